"""The paper's published figures (arXiv 2506.20746), shipped with the package, and the map from
weightgraft's presets to the paper's analyses, sentences and datasets.

`published_numbers.csv` holds top-5 (and some mean probabilities) per analysis, dataset,
evaluation sentence, model and condition, as recovered from the authors' outputs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

MODELS = ("gemma-1.1-2b-it", "gpt2-xl", "llama-3.2-1b", "pythia-2.8b")
# weightgraft's fact kinds and the paper's datasets of the same kind.
DATASET_OF_KIND = {"fake_real": "FMRA", "fake_fake": "FMFA", "real_shuffled": "RMRA-shuffled"}


@dataclass(frozen=True)
class Analysis:
    name: str  # the paper's analysis in published_numbers.csv
    dataset: str  # the paper's main dataset for it
    sentences: dict[str, str]  # our template id -> the paper's eval_sentence
    note: str = ""
    unverified: tuple[str, ...] = ()  # eval_sentence ids whose mapping to our templates is a guess


ANALYSIS_OF_EXPERIMENT = {
    "position_grafting": Analysis("position", "FMRA", {"paper_1": "1", "paper_2": "2", "paper_3": "3"}),
    "components_reversal": Analysis("components_reversal", "FMRA", {"paper_1": "1", "paper_2": "2", "paper_3": "3"}),
    # The published rows used an older sentence 1. The only older sentence-1 wording in the
    # authors' history (2025-05-19) is `{first_actor} stars in {movie_title} alongside`, which is
    # our `paper_3` in the clean wording; whether those rows used it is not known.
    "components_pre": Analysis(
        "components_pre",
        "FMRA",
        {"paper_3": "1-old"},
        "published on an older wording of sentence 1, Gemma only (GPT2-XL and Llama <= 0.07 for every set); "
        "1-old is mapped to `paper_3` in the clean wording, `{first_actor} stars in {movie_title} alongside`, "
        "the only older sentence-1 wording in the authors' history: unverified",
        unverified=("1-old",),
    ),
    "hybrid": Analysis(
        "hybrid", "FMRA_B", {"paper_1": "1"}, "the paper's relation model learned half B of FMRA; SFT(B) = 1.00"
    ),
}


@cache
def published_rows() -> tuple[dict, ...]:
    text = files("weightgraft.paper").joinpath("published_numbers.csv").read_text()
    rows = []
    for row in csv.DictReader(text.splitlines()):
        row["value"] = float(row["value"])
        rows.append(row)
    return tuple(rows)


def published(
    analysis: str, dataset: str, sentence: str, condition: str, model: str, metric: str = "top5"
) -> float | None:
    for row in published_rows():
        if (row["analysis"], row["dataset"], row["eval_sentence"], row["condition"], row["model"], row["metric"]) == (
            analysis,
            dataset,
            sentence,
            condition,
            model,
            metric,
        ):
            return row["value"]
    return None
