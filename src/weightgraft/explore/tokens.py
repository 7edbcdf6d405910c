"""One token as the page shows it. `decode([id])` of a token that holds part of a character's UTF-8
bytes (byte-level BPE, SentencePiece's byte fallback) is "\ufffd", which hides what the token is;
the page shows such a token's bytes instead: its whole characters as text, the rest as <0xE6>."""

from __future__ import annotations

import re
from functools import lru_cache

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte-fallback pieces


def token_text(tokenizer, token_id: int) -> str:
    """The token's text, or its bytes where its text is not whole characters."""
    text = tokenizer.decode([token_id])
    if "\ufffd" not in text:
        return text
    raw = token_bytes(tokenizer, token_id)
    return text if raw is None else shown_bytes(raw)


def token_bytes(tokenizer, token_id: int) -> bytes | None:
    """The token's bytes, where the tokenizer says them (a byte-fallback piece, a byte-level BPE
    token); None for other tokenizers."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if not isinstance(piece, str):
        return None
    match = _BYTE_PIECE.fullmatch(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    if _byte_level(tokenizer):
        table = _byte_decoder()
        if all(ch in table for ch in piece):
            return bytes(table[ch] for ch in piece)
    return None


def shown_bytes(raw: bytes) -> str:
    """UTF-8 bytes as text where they form characters, each other byte as <0xNN>."""
    out, rest = [], raw
    while rest:
        try:
            out.append(rest.decode("utf-8"))
            break
        except UnicodeDecodeError as err:
            out.append(rest[: err.start].decode("utf-8"))
            out.extend(f"<0x{b:02X}>" for b in rest[err.start : err.end])
            rest = rest[err.end :]
    return "".join(out)


def _byte_level(tokenizer) -> bool:
    from tokenizers import decoders

    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    return isinstance(decoder, decoders.ByteLevel)


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Byte-level BPE's printable character -> the byte it stands for (GPT-2's table)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}
