"""The paper's analyses as ready-made experiments, row for row with the authors' conditions
(`conditions.md` in the project's paper notes; summarised in the README and the report).

Model keys: `pre` (pretrained), `sft` (the relation model: finetuned on the facts in both
orders), `b2a` (finetuned on the same facts in the B2A order only: the one-direction or
"reversal task" model), `task` (finetuned on other facts: the hybrid's task model), `freetext`
(finetuned on articles). Dataset keys: `relation` (the facts SFT learned), `known` (real films
the pretrained model knows), `freetext`.

Paper presets (recipient <- donor; positions; layers; components). Each takes `fidelity`:
`authors` (exactly as the authors' code ran them), `clean` (weightgraft's own definitions) or
`both` (the default: the authors' rows under the plain names, and beside them every clean row
that differs on the model, named `NAME [clean]`), and `wording` (`clean`, the default, or
`authors`: their verbatim sentences 1 and 3 with the doubled "in").
- position_grafting   pre <- sft; FE, LT, FE+LT, (FE+LT)^C, FE^C, LT^C; all layers; every
                      weight. Authors: the token embedding only (never GPT-2's `wpe`), and on
                      a tied model the unembedding with the embedding (the donor's in the rows
                      whose last token is grafted), else the recipient's; plus FE, LT, FE+LT
                      with the donor's unembedding at every position (`[donor unembedding]`),
                      which show how much of a gap the finetuned unembedding carries. Clean:
                      both embeddings, the recipient's final norm and unembedding
                      (`unembedding: donor` for the donor's), plus FE, LT, FE+LT with the other
                      unembedding.
- position_relation   pre <- sft; R, FE+R, R+LT, FE+R+LT (R = the relation word, never LT).
- position_title      pre <- sft; M, M+LT, FE+M, FE+M+LT, (FE+M)^C, (FE+M+LT)^C on sentence 3
                      (the title prompt, FE -> M -> LT).
- components_reversal b2a <- sft; nothing at FE; the eight sets at LT; authors' fourth quarter
                      (the same in both fidelities).
- components_pre      pre <- sft; the same grafts.
- hybrid              pre <- task (FE: nothing / every weight / ATTN+O = q,k,v,o / FFN / O+FFN,
                      all layers) and at LT the layers [2q, n) (q = n // 4) from a hybrid model.
                      Authors: the hybrid model is the task model with the relation model's
                      (SFT's) o, up and down in layers [n//2, n) only, so in [2q, n) q,k,v,gate
                      come from the task model, o,up,down from SFT in [n//2, n) and from the
                      task model in [2q, n//2) (empty when n % 4 < 2; layer 8 of Gemma's 18).
                      Clean: task q,k,v,gate and SFT o,up,down in all of [2q, n).
- known_facts         PRE and SFT on real films PRE knows: what finetuning kept.
weightgraft's own: layer_sweeps, free_text (position grafting from an article-finetuned model),
activation_patching (weights vs residual-stream patching).

Presets return plain dicts; the run config validates them (this module imports nothing from
config). Importing this module registers every preset below in
`weightgraft.experiments.preset_registry`, the only way the run config knows them.
"""

from __future__ import annotations

from weightgraft.data.templates import PAPER_TEMPLATES
from weightgraft.experiments.conditions import ConditionMethod, ConditionSpec, GraftSpec
from weightgraft.experiments.conditions.components import AUTHORS_EVERY_WEIGHT, BLOCKS, EVERY_WEIGHT
from weightgraft.experiments.preset_registry import Preset, register_preset
from weightgraft.experiments.vocabulary import CLEAN_SUFFIX

