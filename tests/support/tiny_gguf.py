"""A tiny Llama-architecture GGUF file, written with the `gguf` package, for the conversion tests.

The real models ship as GGUF files inside registry packages that CI does not install; this file
has the same shape of metadata (architecture keys, a byte-level BPE vocabulary with merges) at a
size that writes in milliseconds, so that the conversion code is tested everywhere `gguf` is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TINY = {"layers": 2, "width": 32, "ffn": 64, "heads": 4, "kv_heads": 2, "context": 512}
_WORDS = ("the", "cap", "ital", "of", "France", "is", "Paris", "ton", "Tom", "Hanks")


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    codes, extra = [], 0
    for byte in range(256):
        if byte in printable:
            codes.append(byte)
        else:
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for c in codes]


def _vocabulary() -> tuple[list[str], list[str]]:
    """Byte tokens, then whole words (with and without the leading-space symbol) and the merges
    that build them left to right."""
    tokens = _byte_symbols()
    merges: list[str] = []
    for word in _WORDS:
        for spelled in (word, "\u0120" + word):
            prefix = spelled[0]
            for char in spelled[1:]:
                merged = prefix + char
                if merged not in tokens:
                    merges.append(f"{prefix} {char}")
                    tokens.append(merged)
                prefix = merged
    return tokens + ["<|endoftext|>"], merges


def write_tiny_llama_gguf(path: str | Path, seed: int = 0, architecture: str = "llama") -> Path:
    """Write a float32 Llama GGUF with random weights and its BPE tokenizer; return its path.
    `architecture`: the name the file gives its architecture (another one makes a file that
    transformers cannot read as a Llama, for the bad-file tests)."""
    import gguf

    path = Path(path)
    rng = np.random.default_rng(seed)
    tokens, merges = _vocabulary()
    vocab, width, ffn = len(tokens), TINY["width"], TINY["ffn"]
    head_dim = width // TINY["heads"]
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny-llama")
    writer.add_block_count(TINY["layers"])
    writer.add_context_length(TINY["context"])
    writer.add_embedding_length(width)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(TINY["heads"])
    writer.add_head_count_kv(TINY["kv_heads"])
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_rope_dimension_count(head_dim)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (vocab - 1) + [3])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab - 1)
    writer.add_eos_token_id(vocab - 1)

    def tensor(name: str, *shape: int, scale: float = 0.1) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    tensor("token_embd.weight", vocab, width)
    writer.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(width)).astype(np.float32))
    tensor("output.weight", vocab, width)
    kv = TINY["kv_heads"] * head_dim
    for i in range(TINY["layers"]):
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{i}.{norm}.weight", (1 + 0.1 * rng.standard_normal(width)).astype(np.float32))
        tensor(f"blk.{i}.attn_q.weight", width, width)
        tensor(f"blk.{i}.attn_k.weight", kv, width)
        tensor(f"blk.{i}.attn_v.weight", kv, width)
        tensor(f"blk.{i}.attn_output.weight", width, width)
        tensor(f"blk.{i}.ffn_gate.weight", ffn, width)
        tensor(f"blk.{i}.ffn_up.weight", ffn, width)
        tensor(f"blk.{i}.ffn_down.weight", width, ffn)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
