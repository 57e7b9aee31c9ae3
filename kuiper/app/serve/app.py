"""The HTTP side of `kuiper serve`: a Starlette application speaking the OpenAI API over one Scheduler.

    POST /v1/completions        a prompt (text or token ids) -> its continuation
    POST /v1/chat/completions   messages, laid out by the tokenizer's chat template -> the assistant's reply
    GET  /v1/models             the one model served
    GET  /health                {"status": "ok"} and what the scheduler holds

Both POSTs stream with "stream": true: server-sent events, one `data: {...}` per piece of text, then one with
the finish reason (and one with the usage, if stream_options.include_usage), then `data: [DONE]`.

Handlers run on the event loop and never touch the model: they check the request, tokenize it and hand a
Generation to the scheduler, whose thread delivers the text back through a Mailbox: a step delivers a piece to
every running generation, and the loop is woken once for all of them, at the step's end (Scheduler.delivered),
or for text in mid-stream at most every WAKE_INTERVAL.
A stream sends what has arrived for it since its last write as one write, each piece still an event of its own.
A client that goes away, streaming or not, has its generation cancelled: the scheduler gives its blocks back
before its next step. Every error is the API's error object: 400 for a bad request or one that can never fit,
401 without the API key, 404 for another model or path, 413 for a body over MAX_BODY, 429 with Retry-After when
the queue is full, 500 if the step running the generation failed, 503 if the server shuts down before it is
done.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time

from kuiper.app.serve.api import COMPLETION_MAX_TOKENS, ApiError, Parsed, chunk, completion, new_id, usage_chunk
from kuiper.core.errors import InputError, KuiperError
from kuiper.llm.scheduler import Generation, QueueFull

#: the largest request body read, in bytes: a prompt is text, and a megabyte of it is past any context here
MAX_BODY = 1 << 20
#: what a 429 tells the client to wait, in seconds
RETRY_AFTER = 1
#: the seconds between two wakes of the event loop for text in mid-stream (Mailbox): a stream's pieces wait at
#: most this long, far below what a reader sees, and 16 streams of a few-millisecond step are written every
#: other step rather than at each (docs/serve.md)
WAKE_INTERVAL = 0.008


class Mailbox:
    """Pieces sent from the scheduler's thread to the queues of one event loop's handlers: a step sends its
    pieces, then `flush` wakes the loop once, which moves all that arrived by then to their queues. Woken at
    each piece, the loop would take the interpreter's lock from the scheduler's thread in the middle of a step.
    Nor is it woken at every step for text in mid-stream: at most once per WAKE_INTERVAL, the pieces of the
    steps between written together. Each wake costs the loop a turn over every stream, holding the lock that
    the scheduler's thread needs to launch the next step. A generation's first piece (the time to first token)
    and its finish wake the loop at once."""

    def __init__(self, loop):
        self.loop, self.pieces, self.lock, self.woken = loop, [], threading.Lock(), False
        self.streaming = set()  # the queues that have had a piece and no finish yet
        self.urgent = False     # a first piece or a finish waits
        self.next_wake = 0.0    # time.monotonic() from which text in mid-stream wakes the loop

    def send(self, queue: asyncio.Queue, item) -> None:
        with self.lock:
            self.pieces.append((queue, item))
            if item[1]:  # the finish
                self.streaming.discard(queue)
                self.urgent = True
            elif queue not in self.streaming:
                self.streaming.add(queue)
                self.urgent = True

    def flush(self) -> None:
        """Wake the loop for the pieces sent, if any, unless they are all in mid-stream and it was woken less
        than WAKE_INTERVAL ago: they go with a later step's, as a generation that has not finished has one."""
        with self.lock:
            now = time.monotonic()
            if not self.pieces or self.woken or (not self.urgent and now < self.next_wake):
                return  # nothing to move, the loop woken already, or too soon
            self.woken, self.urgent, self.next_wake = True, False, now + WAKE_INTERVAL
        self.loop.call_soon_threadsafe(self.empty)

    def empty(self) -> None:
        with self.lock:
            pieces, self.pieces, self.woken = self.pieces, [], False
        for queue, item in pieces:
            queue.put_nowait(item)


