"""The condition language: what is grafted where, from which donor(s) into which recipient.

A condition is a recipient, a method (`weights`: dynamic weight grafting through the engine;
`activations`: residual-stream patching from the donor's run) and a list of grafts, each a
position expression, a layer set, a component set and the donor it takes them from (default:
the condition's donor); the grafts' union applies to a row. Two grafts of one condition may take
different donors (the paper's hybrid), never the same (position, layer, component).

Shorthand strings cover the paper's vocabulary:
- `PRE` (the recipient alone) and `SFT` (the donor model itself: every weight everywhere);
- a position expression (`FE+LT`, `(FE+LT)^C`, ...): every weight at those positions. In the
  `clean` fidelity: the embeddings (token and position) and every layer; the final norm and
  unembedding stay the recipient's unless the experiment says `unembedding: donor`, which takes
  the donor's unembedding at every position. In the `authors` fidelity, as the authors' code did:
  the token embedding only (never GPT-2's `wpe`) and every layer, and on a tied model the
  unembedding with the embedding (the donor's where the last token's embedding is grafted);
  the final norm is never grafted;
- a component set (`ATTN+O+FFN`, `O+FFN`, ...): those components at the experiment's
  `component_at` positions (LT) in its `component_layers`, plus every weight at
  `component_base` positions (none by default, as in the paper's component figure).

Tokens after the prompt (the target's own tokens, teacher-forced to score the whole target) get
the grafts of the prompt's last token, as the engine's `generate(generated="last")` does.

The one way in: `resolve_condition(written, recipient=..., donor=..., ...)` turns a written
condition (a shorthand string or a `ConditionSpec`) into a `Condition`; `validate_condition` is
the same call at config load. The package root exports it and the condition types; the pieces
live in modules named for what they hold:
- `roles`: position expressions over the entity roles (FE, M, R, LT, `other`, ALL, NONE);
- `components`: component sets in engine names (WEIGHTS, BLOCKS, the engine's own names);
- `bands`: the layer bands a graft may name, and the check of a layer set as written;
- `paper_atoms`: the paper's component atoms and the authors' bands (why here: its docstring);
- `spec`: the written form (`ConditionSpec`, `GraftSpec`, `ShapeSpec`, `ControlSpec`, the method);
- `resolved`: the resolved form (`Condition`, `ResolvedGraft`, `DrawnPositions`);
- `resolve`: `resolve_condition`, shorthand and full spec alike;
- `controls`: a condition's controls expanded into conditions of their own, at plan time
  (imported from its module: it needs the plan's concrete layers).
"""

from weightgraft.experiments.conditions.bands import LayerSpec
from weightgraft.experiments.conditions.position_roles import NotApplicable
from weightgraft.experiments.conditions.resolve import resolve_condition, validate_condition
from weightgraft.experiments.conditions.resolved import Condition, DrawnPositions, NoDraw, ResolvedGraft
from weightgraft.experiments.conditions.spec import (
    ConditionMethod,
    ConditionSpec,
    ControlSpec,
    Fidelity,
    GraftSpec,
    ShapeSpec,
    Unembedding,
)

__all__ = [
    "Condition",
    "ConditionMethod",
    "ConditionSpec",
    "ControlSpec",
    "DrawnPositions",
    "Fidelity",
    "GraftSpec",
    "LayerSpec",
    "NoDraw",
    "NotApplicable",
    "ResolvedGraft",
    "ShapeSpec",
    "Unembedding",
    "resolve_condition",
    "validate_condition",
]
