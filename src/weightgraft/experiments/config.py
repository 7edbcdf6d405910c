"""The run configuration (YAML), validated with pydantic so that a typo fails before any work.

```yaml
name: my-run
seed: 0
device: cpu            # or cuda
dtype: float32         # or bfloat16 / float16
models:   {pre: gpt2-xl, sft: ./ckpt/relation, b2a: ./ckpt/b2a, task: ./ckpt/task}
datasets: {relation: ./data/relation}
experiments:
  - preset: position_grafting          # a registered preset (weightgraft.paper.presets)
    unembedding: recipient             # or donor
  - preset: components_reversal
  - name: my_lt_components             # or a custom experiment
    dataset: relation
    recipient: pre
    donor: sft
    conditions: [PRE, SFT, FE+LT, O+FFN, {name: late-FE, grafts: [{positions: FE, layers: last_half}]},
                 {name: two-donors, grafts: [{positions: LT, components: [q, k, v], donor: task},
                                             {positions: LT, components: O+FFN}]}]
```

Finer grafts (issue 20; `conditions.GraftSpec`, `ShapeSpec`, `ControlSpec`): a graft may take
`heads: [3]` (q, k, v, o; k and v count key-value heads) or `neurons: [17]` (gate, up, down), and
`shape: {scale: 0.5}` / `{rank: 4}` / `{top: 0.01}` (the donor's change scaled, truncated to its
top singular directions, or kept in its largest entries). A condition of one graft may take
`controls: {random: 3, seed: 0, vary: heads, complement: true}` (expanded at plan time into
`NAME [random i]` and `NAME [complement]`, see `experiments.conditions.controls`) and free plot coordinates
`meta: {...}`. A localize experiment takes `grain: component | head | neuron`.

```yaml
conditions:
  - {name: O h3 L6, grafts: [{positions: LT, layers: [6], components: O, heads: [3]}],
     controls: {random: 3, complement: true}, meta: {grain: head, layer: 6, head: 3}}
  - {name: O+FFN rank 4, grafts: [{positions: LT, layers: authors_fourth_quarter, components: O+FFN,
                                   shape: {rank: 4}}]}
```
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

from weightgraft.errors import UserError
from weightgraft.experiments.conditions import ConditionSpec, LayerSpec, Unembedding, validate_condition
from weightgraft.experiments.conditions.bands import check_layer_spec
from weightgraft.experiments.conditions.components import parse_components
from weightgraft.experiments.conditions.position_roles import parse_positions
from weightgraft.experiments.config_errors import format_validation_error
from weightgraft.experiments.preset_registry import ALL_PRESET_OPTIONS, SHAPE_OPTIONS, get_preset, presets_taking
from weightgraft.experiments.vocabulary import SUMMARY_METRICS, Direction
from weightgraft.runtime import check_device


class ConfigError(UserError, ValueError):
    """A configuration problem, worded so that the fix is plain."""


class SweepSpec(BaseModel):
    """Layer band x component set grid at each position in `at` (a heatmap per position).

    With `others_full`, the other positions of `at` get every weight in every condition, so the
    grid measures what a band adds at one position when the other is already grafted."""

    model_config = ConfigDict(extra="forbid")

    at: list[str] = ["FE", "LT"]
    bands: Literal["auto"] | list[LayerSpec] = "auto"
    components: list[str] = ["ATTN+O+FFN", "ATTN", "O", "FFN"]
    others_full: bool = True

    @field_validator("at")
    @classmethod
    def _at(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_positions(text)
        return value

    @field_validator("bands")
    @classmethod
    def _bands(cls, value):
        if value != "auto":
            for band in value:
                check_layer_spec(band)
        return value

    @field_validator("components")
    @classmethod
    def _components(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_components(text)
        return value


class ExperimentSpec(BaseModel):
    """A custom experiment: conditions scored on one dataset's evaluation prompts."""

    model_config = ConfigDict(extra="forbid")

    name: str
    title: str = ""
    description: str = ""
    dataset: str
    recipient: str
    donor: str
    conditions: list[str | ConditionSpec] = []
    sweep: SweepSpec | None = None
    templates: list[str] | None = None  # evaluation template ids; default all
    # Which prompts by direction: `forward` asks the first actor for the second (the paper's
    # only direction), `reversed` the second for the first, `both` all of them.
    directions: Direction = "both"
    max_examples: int | None = Field(default=None, ge=1)
    # Component-set shorthand (`O+FFN`): those components at `component_at` in
    # `component_layers`, plus every weight at `component_base` (none by default, as the paper).
    component_at: str = "LT"
    component_layers: LayerSpec = "authors_fourth_quarter"
    component_base: str | None = None
    # Position shorthand (`FE+LT`): whose final norm and unembedding score the row (clean
    # rows; the authors' rows follow the authors' rule, see `fidelity`).
    unembedding: Unembedding = "recipient"
    # How shorthand conditions are defined: `authors` (exactly as the paper's code ran them),
    # `clean` (weightgraft's definitions), `both` (the authors' rows, and beside them the clean
    # rows that differ on the model, named `NAME [clean]`); None: clean, rows unlabelled.
    fidelity: Literal["authors", "clean", "both"] | None = None
    # The evaluation sentences' wording: `clean` as the dataset has them, `authors` the
    # authors' verbatim strings (sentences 1 and 3 with the doubled "in").
    wording: Literal["clean", "authors"] = "clean"
    headline: list[str] = ["top1", "top5"]
    plot: Literal["bars", "heatmap", "paired"] = "bars"
    # The recipient's shape that concrete per-layer or per-head conditions were written for
    # (presets that enumerate layers and heads set it); the plan refuses another model.
    built_for: dict[Literal["num_layers", "num_heads"], int] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(f"experiment name {value!r} must use letters, digits, '_', '-', '.'")
        return value

    @field_validator("headline")
    @classmethod
    def _headline(cls, value: list[str]) -> list[str]:
        for metric in value:
            if metric not in SUMMARY_METRICS:
                raise ValueError(f"unknown metric {metric!r}; known: {', '.join(SUMMARY_METRICS)}")
        return value

    @model_validator(mode="after")
    def _conditions(self) -> ExperimentSpec:
        parse_positions(self.component_at)
        if self.component_base:
            parse_positions(self.component_base)
        check_layer_spec(self.component_layers)
        if not self.conditions and self.sweep is None:
            raise ValueError(f"experiment {self.name!r} has no conditions and no sweep")
        names = []
        for item in self.conditions:
            validate_condition(item, recipient=self.recipient, donor=self.donor, context=f"experiment {self.name!r}")
            names.append(item if isinstance(item, str) else item.name)
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"experiment {self.name!r} repeats condition(s) {dupes}")
        return self


