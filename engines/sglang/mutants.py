"""Seeded bugs in SGLang's pools, reintroduced by replacing one SGLang function for the planning call.

SGLang's files are never edited: while a fault declared here is switched on (kvproof.impl.faults),
the planner builds the pools with one method of the imported SGLang swapped for a broken variant
(planner.Patches), so `verify mutants` shows that `verify engine sglang` flags a broken SGLang. A
replacement whose target no longer exists raises: a mutant that silently stopped applying proves
nothing.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kvproof.engines.interface import Mutant
from kvproof.impl import faults

faults.declare({
    "sglang_mamba_no_dummy_slot": "SGLang's MambaPool allocates its conv states for `size` slots, not size + 1, "
    "forgetting slot 0, the dummy its allocator never hands out (allocator/mamba.py), while the allocator still "
    "hands out slots 1..size",
})


def _no_dummy_slot(original: Callable[..., None]) -> Callable[..., None]:
    """MambaPool.__init__ whose conv tensors lack the dummy slot: one slot fewer on their first
    axis (memory_pool.py's MambaPool allocates `size + 1`)."""
    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        import torch

        original(self, *args, **kwargs)
        conv = [torch.zeros((c.shape[0], c.shape[1] - 1, *c.shape[2:]), dtype=c.dtype, device=c.device)
                for c in self.mamba_cache.conv]
        self.mamba_cache = dataclasses.replace(self.mamba_cache, conv=conv)
    return broken


# fault name -> (module, Class.attribute, replacement factory)
PATCHES: dict[str, tuple[str, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    "sglang_mamba_no_dummy_slot": ("sglang.srt.mem_cache.memory_pool", "MambaPool.__init__", _no_dummy_slot),
}


def active() -> list[str]:
    return [name for name in PATCHES if faults.active(name)]


@contextmanager
def applied(mods: dict[str, types.ModuleType], names: list[str] | None = None) -> Iterator[None]:
    """The replacements of the active faults (or of `names`) in place for the block, the originals
    restored after (a planner.Patches)."""
    saved = []
    try:
        for name in active() if names is None else names:
            module, dotted, factory = PATCHES[name]
            owner: Any = mods[module]
            *path, attr = dotted.split(".")
            for step in path:
                owner = getattr(owner, step, None)
            if owner is None or attr not in vars(owner):
                raise RuntimeError(f"mutant {name} no longer applies: {module} has no {dotted}")
            original = vars(owner)[attr]
            saved.append((owner, attr, original))
            setattr(owner, attr, factory(original))
        yield
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


MUTANTS: tuple[Mutant, ...] = (
    # the dummy slot is the conv tensor's: every slot the allocator hands out lies past the shortened end
    Mutant("sglang_mamba_no_dummy_slot", ("verify engine sglang --tp 2 --dtype bf16 --assume page_size=1",),
           expect="in_bounds"),
)
