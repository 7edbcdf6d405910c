"""weightgraft's own extensions of the paper's component analysis (issue 20): grafts finer than
a component. None of these is a finding or a figure of the paper; they ask the question its
component figure leaves open: *which* part of O and the last layers' FFNs carries recall, and
how much of the finetuning change it needs.

- finer_heads_o  b2a <- sft; O per head at LT, one condition per (layer, head) of the authors'
                 fourth quarter, each with random heads of the same layer and its complement
                 (every other head of O in that layer) as controls; references B2A, SFT, O
                 (every head) in the band and O (every head) in each layer of it, the scope a
                 head and its complement make up (the report's cost: that scope minus the
                 complement).
                 Layers and heads are concrete, so the preset takes the recipient's shape:
                 `num_layers` (the fourth quarter is [3q, n), q = n // 4, as the paper's band)
                 and `num_heads` (query heads). A head count above the model's fails at plan
                 time, and so do a `num_layers` or `num_heads` other than the model's (the
                 experiment's `built_for`).
- finer_rank     b2a <- sft; O+FFN at LT in the fourth quarter with the change truncated to its
                 top-k singular directions per matrix, k in RANKS, and the whole change
                 ("full"); random layers of the same count as a control; references B2A, SFT,
                 ATTN+O+FFN. With `hidden_size`, ranks above it are dropped (they exceed the
                 rank of O's and the FFN's matrices) and the description names them.
- finer_dose     the dose-response W_r + lambda * (W_d - W_r) for lambda in DOSES: FE+LT (every
                 weight) onto PRE and O+FFN at LT in the fourth quarter onto B2A, donor SFT; at
                 lambda = 1 random positions of the same count (FE+LT) and random layers (O+FFN)
                 as controls. Two experiments, one per series.

Every condition is a plain dict in the full ConditionSpec form, with the `meta` the report reads
(FINER_CONTRACT: `grain`, `shape`, `reference`); importing this module registers the presets in
`weightgraft.experiments.preset_registry`.
"""

from __future__ import annotations

from weightgraft.data.templates import PAPER_TEMPLATES
from weightgraft.experiments.conditions.components import EVERY_WEIGHT
from weightgraft.experiments.conditions.paper_atoms import author_band
from weightgraft.experiments.preset_registry import Preset, register_preset
from weightgraft.paper.presets import COMPONENT_BAND