class PresetRef(BaseModel):
    """A registered preset, by name (`weightgraft.experiments.preset_registry`; the paper's
    analyses are in `weightgraft.paper.presets`)."""

    model_config = ConfigDict(extra="forbid")

    preset: str
    max_examples: int | None = Field(default=None, ge=1)
    templates: list[str] | None = None
    unembedding: Unembedding | None = None
    # The paper presets' definitions: `authors` (as the authors' code ran them), `clean`
    # (weightgraft's), or `both` (default: the authors' rows and the clean rows that differ).
    fidelity: Literal["authors", "clean", "both"] | None = None
    wording: Literal["clean", "authors"] | None = None  # the paper sentences' wording
    # The recipient's shape, for presets that enumerate its layers, heads or ranks (the finer
    # presets: `weightgraft.paper.finer_presets`).
    num_layers: int | None = Field(default=None, ge=1)
    num_heads: int | None = Field(default=None, ge=1)
    hidden_size: int | None = Field(default=None, ge=1)

    @field_validator("preset", mode="before")
    @classmethod
    def _registered(cls, value: Any) -> str:
        get_preset(value if isinstance(value, str) else repr(value))  # names the registered presets
        return value

    @model_validator(mode="after")
    def _options(self) -> PresetRef:
        takes = get_preset(self.preset).options
        if self.unembedding is not None and "unembedding" not in takes:
            raise ValueError(
                f"preset {self.preset!r} has no `unembedding` option (only "
                f"{', '.join(sorted(presets_taking('unembedding')))} do)"
            )
        for option in ("fidelity", "wording"):
            if getattr(self, option) is not None and option not in takes:
                raise ValueError(
                    f"preset {self.preset!r} has no `{option}` option (only the paper presets "
                    f"{', '.join(presets_taking(option))} do)"
                )
        for option in SHAPE_OPTIONS:
            if getattr(self, option) is not None and option not in takes:
                raise ValueError(
                    f"preset {self.preset!r} has no `{option}` option (only "
                    f"{', '.join(presets_taking(option)) or 'no preset'} takes it)"
                )
        return self

    def experiments(self) -> list[dict]:
        options = {o: getattr(self, o) for o in ALL_PRESET_OPTIONS if getattr(self, o) is not None}
        return get_preset(self.preset).build(self.max_examples, self.templates, **options)


