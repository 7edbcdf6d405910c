"""Where a claim does not appear, what the run's own rows say about the missing part.

A claim that fails on a model is only useful with a pointer to where the finetune's gain went.
The paper presets carry the rows that answer that for the first claim: `FE+LT [donor
unembedding]` (FE+LT with the donor's unembedding at every position) says how much of the
shortfall the finetuned unembedding carries; for the component claims, the reference gaps say
whether the last-token components of the fourth quarter hold any of the gain at all. Every
sentence is built from recovery.csv's rows (intervals over facts), never from a fixed story.
"""

from __future__ import annotations

from weightgraft.reporting.decision import Outcome
from weightgraft.reporting.numbers import with_interval
from weightgraft.reporting.statistics import ALL
from weightgraft.reporting.summary import RecoveryRow
from weightgraft.reporting.verdict import Check

HEAD_ROW = "{} [donor unembedding]"


def _row(
    recovery: list[RecoveryRow], experiment: str, condition: str, base: str, full: str, metric: str
) -> RecoveryRow | None:
    for r in recovery:
        if (r.experiment, r.condition, r.template, r.fact_kind, r.base, r.full) == (
            experiment,
            condition,
            ALL,
            ALL,
            base,
            full,
        ) and r.metric == metric:
            return r
    return None


def _share(r: RecoveryRow | None) -> str:
    if r is None or not r.defined or r.recovery is None:
        return "an undefined share"
    return with_interval(r.recovery, r.ci_low, r.ci_high)


def _gap(r: RecoveryRow | None) -> str:
    if r is None:
        return "n/a"
    return with_interval(r.gap, r.gap_low, r.gap_high, digits=3, sign=True)


def _includes_zero(r: RecoveryRow | None) -> bool:
    return r is not None and r.gap_low is not None and r.gap_low <= 0 <= r.gap_high


def no_gain(recovery: list[RecoveryRow], experiment: str, base: str) -> str | None:
    """A sentence when SFT itself gains nothing measurable over the recipient: then no claim
    about where the gain lives can be decided."""
    total = _row(recovery, experiment, "SFT", base, "SFT", "top5")
    if not _includes_zero(total):
        return None
    return (
        f"SFT adds {_gap(total)} top-5 to {base}: the finetune itself has no measurable gain over the "
        "recipient on these prompts, so where its gain lives cannot be asked here."
    )


def position_note(check: Check, recovery: list[RecoveryRow]) -> str | None:
    """FE+LT against FE+LT with the donor's unembedding, between the claim's references."""
    claim = check.claim
    nothing = no_gain(recovery, claim.experiment, claim.low)
    if nothing:
        return nothing
    head = HEAD_ROW.format(claim.condition)
    rows = {
        (cond, m): _row(recovery, claim.experiment, cond, claim.low, claim.high, m)
        for cond in (claim.condition, head)
        for m in ("top5", "prob")
    }
    with_head, plain = rows[(head, "top5")], rows[(claim.condition, "top5")]
    if with_head is None or plain is None or not with_head.defined or not plain.defined:
        return None
    numbers = (
        f"{head} recovers {_share(with_head)} of {claim.high}'s top-5 gain over {claim.low} and "
        f"{_share(rows[(head, 'prob')])} of its probability gain, against {_share(plain)} and "
        f"{_share(rows[(claim.condition, 'prob')])} for {claim.condition}"
    )
    same = abs(with_head.recovery - plain.recovery) < 1e-9
    if same:
        return (
            f"{numbers}: the two rows are the same, because the donor's unembedding is already used "
            f"here (a tied model scores {claim.condition} with it) or equals the recipient's (a finetune "
            "that left it unchanged), so the missing part is not in the unembedding but at positions "
            f"other than {claim.condition} or in the final norm."
        )
    if with_head.ci_low >= claim.threshold:
        return (
            f"{numbers}: with the donor's unembedding the claim's share is reached, so on this model the "
            "finetuned unembedding carries the rest of the gain."
        )
    if with_head.ci_high < claim.threshold:
        gained = with_head.recovery - plain.recovery
        return (
            f"{numbers}: the donor's unembedding adds {gained:+.2f} of the gain and the rest lies outside "
            f"{claim.condition} and the unembedding (at the other positions, or the final norm)."
        )
    return f"{numbers}: whether the finetuned unembedding carries all of the rest is not settled by these intervals."


def component_note(check: Check, recovery: list[RecoveryRow]) -> str | None:
    """Whether the last-token components hold any of the gain: the claim's reference gap beside
    the whole finetune's gain over the same recipient."""
    claim = check.claim
    nothing = no_gain(recovery, claim.experiment, claim.low)
    if nothing:
        return nothing
    ref = _row(recovery, claim.experiment, claim.condition, claim.low, claim.high, "top5")
    whole = _row(recovery, claim.experiment, claim.high, claim.low, "SFT", "top5")
    total = _row(recovery, claim.experiment, "SFT", claim.low, "SFT", "top5")
    if ref is None:
        return None
    text = f"{claim.high} adds {_gap(ref)} top-5 to {claim.low}"
    if total is not None:
        text += f", where SFT adds {_gap(total)}"
        if whole is not None and whole.defined:
            text += f" ({claim.high} recovers {_share(whole)} of it)"
    if _includes_zero(ref):
        return (
            f"{text}: the grafted components hold no measurable part of the finetune's gain on this "
            "model, so there is nothing for the claim to share out; the gain lies elsewhere (other "
            "positions, layers or the unembedding: see the position rows)."
        )
    return text + "."


def missing_part(check: Check, recovery: list[RecoveryRow]) -> str | None:
    """One sentence on what the run's rows show about a claim that does not appear (or cannot
    be decided); None when it appears or the rows to say more are absent."""
    if check.outcome == Outcome.APPEARS or check.claim is None or not recovery:
        return None
    if check.claim.experiment == "position_grafting" and check.claim.high == "SFT":
        return position_note(check, recovery)
    if check.claim.experiment.startswith("components"):
        return component_note(check, recovery)
    return None
