"""The paper's five analyses as ready-made experiments.

Presets refer to models by the keys `pre` (pretrained), `sft` (the relation model, finetuned on the
facts), `task` (finetuned on the same templates with other facts), `freetext` (finetuned on
articles), and to datasets by `relation` and `freetext`.

Our reading of the three-model setups of the component analysis (documented in the report too):
- `components_pre_sft`: recipient PRE, donor SFT. Every condition grafts the whole first entity
  (enrichment supplied) and the named component set at the last token in the last quarter of
  layers (recall), as in the paper's component figures.
- `components_task_sft`: the same grafts with the task model as recipient, so that whatever the
  finetune taught about the templates is already present and only relation knowledge is missing.
- `components_hybrid`: the task model at FE (nothing grafted there: the entity is read as the
  task model reads it, without the new fact), the relation model's components at LT only. Its
  `O+FFN` row is the hybrid "task model at FE, relation O+FFN at LT": attention at the last
  token stays the task model's, and the relation model supplies only the output projection and
  the MLP of the final layers. A single donor suffices: no position takes a third model's weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightgraft.experiments.conditions import ConditionSpec, GraftSpec

if TYPE_CHECKING:
    from weightgraft.experiments.config import ExperimentSpec, RunConfig

POSITION_CONDITIONS = ["PRE", "SFT", "FE", "LT", "FE+LT", "(FE+LT)^C", "FE^C", "LT^C", "M",
                       "M+LT", "FE+M", "FE+M+LT"]
COMPONENT_SETS = ["ATTN+O+FFN", "ATTN+O", "ATTN+FFN", "O+FFN", "O", "FFN", "O+UP", "O+DOWN"]
PATCH_POSITIONS = ["FE", "LT", "FE+LT", "(FE+LT)^C"]
PATCH_LAYERS = ["all", "first_half", "last_half"]


def _task_baseline() -> ConditionSpec:
    return ConditionSpec(name="TASK", description="task model alone (the recipient)")


def position_grafting(max_examples=None, templates=None) -> list[dict]:
    return [dict(
        name="position_grafting", title="Position grafting (SFT into PRE)",
        description="Every weight of the relation model (SFT) at the named token positions, the "
                    "pretrained model (PRE) elsewhere.",
        dataset="relation", recipient="pre", donor="sft", conditions=POSITION_CONDITIONS,
        headline=["top1", "top5"], max_examples=max_examples, templates=templates)]


def component_grafting(max_examples=None, templates=None) -> list[dict]:
    common = dict(dataset="relation", donor="sft", max_examples=max_examples,
                  templates=templates, component_at="LT", component_layers="last_quarter")
    return [
        dict(name="components_pre_sft", title="Component grafting at LT (SFT into PRE)",
             description="Every SFT weight at FE, plus the named SFT components at the last "
                         "token in the last quarter of layers; PRE elsewhere.",
             recipient="pre", component_base="FE",
             conditions=["PRE", "SFT", "FE", "FE+LT", *COMPONENT_SETS], **common),
        dict(name="components_task_sft", title="Component grafting at LT (SFT into the task model)",
             description="As above with the task model as recipient: every relation-model "
                         "weight at FE plus the named components at LT (last quarter).",
             recipient="task", component_base="FE",
             conditions=[_task_baseline(), "SFT", "FE", "FE+LT", *COMPONENT_SETS], **common),
        dict(name="components_hybrid", title="Hybrid: task model at FE, relation components at LT",
             description="Task model everywhere, FE included (the entity is read without "
                         "the new fact); only the named relation-model components at the last "
                         "token, last quarter of layers. Its O+FFN row is the paper's hybrid: "
                         "attention at LT stays the task model's (task-specific), the relation "
                         "model supplies the attention output projection and the MLP "
                         "(relation-specific extraction). One donor suffices: no position takes "
                         "weights from a third model.",
             recipient="task", component_base=None,
             conditions=[_task_baseline(), "SFT", "LT", *COMPONENT_SETS], **common),
    ]


def layer_sweeps(max_examples=None, templates=None) -> list[dict]:
    return [dict(
        name="layer_sweeps", title="Layer sweeps at FE and LT",
        description="The named components of one layer band at one position (FE or LT), with "
                    "every weight at the other position grafted; heatmaps of top-1 accuracy.",
        dataset="relation", recipient="pre", donor="sft",
        conditions=["PRE", "SFT", "FE", "LT", "FE+LT"],
        sweep={"at": ["FE", "LT"], "bands": "auto",
               "components": ["ATTN+O+FFN", "ATTN", "O", "FFN"], "others_full": True},
        headline=["top1", "top5"], plot="heatmap", max_examples=max_examples,
        templates=templates)]


def free_text(max_examples=None, templates=None) -> list[dict]:
    return [dict(
        name="free_text", title="Free text (finetuned on articles)",
        description="Position grafting from a model finetuned on non-templated articles.",
        dataset="freetext", recipient="pre", donor="freetext", conditions=POSITION_CONDITIONS,
        headline=["top5", "top50"], max_examples=max_examples, templates=templates)]


def activation_patching(max_examples=None, templates=None) -> list[dict]:
    conditions: list = ["PRE", "SFT"]
    for positions in PATCH_POSITIONS:
        for layers in PATCH_LAYERS:
            graft = GraftSpec(positions=positions, layers=layers, components="BLOCKS")
            for method, label in (("weights", "graft"), ("activations", "patch")):
                conditions.append(ConditionSpec(
                    name=f"{label} {positions} @{layers}", method=method, grafts=[graft],
                    description=f"{'weights of every block' if method == 'weights' else 'residual stream after every block'} "
                                f"in layers {layers} at {positions}"))
    return [dict(
        name="activation_patching", title="Activation patching vs weight grafting",
        description="Same positions and layers: the donor's residual stream after each block "
                    "patched into the recipient's run, or the donor's block weights grafted. "
                    "Embeddings and unembedding stay the recipient's in both.",
        dataset="relation", recipient="pre", donor="sft", conditions=conditions,
        headline=["top1", "top5"], plot="paired", max_examples=max_examples, templates=templates)]


PRESETS = {
    "position_grafting": position_grafting,
    "component_grafting": component_grafting,
    "layer_sweeps": layer_sweeps,
    "free_text": free_text,
    "activation_patching": activation_patching,
}
ALL_PRESETS = list(PRESETS)


def expand_presets(config: "RunConfig") -> list["ExperimentSpec"]:
    """The config's experiments with every preset replaced by its experiment(s)."""
    from weightgraft.experiments.config import ExperimentSpec, PresetRef

    out = []
    for item in config.experiments:
        if isinstance(item, PresetRef):
            for spec in PRESETS[item.preset](item.max_examples, item.templates):
                out.append(ExperimentSpec.model_validate(spec))
        else:
            out.append(item)
    return out