class LocalizeSpec(BaseModel):
    """A minimal graft search over one dataset's evaluation prompts (`weightgraft.attribution`
    runs it: `attribution.experiment.run_localize`)."""

    model_config = ConfigDict(extra="forbid")

    localize: str
    dataset: str
    recipient: str = "pre"
    donor: str = "sft"
    method: Literal["gradient", "integrated"] = "gradient"
    steps: int = Field(default=16, ge=1)
    target: float = Field(default=0.9, gt=0, le=1)
    stop_on: list[Literal["top5", "prob"]] = Field(default=["top5", "prob"], min_length=1)
    max_examples: int | None = Field(default=None, ge=1)
    check_cells: int = Field(default=0, ge=0)
    batch_size: int = Field(default=16, ge=1)
    # what the search grafts: whole components, or single heads (q, k, v, o) / neurons (FFN)
    grain: Literal["component", "head", "neuron"] = "component"

    @field_validator("localize")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(f"localize experiment name {value!r} must use letters, digits, '_', '-', '.'")
        return value

    @property
    def name(self) -> str:
        return self.localize


def _experiment_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "preset" if "preset" in value else "localize" if "localize" in value else "custom"
    if isinstance(value, LocalizeSpec):
        return "localize"
    return "preset" if isinstance(value, PresetRef) else "custom"


ExperimentItem = Annotated[
    Annotated[ExperimentSpec, Tag("custom")]
    | Annotated[PresetRef, Tag("preset")]
    | Annotated[LocalizeSpec, Tag("localize")],
    Discriminator(_experiment_kind),
]


class RunConfig(BaseModel):
    """Everything a run needs; models and datasets are named once and referred to by key."""

    model_config = ConfigDict(extra="forbid")

    name: str = "weightgraft-run"
    seed: int = 0
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    trust_remote_code: bool = False
    # config fields the models may differ in (the engine refuses any other difference)
    allow_config_differences: list[str] = Field(default_factory=list)
    models: dict[str, str]
    datasets: dict[str, str]
    experiments: list[ExperimentItem] = Field(min_length=1)
    bootstrap: int = Field(default=2000, ge=0)
    max_batch_tokens: int = Field(default=32768, ge=16)
    conditions_per_chunk: int = Field(default=16, ge=1)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        # The default run folder is runs/NAME: a name must not reach outside it.
        if not value.strip() or value in (".", "..") or any(c in value for c in "/\\\0") or value.startswith("~"):
            raise ValueError(
                f"{value!r} is not a plain name; use letters, digits, '-', '_' or "
                "'.' without path separators (choose the folder with --out)"
            )
        # It becomes a folder name: bounded well below a file system's 255 bytes per name.
        if len(value) > MAX_NAME_CHARS or len(value.encode("utf-8")) > 2 * MAX_NAME_CHARS:
            raise ValueError(
                f"a name of {len(value)} characters is too long; use at most {MAX_NAME_CHARS} "
                "(letters, digits, '-', '_', '.')"
            )
        if any(c in value for c in UNSAFE_NAME_CHARS) or not value.isprintable():
            raise ValueError(
                f"{value[:40]!r} holds characters a file name cannot (control characters or any of "
                f"{UNSAFE_NAME_CHARS}); use letters, digits, '-', '_' or '.'"
            )
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        # Only devices a run can compute on (not `meta`, on which a run would fail at its first
        # model load and be recorded as interrupted); "auto" is the command line's, not a config's.
        return check_device(value)

    @model_validator(mode="after")
    def _references(self) -> RunConfig:
        for spec in self.localizations():
            for key in (spec.recipient, spec.donor):
                if key not in self.models:
                    raise ValueError(
                        f"localize experiment {spec.name!r} uses model {key!r}, which is not "
                        f"under `models:` (have: {sorted(self.models)})"
                    )
            if spec.dataset not in self.datasets:
                raise ValueError(
                    f"localize experiment {spec.name!r} uses dataset {spec.dataset!r}, which is "
                    f"not under `datasets:` (have: {sorted(self.datasets)})"
                )
        experiments = self.expanded()
        if not experiments:
            spec = self.localizations()[0]
            raise ValueError(
                "a localize experiment runs beside at least one grafting experiment (the run's report "
                f"and provenance come from those); add e.g. {{name: baseline, dataset: {spec.dataset}, "
                f"recipient: {spec.recipient}, donor: {spec.donor}, conditions: [PRE, SFT]}}"
            )
        names = [e.name for e in experiments]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"experiment names repeat: {dupes}")
        for exp in experiments:
            keys = {exp.recipient, exp.donor} | {
                k
                for c in exp.conditions
                if isinstance(c, ConditionSpec)
                for k in (c.recipient, c.donor, *(g.donor for g in c.grafts))
                if k
            }
            for key in sorted(keys):
                if key not in self.models:
                    raise ValueError(
                        f"experiment {exp.name!r} uses model {key!r}, which is not under "
                        f"`models:` (have: {sorted(self.models)}); add `models.{key}: ID_OR_PATH`"
                    )
            if exp.dataset not in self.datasets:
                raise ValueError(
                    f"experiment {exp.name!r} uses dataset {exp.dataset!r}, which is not under "
                    f"`datasets:` (have: {sorted(self.datasets)}); add `datasets.{exp.dataset}: DIR`"
                )
        return self

    def expanded(self) -> list[ExperimentSpec]:
        """The experiments with every preset replaced by its experiment(s)."""
        out = []
        for item in self.experiments:
            if isinstance(item, PresetRef):
                out += [ExperimentSpec.model_validate(spec) for spec in item.experiments()]
            elif isinstance(item, ExperimentSpec):
                out.append(item)
        return out

    def localizations(self) -> list[LocalizeSpec]:
        """The `localize` experiments (minimal graft searches; see weightgraft.attribution)."""
        return [item for item in self.experiments if isinstance(item, LocalizeSpec)]


