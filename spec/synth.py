"""Synthesize the best legal packing per point: z3 Optimize over symbolic packings.

Best means the smallest parent, then the smallest worst padding. With the parent fixed, the worst
padding parent / (K_g x raw_g) - 1 is smallest when min over groups of K_g x raw_g is largest,
which is linear. Divisibility by a symbolic packing is written as a product with an integer
quotient; z3 decides those nonlinear terms in a fraction of a second since every packing is
bounded (a disjunction over the 256 concrete values took z3 seconds to a minute per point).
The winner is then re-checked by the prover's own property checks, so "legal" means what the
prover proves, not only what this encoding says.

With draft layers the engine checks no padding, but the synthesizer keeps the bound the user
accepts (the target bound by default): it answers which packing, if any, keeps every group
within it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import gcd, lcm
from typing import Any

import z3

from kvproof.spec import properties as P
from kvproof.spec.catalog import ConfigError, ModelGeometry
from kvproof.spec.contract import (
    ALIGNMENT,
    DRAFT_DTYPE,
    FULL,
    MAX_PADDING,
    PACKING_LIMIT,
    Layout,
    plan_for,
    recipe_layout,
)
from kvproof.spec.encoding import Violation, violations
from kvproof.spec.plan_reader import symbolic_facts


@dataclass(frozen=True)
class Synthesis:
    tp: int
    dtype: str
    packing: dict[str, int] | None  # None: no legal packing with every K <= PACKING_LIMIT
    parent_bytes: int | None
    padding: dict[str, Fraction]
    violations: tuple[Violation, ...]  # of the winner, from the prover's checks (expected: none)
    drafts: int = 0
    draft_dtype: str = DRAFT_DTYPE

    @property
    def worst_padding(self) -> Fraction | None:
        return max(self.padding.values()) if self.padding else None


@dataclass(frozen=True)
class Problem:
    """A legal plan as z3 constraints, and the terms the synthesizer solves them for."""

    constraints: list[Any]
    packing: dict[str, Any]  # group -> its K_g (the state groups share one)
    parent_bytes: Any
    least_payload_bytes: Any  # at most every K_g x raw_g: the evenest plan maximizes it


def _scaled_multiple(k: Any, unit: int, coefficient: int, x: Any, name: str) -> Any:
    """coefficient x x is a multiple of k x unit, as a disjunction over the concrete packings c:
    coefficient x x == 0 (mod c x unit) exactly when x is a multiple of
    c x unit / gcd(c x unit, coefficient), which keeps every equation small and linear."""
    q = z3.Int(name)
    return z3.And(q >= 0, z3.Or([
        z3.And(k == c, x == (c * unit // gcd(c * unit, coefficient)) * q) for c in range(1, PACKING_LIMIT + 1)
    ]))


def encode(layout: Layout, bound: Fraction | None = MAX_PADDING) -> Problem:
    """Constraints of a legal plan (items b-e with every exact stride met, padding within
    `bound` unless None), the packing variables, the parent and the least K_g x raw_g."""
    # The recipe gives every state group one K_lin (they hold the same per-layer state).
    k_lin = z3.Int("K[linear]")
    k = {g: z3.Int(f"K[{g}]") if g == FULL else k_lin for g in layout.groups}
    parent, least, units_of_parent = z3.Ints("parent least parent/alignment")
    facts = [2 * parent <= P.BYTES_MAX, parent == ALIGNMENT * units_of_parent]
    for g in layout.groups:
        facts += [k[g] >= 1, k[g] <= PACKING_LIMIT, least <= k[g] * layout.raw(g)]
        if bound is not None:
            facts.append(P.padding_within(parent, k[g], layout.raw(g), bound))
    for packing in dict.fromkeys(k.values()):  # K_g divides the parent, a multiple of ALIGNMENT
        facts.append(_scaled_multiple(packing, 1, ALIGNMENT, units_of_parent, f"q[parent/{packing}]"))
    total = 0
    units: dict[tuple[str, int, Any], int] = {}  # (exact group, payload, K_g) -> unit K_g x unit must divide
    for plane in layout.planes:
        here = [f for f in layout.fields if f.plane == plane]
        exact = [f for f in here if f.exact_stride]
        if not exact:
            raise ConfigError(f"plane {plane} has no exact-stride field; synthesis needs one to fix its bytes")
        size = k[exact[0].group] * exact[0].payload_bytes  # stride == payload, so plane bytes == K x payload
        total = total + size
        facts += [P.exact_stride(size, k[f.group] * f.payload_bytes) for f in exact[1:]]
        facts += [size >= k[g] * layout.extent[(plane, g)] for g in layout.groups if (plane, g) in layout.extent]
        for f in here:
            key = (exact[0].group, exact[0].payload_bytes, k[f.group])
            units[key] = lcm(units.get(key, 1), f.itemsize, f.stride_alignment)
    for i, ((group, payload, packing), unit) in enumerate(units.items()):
        facts.append(_scaled_multiple(packing, unit, payload, k[group], f"q[plane/{i}]"))
        facts.append(P.divides(ALIGNMENT // gcd(ALIGNMENT, payload), k[group]))  # ALIGNMENT | K x payload
    facts.append(parent >= total)
    return Problem(facts, k, parent, least)


def synthesize(model: ModelGeometry, tp: int, dtype: str, drafts: int = 0, draft_dtype: str = DRAFT_DTYPE,
               bound: Fraction | None = MAX_PADDING) -> Synthesis:
    layout = recipe_layout(model, tp, dtype, drafts, draft_dtype)
    bound = layout.checked_bound(bound)
    problem = encode(layout, bound)
    parent = problem.parent_bytes
    # Two rounds rather than one lexicographic objective: z3 finishes both in well under a second,
    # where the combined objective sometimes ran for minutes.
    smallest = z3.Optimize()
    smallest.add(*problem.constraints)
    smallest.minimize(parent)
    if smallest.check() != z3.sat:
        return Synthesis(tp, dtype, None, None, {}, (), drafts, draft_dtype)
    evenest = z3.Optimize()
    evenest.add(*problem.constraints, parent == smallest.model()[parent])
    evenest.maximize(problem.least_payload_bytes)
    evenest.check()
    found = evenest.model()
    packing = {g: found[problem.packing[g]].as_long() for g in layout.groups}
    plan = plan_for(layout, packing, bound)
    checked = tuple(violations(symbolic_facts(plan)))
    pad = {g: P.padding(plan["parent_bytes"], packing[g], layout.raw(g)) for g in layout.groups}
    return Synthesis(tp, dtype, packing, plan["parent_bytes"], pad, checked, drafts, draft_dtype)
