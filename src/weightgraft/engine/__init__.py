"""The grafting engine: `Graft` says what and where, `Grafter` runs it in one batched pass."""

from weightgraft.engine.graft import BANDS, Graft
from weightgraft.engine.grafter import Grafter

__all__ = ["BANDS", "Graft", "Grafter"]
