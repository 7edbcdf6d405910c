"""The finer grafts' report (head map, rank curve, dose curve): from a synthetic summary whose
numbers are set here, the tables write those numbers and the plots draw them (the heatmap's
arrays, the curves' points), and each sentence says what the decision rule says."""

from __future__ import annotations

import math

import numpy as np
import pytest

from weightgraft.experiments.condition_kind import Plain, kind_of
from weightgraft.experiments.conditions import ConditionMethod
from weightgraft.experiments.record import ConditionRecord, ExperimentRecord
from weightgraft.reporting.finer import curves, head_maps
from weightgraft.reporting.finer_findings import finer_findings
from weightgraft.reporting.finer_plots import curve_figure, head_figure
from weightgraft.reporting.finer_section import experiment_finer
from weightgraft.reporting.plots import plot_experiment
from weightgraft.reporting.report import experiment_section
from weightgraft.reporting.report_model import experiment_report
from weightgraft.reporting.statistics import ALL
from weightgraft.reporting.study_contract import NO_STUDY
from weightgraft.reporting.summary import RunSummary, SummaryRow

EXP = "finer"
# condition -> (top5 value, low, high), prob = top5 / 2 with the same relative interval
VALUES = {
    "B2A": (0.20, 0.15, 0.25),
    "SFT": (0.90, 0.85, 0.95),
    "O": (0.60, 0.50, 0.70),
    "O L6": (0.95, 0.90, 1.00),  # every head of layer 6; layer 7 has no such row (the donor stands in)
    "O L6 h0": (0.50, 0.40, 0.60),  # wholly above B2A's 0.20: appears
    "O L6 h1": (0.22, 0.10, 0.34),  # straddles 0.20: inconclusive
    "O L7 h0": (0.10, 0.05, 0.15),  # wholly below: does not appear
    "O L7 h1": (0.30, 0.25, 0.35),  # appears
    "O L6 h0 [random 1]": (0.25, 0.20, 0.30),
    "O L6 h0 [random 2]": (0.35, 0.30, 0.40),
    "O L6 h0 [complement]": (0.70, 0.60, 0.80),
    "O L7 h1 [complement]": (0.80, 0.75, 0.85),
}


def _cell(layer: int, head: int) -> dict:
    return {"grain": "head", "layer": layer, "head": head, "components": "O"}


def _cond(name: str, meta: dict) -> ConditionRecord:
    return ConditionRecord(name, "b2a", "sft", ConditionMethod.WEIGHTS, f"about {name}", meta, (), f"{name}.parquet")


def _rows(values: dict) -> list[SummaryRow]:
    rows = []
    for name, (v, lo, hi) in values.items():
        for metric, f in (("top5", 1.0), ("prob", 0.5)):
            for template in (ALL, "t1"):
                rows.append(
                    SummaryRow(
                        experiment=EXP,
                        condition=name,
                        template=template,
                        fact_kind=ALL,
                        metric=metric,
                        value=v * f,
                        ci_low=lo * f,
                        ci_high=hi * f,
                        n=40,
                        n_facts=10,
                        fidelity="",
                        wording="clean",
                    )
                )
    return rows


def _state(conditions: list[ConditionRecord]) -> ExperimentRecord:
    return ExperimentRecord(
        name=EXP,
        title="Finer test",
        description="synthetic",
        dataset="relation",
        recipient="b2a",
        donor="sft",
        headline=("top5", "prob"),
        plot="bars",
        num_layers=8,
        conditions=tuple(conditions),
        examples=tuple(f"p{i}" for i in range(40)),
        templates=("t1",),
    )