RANKS = (1, 2, 4, 8, 16)
DOSES = (-0.5, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
RANDOM_DRAWS = 3  # random controls per controlled condition
EXTENSION = "weightgraft's extension of the paper, not a finding of the paper"
DONOR_WORDS = "donor model alone (every weight everywhere)"


def _reference(name: str, role: str, grafts: list[dict], description: str, **meta) -> dict:
    """A reference row: the recipient alone, the donor alone or the whole component."""
    return {"name": name, "grafts": grafts, "description": description, "meta": {"reference": role, **meta}}


def _baselines(recipient: str) -> list[dict]:
    """The recipient alone and the donor alone (every weight everywhere)."""
    return [
        _reference(recipient, "recipient", [], "recipient alone"),
        _reference("SFT", "donor", [{"positions": "ALL", "layers": "all", "components": "all"}], DONOR_WORDS),
    ]


def _experiment(
    name: str, title: str, description: str, recipient: str, conditions: list[dict], built_for=None, **opts
) -> dict:
    """One experiment of the finer presets: relation facts, forward prompts, the paper's
    sentences, top-5 and probability as its headline (what the finer plots show)."""
    return dict(
        name=name,
        title=title,
        description=f"{description}. This is {EXTENSION}.",
        dataset="relation",
        recipient=recipient,
        donor="sft",
        conditions=conditions,
        headline=["top5", "prob"],
        max_examples=opts["max_examples"],
        directions="forward",
        templates=opts["templates"] or list(PAPER_TEMPLATES),
        built_for=built_for,
    )


def head_cells(num_layers: int, num_heads: int) -> list[dict]:
    """One condition per (layer, head) of O at LT in the authors' fourth quarter, each with
    random heads of its layer (when the layer has other heads) and its complement."""
    cells = []
    for layer in author_band(COMPONENT_BAND, num_layers):
        for head in range(num_heads):
            cells.append(
                {
                    "name": f"O L{layer} h{head}",
                    "grafts": [{"positions": "LT", "layers": [layer], "components": "O", "heads": [head]}],
                    "description": f"head {head} of O (its input columns of W_O) at LT in layer {layer}",
                    "meta": {"grain": "head", "layer": layer, "head": head, "components": "O"},
                    "controls": {
                        "random": min(RANDOM_DRAWS, num_heads - 1),
                        "seed": 0,
                        "vary": "heads",
                        "complement": True,
                    },
                }
            )
    return cells


def layer_whole_conditions(num_layers: int) -> list[dict]:
    """O (every head) at LT in each layer of the fourth quarter: a head cell with its complement."""
    return [
        _reference(
            f"O L{layer}",
            "component",
            [{"positions": "LT", "layers": [layer], "components": "O"}],
            f"O (every head) at LT in layer {layer}",
            components="O",
            layer=layer,
        )
        for layer in author_band(COMPONENT_BAND, num_layers)
    ]


def finer_heads_o(max_examples=None, templates=None, num_layers=None, num_heads=None) -> list[dict]:
    if num_layers is None or num_heads is None:
        raise ValueError(
            "preset 'finer_heads_o' enumerates the recipient's layers and heads: give num_layers and "
            "num_heads (the b2a model's num_hidden_layers and num_attention_heads), e.g. "
            "{preset: finer_heads_o, num_layers: 8, num_heads: 4}"
        )
    band = author_band(COMPONENT_BAND, num_layers)
    whole = _reference(
        "O",
        "component",
        [{"positions": "LT", "layers": COMPONENT_BAND, "components": "O"}],
        "O (every head) at LT in the authors' fourth quarter",
        components="O",
    )
    return [
        _experiment(
            "finer_heads_o",
            "O per head at LT onto the one-direction model",
            f"Recipient: the B2A model; donor: SFT. Each of the {num_heads} heads of O (the input columns "
            f"of W_O that head writes through) at the last token, one layer at a time over the authors' "
            f"fourth quarter (layers {band[0]}..{band[-1]} of {num_layers}); each cell with "
            f"{min(RANDOM_DRAWS, num_heads - 1)} random heads of its layer and its complement (every "
            "other head of O in that layer) as controls; O with every head, in the band and in each layer, "
            "as references",
            "b2a",
            [*_baselines("B2A"), whole, *layer_whole_conditions(num_layers), *head_cells(num_layers, num_heads)],
            built_for={"num_layers": num_layers, "num_heads": num_heads},
            max_examples=max_examples,
            templates=templates,
        )
    ]


def rank_points(hidden_size: int | None) -> tuple[list[dict], list[int]]:
    """O+FFN at LT in the fourth quarter truncated to rank k, then the whole change with its
    random-layer control; and the ranks dropped for being above `hidden_size`."""
    kept = [k for k in RANKS if hidden_size is None or k <= hidden_size]
    graft = {"positions": "LT", "layers": COMPONENT_BAND, "components": "O+FFN"}
    points = [
        {
            "name": f"O+FFN rank {k}",
            "grafts": [dict(graft, shape={"rank": k})],
            "description": f"O+FFN at LT in the authors' fourth quarter, the change truncated to rank {k} per matrix",
            "meta": {"shape": "rank", "rank": k, "series": "O+FFN"},
        }
        for k in kept
    ]
    points.append(
        {
            "name": "O+FFN",
            "grafts": [graft],
            "description": "O+FFN at LT in the authors' fourth quarter, the whole change (rank full)",
            "meta": {"shape": "rank", "rank": "full", "series": "O+FFN"},
            "controls": {"random": RANDOM_DRAWS, "seed": 0, "vary": "layers", "complement": False},
        }
    )
    return points, [k for k in RANKS if k not in kept]


def finer_rank(max_examples=None, templates=None, hidden_size=None) -> list[dict]:
    points, dropped = rank_points(hidden_size)
    whole = _reference(
        "ATTN+O+FFN",
        "component",
        [{"positions": "LT", "layers": COMPONENT_BAND, "components": "ATTN+O+FFN"}],
        "ATTN+O+FFN at LT in the authors' fourth quarter",
        components="ATTN+O+FFN",
    )
    note = f"; ranks {dropped} are left out, above hidden_size {hidden_size}" if dropped else ""
    return [
        _experiment(
            "finer_rank",
            "How low-rank is the change that carries a fact? O+FFN at LT by rank",
            "Recipient: the B2A model; donor: SFT. O+FFN at the last token in the authors' fourth quarter, "
            "the finetuning change of each matrix truncated to its top-k singular directions "
            f"(k in {list(RANKS)}) and whole; random layers of the same count as a control{note}",
            "b2a",
            [*_baselines("B2A"), whole, *points],
            max_examples=max_examples,
            templates=templates,
        )
    ]


def dose_points(series: str, graft: dict, vary: str) -> list[dict]:
    """The series at every dose in DOSES; the plain donor at 1 (exactly the donor), with
    `vary` random controls there."""
    out = []
    for scale in DOSES:
        point = {
            "name": f"{series} x{scale:g}",
            "grafts": [graft if scale == 1 else dict(graft, shape={"scale": scale})],
            "description": f"{series}: recipient + {scale:g} x (donor - recipient)",
            "meta": {"shape": "scale", "scale": scale, "series": series},
        }
        if scale == 1:
            point["controls"] = {"random": RANDOM_DRAWS, "seed": 0, "vary": vary, "complement": False}
        out.append(point)
    return out


def finer_dose(max_examples=None, templates=None) -> list[dict]:
    every = {"positions": "FE+LT", "layers": "all", "components": EVERY_WEIGHT}
    o_ffn = {"positions": "LT", "layers": COMPONENT_BAND, "components": "O+FFN"}
    doses = ", ".join(f"{d:g}" for d in DOSES)
    return [
        _experiment(
            "finer_dose_fe_lt",
            "Dose-response: every weight at FE+LT onto PRE",
            f"Recipient PRE, donor SFT. Every weight at FE+LT (embeddings included, the recipient's final "
            f"norm and unembedding) as W_r + lambda (W_d - W_r), lambda in {doses}; at lambda = 1 random "
            "positions of the same count as a control",
            "pre",
            [*_baselines("PRE"), *dose_points("FE+LT", every, "positions")],
            max_examples=max_examples,
            templates=templates,
        ),
        _experiment(
            "finer_dose_o_ffn",
            "Dose-response: O+FFN at LT onto the one-direction model",
            f"Recipient: the B2A model; donor: SFT. O+FFN at the last token in the authors' fourth quarter as "
            f"W_r + lambda (W_d - W_r), lambda in {doses}; at lambda = 1 random layers of the same count "
            "as a control",
            "b2a",
            [*_baselines("B2A"), *dose_points("O+FFN", o_ffn, "layers")],
            max_examples=max_examples,
            templates=templates,
        ),
    ]


FINER_PRESETS = (
    Preset("finer_heads_o", finer_heads_o, frozenset({"num_layers", "num_heads"})),
    Preset("finer_rank", finer_rank, frozenset({"hidden_size"})),
    Preset("finer_dose", finer_dose),
)
FINER_PRESET_NAMES = tuple(p.name for p in FINER_PRESETS)
for _preset in FINER_PRESETS:
    register_preset(_preset)
