"""Differential test of the production allocator and arena against the NumPy cache oracle.

A hypothesis state machine admits requests (latent pages plus one state page per state group),
appends tokens to random MLA layers, writes KDA conv and recurrent state, frees requests and
re-admits into the freed pages, over random synthetic hybrid models and Kimi-K3 at high tp,
under every policy that accepts the layout. After every step:
- every written row of every live page, read back through the arena, equals the oracle;
- every byte no live page owns (padding, stride slack, the null parent, unowned parents) still
  holds the fill pattern the arena started with;
- live pages never share a byte, and each lies inside the parent the contract puts it in;
- the allocator's live pages, parent owners, free list and free slots match the accounting the
  contract implies, and an allocation fails exactly when the plan's capacity says it must.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from math import ceil

import numpy as np
import pytest
from bites import fails_under
from hypothesis import HealthCheck, Phase, event, reject, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from strategies_cache import STATE_SLOTS, Layout, accepted_plan, k3_layouts, synthetic_layouts

from kvproof.impl.allocator import Allocator, AllocatorError
from kvproof.impl.arena import Arena
from kvproof.impl.recipe import FULL, GRANULARITY
from kvproof.oracles.cache import CacheOracle, FieldShape, check_contents, check_pages

FILL = 0xFF  # NaN in every float view, and all ones for the canary check
# The test's own storage types: fp8 as bytes, bf16 as its bit pattern (NumPy has no bfloat16).
STORAGE = {"uint8": np.uint8, "bfloat16": np.uint16, "float32": np.float32}


@dataclass
class Request:
    latent: list[int]  # full-attention pages, in token order
    state: dict[str, list[int]]  # state group -> its STATE_SLOTS pages
    written: dict[int, int] = field(default_factory=dict)  # MLA layer -> tokens written


def _layer(field_id: str) -> int:
    return int(field_id.split(".")[1])


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    if dtype is np.float32:
        return rng.standard_normal(shape, dtype=np.float32)
    return rng.integers(0, np.iinfo(dtype).max + 1, size=shape, dtype=dtype)


class CacheMachine(RuleBasedStateMachine):
    """Rules and invariants; subclasses pick the layouts in their `initialize` rule."""

    def start(self, layout: Layout) -> None:
        plan = accepted_plan(layout.model, layout.tp, layout.dtype, layout.policy)
        # A plan the boot check rejects never reaches an allocator.
        if plan is None:
            reject()
        self.plan = plan
        self.binding = plan.bind(layout.num_parents)
        self.n = layout.num_parents
        self.k = plan.packing
        self.state_groups = [g for g in self.k if g != FULL]
        self.arena = Arena(self.binding, fill=FILL)
        # 0xFF on every payload byte of a live page, kept as pages come and go.
        self.owned = np.zeros_like(self.arena.buffer)
        self.allocator = Allocator(self.k, self.n)
        self.oracle = CacheOracle({
            g.id: {
                f.id: FieldShape(self._logical_shape(f.id), np.dtype(STORAGE[f.dtype])) for f in plan.fields_of(g.id)
            }
            for g in plan.groups
        })
        self.mla_layers = [_layer(f.id) for f in plan.fields_of(FULL)]
        self.requests: dict[int, Request] = {}
        self.next_id = 0

    def _logical_shape(self, field_id: str) -> tuple[int, ...]:
        shape = self.plan.field(field_id).shape
        return (shape[0], shape[2]) if field_id.endswith("latent_kv") else shape

    # Accounting the contract implies, from the oracle's live pages alone.

    def _parent(self, group: str, page: int) -> int:
        return (page + self.k[group] - 1) // self.k[group]

    def _owned(self) -> dict[str, set[int]]:
        return {g: {self._parent(g, p) for p in self.oracle.live(g)} for g in self.k}

    def _fits(self, counts: dict[str, int]) -> bool:
        owned = self._owned()
        free_parents = self.n - self._parents_in_use()
        need = 0
        for g, c in counts.items():
            slack = self.k[g] * len(owned[g]) - len(self.oracle.live(g))
            need += ceil(max(0, c - slack) / self.k[g])
        return need <= free_parents

    def _snapshot(self) -> tuple:
        a = self.allocator
        return (
            {g: a.live_pages(g) for g in self.k},
            a.free_parents(),
            {p: a.owner(p) for p in range(self.n + 1)},
            {g: a.free_slots(g) for g in self.k},
        )

    def _allocate(self, counts: dict[str, int]) -> dict[str, list[int]] | None:
        """Allocate through the allocator; None when it refuses, which must be exactly when the
        plan's accounting says the pages do not fit, and must leave it untouched."""
        fits, before = self._fits(counts), self._snapshot()
        try:
            pages = self.allocator.allocate(counts)
        except AllocatorError as err:
            assert not fits, f"allocator refused {counts} that fit: {err}"
            event("allocation refused: out of capacity")
            assert self._snapshot() == before, "a refused allocation changed the allocator"
            return None
        assert fits, f"allocator handed out {counts} beyond the plan's capacity"
        for g, ps in pages.items():
            assert len(ps) == counts[g], f"{g}: asked for {counts[g]} pages, got {len(ps)}"
            for p in ps:
                assert 1 <= p < self.binding.page_count(g), f"{g}: page {p} outside 1..{self.binding.page_count(g) - 1}"
            self.oracle.allocate(g, ps)
            for start, end in self._ranges(g, ps):
                self.owned[start:end] = 0xFF
        event(f"arena full after an allocation: {self._parents_in_use() == self.n}")
        return pages

    def _parents_in_use(self) -> int:
        return len(set().union(*self._owned().values()))

    def _free(self, rid: int) -> Request:
        req = self.requests.pop(rid)
        pages = {FULL: req.latent} | req.state
        self.allocator.free(pages)
        for g, ps in pages.items():
            self.oracle.free(g, ps)
            # An engine does not scrub freed pages; the test restores the fill so the canary
            # check can watch every byte nobody owns.
            for start, end in self._ranges(g, ps):
                self.arena.buffer[start:end] = FILL
                self.owned[start:end] = 0
        return req

    def _ranges(self, group: str, pages: list[int]) -> list[tuple[int, int]]:
        return [
            (self.binding.offset_bytes(f.id, p), self.binding.offset_bytes(f.id, p) + f.payload_bytes)
            for p in pages
            for f in self.plan.fields_of(group)
        ]

    def _write_latent(self, req: Request, layer: int, n: int, rng: np.random.Generator) -> None:
        field_id = f"layer.{layer}.latent_kv"
        rows = _values(rng, (n, self._logical_shape(field_id)[1]), STORAGE[self.plan.field(field_id).dtype])
        token = req.written.get(layer, 0)
        while len(rows):
            page, row = req.latent[token // GRANULARITY], token % GRANULARITY
            chunk, rows = rows[: GRANULARITY - row], rows[GRANULARITY - row :]
            self.arena.write_latent(layer, page, row, chunk)
            self.oracle.write(field_id, page, row, chunk)
            token += len(chunk)
        req.written[layer] = token

    def _admit(self, tokens: int, rng: np.random.Generator) -> bool:
        counts = {FULL: ceil(tokens / GRANULARITY)} | {g: STATE_SLOTS for g in self.state_groups}
        pages = self._allocate(counts)
        if pages is None:
            return False
        req = Request(pages[FULL], {g: pages[g] for g in self.state_groups})
        self.requests[self.next_id] = req
        self.next_id += 1
        for layer in self.mla_layers:  # prefill: every MLA layer gets the prompt's rows
            self._write_latent(req, layer, tokens, rng)
        return True

    # Rules.

    @rule(tokens=st.integers(1, 3 * GRANULARITY + 5), seed=st.integers(0, 2**32 - 1))
    def admit(self, tokens: int, seed: int) -> None:
        self._admit(tokens, np.random.default_rng(seed))

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), n=st.integers(1, 2 * GRANULARITY), seed=st.integers(0, 2**32 - 1))
    def append(self, data: st.DataObject, n: int, seed: int) -> None:
        rid = data.draw(st.sampled_from(sorted(self.requests)), label="request")
        layers = data.draw(st.sets(st.sampled_from(self.mla_layers), min_size=1), label="layers")
        req = self.requests[rid]
        need = ceil((max(req.written.get(x, 0) for x in layers) + n) / GRANULARITY) - len(req.latent)
        if need > 0:
            pages = self._allocate({FULL: need})
            if pages is None:
                return
            req.latent += pages[FULL]
        rng = np.random.default_rng(seed)
        for layer in sorted(layers):
            self._write_latent(req, layer, n, rng)

    @precondition(lambda self: self.requests and self.state_groups)
    @rule(data=st.data(), conv=st.booleans(), seed=st.integers(0, 2**32 - 1))
    def write_state(self, data: st.DataObject, conv: bool, seed: int) -> None:
        rid = data.draw(st.sampled_from(sorted(self.requests)), label="request")
        group = data.draw(st.sampled_from(self.state_groups), label="group")
        layers = sorted({_layer(f.id) for f in self.plan.fields_of(group)})
        chosen = data.draw(st.sets(st.sampled_from(layers), min_size=1), label="layers")
        page = data.draw(st.sampled_from(self.requests[rid].state[group]), label="page")
        rng = np.random.default_rng(seed)
        for layer in sorted(chosen):
            # The recurrent state changes every step; conv state too when the rule says so.
            kinds = ("conv_state", "recurrent_state") if conv else ("recurrent_state",)
            for kind in kinds:
                field_id = f"layer.{layer}.{kind}"
                f = self.plan.field(field_id)
                values = _values(rng, f.shape, STORAGE[f.dtype])
                write = self.arena.write_conv if kind == "conv_state" else self.arena.write_recurrent
                write(layer, page, values)
                self.oracle.write(field_id, page, 0, values)

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        self._free(data.draw(st.sampled_from(sorted(self.requests)), label="request"))

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), seed=st.integers(0, 2**32 - 1))
    def readmit(self, data: st.DataObject, seed: int) -> None:
        """Free a request and admit one of the same size: the freed pages must take it."""
        req = self._free(data.draw(st.sampled_from(sorted(self.requests)), label="request"))
        tokens = max(1, *req.written.values())
        assert self._admit(tokens, np.random.default_rng(seed)), (
            "re-admitting a request of the size just freed ran out of capacity"
        )

    # Invariants.

    @invariant()
    def allocator_matches_accounting(self) -> None:
        a = self.allocator
        check_pages({g: a.live_pages(g) for g in self.k}, self.oracle)
        owned = self._owned()
        groups = sorted(owned)
        for i, g in enumerate(groups):
            for h in groups[i + 1 :]:
                shared = owned[g] & owned[h]
                assert not shared, f"parents {sorted(shared)} hold live pages of both {g} and {h}"
        for parent in range(self.n + 1):
            want = next((g for g in groups if parent in owned[g]), None)
            assert a.owner(parent) == want, f"parent {parent} owned by {a.owner(parent)}, live pages say {want}"
        free = sorted(set(range(1, self.n + 1)) - set().union(*owned.values()))
        assert sorted(a.free_parents()) == free, f"free list {sorted(a.free_parents())}, expected {free}"
        for g in groups:
            slack = self.k[g] * len(owned[g]) - len(self.oracle.live(g))
            assert a.free_slots(g) == slack, f"{g}: {a.free_slots(g)} free slots, expected {slack}"

    @invariant()
    def live_pages_disjoint_and_inside_their_parent(self) -> None:
        spans = []
        for g in self.k:
            for p in sorted(self.oracle.live(g)):
                parent = self._parent(g, p)
                for f in self.plan.fields_of(g):
                    start = self.binding.offset_bytes(f.id, p)
                    plane = self.plan.plane(f.plane)
                    lo = self.binding.plane_offset_bytes(f.plane) + parent * plane.plane_bytes
                    assert lo <= start and start + f.payload_bytes <= lo + plane.plane_bytes, (
                        f"{f.id} page {p} at byte {start} is outside its parent {parent} on {f.plane}"
                    )
                    spans.append((start, start + f.payload_bytes, f"{f.id} page {p}"))
        spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            assert end <= start, f"{a} and {b} share bytes"

    @invariant()
    def canaries_unchanged(self) -> None:
        # FILL is all ones, so OR-ing the owned bytes to ones leaves all ones exactly when no
        # other byte changed; 8 bytes at a time (arena bytes are a multiple of the alignment).
        seen = np.bitwise_or(self.arena.buffer.view(np.uint64), self.owned.view(np.uint64))
        if not (seen == np.uint64(2**64 - 1)).all():
            stray = np.flatnonzero((self.arena.buffer | self.owned) != FILL)
            raise AssertionError(f"{len(stray)} bytes nobody owns were written, first at {stray[0]}")

    @invariant()
    def live_pages_read_back_as_the_oracle(self) -> None:
        read = {}
        for field_id, page in self.oracle.live_fields():
            kind, layer = field_id.split(".")[2], _layer(field_id)
            reader = {"latent_kv": self.arena.read_latent, "conv_state": self.arena.read_conv,
                      "recurrent_state": self.arena.read_recurrent}[kind]
            read[(field_id, page)] = reader(layer, page)
        check_contents(read, self.oracle)


