"""Graft attribution and minimal graft search: which cells (position x layer x component) carry
a finetuning effect, and the smallest graft that carries most of it."""

from weightgraft.attribution.agreement import cell_agreement
from weightgraft.attribution.attribute import Attribution, attribute, position_roles
from weightgraft.attribution.exact import exact_cell_effects, spearman
from weightgraft.attribution.localize import LocalizeResult, localize
from weightgraft.attribution.role_examples import RoleExample, encode_role_examples

__all__ = [
    "Attribution",
    "RoleExample",
    "LocalizeResult",
    "attribute",
    "cell_agreement",
    "encode_role_examples",
    "exact_cell_effects",
    "localize",
    "position_roles",
    "spearman",
]