TITLE_TEMPLATES = ["paper_3"]  # the only sentence with a movie title (FE -> M -> LT)
POSITION_CONDITIONS = ["PRE", "SFT", "FE", "LT", "FE+LT", "(FE+LT)^C", "FE^C", "LT^C"]
RELATION_CONDITIONS = ["PRE", "SFT", "R", "FE+R", "R+LT", "FE+R+LT"]
TITLE_CONDITIONS = ["PRE", "SFT", "M", "M+LT", "FE+M", "FE+M+LT", "(FE+M)^C", "(FE+M+LT)^C"]
BOTH_UNEMBEDDINGS = ["FE", "LT", "FE+LT"]  # shown with the other unembedding too
# The component figure's eight sets, in the paper's order.
PAPER_COMPONENT_SETS = ("ATTN+O+FFN", "ATTN+O", "ATTN+FFN", "O+FFN", "O", "FFN", "O+UP", "O+DOWN")
COMPONENT_BAND = "authors_fourth_quarter"
HYBRID_BAND = "authors_third_and_fourth_quarters"  # [2q, n): the layers grafted at LT
# The hybrid's five FE variants from the task model: name -> components (None: nothing at FE).
HYBRID_FE = {"no_FE": None, "full_FE": EVERY_WEIGHT, "FE_attn": "ATTN+O", "FE_ffn": "FFN", "FE_o_ffn": "O+FFN"}
# At LT, per fidelity: (donor, components, layers). The authors grafted [2q, n) of a hybrid
# model that holds the relation model's o,up,down in [n//2, n) only.
HYBRID_LT = {
    "authors": [
        ("task", ["q", "k", "v", "gate"], HYBRID_BAND),
        ("sft", ["o", "up", "down"], "authors_second_half"),
        ("task", ["o", "up", "down"], "authors_third_quarter_below_half"),
    ],
    "clean": [("task", ["q", "k", "v", "gate"], HYBRID_BAND), ("sft", ["o", "up", "down"], HYBRID_BAND)],
}
HYBRID_LT_WORDS = {
    "authors": "LT: layers [2q, n) of the authors' hybrid model: task q,k,v,gate throughout; "
    "relation (sft) o,up,down in [n//2, n) and task o,up,down in [2q, n//2)",
    "clean": "LT: task q,k,v,gate and relation (sft) o,up,down in layers [2q, n) (the authors' third and fourth quarters)",
}
# "Every weight" per fidelity, for grafts written out in full.
EVERY = {"authors": AUTHORS_EVERY_WEIGHT, "clean": EVERY_WEIGHT}
FIDELITY_OPTIONS = ("authors", "clean", "both")
PATCH_POSITIONS = ["FE", "LT", "FE+LT", "(FE+LT)^C"]
PATCH_LAYERS = ["all", "first_half", "last_half"]
OTHER = {"recipient": "donor", "donor": "recipient"}


def modes(fidelity: str) -> list[str]:
    """The fidelities a preset's rows are built in."""
    if fidelity not in FIDELITY_OPTIONS:
        raise ValueError(f"unknown fidelity {fidelity!r}; use one of {', '.join(FIDELITY_OPTIONS)}")
    return ["authors", "clean"] if fidelity == "both" else [fidelity]


def row_name(name: str, mode: str, fidelity: str) -> str:
    """A row's name: the clean rows of a `both` experiment carry CLEAN_SUFFIX."""
    return name + CLEAN_SUFFIX if fidelity == "both" and mode == "clean" else name


def _head_variant(position: str, unembedding: str, mode: str, fidelity: str) -> ConditionSpec:
    """`position` with every weight from the donor (as `mode` defines it, without its own
    head) and the given unembedding at every position, as a full spec."""
    body = [EVERY_WEIGHT] if mode == "clean" else ["embed", BLOCKS]
    grafts = [GraftSpec(positions=position, layers="all", components=body)]
    if unembedding == "donor":
        grafts.append(GraftSpec(positions="ALL", layers="all", components=["lm_head"]))
    what = "every weight" if mode == "clean" else "the token embedding and every layer's weights"
    return ConditionSpec(
        name=row_name(f"{position} [{unembedding} unembedding]", mode, fidelity),
        grafts=grafts,
        description=f"{what} at {position}; the {unembedding}'s unembedding at every position",
        fidelity=mode,
    )