@pytest.fixture
def heads():
    conds = [
        _cond("B2A", {"reference": "recipient"}),
        _cond("SFT", {"reference": "donor"}),
        _cond("O", {"reference": "component", "components": "O"}),
        _cond("O L6", {"reference": "component", "components": "O", "layer": 6}),
    ]
    for layer in (6, 7):
        for head in (0, 1):
            conds.append(_cond(f"O L{layer} h{head}", _cell(layer, head)))
    for i in (1, 2):
        conds.append(_cond(f"O L6 h0 [random {i}]", _cell(6, 0) | {"control": "random", "of": "O L6 h0", "draw": i}))
    conds.append(_cond("O L6 h0 [complement]", _cell(6, 0) | {"control": "complement", "of": "O L6 h0"}))
    conds.append(_cond("O L7 h1 [complement]", _cell(7, 1) | {"control": "complement", "of": "O L7 h1"}))
    return _state(conds), _rows(VALUES)


def test_head_map_holds_the_summary_numbers(heads):
    state, rows = heads
    (grid,) = head_maps(rows, state)
    assert grid.layers == [6, 7] and grid.heads == [0, 1] and grid.components == "O"
    effect = np.array(grid.effect("top5"))
    expected = np.array([[0.50 - 0.20, 0.22 - 0.20], [0.10 - 0.20, 0.30 - 0.20]])
    assert np.allclose(effect, expected)
    assert np.allclose(grid.effect("prob", "low"), np.array([[0.40, 0.10], [0.05, 0.25]]) / 2 - 0.10)
    assert grid.refs["component"]["top5"].condition == "O" and grid.wholes[6]["top5"].value == 0.95
    cost = np.array(grid.cost("top5"))
    assert cost[0][0] == pytest.approx(0.95 - 0.70) and cost[1][1] == pytest.approx(0.90 - 0.80)
    assert grid.cost("top5", "low")[0][0] == pytest.approx(0.95 - 0.80)  # the complement's high bound
    assert math.isnan(cost[0][1]) and math.isnan(cost[1][0])  # no complement computed there
    assert [r["top5"].value for r in grid.cells[(6, 0)].random] == [0.25, 0.35]


def test_head_figure_draws_the_maps(heads):
    state, rows = heads
    (grid,) = head_maps(rows, state)
    fig = head_figure(grid, "t")
    top5, prob, cost = (ax.images[0].get_array() for ax in fig.axes if ax.images)
    assert np.allclose(top5, grid.effect("top5"))
    assert np.allclose(prob, grid.effect("prob"))
    assert np.allclose(np.ma.filled(cost, np.nan), grid.cost("top5"), equal_nan=True)
    clim = [ax for ax in fig.axes if ax.images][0].images[0].get_clim()
    assert clim == pytest.approx((-0.40, 0.40))  # the widest interval bound (L6 h0's +0.40) sets the scale
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "+0.30\n[+0.20, +0.40]" in texts  # L6 h0: 0.50 [0.40, 0.60] - 0.20
    cost_texts = [t.get_text() for t in [ax for ax in fig.axes if ax.images][2].texts]
    assert "+0.25\n[+0.15, +0.35]" in cost_texts  # O L6 0.95 - complement 0.70 [0.60, 0.80]


def test_head_table_and_sentence(heads):
    state, rows = heads
    text = "\n".join(experiment_finer(finer_findings(rows, state)))
    assert "weightgraft's extension" in text and "not a finding of the paper" in text
    assert (
        "| 6 | 0 | 0.500 | +0.300 [+0.20, +0.40] | +0.150 [+0.10, +0.20] | +0.250 [+0.15, +0.35] | 0.300 | appears |"
        in text
    )
    assert "| 6 | 1 | 0.220 |" in text and "| n/a | inconclusive |" in text
    assert "| 7 | 0 | 0.100 | -0.100 [-0.15, -0.05]" in text and "does not appear |" in text
    assert "Of 4 cells: appears: L6 h0, L7 h1 (2); does not appear: L7 h0 (1); inconclusive: L6 h1 (1)." in text


RANKS = {
    "B2A": (0.20, 0.15, 0.25),
    "SFT": (0.90, 0.85, 0.95),
    "ATTN+O+FFN": (0.85, 0.80, 0.90),
    "O+FFN rank 1": (0.30, 0.20, 0.40),
    "O+FFN rank 2": (0.55, 0.45, 0.65),
    "O+FFN rank 4": (0.70, 0.65, 0.75),
    "O+FFN": (0.70, 0.60, 0.80),
    "O+FFN [random 1]": (0.25, 0.20, 0.30),
}


