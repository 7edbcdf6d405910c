"""The names of a `Grafter`'s donors: one donor goes by DEFAULT_DONOR_NAME, several by the names
the caller gives."""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from weightgraft.donors import DonorSource, as_donor_source

# The name a donor passed as `Grafter(recipient, donor)` goes by.
DEFAULT_DONOR_NAME = "donor"


def named_donors(
    donor: object | None, donors: Mapping[str, object] | None, recipient: nn.Module
) -> dict[str, DonorSource]:
    """One name per donor: `donor` alone is called DEFAULT_DONOR_NAME."""
    if donor is not None and donors is not None:
        raise ValueError("pass either donor (one donor) or donors={name: model, ...} (several), not both")
    if donor is None and donors is None:
        raise TypeError("Grafter needs a donor: Grafter(recipient, donor) or Grafter(recipient, donors={name: model})")
    if donors is None:
        if isinstance(donor, Mapping):
            raise TypeError("several donors go by keyword: Grafter(recipient, donors={name: model, ...})")
        return {DEFAULT_DONOR_NAME: as_donor_source(donor, recipient)}
    if not isinstance(donors, Mapping) or not donors:
        raise ValueError("donors must be a non-empty dict {name: model}")
    bad = [name for name in donors if not isinstance(name, str) or not name]
    if bad:
        raise ValueError(f"donor names must be non-empty strings, got {bad}")
    return {name: as_donor_source(model, recipient) for name, model in donors.items()}
