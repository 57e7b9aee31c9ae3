"""The decoder as a PNNX graph, written from config.json: the same kind of .pnnx.param text pnnx writes for a
vision model, which kuiper's own reader parses, with the weights bound from the checkpoint instead of a .pnnx.bin.

Two inputs: the token ids (1, S) int64 and their positions (S,) int64; S is the whole prompt in the first
forward (prefill) and one token in each later one (decode). One output: the logits (1, S, vocab). Per block:

    h -> input_layernorm (RMSNorm) -> q_proj, k_proj, v_proj (Linear)
      -> each reshaped to (1, S, heads, head_dim) (Qwen3: q and k then normalized per head, q_norm and k_norm,
         RMSNorms over head_dim) and permuted to (1, heads, S, head_dim)
      -> q and k rotated (kuiper.RotaryEmbedding; not in SmolLM3's NoPE layers) -> kuiper.CachedAttention (the KV
         cache lives here)
      -> permuted back, reshaped to (1, S, heads * head_dim) -> o_proj (Linear) -> h + that (residual)
      -> post_attention_layernorm (RMSNorm) -> gate_proj and up_proj (Linear)
      -> F.silu(gate) * up (SwiGLU: a pnnx.Expression mul) -> down_proj (Linear) -> h + that (residual)

then the final norm (RMSNorm) and lm_head (Linear; with tied embeddings it reads the embedding's matrix). With
quantize="int8" every Linear is a kuiper.Int8Linear (kuiper/llm/quantize.py makes its int8 weights and scales).
Operators are named as the checkpoint names its modules, so `@weight` of `model.layers.0.mlp.up_proj` is the
tensor `model.layers.0.mlp.up_proj.weight`, as a .pnnx.bin's members are named `<operator>.<key>`.
"""

from __future__ import annotations

from kuiper.layers.int8_linear import GROUP, groups

#: pnnx's magic number, first line of every .param
MAGIC = 7767517


class ParamWriter:
    """Collects operator lines; operands get pnnx-style numeric names."""

    def __init__(self):
        self.lines = []
        self.operands = 0

    def op(self, type: str, name: str, inputs: list, params: dict | None = None, attrs: dict | None = None,
           output: str | None = None, shape: str = "") -> str:
        """Add one operator with one output (none for pnnx.Output); `attrs` maps keys to (shape, dtype),
        `shape` is the output's `#` spec. Returns the output operand's name."""
        if output is None and type != "pnnx.Output":
            output, self.operands = str(self.operands), self.operands + 1
        outputs = [output] if output is not None else []
        words = [f"{type:<24}", f"{name:<40}", str(len(inputs)), str(len(outputs)), *inputs, *outputs]
        words += [f"{key}={_value(value)}" for key, value in (params or {}).items()]
        words += [f"@{key}=({','.join(map(str, s))}){dtype}" for key, (s, dtype) in (attrs or {}).items()]
        if shape:
            words.append(f"#{output}={shape}")
        self.lines.append(" ".join(words))
        return output

    def text(self) -> str:
        count = len(self.lines)
        named = sum(1 for line in self.lines if not line.startswith("pnnx.Output"))
        return "\n".join([str(MAGIC), f"{count} {named}", *self.lines]) + "\n"


def _value(value) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_value(v) for v in value) + ")"
    return str(value)


