"""The production page allocator: hands out pages of shared parents to groups.

A parent belongs to one group at a time and is cut into K_g pages of that group; page p of a
group lives in parent (p + K - 1) // K, so parent P holds pages (P - 1)K + 1 .. PK. Parents
1..N are usable; parent 0 is the null parent, whose last slot is page 0, never handed out.
A group fills the parents it owns before it takes a new one, and a parent goes back to the
shared free list the moment its last page is freed, so any group can reuse it.

Pure Python, no torch: the engine's scheduler runs it on the host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kvproof.impl import faults
from kvproof.impl.packer import PlanError
from kvproof.spec import properties as P

faults.declare({
    "allocator_hands_out_null_page": "parent P's pages are numbered from (P-1)K, one too low: page 0 is handed out",
    "allocator_shares_parent": "the allocator takes a parent but leaves it on the free list: two groups own it",
    "allocator_double_free_parent": "freeing several pages of a parent returns it to the free list once per page",
    "allocator_reuses_live_page": "the allocator leaves a handed-out page on its free list: it is handed out again",
})


class AllocatorError(PlanError):
    """A request the allocator refuses (out of capacity, unknown group, page not live).

    Raised before any state changes, so the allocator is exactly as it was.
    """


class Allocator:
    """Pages per group over N shared parents, with the accounting a test checks against the plan."""

    def __init__(self, packing: Mapping[str, int], num_parents: int) -> None:
        if num_parents < 1 or any(k < 1 for k in packing.values()):
            raise AllocatorError("need at least one parent and positive packings")
        self.packing = dict(packing)
        self.num_parents = num_parents
        # Taken from the end: the lowest parent id first, which keeps arenas compact.
        self._free_parents = list(range(num_parents, 0, -1))
        self._owner: dict[int, str] = {}
        self._free_pages: dict[str, list[int]] = {g: [] for g in packing}
        self._live: dict[str, set[int]] = {g: set() for g in packing}

    def pages_of(self, group: str, parent: int) -> range:
        """The page ids parent `parent` holds when `group` owns it."""
        k = self.packing[group]
        if faults.active("allocator_hands_out_null_page"):
            return range((parent - 1) * k, parent * k)
        return range((parent - 1) * k + 1, parent * k + 1)

    def parent_of(self, group: str, page: int) -> int:
        return P.parent_of(page, self.packing[group])

    def parents_needed(self, counts: Mapping[str, int]) -> int:
        """New parents an allocation of `counts` pages per group would take from the free list."""
        total = 0
        for group, count in counts.items():
            short = count - len(self._free_pages[group])
            if short > 0:
                total += -(-short // self.packing[group])
        return total

    def allocate(self, counts: Mapping[str, int]) -> dict[str, list[int]]:
        """Pages for several groups at once (a request's latent pages and state pages), all or none."""
        unknown = sorted(set(counts) - set(self.packing))
        if unknown:
            raise AllocatorError(f"unknown group {unknown[0]}")
        if any(c < 0 for c in counts.values()):
            raise AllocatorError("page counts must be >= 0")
        need = self.parents_needed(counts)
        if need > len(self._free_parents):
            wanted = ", ".join(f"{g} {c}" for g, c in counts.items() if c)
            raise AllocatorError(
                f"out of capacity: {wanted} pages need {need} new parents, {len(self._free_parents)} free"
            )
        out: dict[str, list[int]] = {}
        for group, count in counts.items():
            free = self._free_pages[group]
            while len(free) < count:
                self._take_parent(group)
            taken = [free.pop() for _ in range(count)]
            if faults.active("allocator_reuses_live_page") and taken:
                free.append(taken[-1])
            self._live[group].update(taken)
            out[group] = taken
        return out

    def _take_parent(self, group: str) -> None:
        parent = self._free_parents[-1] if faults.active("allocator_shares_parent") else self._free_parents.pop()
        self._owner[parent] = group
        # Under the pages already free (those go first), reversed so pop() hands out the new
        # parent's pages in ascending order.
        self._free_pages[group][:0] = reversed(self.pages_of(group, parent))

    def free(self, pages: Mapping[str, Iterable[int]]) -> None:
        """Free live pages of several groups at once; a parent whose pages are all free returns."""
        wanted = {g: list(ps) for g, ps in pages.items()}
        for group, ps in wanted.items():
            if group not in self._live:
                raise AllocatorError(f"unknown group {group}")
            not_live = sorted(set(ps) - self._live[group])
            if not_live:
                raise AllocatorError(f"page {not_live[0]} of {group} is not live")
            if len(set(ps)) != len(ps):
                raise AllocatorError(f"a page of {group} is freed twice in one call")
        for group, ps in wanted.items():
            self._live[group].difference_update(ps)
            self._free_pages[group].extend(ps)
            touched = [self.parent_of(group, p) for p in ps]
            if not faults.active("allocator_double_free_parent"):
                touched = sorted(set(touched))
            for parent in touched:
                self._release_if_empty(group, parent)

    def _release_if_empty(self, group: str, parent: int) -> None:
        if any(p in self._live[group] for p in self.pages_of(group, parent)):
            return
        mine = set(self.pages_of(group, parent))
        self._free_pages[group] = [p for p in self._free_pages[group] if p not in mine]
        self._owner.pop(parent, None)
        self._free_parents.append(parent)

    # Accounting, for the engine's capacity report and for tests.

    def live_pages(self, group: str) -> frozenset[int]:
        return frozenset(self._live[group])

    def free_parents(self) -> tuple[int, ...]:
        """The shared free list (a parent listed twice is a bug the tests look for)."""
        return tuple(self._free_parents)

    def owner(self, parent: int) -> str | None:
        return self._owner.get(parent)

    def owned_parents(self, group: str) -> frozenset[int]:
        return frozenset(p for p, g in self._owner.items() if g == group)

    def free_slots(self, group: str) -> int:
        """Pages `group` can still take without a new parent."""
        return len(self._free_pages[group])
