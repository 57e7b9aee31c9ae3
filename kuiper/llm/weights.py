"""A checkpoint's weights: safetensors files, memory-mapped, every tensor checked before anything is allocated.

A safetensors file is 8 bytes (the header's length, little-endian), a JSON header (per tensor: dtype, shape and
data_offsets, relative to the end of the header) and the raw little-endian data. So a tensor is a numpy view of
the mapped file at a known offset: loading copies nothing, and pages are read from disk as layers first touch
them. The `safetensors` package checks each file first (a header that does not parse, offsets that overlap or do
not cover the file, a truncated file); the views are then made here, since numpy has no bfloat16 and the
package's numpy reader copies. bf16 tensors stay raw 16-bit words until a layer widens them (a bfloat16 is the
high half of a float32: kuiper/pnnx/records.py Attribute.numpy).

Large checkpoints come as shards, model-00001-of-00004.safetensors and so on, with model.safetensors.index.json
mapping every tensor name to its shard (`weight_map`).

The store has BinFile's interface (`path`, `view`), so the graph binds these tensors to the operators of the
decoder graph as it binds a .pnnx.bin's members: an operator named `model.layers.0.self_attn.q_proj` with
`@weight` reads the tensor `model.layers.0.self_attn.q_proj.weight`, which is the checkpoint's own name for it.
"""

from __future__ import annotations

import json
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kuiper.core.errors import CheckpointError
from kuiper.pnnx.dtypes import STORAGE

SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
#: safetensors dtype -> the pnnx dtype name the decoder graph declares (kuiper/pnnx/dtypes.py)
DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16"}


@dataclass(frozen=True)
class TensorEntry:
    file: Path
    dtype: str      # pnnx name: f32, f16, bf16
    shape: tuple
    offset: int     # from the start of the file
    nbytes: int


def expected_tensors(config) -> dict:
    """{tensor name: shape} that a checkpoint of this config must hold (Linear weights are (out, in))."""
    c = config
    q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    tensors = {"model.embed_tokens.weight": (c.vocab_size, c.hidden_size)}
    for i in range(c.num_hidden_layers):
        block = f"model.layers.{i}"
        # (out, in, bias)
        linears = {"self_attn.q_proj": (q, c.hidden_size, c.qkv_bias),
                   "self_attn.k_proj": (kv, c.hidden_size, c.qkv_bias),
                   "self_attn.v_proj": (kv, c.hidden_size, c.qkv_bias),
                   "self_attn.o_proj": (c.hidden_size, q, c.o_bias),
                   "mlp.gate_proj": (c.intermediate_size, c.hidden_size, c.mlp_bias),
                   "mlp.up_proj": (c.intermediate_size, c.hidden_size, c.mlp_bias),
                   "mlp.down_proj": (c.hidden_size, c.intermediate_size, c.mlp_bias)}
        tensors[f"{block}.input_layernorm.weight"] = (c.hidden_size,)
        if c.qk_norm:
            tensors[f"{block}.self_attn.q_norm.weight"] = tensors[f"{block}.self_attn.k_norm.weight"] = (c.head_dim,)
        for name, (out, inp, bias) in linears.items():
            tensors[f"{block}.{name}.weight"] = (out, inp)
            if bias:
                tensors[f"{block}.{name}.bias"] = (out,)
        tensors[f"{block}.post_attention_layernorm.weight"] = (c.hidden_size,)
    tensors["model.norm.weight"] = (c.hidden_size,)
    if not c.tie_word_embeddings:
        tensors["lm_head.weight"] = (c.vocab_size, c.hidden_size)
    return tensors


