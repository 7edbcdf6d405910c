"""Two small tokenizers built with `tokenizers` for span tests: byte-level BPE (GPT-2-style
leading-space tokens) and SentencePiece-style (Metaspace with the ▁ marker)."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast


def byte_level_bpe(texts: list[str], vocab_size: int = 600) -> PreTrainedTokenizerFast:
    from weightgraft.training.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer(texts, vocab_size)


def metaspace_bpe(texts: list[str], vocab_size: int = 600) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # Like SentencePiece: spaces become the word marker "\u2581" kept on the next word, and
    # punctuation stands alone (SentencePiece splits by Unicode script by default).
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always"),
        pre_tokenizers.Split(Regex(r"[^\w\u2581]"), behavior="isolated"),
    ])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
