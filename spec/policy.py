"""The K_mla policies of §4 as constraints, so a policy is data the prover can be handed.

A policy states what K_mla must satisfy given one KDA layer's state bytes and one MLA page's
bytes; z3 solves for it and checks the answer is unique (a policy that admits two packings, or
none, is a bug in the policy). `search` instead takes the smallest admitted K_mla whose plan
boots. K_lin is the recipe's, for every policy: max(1, K_mla x page // state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from kvproof.spec.catalog import ConfigError
from kvproof.spec.contract import FULL, PACKING_LIMIT, Layout

K_MLA, K_LIN = z3.Ints("K_mla K_lin")
# One long-lived solver with push/pop: a fresh z3 solver costs more than the queries themselves.
_SOLVER = z3.SimpleSolver()


@dataclass(frozen=True)
class Policy:
    name: str
    admits: Callable[[Any, int, int], Any]  # (K_mla, state, page) -> z3 constraint
    smallest_accepted: bool = False  # search: the smallest admitted K_mla whose plan is accepted


POLICIES: dict[str, Policy] = {
    "search": Policy("search", lambda k, state, page: z3.And(state <= k * page, k <= PACKING_LIMIT), True),
    "ceil": Policy("ceil", lambda k, state, page: z3.And((k - 1) * page < state, state <= k * page)),
    "pinned12": Policy("pinned12", lambda k, state, page: k == 12),
}


def policy_named(name: str) -> Policy:
    if name not in POLICIES:
        raise ConfigError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    return POLICIES[name]


def _k_lin(state: int, page: int) -> Any:
    """K_lin = max(1, K_mla x page // state), as linear constraints (state and page are numbers)."""
    fill = K_MLA * page
    return z3.Or(z3.And(fill < state, K_LIN == 1),
                 z3.And(K_LIN * state <= fill, fill < (K_LIN + 1) * state))


def _witness(solver: z3.Solver, *extra: Any) -> int | None:
    return solver.model()[K_MLA].as_long() if solver.check(*extra) == z3.sat else None


def _smallest(solver: z3.Solver, above: int) -> int | None:
    """The least admitted K_mla > above: any witness, then bisection below it."""
    high = _witness(solver, above < K_MLA)
    low = above + 1
    while high is not None and low < high:
        mid = (low + high) // 2
        found = _witness(solver, low <= K_MLA, mid >= K_MLA)
        low, high = (low, found) if found is not None else (mid + 1, high)
    return high


def choose(policy: Policy, layout: Layout, accepted: Callable[[dict[str, int]], bool]) -> dict[str, int]:
    """The packing `policy` picks for `layout`; `accepted(packing)` is the boot verdict of a plan."""
    if layout.state == 0:
        # MLA only: one group with nothing to share a plane with, so one page per plane.
        return {FULL: 1}
    solver = _SOLVER
    solver.push()
    try:
        solver.add(K_MLA >= 1, K_LIN >= 1, policy.admits(K_MLA, layout.state, layout.page),
                   _k_lin(layout.state, layout.page))
        if policy.smallest_accepted:
            return _first_accepted(solver, layout, accepted)
        k_mla = _witness(solver)
        if k_mla is None:
            raise ConfigError(f"policy {policy.name} admits no packing "
                              f"(state {layout.state:,} B, page {layout.page:,} B)")
        other = _witness(solver, k_mla != K_MLA)
        if other is not None:
            raise ConfigError(f"policy {policy.name} admits both K_mla={k_mla} and K_mla={other}: "
                              "it must define one packing")
        return _packing(solver, layout, k_mla)
    finally:
        solver.pop()


def _packing(solver: z3.Solver, layout: Layout, k_mla: int) -> dict[str, int]:
    solver.check(k_mla == K_MLA)
    k_lin = solver.model()[K_LIN].as_long()
    return {g: k_mla if g == FULL else k_lin for g in layout.groups}


def _first_accepted(solver: z3.Solver, layout: Layout,
                    accepted: Callable[[dict[str, int]], bool]) -> dict[str, int]:
    k_mla = _smallest(solver, 0)
    first = None
    while k_mla is not None:
        packing = _packing(solver, layout, k_mla)
        first = first or packing
        if accepted(packing):
            return packing
        k_mla = _smallest(solver, k_mla)
    if first is None:
        raise ConfigError(f"policy search admits no packing (state {layout.state:,} B, page {layout.page:,} B)")
    return first
