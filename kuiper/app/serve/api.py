"""The OpenAI API's requests and responses, as plain dicts: checked fields in, completion objects out.

A request body is checked field by field before anything runs, and a field of the wrong type or range is an
ApiError naming it (HTTP 400, the API's error object). Fields the API has and kuiper does not support, given a
value that asks for something (n > 1, echo, logprobs, penalties, logit_bias, tools, a JSON response_format:
UNSUPPORTED), are refused the same way; other unknown fields are ignored, as the API does.
"""

from __future__ import annotations

import time
import uuid

from kuiper.core.errors import InputError, KuiperError
from kuiper.llm.sampling import SamplingOptions
from kuiper.llm.tokenizer import check_unicode

#: the API's default max_tokens for /v1/completions (chat's default is the rest of the context)
COMPLETION_MAX_TOKENS = 16
#: stop strings a request may give, as the API allows
MAX_STOPS = 4


class ApiError(KuiperError):
    """A request the API refuses: HTTP `status`, the error object's `type`, `param` and `code`."""

    def __init__(self, message: str, status: int = 400, type: str = "invalid_request_error", param=None,
                 code=None, headers=None):
        super().__init__(message)
        self.status, self.type, self.param, self.code, self.headers = status, type, param, code, headers or {}

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.code}}


def _number(body: dict, name: str, default, low: float, high: float, integer: bool = False):
    value = body.get(name)
    if value is None:
        return default
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise ApiError(f"'{name}' must be {kind}, got {type(value).__name__}", param=name)
    if not low <= value <= high:
        raise ApiError(f"'{name}' must be from {low} to {high}, got {value}", param=name)
    return value


#: fields of the API that kuiper does not implement, and the values of each that ask for nothing it lacks (null
#: always does): any other value is refused, so that no client gets an answer other than the one it asked for
UNSUPPORTED = {"n": (1,), "best_of": (1,), "echo": (False,), "logprobs": (False,), "top_logprobs": (0,),
               "suffix": (), "presence_penalty": (0,), "frequency_penalty": (0,), "logit_bias": ({},),
               "tools": ([],), "functions": ([],), "response_format": ({"type": "text"},)}


def _text(value: str, param: str) -> str:
    """`value`, if it is text a tokenizer can take (no lone surrogate); else the ApiError naming `param`."""
    try:
        check_unicode(value, param)
    except InputError as e:
        raise ApiError(str(e), param=param) from None
    return value


def _unsupported(body: dict) -> None:
    for name, accepted in UNSUPPORTED.items():
        value = body.get(name)
        # a bool is accepted only as a bool: logprobs=0 on a completion asks for the sampled tokens' logprobs
        if value is not None and not any(value == a and isinstance(value, bool) == isinstance(a, bool)
                                         for a in accepted):
            raise ApiError(f"'{name}'={value!r} is not supported by this server", param=name)


