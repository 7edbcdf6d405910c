"""The paper's analyses as ready-made experiments, row for row with the authors' conditions
(`conditions.md` in the project's paper notes; summarised in the README and the report).

Model keys: `pre` (pretrained), `sft` (the relation model: finetuned on the facts in both
orders), `b2a` (finetuned on the same facts in the B2A order only: the one-direction or
"reversal task" model), `task` (finetuned on other facts: the hybrid's task model), `freetext`
(finetuned on articles). Dataset keys: `relation` (the facts SFT learned), `known` (real films
the pretrained model knows), `freetext`.

Paper presets (recipient <- donor; positions; layers; components):
- position_grafting   pre <- sft; FE, LT, FE+LT, (FE+LT)^C, FE^C, LT^C; all layers; every
                      weight incl. embeddings; the recipient's final norm and unembedding
                      (`unembedding: donor` for the donor's), plus FE, LT, FE+LT with the other
                      unembedding so the report shows both.
- position_relation   pre <- sft; R, FE+R, R+LT, FE+R+LT (R = the relation word, never LT).
- position_title      pre <- sft; M, M+LT, FE+M, FE+M+LT, (FE+M)^C, (FE+M+LT)^C on sentence 3
                      (the title prompt, FE -> M -> LT).
- components_reversal b2a <- sft; nothing at FE; the eight sets at LT; authors' fourth quarter.
- components_pre      pre <- sft; the same grafts.
- hybrid              pre <- task (FE: nothing / every weight / ATTN+O = q,k,v,o / FFN / O+FFN,
                      all layers) and, at LT, task q,k,v,gate + sft o,up,down in the authors'
                      third and fourth quarters. conditions.md infers the band from the
                      authors' layer override (layers >= n//2); with the override inactive it
                      would be the fourth quarter alone.
- known_facts         PRE and SFT on real films PRE knows: what finetuning kept.
weightgraft's own: layer_sweeps, free_text (position grafting from an article-finetuned model),
activation_patching (weights vs residual-stream patching).

Presets return plain dicts; `config` validates them (this module imports nothing from config).
"""

from __future__ import annotations

from weightgraft.experiments.conditions import ConditionSpec, GraftSpec
from weightgraft.experiments.vocabulary import EVERY_WEIGHT, PAPER_COMPONENT_SETS

PAPER_TEMPLATES = ["paper_1", "paper_2", "paper_3"]
TITLE_TEMPLATES = ["paper_3"]  # the only sentence with a movie title (FE -> M -> LT)
POSITION_CONDITIONS = ["PRE", "SFT", "FE", "LT", "FE+LT", "(FE+LT)^C", "FE^C", "LT^C"]
RELATION_CONDITIONS = ["PRE", "SFT", "R", "FE+R", "R+LT", "FE+R+LT"]
TITLE_CONDITIONS = ["PRE", "SFT", "M", "M+LT", "FE+M", "FE+M+LT", "(FE+M)^C", "(FE+M+LT)^C"]
BOTH_UNEMBEDDINGS = ["FE", "LT", "FE+LT"]  # shown with the other unembedding too
COMPONENT_BAND = "authors_fourth_quarter"
HYBRID_BAND = "authors_third_and_fourth_quarters"
# The hybrid's five FE variants from the task model: name -> components (None: nothing at FE).
HYBRID_FE = {"no_FE": None, "full_FE": EVERY_WEIGHT, "FE_attn": "ATTN+O", "FE_ffn": "FFN", "FE_o_ffn": "O+FFN"}
HYBRID_LT = [("task", ["q", "k", "v", "gate"]), ("sft", ["o", "up", "down"])]
PATCH_POSITIONS = ["FE", "LT", "FE+LT", "(FE+LT)^C"]
PATCH_LAYERS = ["all", "first_half", "last_half"]
OTHER = {"recipient": "donor", "donor": "recipient"}


def _head_variant(position: str, unembedding: str) -> ConditionSpec:
    """`position` with every weight from the donor and the given unembedding, as a full spec."""
    grafts = [GraftSpec(positions=position, layers="all", components=[EVERY_WEIGHT])]
    if unembedding == "donor":
        grafts.append(GraftSpec(positions="ALL", layers="all", components=["lm_head"]))
    return ConditionSpec(
        name=f"{position} [{unembedding} unembedding]",
        grafts=grafts,
        description=f"every weight at {position}; the {unembedding}'s unembedding at every position",
    )