def make_app(lm, scheduler, api_key: str | None = None, template_variables: dict | None = None):
    """The application serving `lm` through `scheduler`; with `api_key`, /v1/ wants `Authorization: Bearer KEY`;
    `template_variables` go to the chat template of every chat request, under the request's own."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    name = lm.directory.name or str(lm.directory)
    mailboxes = {}  # event loop -> its Mailbox (one loop serves the app)
    scheduler.delivered.append(lambda: [mailbox.flush() for mailbox in list(mailboxes.values())])

    def error(e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    def authorize(request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            raise ApiError("a valid API key is needed: Authorization: Bearer KEY", status=401,
                           code="invalid_api_key")

    async def read_json(request):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            raise ApiError(f"the request body is over {MAX_BODY} bytes", status=413)
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > MAX_BODY:
                raise ApiError(f"the request body is over {MAX_BODY} bytes", status=413)
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(f"the request body is not valid JSON ({e})") from None
        except RecursionError:  # arrays or objects nested past the interpreter's recursion limit
            raise ApiError("the request body is nested too deeply") from None

    def prompt_ids(parsed: Parsed) -> list:
        tokenizer = lm.tokenizer
        try:
            if parsed.chat:
                variables = {**(template_variables or {}), **parsed.template_variables}
                text = tokenizer.apply_chat_template(parsed.messages, variables=variables)
                return tokenizer.encode(text, add_special_tokens=False)
        except InputError as e:  # a name the template gets from the conversation, or text from those variables
            raise ApiError(str(e).splitlines()[0], param="chat_template_kwargs") from None
        except KuiperError as e:
            raise ApiError(str(e).splitlines()[0], param="messages") from None
        if isinstance(parsed.prompt, str):
            return tokenizer.encode(parsed.prompt)
        vocab = lm.config.vocab_size
        if not all(0 <= i < vocab for i in parsed.prompt):
            raise ApiError(f"'prompt' token ids must be from 0 to {vocab - 1}", param="prompt")
        return list(parsed.prompt)

    async def generate(request, chat: bool):
        try:
            authorize(request)
            parsed = Parsed(await read_json(request), name, lm.context, chat)
            ids = prompt_ids(parsed)
            max_tokens = parsed.max_tokens or (lm.context - len(ids) if chat else COMPLETION_MAX_TOKENS)
            queue, loop = asyncio.Queue(), asyncio.get_running_loop()
            mailbox = mailboxes.get(loop) or mailboxes.setdefault(loop, Mailbox(loop))
            generation = Generation(ids, max_tokens, parsed.options, parsed.seed, parsed.stop,
                                    lambda piece, finish: mailbox.send(queue, (piece, finish)))
            scheduler.submit(generation)
        except ApiError as e:
            return error(e)
        except QueueFull as e:
            return error(ApiError(f"the server is busy: {e}; retry after {RETRY_AFTER} s", status=429,
                                  type="rate_limit_error", code="queue_full",
                                  headers={"Retry-After": str(RETRY_AFTER)}))
        except KuiperError as e:  # the scheduler's check: a request that can never fit
            return error(ApiError(str(e).splitlines()[0], param="max_tokens"))
        id = new_id(chat)
        if parsed.stream:
            return StreamingResponse(events(parsed, id, generation, queue), media_type="text/event-stream")
        return await whole(request, parsed, id, generation, queue)

    def ended(finish: str) -> ApiError:
        """The error of a generation that did not finish: its step failed, or the server is shutting down."""
        if finish == "error":
            return ApiError(f"the generation failed: {scheduler.error}", status=500, type="server_error")
        return ApiError("the server is shutting down", status=503, type="server_error")

    async def whole(request, parsed, id, generation, queue):
        async def collect():
            pieces = []
            while True:
                piece, finish = await queue.get()
                pieces.append(piece)
                if finish:
                    return "".join(pieces), finish

        async def gone():
            while (await request.receive())["type"] != "http.disconnect":
                pass

        result, watch = asyncio.ensure_future(collect()), asyncio.ensure_future(gone())
        await asyncio.wait({result, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not result.done():  # the client left: nobody will read the answer
            scheduler.cancel(generation)
            result.cancel()
            return error(ApiError("the client disconnected", status=499))
        watch.cancel()
        text, finish = result.result()
        if finish in ("error", "cancelled"):
            return error(ended(finish))
        return JSONResponse(completion(parsed, id, text, finish, len(generation.ids), len(generation.tokens)))

    async def events(parsed, id, generation, queue):
        def sse(value) -> str:
            return f"data: {json.dumps(value)}\n\n"

        try:
            if parsed.chat:
                yield sse(chunk(parsed, id, "", None, first=True))
            finish = None
            while not finish:
                events = []
                piece, finish = await queue.get()
                while True:  # and what else has arrived: one write
                    if piece:
                        events.append(sse(chunk(parsed, id, piece, None)))
                    if finish or queue.empty():
                        break
                    piece, finish = queue.get_nowait()
                if events:
                    yield "".join(events)
            if finish in ("error", "cancelled"):
                yield sse(ended(finish).body())
            else:
                yield sse(chunk(parsed, id, None, finish))
                if parsed.include_usage:
                    yield sse(usage_chunk(parsed, id, len(generation.ids), len(generation.tokens)))
            yield "data: [DONE]\n\n"
        finally:  # the client left mid-stream (the task is cancelled), or the stream ended
            if generation.finish_reason is None:
                scheduler.cancel(generation)

    async def completions(request):
        return await generate(request, chat=False)

    async def chat_completions(request):
        return await generate(request, chat=True)

    async def models(request):
        try:
            authorize(request)
        except ApiError as e:
            return error(e)
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                                         "owned_by": "kuiper"}]})

    async def health(request):
        return JSONResponse({"status": "ok", "model": name, **scheduler.load()})

    async def http_error(request, e):
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(e.status_code, "invalid_request_error")
        return error(ApiError(f"{request.method} {request.url.path}: {e.detail}", status=e.status_code, type=kind))

    routes = [Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]), Route("/health", health, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})
