"""A plan's numbers as facts: the model every property check reads.

One model serves two callers. `verify check` binds a concrete plan: N is pinned to the plan's
num_parents and the plane slabs sit where the plan says. The prover binds a plan it derived from
the contract: N ranges over 1..max_parents and every slab starts at (N + 1) x (the plane bytes
before it). Every N-dependent number is an `Affine` in N, so once the plan's strides are known
every term is linear over z3 Int.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

from kvproof.spec.contract import DTYPE_BYTES
from kvproof.spec.smt import Env, Solver, Term

# The parent count and two page ids: the variables a witness gives values to.
N, PAGE, OTHER = Term.var("N"), Term.var("p"), Term.var("q")
_SOLVER = Solver(("N", "p", "q"))


@dataclass(frozen=True)
class Affine:
    """per_parent x N + fixed: how every N-dependent number of a bound plan grows with N.
    Kept as two ints so equal terms are found before any z3 term is built."""

    per_parent: int
    fixed: int

    def term(self) -> Any:
        return self.per_parent * N + self.fixed if self.per_parent else self.fixed

    def __add__(self, other: Affine) -> Affine:
        return Affine(self.per_parent + other.per_parent, self.fixed + other.fixed)


@dataclass(frozen=True)
class PlaneFact:
    id: str
    plane_bytes: int
    arena_offset_bytes: Affine
    alignment: int | None = None  # the plane alignment the engine declares, if it declares one

    @property
    def slab(self) -> Affine:
        """(N + 1) x plane bytes: the plane's slab, null parent included."""
        return Affine(self.plane_bytes, self.plane_bytes)


@dataclass(frozen=True)
class Front:
    """An allocator's pages of a shared buffer: page i spans [i x page_bytes, (i + 1) x page_bytes)."""

    page_bytes: int
    min_page: int  # the first page it may hand out
    pages: int  # its index space: page ids below it


@dataclass(frozen=True)
class Reach:
    """With the other end at any watermark in [peer_from, peer_to], the farthest watermark an end's allocations
    reach, from empty."""

    peer_from: int
    peer_to: int
    own: int


@dataclass(frozen=True)
class EndFact:
    """A group that is one end of a buffer two allocators share, growing up or down, and the other end."""

    grows: str  # "up" | "down"
    own: Front
    peer: Front
    sink_bytes: int
    reach: tuple[Reach, ...]


@dataclass(frozen=True)
class GroupFact:
    id: str
    packing: int
    page_count: Affine
    end: EndFact | None = None


@dataclass(frozen=True)
class KernelFact:
    """A kernel that reads a field's pages: the page it is handed and the limits its source sets."""

    name: str
    tokens: int
    block: int
    max_tokens: int | None
    power_of_two: bool = False


@dataclass(frozen=True)
class FieldFact:
    id: str
    group: str
    plane: str
    dtype: str
    payload_bytes: int
    offset_bytes: int
    page_stride_bytes: int
    exact_stride: bool
    tokens: int | None = None  # tokens per page, where the plan says
    kernels: tuple[KernelFact, ...] = ()
    # (name, walks: page | payload | item, the item bytes it steps by for `item`, else None)
    readers: tuple[tuple[str, str, int | None], ...] = ()
    aligned: tuple[int, int, int] | None = None  # (entry, row, rows): the alignments the engine's layout states

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Facts:
    parent_bytes: int
    alignment: int
    max_padding: Fraction | None  # None: the engine sets no bound, so padding_bound has nothing to check
    planes: tuple[PlaneFact, ...]  # in arena order
    groups: tuple[GroupFact, ...]
    fields: tuple[FieldFact, ...]
    parents: tuple[int, int]  # the range of the parent count N, both ends included
    arena_bytes: Affine | None = None  # the engine's allocation; None: the planes' slabs end to end

    @property
    def arena(self) -> Affine:
        """The bytes every slab must lie in: the engine's allocation, or (N + 1) x the plane bytes."""
        if self.arena_bytes is not None:
            return self.arena_bytes
        total = sum(p.plane_bytes for p in self.planes)
        return Affine(total, total)

    def plane(self, plane_id: str) -> PlaneFact:
        return self._planes[plane_id]

    def group(self, group_id: str) -> GroupFact:
        return self._groups[group_id]

    def witness(self, *formulas: Term) -> Env | None:
        """Values of N (within `parents`), p and q that satisfy `formulas`, or None."""
        low, high = self.parents
        return _SOLVER.witness(low <= N, high >= N, *formulas)

    @cached_property
    def _planes(self) -> dict[str, PlaneFact]:
        return {p.id: p for p in self.planes}

    @cached_property
    def _groups(self) -> dict[str, GroupFact]:
        return {g.id: g for g in self.groups}

    def raw(self, group_id: str) -> int:
        return self._raw[group_id]

    @cached_property
    def _raw(self) -> dict[str, int]:
        out = dict.fromkeys(self._groups, 0)
        for f in self.fields:
            out[f.group] += f.payload_bytes
        return out

    @cached_property
    def on_plane(self) -> dict[str, list[FieldFact]]:
        """plane -> the fields of every group on it (each list scanned once per plan, not per plane)."""
        out: dict[str, list[FieldFact]] = {p.id: [] for p in self.planes}
        for f in self.fields:
            out[f.plane].append(f)
        return out

    @cached_property
    def stacks(self) -> dict[tuple[str, str], list[FieldFact]]:
        """(group, plane) -> the fields one page of the group keeps on that plane."""
        out: dict[tuple[str, str], list[FieldFact]] = {}
        for f in self.fields:
            out.setdefault((f.group, f.plane), []).append(f)
        return out
