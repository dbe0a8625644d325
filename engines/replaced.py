"""A seeded bug's replacement of an engine's function for one planning call: the engine's files are never
edited, the attribute is swapped for the block and restored after."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

# (the mutant's name, the module holding the attribute, the attribute's dotted path in it (a class's method:
# "Class.method"), the factory making the replacement from the original)
Target = tuple[str, types.ModuleType, str, Callable[[Any], Any]]


@contextmanager
def replaced(targets: Iterable[Target]) -> Iterator[None]:
    """Each target's attribute replaced for the block, every original restored after (in reverse order); a
    target the engine no longer has raises, naming the mutant, so a seeded bug never silently does nothing."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        for name, module, dotted, factory in targets:
            owner: Any = module
            *path, attr = dotted.split(".")
            for step in path:  # a class of the module (a classmethod is replaced on its class)
                owner = getattr(owner, step, None)
            if owner is None or attr not in vars(owner):
                raise RuntimeError(f"mutant {name} no longer applies: {module.__name__} has no {dotted}")
            original = vars(owner)[attr]
            saved.append((owner, attr, original))
            setattr(owner, attr, factory(original))
        yield
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)
