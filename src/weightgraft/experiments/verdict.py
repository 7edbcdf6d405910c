"""Does the paper's pattern appear? Three checks, each a plain sentence made from the numbers.

All use top-5 accuracy over every template (`ALL`; the measure the built-in models are
trained to, and less all-or-nothing than top-1 on small models) and the share of the finetuning gain a
condition recovers:  recovery(C) = (C - base) / (full - base).

1. FE+LT against SFT (position_grafting): the pattern appears when FE+LT recovers at least
   80% of SFT's gain over PRE.
2. (FE+LT)^C against PRE (position_grafting): the pattern appears when grafting everything except
   FE and LT recovers at most 20% of that gain (it stays near PRE).
3. O+FFN against ATTN+O+FFN (components_pre_sft, every condition with FE grafted): the pattern
   appears when O+FFN at LT recovers at least 80% of what ATTN+O+FFN at LT adds over FE alone.

A check is inconclusive when its denominator is under 0.10 (e.g. SFT barely beats PRE, so there
is no gain to share out), and skipped when its experiment was not run.
"""

from __future__ import annotations

from dataclasses import dataclass

METRIC = "top5"
MIN_GAP = 0.10
RECOVERS = 0.8
STAYS_NEAR = 0.2


@dataclass
class Check:
    name: str
    outcome: str  # "appears", "does not appear", "inconclusive"
    sentence: str


def _value(summary, experiment, condition):
    for row in summary:
        if (row["experiment"], row["condition"], row["template"], row["metric"]) == (
                experiment, condition, "ALL", METRIC):
            return row["value"]
    return None


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def check_pattern(summary: list[dict]) -> list[Check]:
    checks = []
    pre, sft = _value(summary, "position_grafting", "PRE"), _value(summary, "position_grafting", "SFT")
    fe_lt = _value(summary, "position_grafting", "FE+LT")
    comp = _value(summary, "position_grafting", "(FE+LT)^C")
    if None not in (pre, sft, fe_lt, comp):
        gap = sft - pre
        nums = f"(top-5: PRE {_fmt(pre)}, SFT {_fmt(sft)}, FE+LT {_fmt(fe_lt)}, (FE+LT)^C {_fmt(comp)})"
        if gap < MIN_GAP:
            for name in ("FE+LT vs SFT", "(FE+LT)^C vs PRE"):
                checks.append(Check(name, "inconclusive",
                                    f"SFT gains only {_fmt(gap)} over PRE, too little to share out {nums}."))
        else:
            rec = (fe_lt - pre) / gap
            ok = rec >= RECOVERS
            checks.append(Check("FE+LT vs SFT", "appears" if ok else "does not appear",
                                f"Grafting only the first entity and the last token recovers "
                                f"{rec:.0%} of the finetuning gain ({'>=' if ok else '<'} "
                                f"{RECOVERS:.0%}) {nums}."))
            rec_c = (comp - pre) / gap
            ok = rec_c <= STAYS_NEAR
            checks.append(Check("(FE+LT)^C vs PRE", "appears" if ok else "does not appear",
                                f"Grafting every position except FE and LT recovers {rec_c:.0%} "
                                f"of the gain ({'<=' if ok else '>'} {STAYS_NEAR:.0%}: "
                                f"{'stays near' if ok else 'moves away from'} PRE) {nums}."))
    fe = _value(summary, "components_pre_sft", "FE")
    full = _value(summary, "components_pre_sft", "ATTN+O+FFN")
    o_ffn = _value(summary, "components_pre_sft", "O+FFN")
    if None not in (fe, full, o_ffn):
        gap = full - fe
        nums = f"(top-5 with FE grafted: FE only {_fmt(fe)}, +ATTN+O+FFN {_fmt(full)}, +O+FFN {_fmt(o_ffn)})"
        if gap < MIN_GAP:
            checks.append(Check("O+FFN vs ATTN+O+FFN", "inconclusive",
                                f"ATTN+O+FFN at LT adds only {_fmt(gap)} over FE alone {nums}."))
        else:
            rec = (o_ffn - fe) / gap
            ok = rec >= RECOVERS
            checks.append(Check("O+FFN vs ATTN+O+FFN", "appears" if ok else "does not appear",
                                f"O and FFN alone at the last token (last quarter) give {rec:.0%} "
                                f"of what ATTN+O+FFN adds ({'>=' if ok else '<'} {RECOVERS:.0%}) {nums}."))
    return checks
