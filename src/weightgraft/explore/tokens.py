"""One token as the page shows it. `decode([id])` of a token that holds part of a character's UTF-8
bytes (byte-level BPE, SentencePiece's byte fallback) is "\ufffd", which hides what the token is;
the page shows such a token's bytes instead: its whole characters as text, the rest as <0xE6>."""

from __future__ import annotations

from weightgraft.data.encode import token_bytes


def token_text(tokenizer, token_id: int) -> str:
    """The token's text, or its bytes where its text is not whole characters."""
    text = tokenizer.decode([token_id])
    if "\ufffd" not in text:
        return text
    raw = token_bytes(tokenizer, token_id)
    return text if raw is None else shown_bytes(raw)


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
