"""Write a GGUF file of a Hugging Face checkpoint with llama.cpp's own converter, for benchmarks/llm.py's llama.cpp
engines.

    python tools/make_gguf.py MODEL_DIR --convert .../llama.cpp/convert_hf_to_gguf.py --outtype q8_0
                              [--out ~/.cache/kuiper/gguf]

Writes OUT/<MODEL_DIR's name>-<outtype>.gguf (f32, f16, bf16 or q8_0). Needs torch and transformers, as the
converter does; the converter and its `gguf` package (the gguf-py folder beside it) come with llama.cpp's source,
which the sdist of llama-cpp-python carries under vendor/llama.cpp.

The converter recognises a byte-level BPE tokenizer by a hash of how it splits a test text. The checkpoints of
tools/make_llm_shapes.py carry models/llm's tiny tokenizer, which splits as Llama 3's does (the same regular
expression) but which no published model has: where the hash is unknown this tool names Llama 3's
pre-tokenizer. A tokenizer without sentencepiece's model file is read as byte-level BPE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--convert", type=Path, required=True, help="llama.cpp's convert_hf_to_gguf.py")
    parser.add_argument("--outtype", default="q8_0", choices=["f32", "f16", "bf16", "q8_0"])
    parser.add_argument("--out", type=Path, default=Path.home() / ".cache" / "kuiper" / "gguf")
    args = parser.parse_args()
    folder = args.convert.resolve().parent
    sys.path[:0] = [str(folder), str(folder / "gguf-py")]
    import convert_hf_to_gguf
    from conversion.base import TextModel

    known = TextModel.get_vocab_base_pre

    def pre_tokenizer(self, tokenizer) -> str:
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            return "llama-bpe"

    def no_sentencepiece(self, *_, **__):
        raise FileNotFoundError("no sentencepiece model: byte-level BPE")

    TextModel.get_vocab_base_pre = pre_tokenizer
    if not (args.model / "tokenizer.model").is_file():
        TextModel._set_vocab_sentencepiece = no_sentencepiece
    args.out.mkdir(parents=True, exist_ok=True)
    outfile = args.out / f"{args.model.name}-{args.outtype}.gguf"
    sys.argv = ["convert_hf_to_gguf.py", str(args.model), "--outtype", args.outtype, "--outfile", str(outfile)]
    convert_hf_to_gguf.main()
    print(outfile)


if __name__ == "__main__":
    main()