def _head_variants(unembedding: str, fidelity: str) -> list[ConditionSpec]:
    """The diagnostic rows: FE, LT, FE+LT with the donor's unembedding in the authors' rows
    (how much of a gap the finetuned unembedding carries), the other one in the clean rows."""
    out = []
    for mode in modes(fidelity):
        head = "donor" if mode == "authors" else OTHER[unembedding]
        out += [_head_variant(p, head, mode, fidelity) for p in BOTH_UNEMBEDDINGS]
    return out


def _position_words(fidelity: str, unembedding: str, variants: bool = True) -> str:
    authors = (
        "Authors' rows: the token embedding (never the position embedding) and every layer; the "
        "unembedding the recipient's, except on a tied model, where it goes with the embedding "
        "(the donor's in the rows whose last token is grafted)"
        + ("; rows marked [donor unembedding] take the donor's at every position." if variants else ".")
    )
    clean = (
        "Clean rows: the embeddings (token and position) and every layer; final norm and "
        f"unembedding the {unembedding}'s"
        + (f" (rows marked [{OTHER[unembedding]} unembedding] use the other)." if variants else ".")
    )
    return " ".join(authors if m == "authors" else clean for m in modes(fidelity))


def _position_experiment(
    name: str, title: str, description: str, conditions: list, templates: list[str], **options
) -> list[dict]:
    """One position experiment of PRE grafted from SFT, forward prompts, top-1 and top-5 as its
    headline; `options` are the preset's own (max_examples, unembedding, fidelity, wording)."""
    return [
        dict(
            name=name,
            title=title,
            description=description,
            dataset="relation",
            recipient="pre",
            donor="sft",
            unembedding=options["unembedding"],
            fidelity=options["fidelity"],
            wording=options["wording"],
            conditions=conditions,
            headline=["top1", "top5"],
            max_examples=options["max_examples"],
            directions="forward",
            templates=templates,
        )
    ]


def position_grafting(
    max_examples=None, templates=None, unembedding="recipient", fidelity="both", wording="clean"
) -> list[dict]:
    return _position_experiment(
        "position_grafting",
        "Position grafting (SFT into PRE)",
        "Every weight of the relation model (SFT) at the named token positions, in "
        "every layer; the pretrained model (PRE) elsewhere. " + _position_words(fidelity, unembedding),
        [*POSITION_CONDITIONS, *_head_variants(unembedding, fidelity)],
        templates or list(PAPER_TEMPLATES),
        max_examples=max_examples,
        unembedding=unembedding,
        fidelity=fidelity,
        wording=wording,
    )


def position_relation(
    max_examples=None, templates=None, unembedding="recipient", fidelity="both", wording="clean"
) -> list[dict]:
    return _position_experiment(
        "position_relation",
        "Position grafting with the relation word (R)",
        "As position grafting, with R = the relation word's tokens only (never the "
        "last token). " + _position_words(fidelity, unembedding, variants=False),
        RELATION_CONDITIONS,
        templates or list(PAPER_TEMPLATES),
        max_examples=max_examples,
        unembedding=unembedding,
        fidelity=fidelity,
        wording=wording,
    )


def position_title(
    max_examples=None, templates=None, unembedding="recipient", fidelity="both", wording="clean"
) -> list[dict]:
    return _position_experiment(
        "position_title",
        "Position grafting with the movie title (M), sentence 3",
        "As position grafting, on the title prompt `{first_actor} stars in "
        "{movie_title} alongside` (FE, then M, then LT). " + _position_words(fidelity, unembedding, variants=False),
        TITLE_CONDITIONS,
        templates or TITLE_TEMPLATES,
        max_examples=max_examples,
        unembedding=unembedding,
        fidelity=fidelity,
        wording=wording,
    )