class CheckpointWeights:
    """The tensors of a checkpoint directory, by name, as read-only views of the memory-mapped files."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.path = str(self.directory)
        self.tensors = {}  # name -> TensorEntry
        self.aliases = {}  # name -> the name of the tensor it reads (lm_head.weight of tied embeddings)
        self._maps = {}    # file -> mmap
        for file, names in self._files().items():
            self._read_header(file, names)

    def _files(self) -> dict:
        """{safetensors file: names the index assigns it, or None for all of a single file}."""
        index = self.directory / INDEX
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                    raise TypeError("weight_map must map tensor names to file names")
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
                raise CheckpointError(f"{index}: not a readable index ({type(e).__name__}: {e})") from None
            files = {}
            for name, file in weight_map.items():
                files.setdefault(self.directory / file, []).append(name)
            for file, names in files.items():
                if not file.is_file():
                    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
                    raise CheckpointError(f"{index}: shard {file.name} is missing (it holds {names[0]}{more})")
            return files
        single = self.directory / SINGLE
        if not single.is_file():
            raise CheckpointError(f"{self.directory}: no {SINGLE} or {INDEX} (the weights of a Hugging Face "
                                  f"checkpoint)")
        return {single: None}

    def _read_header(self, file: Path, names) -> None:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(file), framework="numpy"):
                pass  # the package's checks of the header and of the data's extent
            with open(file, "rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(length))
                self._maps[file] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (SafetensorError, OSError, ValueError, struct.error) as e:
            raise CheckpointError(f"{file}: not a readable safetensors file ({e})") from None
        data_start = 8 + length
        header.pop("__metadata__", None)
        for name in names if names is not None else header:
            entry = header.get(name)
            if entry is None:
                raise CheckpointError(f"{file}: tensor {name} is not in this shard, though "
                                      f"{INDEX} says it is")
            dtype = DTYPES.get(entry["dtype"])
            if dtype is None:
                raise CheckpointError(f"{file}: tensor {name} has dtype {entry['dtype']}; kuiper reads "
                                      f"{', '.join(DTYPES)}")
            begin, end = entry["data_offsets"]
            self.tensors[name] = TensorEntry(file, dtype, tuple(entry["shape"]), data_start + begin, end - begin)

    def tie(self, name: str, target: str) -> None:
        """Let `name` read the tensor `target` (an lm_head tied to the embedding)."""
        self.aliases[name] = target

    def entry(self, name: str) -> TensorEntry:
        return self.tensors[self.aliases.get(name, name)]

    def check(self, expected: dict) -> None:
        """Every expected tensor present with the expected shape: the first that is not, named in one line."""
        for name, shape in expected.items():
            if self.aliases.get(name, name) not in self.tensors:
                raise CheckpointError(f"{self.path}: tensor {name} is missing from the checkpoint "
                                      f"({', '.join(sorted({e.file.name for e in self.tensors.values()}))})")
            entry = self.entry(name)
            if entry.shape != tuple(shape):
                raise CheckpointError(f"{entry.file}: tensor {name} has shape {list(entry.shape)}, config.json "
                                      f"makes it {list(shape)}")

    def view(self, name: str, dtype: str, shape: tuple, declared_at: str = "") -> np.ndarray:
        """Tensor `name` as a read-only array in its storage dtype (raw words for bf16): BinFile.view's contract."""
        entry = self.tensors.get(self.aliases.get(name, name))
        where = f" (declared at {declared_at})" if declared_at else ""
        if entry is None:
            raise CheckpointError(f"{self.path}: tensor {name} is missing from the checkpoint{where}")
        if (entry.dtype, entry.shape) != (dtype, tuple(shape)):
            raise CheckpointError(f"{entry.file}: tensor {name} is {list(entry.shape)} {entry.dtype}, the graph "
                                  f"declares {list(shape)} {dtype}{where}")
        storage = STORAGE[dtype]
        count = math.prod(shape)
        if entry.nbytes != count * storage.itemsize:
            raise CheckpointError(f"{entry.file}: tensor {name} holds {entry.nbytes} bytes, {list(shape)} {dtype} "
                                  f"needs {count * storage.itemsize}")
        return np.frombuffer(self._maps[entry.file], dtype=storage, count=count, offset=entry.offset).reshape(shape)

    def nbytes_as_float32(self, names) -> int:
        """What these tensors take once the layers hold them in float32."""
        return sum(math.prod(self.entry(name).shape) * 4 for name in names)