@pytest.fixture
def ranks():
    point = {"shape": "rank", "series": "O+FFN"}
    conds = [
        _cond("B2A", {"reference": "recipient"}),
        _cond("SFT", {"reference": "donor"}),
        _cond("ATTN+O+FFN", {"reference": "component", "components": "ATTN+O+FFN"}),
        _cond("O+FFN", point | {"rank": "full"}),  # out of order on purpose: the curve sorts by rank
        _cond("O+FFN rank 4", point | {"rank": 4}),
        _cond("O+FFN rank 1", point | {"rank": 1}),
        _cond("O+FFN rank 2", point | {"rank": 2}),
        _cond("O+FFN [random 1]", point | {"rank": "full", "control": "random", "of": "O+FFN", "draw": 1}),
    ]
    return _state(conds), _rows(RANKS)


def test_rank_curve_points_and_plot(ranks):
    state, rows = ranks
    (curve,) = curves(rows, state, "rank")
    assert curve.xs == [1, 2, 4, "full"]
    assert curve.ys("top5") == [0.30, 0.55, 0.70, 0.70] and curve.ys("prob", "high") == [0.20, 0.325, 0.375, 0.40]
    fig = curve_figure(curve, "t")
    line = fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [0.0, 1.0, 2.0, 3.0]  # log2 ranks, full one step past 4
    assert list(line.get_ydata()) == [0.30, 0.55, 0.70, 0.70]
    assert np.allclose(fig.axes[0].collections[1].get_offsets(), [[3.0, 0.25]])  # the random-layer control
    refs = sorted(round(ln.get_ydata()[0], 6) for ln in fig.axes[0].lines[1:])
    assert refs == [0.20, 0.85, 0.90]


def test_rank_table_and_sentence(ranks):
    state, rows = ranks
    text = "\n".join(experiment_finer(finer_findings(rows, state)))
    assert "| 1 | 0.300 [0.20, 0.40] | 0.150 [0.10, 0.20] | does not appear |" in text
    assert "| 2 | 0.550 [0.45, 0.65] | 0.275 [0.23, 0.33] | does not appear |" in text  # 0.65 < 0.70
    assert "| 4 | 0.700 [0.65, 0.75] | 0.350 [0.33, 0.38] | inconclusive |" in text
    assert "| full | 0.700 [0.60, 0.80] | 0.350 [0.30, 0.40] | (the reference) |" in text
    assert "| random control 1 at full (`O+FFN [random 1]`) | 0.250 [0.20, 0.30] |" in text
    assert "| the whole component (`ATTN+O+FFN`) | 0.850 [0.80, 0.90] |" in text
    assert "does not appear: rank 1, rank 2 (2); inconclusive: rank 4 (1); no rank below full does by the rule" in text


DOSES = {
    "PRE": (0.10, 0.05, 0.15),
    "SFT": (0.90, 0.85, 0.95),
    "FE+LT x-0.5": (0.02, 0.00, 0.04),
    "FE+LT x0": (0.10, 0.05, 0.15),
    "FE+LT x1": (0.80, 0.70, 0.90),
    "FE+LT x2": (0.40, 0.05, 0.75),
    "FE+LT x1 [random 1]": (0.12, 0.08, 0.16),
    "FE+LT x1 [random 2]": (0.14, 0.10, 0.18),
}


@pytest.fixture
def doses():
    point = {"shape": "scale", "series": "FE+LT"}
    conds = [_cond("PRE", {"reference": "recipient"}), _cond("SFT", {"reference": "donor"})]
    conds += [_cond(f"FE+LT x{s:g}", point | {"scale": s}) for s in (2.0, -0.5, 1.0, 0.0)]
    conds += [
        _cond(f"FE+LT x1 [random {i}]", point | {"scale": 1.0, "control": "random", "of": "FE+LT x1", "draw": i})
        for i in (1, 2)
    ]
    return _state(conds), _rows(DOSES)