def _components(name, title, recipient, baseline, description, max_examples, templates, fidelity, wording):
    return dict(
        fidelity=fidelity,
        wording=wording,
        name=name,
        title=title,
        description=description,
        dataset="relation",
        recipient=recipient,
        donor="sft",
        component_at="LT",
        component_layers=COMPONENT_BAND,
        component_base=None,
        conditions=[ConditionSpec(name=baseline, description="recipient alone"), "SFT", *PAPER_COMPONENT_SETS],
        headline=["top1", "top5"],
        max_examples=max_examples,
        directions="forward",
        templates=templates or list(PAPER_TEMPLATES),
    )


def components_reversal(max_examples=None, templates=None, fidelity="both", wording="clean") -> list[dict]:
    return [
        _components(
            "components_reversal",
            "Components at LT onto the one-direction model (the paper's component figure)",
            "b2a",
            "B2A",
            "Recipient: the model finetuned on the facts in the B2A order only (it knows the task, "
            "not the forward relation). Donor: SFT. Nothing at FE; the named SFT components at the "
            "last token in the authors' fourth quarter of layers.",
            max_examples,
            templates,
            fidelity,
            wording,
        )
    ]


def components_pre(max_examples=None, templates=None, fidelity="both", wording="clean") -> list[dict]:
    return [
        _components(
            "components_pre",
            "Components at LT onto PRE",
            "pre",
            "PRE",
            "Recipient PRE, donor SFT. Nothing at FE; the named SFT components at the last token in "
            "the authors' fourth quarter of layers.",
            max_examples,
            templates,
            fidelity,
            wording,
        )
    ]


def hybrid(max_examples=None, templates=None, fidelity="both", wording="clean") -> list[dict]:
    conditions: list = ["PRE", "SFT", ConditionSpec(name="TASK", recipient="task", description="task model alone")]
    for variant, comps in HYBRID_FE.items():
        for mode in modes(fidelity):
            at_fe = EVERY[mode] if comps == EVERY_WEIGHT else comps
            fe = [] if comps is None else [GraftSpec(positions="FE", layers="all", components=at_fe, donor="task")]
            lt = [
                GraftSpec(positions="LT", layers=band, components=parts, donor=donor)
                for donor, parts, band in HYBRID_LT[mode]
            ]
            fe_words = "every weight" if comps == EVERY_WEIGHT else comps
            conditions.append(
                ConditionSpec(
                    name=row_name(f"HYBRID {variant}", mode, fidelity),
                    grafts=[*fe, *lt],
                    description=f"FE: {'nothing' if comps is None else fe_words} from the task model, all "
                    f"layers; {HYBRID_LT_WORDS[mode]}",
                    fidelity=mode,
                )
            )
    return [
        dict(
            name="hybrid",
            title="Hybrid: task model at FE, task and relation models at LT",
            description="Recipient PRE. The task model (finetuned on other facts) at FE in five "
            "variants; at the last token the layers [2q, n) (q = n // 4, the authors' third and fourth "
            "quarters) of a hybrid of the task model and the relation model (SFT). The authors' "
            "hybrid holds SFT's o, up and down in layers [n//2, n) only: q, k, v, gate come from the "
            "task model throughout, o, up, down from SFT in [n//2, n) and from the task model in "
            "[2q, n//2) (empty when n % 4 < 2). The clean rows take SFT's o, up, down over all of "
            "[2q, n). Scored on the relation model's facts.",
            dataset="relation",
            recipient="pre",
            donor="sft",
            fidelity=fidelity,
            wording=wording,
            conditions=conditions,
            headline=["top1", "top5"],
            max_examples=max_examples,
            directions="forward",
            templates=templates or list(PAPER_TEMPLATES),
        )
    ]


