"""Progress on long work, drawn on stderr while a person watches a terminal.

Long work (an engine's points, the seeded bugs, the compatibility matrix's targets, the gate's
steps) says how much there is with `task(total, what)` and how far it got with `Task.advance`.
Nothing is drawn unless a command turned drawing on with `shown(...)`: the commands do so when
stderr is a terminal and no --json was asked, so CI logs, pipes and machine output stay exactly
as they are. A forked worker inherits the switch but draws nothing: only the process that turned
it on draws, and it counts what its workers finished.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

_ON: list[int] = []  # the pid of the process that turned drawing on, while it is on
T = TypeVar("T")
_LOCK = threading.Lock()  # a worker pool's callbacks advance from their own thread


@contextmanager
def shown(wanted: bool) -> Iterator[None]:
    """Drawing on within the block where `wanted` (the command's own choice: no --json) and stderr is a
    terminal; off otherwise."""
    on = wanted and sys.stderr.isatty()
    if on:
        _ON.append(os.getpid())
    try:
        yield
    finally:
        if on:
            _ON.pop()


def drawing() -> bool:
    return bool(_ON) and _ON[-1] == os.getpid()


class Task:
    """One piece of long work's count; a no-op where nothing is drawn."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def advance(self, done: int = 1, now: str | None = None) -> None:
        """`done` more finished; `now`: what was or is under way (a model, a mutant, a target)."""
        if self._bar is None:
            return
        with _LOCK:
            if now is not None:
                self._bar.set_postfix_str(now, refresh=False)
            self._bar.update(done)

    def each(self, items: Iterable[T], now: str | None = None) -> Iterator[T]:
        """The items, each counted once the loop body that took it is done (a `continue` included)."""
        for item in items:
            yield item
            self.advance(1, now)


@contextmanager
def task(total: int | None, what: str, unit: str) -> Iterator[Task]:
    """A count of `total` `unit`s of `what` (None: a total nobody knows ahead), with the time elapsed, drawn
    while the block runs and erased after it."""
    if not drawing():
        yield Task(None)
        return
    from tqdm import tqdm  # only where something is drawn

    tqdm.monitor_interval = 0  # no monitor thread: a run may fork its workers after this
    count = "{n_fmt}" if total is None else "{n_fmt}/{total_fmt}"
    bar = tqdm(total=total, desc=what, unit=f" {unit}", file=sys.stderr, leave=False, dynamic_ncols=True,
               bar_format="{desc}: " + count + "{unit} [{elapsed}]{postfix}")
    try:
        yield Task(bar)
    finally:
        with _LOCK:
            bar.close()
