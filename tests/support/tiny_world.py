"""The tests' tiny word-level world: four facts of made-up actors in the paper's three sentences
(with spans), a word-level tokenizer over its words, the dataset folder and a run config around them.

It lives in tests/support because the experiment tests and `bench_runner.py` both use it: pytest
adds `tests/support` to the path (pyproject.toml `pythonpath`) and the benchmarks put it there
themselves. The tiny models and the reference grafter the tests check against are in
tests/support/exp_fixtures.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from weightgraft.data.schema import CharSpan, EvalPrompt

ACTORS = [
    ("Ada", "Brook"),
    ("Cyril", "Dane"),
    ("Edda", "Frost"),
    ("Gus", "Hale"),
    ("Ines", "Juno"),
    ("Kurt", "Lorn"),
    ("Mira", "Nash"),
    ("Otto", "Pike"),
]
MOVIES = ["Iron Tide", "Blue Hour", "Glass Road", "Red Orbit"]
KINDS = ["fake_fake", "fake_real", "fake_fake", "real_shuffled"]
# The paper's three sentences (the data layer's `paper_*` ids); R is the word "stars" only.
TEMPLATES = {
    "paper_1": "{a} stars in a movie alongside",
    "paper_2": "Q: Who stars in a movie with {a}? A: An actor named",
    "paper_3": "{a} stars in {m} alongside",
}


def make_prompts() -> list[EvalPrompt]:
    """Three templates x four facts; `paper_3` alone has a movie title."""
    prompts = []
    for i in range(4):
        a, b = " ".join(ACTORS[2 * i]), " ".join(ACTORS[2 * i + 1])
        movie = MOVIES[i]
        for tid, template in TEMPLATES.items():
            text = template.format(a=a, m=movie)
            spans = {"first_entity": _span(text, a), "relation": _span(text, "stars")}
            if "{m}" in template:
                spans["movie_title"] = _span(text, movie)
            last = text.rsplit(" ", 1)[-1]
            spans["last_token"] = CharSpan(start=len(text) - len(last), end=len(text))
            prompts.append(
                EvalPrompt(
                    id=f"f{i}-{tid}",
                    fact_id=f"f{i}",
                    template_id=tid,
                    text=text,
                    target=" " + b,
                    spans=spans,
                    fact_kind=KINDS[i],
                )
            )
    return prompts


def _span(text: str, part: str) -> CharSpan:
    start = text.index(part)
    return CharSpan(start=start, end=start + len(part))


def build_tokenizer():
    """Word-level tokenizer over the world's words with a BOS token prepended."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = set()
    for p in make_prompts():
        words |= set(p.text.replace("?", " ? ").replace(":", " : ").replace(",", " , ").split())
        words |= set(p.target.split())
    vocab = {"<pad>": 0, "<s>": 1, "<unk>": 2}
    for w in sorted(words):
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", unk_token="<unk>")


def write_dataset(root: Path) -> str:
    """A dataset folder in the data layer's layout: eval.jsonl plus a manifest."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / "eval.jsonl").open("w") as handle:
        for p in make_prompts():
            handle.write(p.model_dump_json() + "\n")
    (root / "manifest.json").write_text(json.dumps({"name": "test-world", "seed": 0}))
    return str(root)


def base_config(models: dict[str, str], dataset: str, experiments: list) -> dict:
    """A run config over `models` and the dataset folder, with a small bootstrap (200 resamples)."""
    return {
        "name": "test",
        "seed": 0,
        "models": models,
        "datasets": {"relation": dataset},
        "experiments": experiments,
        "bootstrap": 200,
    }
