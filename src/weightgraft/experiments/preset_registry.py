"""Presets: named, ready-made experiments that a run config asks for with `preset: NAME`.

The run config knows presets only through this registry, never which ones exist: a study
registers its presets here when its module is imported (`weightgraft.paper.presets` registers
the paper's, and `weightgraft.pipelines` imports it), as an architecture registers its adapter.
A preset is a function of the preset entry's options that returns plain experiment dicts; the
run config validates them like any custom experiment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# The options a preset entry may carry beyond `max_examples` and `templates`, each only on the
# presets that declare it. `num_layers`, `num_heads`, `hidden_size`: the recipient's shape, for
# presets that enumerate its layers, heads or ranks (weightgraft.paper.finer_presets).
PRESET_OPTIONS = ("unembedding", "fidelity", "wording")
SHAPE_OPTIONS = ("num_layers", "num_heads", "hidden_size")
ALL_PRESET_OPTIONS = (*PRESET_OPTIONS, *SHAPE_OPTIONS)


@dataclass(frozen=True)
class Preset:
    """One preset: its name, its builder `build(max_examples, templates, **options) -> [dict]`,
    and which of ALL_PRESET_OPTIONS it takes."""

    name: str
    build: Callable[..., list[dict]]
    options: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(self.options - set(ALL_PRESET_OPTIONS))
        if unknown:
            raise ValueError(
                f"preset {self.name!r}: unknown option(s) {unknown}; known: {', '.join(ALL_PRESET_OPTIONS)}"
            )


_REGISTRY: dict[str, Preset] = {}


def register_preset(preset: Preset, *, replace: bool = False) -> Preset:
    """Make `preset` available to run configs under its name (registering the same preset
    twice is harmless; another one under a taken name needs `replace=True`)."""
    taken = _REGISTRY.get(preset.name)
    if taken is not None and taken != preset and not replace:
        raise ValueError(f"a preset named {preset.name!r} is already registered; pass replace=True")
    _REGISTRY[preset.name] = preset
    return preset


def preset_names() -> list[str]:
    """The registered presets' names, in registration order."""
    return list(_REGISTRY)


def presets_taking(option: str) -> list[str]:
    """The registered presets that take `option`, in registration order."""
    return [name for name, preset in _REGISTRY.items() if option in preset.options]


def get_preset(name: str) -> Preset:
    """The preset registered under `name`; ValueError (worded as pydantic words a wrong
    choice, so that a config names the known presets) when there is none."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    names = [repr(n) for n in _REGISTRY]
    if not names:
        raise ValueError(
            f"no presets are registered, so {name!r} is unknown; import weightgraft.paper.presets "
            "(the paper's presets) or register your own with register_preset"
        )
    choices = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    raise ValueError(f"Input should be {choices}")
