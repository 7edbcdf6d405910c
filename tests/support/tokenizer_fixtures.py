"""Small tokenizers built with `tokenizers` for span tests (no downloads): byte-level BPE
(GPT-2-style leading-space tokens), Metaspace BPE and a SentencePiece Unigram with byte fallback
(the \u2581 word marker), and BERT-style WordPiece; and two real ones, loaded without a model:
the built-in models' byte-level BPE and SmolLM2's (from its GGUF file)."""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast


def byte_level_bpe(texts: list[str], vocab_size: int = 600) -> PreTrainedTokenizerFast:
    from weightgraft.training.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer(texts, vocab_size)


def metaspace_bpe(texts: list[str], vocab_size: int = 600) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # Like SentencePiece: spaces become the word marker "\u2581" kept on the next word, and
    # punctuation stands alone (SentencePiece splits by Unicode script by default).
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always"),
            pre_tokenizers.Split(Regex(r"[^\w\u2581]"), behavior="isolated"),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def sentencepiece_unigram(texts: list[str], vocab_size: int = 600) -> PreTrainedTokenizerFast:
    """SentencePiece proper: a Unigram model over Metaspace pieces, with byte fallback (a
    character outside the vocabulary becomes its UTF-8 bytes, tokens that share its offsets)."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Fuse(), decoders.Metaspace(replacement="\u2581", prepend_scheme="always")]
    )
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>", *byte_tokens],
        unk_token="<unk>",
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    trained = json.loads(tok.to_str())["model"]  # the trainer leaves byte fallback off: switch it on
    tok.model = models.Unigram([tuple(p) for p in trained["vocab"]], unk_id=trained["unk_id"], byte_fallback=True)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def wordpiece(texts: list[str], vocab_size: int = 600) -> PreTrainedTokenizerFast:
    """BERT-style WordPiece: lowercasing and accent-stripping normalizer, [CLS] ... [SEP]."""
    from tokenizers import normalizers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, handle_chinese_chars=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"], show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]"
    )


@lru_cache(maxsize=1)
def builtin_tokenizer() -> PreTrainedTokenizerFast:
    """The built-in models' tokenizer (its default size), trained on its world's text, seeded."""
    from weightgraft.training import builtin, builtin_specs

    spec = builtin_specs.SPECS["default"]
    return builtin.pretraining_tokenizer(spec, builtin.build_world(spec))


@lru_cache(maxsize=1)
def smollm2_tokenizer() -> PreTrainedTokenizerFast:
    """SmolLM2-135M's tokenizer, read from the GGUF file of its registry package (no conversion
    of the model); the calling test skips where the package or `gguf` is missing."""
    import pytest

    from weightgraft.pretrained import CATALOG

    pytest.importorskip("gguf", reason="SmolLM2's tokenizer is read from its GGUF file, which needs `gguf`")
    model = CATALOG["smollm2-135m"]
    if importlib.util.find_spec(model.module) is None:
        pytest.skip(f"{model.package} is not installed: {model.install}")
    path = model.package_folder() / model.gguf_name
    if not path.is_file():
        pytest.skip(f"SmolLM2's GGUF file is not here ({path})")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(path).parent), gguf_file=path.name)
