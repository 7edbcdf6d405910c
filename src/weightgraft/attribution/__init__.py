"""Graft attribution and minimal graft search: which cells (position x layer x component) carry
a finetuning effect, and the smallest graft that carries most of it."""

from weightgraft.attribution.attribute import Attribution, attribute, position_roles

__all__ = ["Attribution", "attribute", "position_roles"]