def test_dose_curve_table_plot_and_sentence(doses):
    state, rows = doses
    (curve,) = curves(rows, state, "scale")
    assert curve.xs == [-0.5, 0.0, 1.0, 2.0] and curve.ys("top5") == [0.02, 0.10, 0.80, 0.40]
    fig = curve_figure(curve, "t")
    assert list(fig.axes[1].lines[0].get_xdata()) == [-0.5, 0.0, 1.0, 2.0]
    assert list(fig.axes[1].lines[0].get_ydata()) == [0.01, 0.05, 0.40, 0.20]
    assert np.allclose(fig.axes[0].collections[1].get_offsets(), [[1.0, 0.12], [1.0, 0.14]])
    text = "\n".join(experiment_finer(finer_findings(rows, state)))
    assert "| 1 | 0.800 [0.70, 0.90] | 0.400 [0.35, 0.45] | appears |" in text
    assert "| 2 | 0.400 [0.05, 0.75] | 0.200 [0.03, 0.38] | inconclusive |" in text
    # lambda 0 is the recipient's own value: its interval straddles it, so inconclusive
    assert "appears: lambda 1 (1); does not appear: lambda -0.5 (1); inconclusive: lambda 0, lambda 2 (2)." in text
    assert "At lambda = 1 against its random controls' mean: appears." in text


def test_report_section_and_plot_files(heads, tmp_path):
    state, rows = heads
    plain = [isinstance(kind_of(meta), Plain) for meta in ({}, {"reference": "recipient"}, _cell(6, 0))]
    assert plain == [True, True, False]
    assert isinstance(kind_of({"reference": "component", "components": "O", "layer": 6}), Plain)
    paths = plot_experiment(rows, state, finer_findings(rows, state), tmp_path)
    assert {p.name for p in paths} >= {"finer.png", "finer_heads.png", "finer_heads.svg"}
    assert all(p.stat().st_size > 1000 for p in paths)
    lines = experiment_section(experiment_report(RunSummary(rows), state), paths, NO_STUDY, rows)
    text = "\n".join(lines)
    assert "![finer_heads](plots/finer_heads.png)" in text and "### O per head (layer x head)" in text
    assert "- **B2A**:" in text and "- **O L6**:" in text and "- plus 8 finer-grain conditions" in text
    assert "- **O L6 h0**" not in text


def test_a_metric_equal_at_every_resample_decides_nothing_and_small_values_keep_digits():
    """A dose with top-5 0 at every resample, as the recipient's, is not 'above' it on top-5:
    the row is decided on probability alone, whose tiny lift prints with its digits."""
    from weightgraft.reporting.decision import Outcome
    from weightgraft.reporting.finer import Estimate
    from weightgraft.reporting.finer_findings import judge
    from weightgraft.reporting.finer_section import _ci

    def est(top5, prob):
        return {"top5": Estimate("x", *top5, n_facts=50), "prob": Estimate("x", *prob, n_facts=50)}

    recipient = est((0.0, 0.0, 0.0), (1e-5, 5e-6, 2e-5))
    assert judge(est((0.0, 0.0, 0.0), (4e-4, 2e-4, 6e-4)), recipient) == Outcome.APPEARS
    assert judge(est((0.0, 0.0, 0.0), (1e-5, 4e-6, 3e-5)), recipient) == Outcome.INCONCLUSIVE
    assert judge(est((0.0, 0.0, 0.0), (1e-5, 1e-5, 1e-5)), est((0.0, 0.0, 0.0), (1e-5, 1e-5, 1e-5))) == (
        Outcome.UNDEFINED
    )
    assert _ci(4e-4, 2e-4, 6e-4) == "4.0e-04 [2.0e-04, 6.0e-04]"
    assert _ci(0.25, 0.2, 0.3) == "0.250 [0.20, 0.30]"
