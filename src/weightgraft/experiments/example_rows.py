"""One encoded example, and the row a condition's result file holds for it (scored, or flagged
not applicable with the reason)."""

from __future__ import annotations

from dataclasses import dataclass

from weightgraft.data.schema import EvalPrompt
from weightgraft.engine.scoring import TargetScore


@dataclass
class Example:
    """One evaluation prompt, encoded: token ids, target ids and each role's token positions.
    `scored` indexes the target token that rank, prob and the prediction score: the first that is
    not whitespace alone (`data.encode`), 0 for ordinary targets; `unit` how many target tokens
    from there on rank and prob score (the tokens of a first character split over byte tokens),
    1 for ordinary targets; `note` says so when either differs."""

    prompt: EvalPrompt
    input_ids: list[int]
    target_ids: list[int]
    positions: dict[str, list[int]]
    scored: int = 0
    note: str = ""
    unit: int = 1


def example_key(e: Example) -> tuple:
    """What of an example a condition's results depend on; the scored token only where it is not
    the target's first, its unit only where it holds several tokens (so that fingerprints of
    ordinary targets are those of earlier versions)."""
    key = (e.prompt.id, e.input_ids, e.target_ids, e.positions, prompt_fields(e.prompt))
    if e.unit != 1:
        return (*key, {"scored": e.scored, "unit": e.unit, "note": e.note})
    return key if e.scored == 0 else (*key, {"scored": e.scored, "note": e.note})


def prompt_fields(prompt) -> dict:
    """The fields of a prompt that a result row copies (see `ExampleRow`)."""
    return {
        "template": prompt.template_id,
        "fact_id": prompt.fact_id,
        "fact_kind": fact_kind_of(prompt),
        "reversed": bool(prompt.reversed),
        "target": prompt.target,
    }


def fact_kind_of(prompt) -> str:
    """The fact's kind (fake_fake, fake_real, real_shuffled, ...), or `unknown` for datasets
    written before prompts carried it."""
    return str(getattr(prompt, "fact_kind", None) or "unknown")


@dataclass(frozen=True)
class ExampleRow:
    """One row of a condition's result file (`result_files.SCHEMA` gives the columns' types):
    the example it scores, and how it scored, or why the condition does not apply to it (then
    `applicable` is False, `note` gives the reason and the scores are None).

    template, example_id, fact_id, fact_kind, reversed, target: copied from the prompt
    (`prompt_fields`); n_target_tokens: the target's length in tokens; note: on a scored row,
    `Example.note` (how its scored token was chosen), else the reason it was not scored;
    predicted: the text of the token the model ranks first where the target's scored token is.
    """

    experiment: str
    condition: str
    template: str
    example_id: str
    fact_id: str
    fact_kind: str
    reversed: bool
    applicable: bool
    note: str
    target: str
    n_target_tokens: int
    rank: int | None
    prob: float | None
    target_logprob: float | None
    exact_match: bool | None
    predicted: str | None

    @classmethod
    def not_applicable(cls, experiment: str, condition: str, ex: Example, reason: str) -> ExampleRow:
        return cls(
            **_copied(experiment, condition, ex),
            applicable=False,
            note=f"not applicable: {reason}",
            rank=None,
            prob=None,
            target_logprob=None,
            exact_match=None,
            predicted=None,
        )

    @classmethod
    def scored(cls, experiment: str, condition: str, ex: Example, score: TargetScore, predicted: str) -> ExampleRow:
        return cls(
            **_copied(experiment, condition, ex),
            applicable=True,
            note=ex.note,
            rank=score.rank,
            prob=score.prob,
            target_logprob=score.target_logprob,
            exact_match=score.exact_match,
            predicted=predicted,
        )


def _copied(experiment: str, condition: str, ex: Example) -> dict[str, str | bool | int]:
    """The fields of a row that name its example (the same in every condition's file)."""
    p = ex.prompt
    return {
        "experiment": experiment,
        "condition": condition,
        "template": p.template_id,
        "example_id": p.id,
        "fact_id": p.fact_id,
        "fact_kind": fact_kind_of(p),
        "reversed": bool(p.reversed),
        "target": p.target,
        "n_target_tokens": len(ex.target_ids),
    }