def position_grafting(max_examples=None, templates=None, unembedding="recipient") -> list[dict]:
    others = [_head_variant(p, OTHER[unembedding]) for p in BOTH_UNEMBEDDINGS]
    return [
        dict(
            name="position_grafting",
            title="Position grafting (SFT into PRE)",
            description="Every weight of the relation model (SFT) at the named token positions, in "
            "every layer, embeddings included; the pretrained model (PRE) elsewhere. "
            f"Final norm and unembedding: the {unembedding}'s (rows marked "
            f"[{OTHER[unembedding]} unembedding] use the other).",
            dataset="relation",
            recipient="pre",
            donor="sft",
            unembedding=unembedding,
            conditions=[*POSITION_CONDITIONS, *others],
            headline=["top1", "top5"],
            max_examples=max_examples,
            directions="forward",
            templates=templates or PAPER_TEMPLATES,
        )
    ]


def position_relation(max_examples=None, templates=None, unembedding="recipient") -> list[dict]:
    return [
        dict(
            name="position_relation",
            title="Position grafting with the relation word (R)",
            description="As position grafting, with R = the relation word's tokens only (never the last token).",
            dataset="relation",
            recipient="pre",
            donor="sft",
            unembedding=unembedding,
            conditions=RELATION_CONDITIONS,
            headline=["top1", "top5"],
            max_examples=max_examples,
            directions="forward",
            templates=templates or PAPER_TEMPLATES,
        )
    ]


def position_title(max_examples=None, templates=None, unembedding="recipient") -> list[dict]:
    return [
        dict(
            name="position_title",
            title="Position grafting with the movie title (M), sentence 3",
            description="As position grafting, on the title prompt `{first_actor} stars in "
            "{movie_title} alongside` (FE, then M, then LT).",
            dataset="relation",
            recipient="pre",
            donor="sft",
            unembedding=unembedding,
            conditions=TITLE_CONDITIONS,
            headline=["top1", "top5"],
            max_examples=max_examples,
            directions="forward",
            templates=templates or TITLE_TEMPLATES,
        )
    ]


def _components(name, title, recipient, baseline, description, max_examples, templates):
    return dict(
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
        templates=templates or PAPER_TEMPLATES,
    )


def components_reversal(max_examples=None, templates=None) -> list[dict]:
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
        )
    ]


def components_pre(max_examples=None, templates=None) -> list[dict]:
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
        )
    ]


def hybrid(max_examples=None, templates=None) -> list[dict]:
    lt = [GraftSpec(positions="LT", layers=HYBRID_BAND, components=comps, donor=donor) for donor, comps in HYBRID_LT]
    conditions: list = ["PRE", "SFT", ConditionSpec(name="TASK", recipient="task", description="task model alone")]
    for variant, comps in HYBRID_FE.items():
        fe = [] if comps is None else [GraftSpec(positions="FE", layers="all", components=comps, donor="task")]
        conditions.append(
            ConditionSpec(
                name=f"HYBRID {variant}",
                grafts=[*fe, *lt],
                description=f"FE: {'nothing' if comps is None else comps} from the task model, all "
                "layers; LT: task q,k,v,gate and relation o,up,down in the authors' "
                "third and fourth quarters",
            )
        )
    return [
        dict(
            name="hybrid",
            title="Hybrid: task model at FE, task and relation models at LT",
            description="Recipient PRE. The task model (finetuned on other facts) at FE in five "
            "variants; at the last token the task model's q, k, v and gate with the "
            "relation model's (SFT) o, up and down, in the authors' third and fourth "
            "quarters (inferred: the authors' layer override grafted layers >= n//2). "
            "Scored on the relation model's facts.",
            dataset="relation",
            recipient="pre",
            donor="sft",
            conditions=conditions,
            headline=["top1", "top5"],
            max_examples=max_examples,
            directions="forward",
            templates=templates or PAPER_TEMPLATES,
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
            for method, label in (("weights", "graft"), ("activations", "patch")):
                what = "weights of every block" if method == "weights" else "residual stream after every block"
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


PRESETS = {
    "position_grafting": position_grafting,
    "position_relation": position_relation,
    "position_title": position_title,
    "components_reversal": components_reversal,
    "components_pre": components_pre,
    "hybrid": hybrid,
    "known_facts": known_facts,
    "layer_sweeps": layer_sweeps,
    "free_text": free_text,
    "activation_patching": activation_patching,
}
ALL_PRESETS = list(PRESETS)
TAKES_UNEMBEDDING = {"position_grafting", "position_relation", "position_title", "free_text"}
