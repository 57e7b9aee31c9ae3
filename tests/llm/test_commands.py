"""`kuiper generate`, `kuiper chat` and `kuiper inspect MODEL_DIR` on a tiny checkpoint made in the test."""

import io
import json
import shutil

import pytest

import kuiper
from kuiper.app.cli import main
from kuiper.app.cli import generate as commands
from llm_tools import write_checkpoint


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cli") / "tiny"
    write_checkpoint(directory, chat_template=True)
    return directory


def run(argv, capsys) -> tuple:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_generate_prints_the_text_then_the_rates(model, capsys):
    status, out, err = run(["generate", str(model), "--prompt", "Once upon", "--max-new-tokens", "12",
                            "--seed", "3"], capsys)
    assert status == 0
    lm = kuiper.llm.load(model, backend="numpy")
    new = lm.generate(lm.tokenizer.encode("Once upon"), max_new_tokens=12, temperature=0.8, top_p=0.95, seed=3)
    assert out == "Once upon" + lm.tokenizer.decode(new, skip_special_tokens=True) + "\n"
    assert err.startswith(f"prefill: {len(lm.tokenizer.encode('Once upon'))} tokens, ")
    assert f"tokens/s; decode: {len(new) - 1} tokens, " in err


def test_generate_json(model, capsys):
    status, out, _ = run(["generate", str(model), "--prompt", "Once upon", "--max-new-tokens", "5",
                          "--temperature", "0", "--backend", "reference", "--json"], capsys)
    result = json.loads(out)
    lm = kuiper.llm.load(model, backend="numpy")
    ids = lm.tokenizer.encode("Once upon")
    assert status == 0 and result["prompt_tokens"] == ids and result["tokens"] == lm.generate(ids, max_new_tokens=5)
    assert result["text"] == lm.tokenizer.decode(result["tokens"], skip_special_tokens=True)
    assert result["timings"]["prefill_tokens"] == len(ids) and result["timings"]["decode_tokens"] == 4
    assert result["timings"]["decode_tokens_per_second"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--top-p", "2"], "top_p=2.0: give a number in (0, 1]"),
    (["--temperature", "-1"], "temperature=-1.0"),
    (["--context", "1000"], "context=1000: give a whole number from 1 to 64"),
])
def test_generate_refuses_bad_options_in_one_line(model, capsys, argv, message):
    status, out, err = run(["generate", str(model), "--prompt", "hi", *argv], capsys)
    assert status == 1 and out == "" and err.count("\n") == 1 and message in err


def test_generate_without_a_model_says_where_the_shipped_one_should_be(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(commands, "shipped", lambda name: tmp_path / name)
    status, _, err = run(["generate", "--prompt", "hi"], capsys)
    assert status == 1 and err.count("\n") == 1
    assert f"no MODEL_DIR given, and the shipped model {tmp_path}/models/shakespeare is not there" in err


def test_generate_of_a_malformed_directory_is_one_line(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    status, _, err = run(["generate", str(tmp_path), "--prompt", "hi"], capsys)
    assert status == 1 and err.count("\n") == 1 and "model_type 'gpt2' is not supported" in err


def test_chat_answers_each_line_until_the_end_of_input(model, capsys, monkeypatch):
    # a line read with undecodable bytes (Python's surrogateescape) is refused, and the chat goes on
    monkeypatch.setattr("sys.stdin", io.StringIO("Hello there\n\nab\udcff\nTell me more\n"))
    status, out, err = run(["chat", str(model), "--max-new-tokens", "6", "--temperature", "0"], capsys)
    assert status == 0 and "chatting with tiny" in err
    assert "kuiper: this line is not valid Unicode: U+DCFF at character 2" in err
    lines = out.split("\n")
    assert lines[0] == "> Hello there" and "> Tell me more" in lines and out.rstrip().endswith(">")
    # the first reply is the model's greedy answer to the rendered conversation
    lm = kuiper.llm.load(model, backend="numpy")
    text = lm.tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}])
    reply = lm.tokenizer.decode(lm.generate(lm.tokenizer.encode(text, add_special_tokens=False), max_new_tokens=6),
                                skip_special_tokens=True)
    assert out.startswith(f"> Hello there\n{reply}\n")


def test_chat_template_kwargs(model, capsys, monkeypatch, tmp_path):
    shutil.copytree(model, tmp_path, dirs_exist_ok=True)
    (tmp_path / "chat_template.jinja").write_text("{{ bos_token }}{% if brief %}Be brief. {% endif %}"
                                                  "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    monkeypatch.setattr("sys.stdin", io.StringIO("Hello there\n"))
    status, out, _ = run(["chat", str(tmp_path), "--max-new-tokens", "6", "--temperature", "0", "--template-kwargs",
                          '{"brief": true}'], capsys)
    lm = kuiper.llm.load(tmp_path, backend="numpy")
    ids = lm.tokenizer.encode(f"{lm.tokenizer.bos_token}Be brief. Hello there", add_special_tokens=False)
    assert status == 0 and out.startswith(f"> Hello there\n{lm.tokenizer.decode(lm.generate(ids, 6), True)}\n")
    assert main(["chat", str(tmp_path), "--template-kwargs", "[1]"]) == 2
    assert "argument --template-kwargs: give a JSON object, got list" in capsys.readouterr().err


def test_chat_needs_a_chat_template(capsys, tmp_path):
    write_checkpoint(tmp_path / "base")
    status, _, err = run(["chat", str(tmp_path / "base")], capsys)
    assert status == 1 and err.count("\n") == 1 and "no chat template" in err


def test_inspect_a_model_directory(model, capsys):
    status, out, _ = run(["inspect", str(model)], capsys)
    assert status == 0
    assert "llama, 2 layers, hidden 32, 4 heads (2 KV heads, head_dim 8), MLP 48" in out
    assert "KV cache: 256 B per token (float32), 16.0 KiB for the context of 64 positions" in out
    assert "model.layers.1.self_attn.attention" in out and "kuiper.CachedAttention" in out
    status, out, _ = run(["inspect", str(model), "--json", "--backend", "reference", "--input-shape", "1,5"], capsys)
    report = json.loads(out)
    assert report["kv_cache_bytes_per_token"] == 2 * 2 * 2 * 8 * 4  # K and V, layers, KV heads, head_dim, float32
    assert report["parameters"] == kuiper.llm.load(model, backend="numpy").parameters and report["prompt_tokens"] == 5
    types = [row["type"] for row in report["rows"]]
    assert types.count("kuiper.CachedAttention") == 2 and types.count("nn.RMSNorm") == 5
    embedding = next(row for row in report["rows"] if row["type"] == "nn.Embedding")
    assert embedding["inputs"] == [[1, 5]] and embedding["outputs"] == [[1, 5, 32]]