class Parsed:
    """What a request asks for: the prompt's token ids, max_tokens, sampling, seed, stop strings, streaming."""

    def __init__(self, body, model_name: str, context: int, chat: bool):
        if not isinstance(body, dict):
            raise ApiError("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise ApiError(f"'model' must be a string, got {type(model).__name__}", param="model")
        if model not in (None, model_name):
            raise ApiError(f"the model '{model}' does not exist: this server runs '{model_name}' (GET /v1/models)",
                           status=404, param="model", code="model_not_found")
        _unsupported(body)
        self.chat, self.model = chat, model_name
        limit = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
        self.max_tokens = _number(body, limit, None, 1, context, integer=True)
        self.temperature = _number(body, "temperature", 1.0, 0, 2)
        self.top_p = _number(body, "top_p", 1.0, 0, 1)
        if self.top_p == 0:
            raise ApiError("'top_p' must be more than 0", param="top_p")
        self.seed = _number(body, "seed", None, -2 ** 63, 2 ** 63 - 1, integer=True)
        self.seed = None if self.seed is None else self.seed % 2 ** 63
        self.options = SamplingOptions(float(self.temperature), 0, float(self.top_p))
        self.stop = self._stop(body.get("stop"))
        self.stream = body.get("stream", False)
        if not isinstance(self.stream, bool):
            raise ApiError(f"'stream' must be a boolean, got {type(self.stream).__name__}", param="stream")
        options = body.get("stream_options") or {}
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise ApiError("'stream_options' must be an object with a boolean 'include_usage'", param="stream_options")
        self.include_usage = options.get("include_usage", False)
        self.messages = self._messages(body.get("messages")) if chat else None
        variables = body.get("chat_template_kwargs") if chat else None
        if variables is not None and not isinstance(variables, dict):
            raise ApiError("'chat_template_kwargs' must be an object: names the chat template reads, and their values",
                           param="chat_template_kwargs")
        self.template_variables = variables or {}
        self.prompt = None if chat else self._prompt(body.get("prompt"))

    @staticmethod
    def _stop(stop) -> tuple:
        if stop is None:
            return ()
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOPS:
            raise ApiError(f"'stop' must be a non-empty string or a list of at most {MAX_STOPS} of them", param="stop")
        return tuple(_text(s, "stop") for s in stops)

    @staticmethod
    def _prompt(prompt):
        """A string, or token ids; a list of one string or of one list of ids is that one prompt."""
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str) and prompt:
            return _text(prompt, "prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            return prompt
        raise ApiError("'prompt' must be a non-empty string or list of token ids (one prompt per request)",
                       param="prompt")

    @staticmethod
    def _messages(messages) -> list:
        if not isinstance(messages, list) or not messages:
            raise ApiError("'messages' must be a non-empty list of {role, content} objects", param="messages")
        out = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ApiError(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
            content = message.get("content")
            if isinstance(content, list):  # content parts: the text ones, joined
                if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                           for p in content):
                    raise ApiError(f"messages[{i}].content: only text parts are supported",
                                   param=f"messages[{i}].content")
                content = "".join(p["text"] for p in content)
            if not isinstance(content, str):
                raise ApiError(f"messages[{i}].content must be a string", param=f"messages[{i}].content")
            out.append({"role": _text(message["role"], f"messages[{i}].role"),
                        "content": _text(content, f"messages[{i}].content")})
        return out


def new_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def finish_reason(reason: str) -> str:
    """The API's finish reasons are "stop" and "length"."""
    return "length" if reason == "length" else "stop"


def completion(request: Parsed, id: str, text: str, reason: str, prompt_tokens: int, tokens: int) -> dict:
    """The whole response of a request that did not stream."""
    created = int(time.time())
    if request.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason(reason)}
        return {"id": id, "object": "chat.completion", "created": created, "model": request.model,
                "choices": [choice], "usage": usage(prompt_tokens, tokens)}
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason(reason)}
    return {"id": id, "object": "text_completion", "created": created, "model": request.model, "choices": [choice],
            "usage": usage(prompt_tokens, tokens)}


def chunk(request: Parsed, id: str, piece: str | None, reason: str | None, first: bool = False) -> dict:
    """One server-sent event of a streamed response: a piece of text, or the finish reason."""
    created = int(time.time())
    done = None if reason is None else finish_reason(reason)
    if request.chat:
        delta = {} if piece is None else {"content": piece}
        if first:
            delta["role"] = "assistant"
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": done}
        return {"id": id, "object": "chat.completion.chunk", "created": created, "model": request.model,
                "choices": [choice]}
    choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": done}
    return {"id": id, "object": "text_completion", "created": created, "model": request.model, "choices": [choice]}


def usage_chunk(request: Parsed, id: str, prompt_tokens: int, tokens: int) -> dict:
    """The last event when stream_options.include_usage: no choices, the counts."""
    return {"id": id, "object": "chat.completion.chunk" if request.chat else "text_completion",
            "created": int(time.time()), "model": request.model, "choices": [], "usage": usage(prompt_tokens, tokens)}
