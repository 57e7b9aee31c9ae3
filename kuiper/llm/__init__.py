"""Language models on kuiper's graph: Llama, Qwen2, Mistral, Qwen3 and SmolLM3 checkpoints, numpy, reference and
OpenCL.

    import kuiper.llm
    lm = kuiper.llm.load("path/to/model_dir", backend="numpy")   # or "reference", "opencl"; device=, precision=,
                                                                 # quantize="int8"
    ids = lm.tokenizer.encode("Once upon a time")                # list[int]
    logits = lm.logits(ids)                                      # (len(ids), vocab) float32, one prefill
    new = lm.generate(ids, max_new_tokens=32, temperature=0.0)   # list[int], the new tokens only
    for piece in lm.stream("Once upon a time", max_new_tokens=32, temperature=0.8, top_p=0.95, seed=0): ...

The modules, in the order a checkpoint goes through them:
    config.py     config.json, read and checked
    weights.py    the safetensors files (or shards), memory-mapped, every tensor checked
    quantize.py   int8 weights for every Linear, made from the checkpoint's as the model loads
    tokenizer.py  tokenizer.json through the `tokenizers` package; the chat template through jinja2
    decoder.py    the decoder's .pnnx.param text, written from the config
    model.py      load(), LanguageModel: prefill, decode, generate, stream, forward_packed
    paged.py      the paged KV cache's block allocator, and packing several sequences into one forward
    scheduler.py  continuous batching: many generations stepped together (kuiper serve)
    sampling.py   greedy, temperature, top-k, top-p
    streaming.py  text piece by piece, never half a UTF-8 character
The layers it needs are ordinary kuiper layers (kuiper/layers/embedding.py, rms_norm.py, rotary.py,
cached_attention.py, pages.py); safetensors, tokenizers and jinja2 are imported only when a model is loaded.
"""

from kuiper.llm.model import DEFAULT_CONTEXT, LanguageModel, Timings, load

__all__ = ["DEFAULT_CONTEXT", "LanguageModel", "Timings", "load"]