class SyntheticMachine(CacheMachine):
    @initialize(layout=synthetic_layouts())
    def setup(self, layout: Layout) -> None:
        self.start(layout)


class KimiK3Machine(CacheMachine):
    @initialize(layout=k3_layouts())
    def setup(self, layout: Layout) -> None:
        self.start(layout)


def _scaled(examples: int, steps: int) -> settings:
    """Depth relative to the loaded profile: ci runs 60 examples per property, nightly 1000."""
    profile = settings.default
    assert profile is not None  # None only before a profile is loaded; conftest loads one
    scale = profile.max_examples / 60
    return settings(
        profile,
        max_examples=max(2, round(examples * scale)),
        stateful_step_count=max(5, round(steps * min(scale, 4))),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def test_synthetic_arena_matches_oracle():
    run_state_machine_as_test(SyntheticMachine, settings=_scaled(40, 30))


def test_kimi_k3_arena_matches_oracle():
    run_state_machine_as_test(KimiK3Machine, settings=_scaled(4, 12))


# Each seeded fault must make the machine fail. No shrinking and no example database: the test
# only needs a failure, fast, and must not feed fault-found examples to the real runs.
FAULT_SETTINGS = settings(
    max_examples=60,
    stateful_step_count=30,
    phases=(Phase.generate,),
    database=None,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize(
    "fault",
    [
        "allocator_hands_out_null_page",
        "allocator_shares_parent",
        "allocator_double_free_parent",
        "allocator_reuses_live_page",
        "arena_dense_page_stride",
        "offset_skips_null_slot",
        "stride_in_elements",
        "field_end_in_elements",
    ],
)
def test_machine_bites(fault):
    fails_under(fault, lambda: run_state_machine_as_test(SyntheticMachine, settings=FAULT_SETTINGS))