def known_facts(max_examples=None, templates=None) -> list[dict]:
    return [
        dict(
            name="known_facts",
            title="Known facts: what finetuning kept",
            description="Real films the pretrained model knows, scored by PRE and by SFT.",
            dataset="known",
            recipient="pre",
            donor="sft",
            conditions=["PRE", "SFT"],
            headline=["top1", "top5"],
            max_examples=max_examples,
            templates=templates,
        )
    ]


def layer_sweeps(max_examples=None, templates=None) -> list[dict]:
    return [
        dict(
            name="layer_sweeps",
            title="Layer sweeps at FE and LT",
            description="The named components of one layer band at one position (FE or LT), with "
            "every weight at the other position grafted; heatmaps of top-1 accuracy.",
            dataset="relation",
            recipient="pre",
            donor="sft",
            conditions=["PRE", "SFT", "FE", "LT", "FE+LT"],
            sweep={
                "at": ["FE", "LT"],
                "bands": "auto",
                "components": ["ATTN+O+FFN", "ATTN", "O", "FFN"],
                "others_full": True,
            },
            headline=["top1", "top5"],
            plot="heatmap",
            max_examples=max_examples,
            templates=templates,
        )
    ]


def free_text(max_examples=None, templates=None, unembedding="recipient") -> list[dict]:
    return [
        dict(
            name="free_text",
            title="Free text (finetuned on articles)",
            description="Position grafting from a model finetuned on non-templated articles.",
            dataset="freetext",
            recipient="pre",
            donor="freetext",
            unembedding=unembedding,
            conditions=POSITION_CONDITIONS,
            headline=["top5", "top50"],
            max_examples=max_examples,
            templates=templates,
        )
    ]


def activation_patching(max_examples=None, templates=None) -> list[dict]:
    conditions: list = ["PRE", "SFT"]
    for positions in PATCH_POSITIONS:
        for layers in PATCH_LAYERS:
            graft = GraftSpec(positions=positions, layers=layers, components="BLOCKS")
            for method, label in ((ConditionMethod.WEIGHTS, "graft"), (ConditionMethod.ACTIVATIONS, "patch")):
                what = (
                    "weights of every block"
                    if method == ConditionMethod.WEIGHTS
                    else "residual stream after every block"
                )
                conditions.append(
                    ConditionSpec(
                        name=f"{label} {positions} @{layers}",
                        method=method,
                        grafts=[graft],
                        description=f"{what} in layers {layers} at {positions}",
                    )
                )
    return [
        dict(
            name="activation_patching",
            title="Activation patching vs weight grafting",
            description="Same positions and layers: the donor's residual stream after each block "
            "patched into the recipient's run, or the donor's block weights grafted. "
            "Embeddings and unembedding stay the recipient's in both.",
            dataset="relation",
            recipient="pre",
            donor="sft",
            conditions=conditions,
            headline=["top1", "top5"],
            plot="paired",
            max_examples=max_examples,
            templates=templates,
        )
    ]


PAPER_OPTIONS = frozenset({"fidelity", "wording"})  # the paper's analyses take both
PRESETS = (
    Preset("position_grafting", position_grafting, PAPER_OPTIONS | {"unembedding"}),
    Preset("position_relation", position_relation, PAPER_OPTIONS | {"unembedding"}),
    Preset("position_title", position_title, PAPER_OPTIONS | {"unembedding"}),
    Preset("components_reversal", components_reversal, PAPER_OPTIONS),
    Preset("components_pre", components_pre, PAPER_OPTIONS),
    Preset("hybrid", hybrid, PAPER_OPTIONS),
    Preset("known_facts", known_facts),
    Preset("layer_sweeps", layer_sweeps),
    Preset("free_text", free_text, frozenset({"unembedding"})),
    Preset("activation_patching", activation_patching),
)
PRESET_NAMES = tuple(p.name for p in PRESETS)
# The paper's presets proper: they take `fidelity` and `wording`.
PAPER_PRESETS = tuple(p.name for p in PRESETS if PAPER_OPTIONS <= p.options)
for _preset in PRESETS:
    register_preset(_preset)
