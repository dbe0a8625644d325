"""`search` over a whole family, decided exactly by evaluating its candidate loop at every reduced point.

A member's plan reads its geometry only through four numbers besides the layer pattern: heads per
rank h, the latent width, the head dim and the dtype (the state is h x state_per_head[head_dim],
the page page_per_value[dtype] x latent: the linear terms derive_shape checks against the
contract). The layer pattern enters only through the MLA layer count n and the smallest and
largest state group (the contract's own counts, layer_patterns). So the family's verdict is the
verdict at every (h, latent, head_dim, dtype) reached, under every layer pattern reached: far
fewer points than members, each evaluated, none sampled.

At one point a packing K_mla = K (K_lin = K x page // state) is accepted iff its planes are exact
(K x page covers K_lin states, and is a multiple of the plane alignment and of K_lin x the state
field's lcm(itemsize, stride alignment), the latent's page is a multiple of its own) and every
group pads within MAX_PADDING. The groups' padding is the only part the layer pattern enters,
and it reads K only through K_lin x state / (K x page). So the pattern-free part is computed
once per point for K = ceil(state / page) .. 256, keeping the best exact K_lin x state / (K x
page); a member boots under `search` iff that best meets its pattern's padding. The same
conditions are the sweep encoding's (spec/sweep.py), compared with the pointwise prover member by
member in tests/test_sweep.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

import numpy as np

from kvproof.spec import properties as P
from kvproof.spec.catalog import CACHE_DTYPES
from kvproof.spec.contract import ALIGNMENT, MAX_PADDING, PACKING_LIMIT, state_group_sizes
from kvproof.spec.sweep_family import PARAMETERS, Family, Member, divisors, mla_layers

MAX_POINTS = 1 << 24  # reduced points evaluated at most; a larger family goes to the z3 query


@dataclass(frozen=True)
class Layers:
    """What a plan reads of a layer pattern: MLA layers (= planes), smallest and largest state group."""

    n: int
    smin: int
    smax: int


def layer_patterns(family: Family) -> dict[tuple[int, int], Layers]:
    """(num_layers, mla_every) -> its pattern, counted as the contract counts (MLA layers, state groups)."""
    out = {}
    for layers in family.ranges["num_layers"].all():
        for every in family.ranges["mla_every"].all():
            n = len(mla_layers(layers, every))
            sizes = state_group_sizes(layers - n, n)
            out[layers, every] = Layers(n, min(sizes), max(sizes))
    return out


@dataclass
class Table:
    """Per (dtype, head_dim): the best exact K_lin x state over K x page at each (h, latent),
    as num / den (num 0: no packing up to 256 is exact, or ceil(state / page) > 256)."""

    heads: np.ndarray  # h values reached, ascending
    latents: np.ndarray  # kv_lora_rank + rope, ascending
    best: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]

    def boots(self, key: tuple[str, int], layers: Layers) -> np.ndarray:
        """Whether `search` boots at each (h, latent) under this pattern: its parent n x K x page
        pads each group (n x K x page, smin and smax x K_lin x state) within the bound, and the arena
        (two parents at least) fits int64 (checked for the family's largest parent in build)."""
        num, den = self.best[key]
        parent = layers.n * den
        return ((num > 0) & P.padding_within(parent, 1, layers.smin * num, MAX_PADDING)
                & P.padding_within(parent, 1, layers.smax * num, MAX_PADDING))


def _heads_per_rank(family: Family) -> list[int]:
    return sorted({h // tp for h in family.ranges["kda_heads"].all() for tp in divisors(h)})


def points(family: Family) -> int:
    """Reduced points the table evaluates: (heads per rank, latent, head_dim, dtype)."""
    r = family.ranges
    return prod((len(_heads_per_rank(family)), len(r["kv_lora_rank"]), len(r["head_dim"]), len(family.dtypes)))


def fits(family: Family) -> bool:
    return points(family) <= MAX_POINTS


def build(family: Family, state_per_head: dict[int, int], page_per_value: dict[str, int],
          mla_multiple: dict[str, int], lin_multiple: int, on_time: Callable[[], None]) -> Table:
    """`on_time` is called between steps: it raises once the sweep's time budget is spent."""
    r = family.ranges
    heads = np.array(_heads_per_rank(family), dtype=np.int64)
    latents = np.array(r["kv_lora_rank"].all(), dtype=np.int64) + family.base.qk_rope_head_dim
    largest = PACKING_LIMIT * max(page_per_value.values()) * int(latents[-1])
    top = max(len(mla_layers(a, b)) for a in r["num_layers"].all() for b in r["mla_every"].all())
    # int64 holds every product below, and two parents of the largest plan fit the arena
    if largest * largest * 8 >= 2**63 or 2 * top * largest > P.BYTES_MAX:
        raise OverflowError("the family's pages are too large for the table")
    best = {}
    for dtype in family.dtypes:
        page = page_per_value[dtype] * latents[None, :]
        page_ok = page % mla_multiple[dtype] == 0
        for head_dim in r["head_dim"].all():
            state = state_per_head[head_dim] * heads[:, None]
            num = np.zeros((len(heads), len(latents)), dtype=np.int64)
            den = np.ones_like(num)
            for k in range(1, PACKING_LIMIT + 1):
                on_time()
                fill = k * page
                k_lin = fill // state  # >= 1 where admitted (state <= fill)
                states = k_lin * state
                exact = ((state <= fill) & (fill % ALIGNMENT == 0) & page_ok & (k_lin <= P.PAGE_ID_MAX)
                         & (fill % (lin_multiple * np.maximum(k_lin, 1)) == 0))
                better = exact & (states * den > num * fill)
                num, den = np.where(better, states, num), np.where(better, fill, den)
            best[dtype, head_dim] = (num, den)
    return Table(heads, latents, best)


class Verdicts:
    """Which members of the family fail, read from the table."""

    def __init__(self, family: Family, table: Table) -> None:
        self.family, self.table = family, table
        self.patterns = layer_patterns(family)
        self.rows = {int(h): i for i, h in enumerate(table.heads)}
        self.columns = {int(x) - family.base.qk_rope_head_dim: i for i, x in enumerate(table.latents)}
        self.cache: dict[Layers, dict[tuple[str, int], np.ndarray]] = {}

    def fails(self, layers: Layers) -> dict[tuple[str, int], np.ndarray]:
        """(dtype, head_dim) -> at each (h, latent): `search` does not boot under this pattern."""
        if layers not in self.cache:
            self.cache[layers] = {key: ~self.table.boots(key, layers) for key in self.table.best}
        return self.cache[layers]

    def fails_member(self, m: Member) -> bool:
        at = self.rows[m.kda_heads // m.tp], self.columns[m.kv_lora_rank]
        return bool(self.fails(self.patterns[m.num_layers, m.mla_every])[m.dtype, m.head_dim][at])

    def smallest(self) -> Member | None:
        """The least failing member (spec.sweep.ORDER), or None: no member fails."""
        r, rope = self.family.ranges, self.family.base.qk_rope_head_dim
        for layers in r["num_layers"].all():
            here = {e: self.fails(self.patterns[layers, e]) for e in r["mla_every"].all()}
            if not any(m.any() for f in here.values() for m in f.values()):
                continue
            for heads in r["kda_heads"].all():
                # per (head_dim, mla_every, tp, dtype) only its least failing rank: the least
                # member has the least rank of all, so no other rank of a tuple can be it
                found = [(hd, int(self.table.latents[at[0]]) - rope, every, tp, CACHE_DTYPES.index(dtype))
                         for tp in divisors(heads) for every, f in here.items()
                         for (dtype, hd), mask in f.items()
                         if (at := np.flatnonzero(mask[self.rows[heads // tp]])).size]
                if found:
                    hd, rank, every, tp, dtype_index = min(found)
                    return Member(layers, heads, hd, rank, every, tp, CACHE_DTYPES[dtype_index])
        return None

    def fails_at(self, member: dict[str, int], name: str) -> Callable[[int], bool]:
        """Whether the member fails with `name` changed (any tp for kda_heads, since tp must divide them)."""
        dtype = "bf16" if member["bf16"] else "fp8"

        def fails(value: int) -> bool:
            values = {p: member[p] for p in PARAMETERS} | {name: value}
            tps = divisors(value) if name == "kda_heads" else [member["tp"]]
            return any(self.fails_member(Member(**values, tp=tp, dtype=dtype)) for tp in tps)

        return fails
