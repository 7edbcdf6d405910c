"""Errors a user can fix: bad input, missing or damaged files, models that do not fit together.

Raise `UserError` with one line that names the file, field or line and says what to do; the
command line prints that line and exits with code 2 (`--debug` shows the traceback). Anything
else that escapes is a bug in weightgraft and keeps its traceback. docs/errors.md lists them all.
"""

from __future__ import annotations

import sys


class UserError(Exception):
    """A problem in the user's input, files or environment, worded so that the fix is plain."""


def warn(message: str) -> None:
    """A one-line warning on stderr for something weightgraft repaired on its own (for example a
    damaged result file it recomputes): the user should know, but the run goes on."""
    print(f"warning: {message}", file=sys.stderr, flush=True)