def decoder_param(config, context: int, dtype_of, quantize: str | None = None) -> str:
    """The .param text of the decoder for `config` (kuiper/llm/config.py) with a KV cache of `context` positions;
    `dtype_of(tensor name)` gives each weight's pnnx dtype (f32, f16, bf16), as the checkpoint stores it;
    quantize="int8": every Linear an Int8Linear."""
    c, w = config, ParamWriter()
    hidden, q_width, kv_width = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    seq = f"(1,?,{hidden})f32"

    def weights(module: str, shape: tuple, bias: bool = False) -> dict:
        attrs = {"weight": (shape, dtype_of(f"{module}.weight"))}
        if bias:
            attrs["bias"] = ((shape[0],), dtype_of(f"{module}.bias"))
        return attrs

    def linear(module: str, x: str, out: int, inp: int, bias: bool) -> str:
        params = dict(bias=bias, in_features=inp, out_features=out)
        if quantize == "int8":
            attrs = {"qweight": ((out, inp), "i8"), "scales": ((out, groups(inp)), "f32")}
            if bias:
                attrs["bias"] = ((out,), dtype_of(f"{module}.bias"))
            return w.op("kuiper.Int8Linear", module, [x], dict(params, group_size=GROUP), attrs,
                        shape=f"(1,?,{out})f32")
        return w.op("nn.Linear", module, [x], params, weights(module, (out, inp), bias), shape=f"(1,?,{out})f32")

    def norm(module: str, x: str, size: int = hidden, shape: str = seq) -> str:
        return w.op("nn.RMSNorm", module, [x], dict(elementwise_affine=True, eps=c.rms_norm_eps,
                                                   normalized_shape=[size]), weights(module, (size,)), shape=shape)

    def heads(name: str, x: str, count: int, normed: bool = False) -> str:
        """(1, S, count * head_dim) -> (1, count, S, head_dim); `normed`: each head through {name}_norm first."""
        shape = f"(1,?,{count},{c.head_dim})f32"
        split = w.op("Tensor.reshape", f"{name}_split", [x], dict(shape=[1, -1, count, c.head_dim]), shape=shape)
        if normed:
            split = norm(f"{name}_norm", split, c.head_dim, shape)
        return w.op("Tensor.permute", f"{name}_heads", [split], dict(dims=[0, 2, 1, 3]),
                    shape=f"(1,{count},?,{c.head_dim})f32")

    rope = dict(head_dim=c.head_dim, rope_theta=c.rope_theta, **c.rope_scaling)
    ids = w.op("pnnx.Input", "input_ids", [], output="ids", shape="(1,?)i64")
    positions = w.op("pnnx.Input", "positions", [], output="positions", shape="(?)i64")
    h = w.op("nn.Embedding", "model.embed_tokens", [ids], dict(embedding_dim=hidden, num_embeddings=c.vocab_size),
             weights("model.embed_tokens", (c.vocab_size, hidden)), shape=seq)
    for i in range(c.num_hidden_layers):
        block, attn, mlp = f"model.layers.{i}", f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        x = norm(f"{block}.input_layernorm", h)
        q = heads(f"{attn}.q", linear(f"{attn}.q_proj", x, q_width, hidden, c.qkv_bias), c.num_attention_heads,
                  c.qk_norm)
        k = heads(f"{attn}.k", linear(f"{attn}.k_proj", x, kv_width, hidden, c.qkv_bias), c.num_key_value_heads,
                  c.qk_norm)
        v = heads(f"{attn}.v", linear(f"{attn}.v_proj", x, kv_width, hidden, c.qkv_bias), c.num_key_value_heads)
        if c.rotated(i):  # SmolLM3's NoPE layers are not
            q = w.op("kuiper.RotaryEmbedding", f"{attn}.q_rotary", [q, positions], rope,
                     shape=f"(1,{c.num_attention_heads},?,{c.head_dim})f32")
            k = w.op("kuiper.RotaryEmbedding", f"{attn}.k_rotary", [k, positions], rope,
                     shape=f"(1,{c.num_key_value_heads},?,{c.head_dim})f32")
        o = w.op("kuiper.CachedAttention", f"{attn}.attention", [q, k, v, positions],
                 dict(head_dim=c.head_dim, max_positions=context, num_heads=c.num_attention_heads,
                      num_kv_heads=c.num_key_value_heads), shape=f"(1,{c.num_attention_heads},?,{c.head_dim})f32")
        o = w.op("Tensor.permute", f"{attn}.o_heads", [o], dict(dims=[0, 2, 1, 3]),
                 shape=f"(1,?,{c.num_attention_heads},{c.head_dim})f32")
        o = w.op("Tensor.reshape", f"{attn}.o_join", [o], dict(shape=[1, -1, q_width]), shape=f"(1,?,{q_width})f32")
        o = linear(f"{attn}.o_proj", o, hidden, q_width, c.o_bias)
        h = w.op("pnnx.Expression", f"{block}.attention_residual", [h, o], dict(expr="add(@0,@1)"), shape=seq)
        x = norm(f"{block}.post_attention_layernorm", h)
        gate = linear(f"{mlp}.gate_proj", x, c.intermediate_size, hidden, c.mlp_bias)
        up = linear(f"{mlp}.up_proj", x, c.intermediate_size, hidden, c.mlp_bias)
        gate = w.op("F.silu", f"{mlp}.act", [gate], shape=f"(1,?,{c.intermediate_size})f32")
        x = w.op("pnnx.Expression", f"{mlp}.mul", [gate, up], dict(expr="mul(@0,@1)"),
                 shape=f"(1,?,{c.intermediate_size})f32")
        x = linear(f"{mlp}.down_proj", x, hidden, c.intermediate_size, c.mlp_bias)
        h = w.op("pnnx.Expression", f"{block}.mlp_residual", [h, x], dict(expr="add(@0,@1)"), shape=seq)
    h = norm("model.norm", h)
    logits = linear("lm_head", h, c.vocab_size, hidden, False)
    w.op("pnnx.Output", "output", [logits])
    return w.text()
