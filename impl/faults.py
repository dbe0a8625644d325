"""Seeded faults: named, deliberately broken variants of kvproof's code and of engines' code.

A verification suite must show that it bites. Each fault is a small, realistic planner or kernel
bug that a code path switches on by name (`active(name)`, its hook); `verify mutants` turns each
one on (through the KVPROOF_FAULTS environment variable, so pytest-xdist workers see it too) and
runs the checks that must catch it. With no fault active every hook is a no-op.

This module is only the switch: it knows no fault by name. The module that holds a fault's hook
declares it, with what its broken variant does, when imported (`declare({name: description})`);
an engine's faults are declared by its adapter's mutants module. The checks that must kill each
fault are in kvproof.ci.mutants (kvproof's own) and in each adapter's `mutants`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

ENV = "KVPROOF_FAULTS"

_declared: dict[str, str] = {}  # name -> what the broken variant does, as its hook's module declared it
_active: set[str] = {name for name in os.environ.get(ENV, "").split(",") if name}


def declare(faults: Mapping[str, str]) -> None:
    """Declare the faults whose hooks the calling module holds: name -> what the broken variant
    does. Declaring a name again with another description is an error (two faults, one name)."""
    for name, description in faults.items():
        if _declared.setdefault(name, description) != description:
            raise ValueError(f"fault {name!r} is declared twice, with different descriptions")


def declared() -> Mapping[str, str]:
    """Every fault declared so far (by the modules imported so far), read-only."""
    return MappingProxyType(_declared)


def active(name: str) -> bool:
    return name in _active


def switched_on() -> frozenset[str]:
    """Every fault on in this process, whether by KVPROOF_FAULTS or `inject`: what a worker
    process it starts must switch on too (`switch_on`), since it sees only the environment."""
    return frozenset(_active)


def switch_on(names: frozenset[str]) -> None:
    _active.update(names)


@contextmanager
def inject(name: str) -> Iterator[None]:
    """Turn one fault on for the duration of a block (tests that show a check bites). The fault
    must be declared: its hook's module imported."""
    if name not in _declared:
        raise KeyError(f"unknown fault {name!r}")
    _active.add(name)
    try:
        yield
    finally:
        _active.discard(name)
