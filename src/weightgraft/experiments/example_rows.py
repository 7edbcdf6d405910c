"""One encoded example, and the row a condition's result file holds for it (scored, or flagged
not applicable with the reason)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Example:
    """One evaluation prompt, encoded: token ids, target ids and each role's token positions.
    `scored` indexes the target token that rank, prob and the prediction score: the first that is
    not whitespace alone (`data.encode`), 0 for ordinary targets; `unit` how many target tokens
    from there on rank and prob score (the tokens of a first character split over byte tokens),
    1 for ordinary targets; `note` says so when either differs."""

    prompt: object  # EvalPrompt
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
    """The fields of a prompt that a record copies (see `base_record`)."""
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


def base_record(experiment: str, condition: str, ex: Example) -> dict:
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


def na_record(experiment: str, condition: str, ex: Example, note: str) -> dict:
    return dict(
        base_record(experiment, condition, ex),
        applicable=False,
        note=f"not applicable: {note}",
        rank=None,
        prob=None,
        target_logprob=None,
        exact_match=None,
        predicted=None,
    )


def scored_record(experiment: str, condition: str, ex: Example, score: dict, predicted: str) -> dict:
    return dict(
        base_record(experiment, condition, ex),
        applicable=True,
        note=ex.note,
        rank=score["rank"],
        prob=score["prob"],
        target_logprob=score["target_logprob"],
        exact_match=score["exact_match"],
        predicted=predicted,
    )
