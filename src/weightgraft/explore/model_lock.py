"""The explorer's models are shared by the server's threads: one model call at a time, and a long
request (many passes) that gives up once a newer one of its kind has come."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager

import torch

from weightgraft.explore.explore_error import ExploreError


class ModelLock:
    """The lock around every model call. `threads`: torch threads for the calls (None: torch's
    setting), set in whichever server thread holds the lock."""

    def __init__(self, threads: int | None = None):
        self.threads = threads
        self._lock = threading.Lock()
        self._tickets: dict[str, int] = {}  # per kind of long request, the newest one's number

    @contextmanager
    def running(self):
        """One model call at a time, with `threads` torch threads in whichever server thread runs it
        (on a small model one thread answers fastest: more threads wait on each other)."""
        with self._lock:
            if self.threads is not None and torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)
            yield

    def latest_only(self, kind: str, lock: Callable[[], AbstractContextManager] | None = None):
        """The model lock for one pass of a long request of `kind`; it gives up once a newer request
        of that kind has come (the page wants only the newest). Clicks get the lock between passes.
        `lock`: how a pass takes the lock (default `running`; the session passes its own, which
        every model call of the session goes through)."""
        with self._lock:
            ticket = self._tickets[kind] = self._tickets.get(kind, 0) + 1
        take = lock or self.running

        @contextmanager
        def running():
            with take():
                if self._tickets[kind] != ticket:
                    raise ExploreError(f"this {kind} request was replaced by a newer one")
                yield

        return running
