"""The explorer's one error: a request it cannot answer as asked."""

from __future__ import annotations

from weightgraft.errors import UserError


class ExploreError(UserError, ValueError):
    """A request the explorer cannot answer as asked; the message says what to change."""