MAX_NAME_CHARS = 100  # a run name becomes a folder name
UNSAFE_NAME_CHARS = '<>:"|?*'
MAX_CONFIG_BYTES = 1_000_000  # a run config is a page of YAML, not a data file
MAX_CONFIG_NODES = 100_000  # values after expanding YAML aliases (a "billion laughs" file has 10^9)


def _expanded_nodes(root: yaml.Node) -> int:
    """How many values the YAML document holds once every alias is expanded, counted without
    expanding (each anchored node is counted once and reused); a recursive alias counts as
    unbounded."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            return MAX_CONFIG_NODES + 1
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        active.discard(key)
        sizes[key] = min(total, 10 * MAX_CONFIG_NODES)
        return sizes[key]

    return size(root)


def parse_config(data: dict, source: str = "") -> RunConfig:
    """Validate a config dict; raises ConfigError whose text names each bad field or condition
    (and `source`, the config file, when given)."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


def load_config(path: str | Path, **overrides: Any) -> RunConfig:
    """Read a YAML config; `overrides` (e.g. device, dtype, models) replace top-level fields,
    with `models` merged key by key. Relative paths are taken from the config file's folder."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a config file; give the YAML file's path (e.g. {path}/run.yaml)")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; check the path")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: {path.stat().st_size} bytes is too large for a run config (at most "
            f"{MAX_CONFIG_BYTES}); is it the right file?"
        )
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None and _expanded_nodes(root) > MAX_CONFIG_NODES:
            raise ConfigError(
                f"{path}: its YAML aliases expand to more than {MAX_CONFIG_NODES} values; a run config "
                "needs far fewer: write the values out, or use fewer nested aliases (*name)"
            )
        data = yaml.safe_load(text) or {}
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); save the config as UTF-8"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(
            f"{path}{where}: bad YAML ({problem}); fix the syntax there (close "
            "brackets and quotes; quote values that hold ':' or '#')"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected `field: value` lines at the top level, got a {type(data).__name__}")
    base = path.resolve().parent
    for section in ("models", "datasets"):
        if not isinstance(data.get(section), dict):
            continue  # validation names the field
        for key, value in data[section].items():
            if (
                isinstance(value, str)
                and value.startswith((".", "/"))
                or (isinstance(value, str) and (base / value).exists())
            ):
                data[section][key] = str((base / value).resolve())
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "models" and isinstance(data.get("models", {}), dict):
            data.setdefault("models", {}).update(value)
        elif key != "models":
            data[key] = value
    return parse_config(data, str(path))
