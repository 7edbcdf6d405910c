"""Errors and warnings about a user's data and options, worded so that the fix is plain.

`DataError` messages are one line naming the file, line or option and what to do; the command
line prints them and exits with code 2. (When `weightgraft.errors.UserError` is available this is
the data layer's member of that family.)
"""

from __future__ import annotations

from weightgraft.errors import UserError


class DataError(UserError, ValueError):
    """Bad input data or options: the message names the file, line or option and the fix."""
