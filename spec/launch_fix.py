"""The launch-fix search of `verify config`: each violated launch rule, and the cache contract at
the launch's point, with the smallest launch that fixes it (fewest flags changed, then the
smallest change of the resolved sizes, ties to the fewest flags given), found by
spec/launch.py's smallest_fix within a time limit. A fix keeps every rule that held holding;
where the contract must hold too, a fix lands only on a point where it holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from fractions import Fraction

from kvproof.spec.catalog import ConfigError, ModelGeometry
from kvproof.spec.contract import MAX_PADDING
from kvproof.spec.launch import (
    RULE_NAMES,
    Assumptions,
    Enforced,
    Launch,
    OutOfTime,
    Rule,
    assumption_cases,
    elsewhere,
    resolve_launch,
    smallest_fix,
    violated,
)
from kvproof.spec.policy import Policy
from kvproof.spec.prover import plan_point

CONTRACT = "cache_contract"
BASE = ("world_product",)  # a per-rule fix always leaves a well-formed world
# rule -> the seeded fault that drops its row, as a refactor that loses one row of the table would
UNCHECKED = {name: f"launch_{name}_unchecked" for name in (*RULE_NAMES, CONTRACT)} | {
    "dense_tp_is_attention_tp": "launch_dense_tp_unchecked"}

Fix = Launch | str  # the fixed launch, or why there is none


@dataclass(frozen=True)
class Drafts:
    """The draft layers the launch adds to the cache (the draft model's, not a launch flag)."""

    count: int
    dtype: str
    bound: Fraction | None  # the padding bound the user accepts


NO_DRAFTS = Drafts(0, "bf16", MAX_PADDING)


@dataclass(frozen=True)
class Search:
    """What every fix of one run shares: the deadline (time.monotonic()), the time limit, and
    whether the fix counts the flags it changes (its first objective)."""

    deadline: float
    limit: float
    count_flags: bool = True

    def share(self, calls: int) -> Search:
        """The next of `calls` fixes still to find gets an equal share of the time left, so one
        hard rule cannot starve the rest."""
        now = time.monotonic()
        return replace(self, deadline=now + max(0.0, self.deadline - now) / max(1, calls))


class Contract:
    """The prover's verdict at (tp, dtype) under the policy, each point decided once."""

    def __init__(self, model: ModelGeometry, policy: Policy, drafts: Drafts) -> None:
        self.model, self.policy, self.drafts = model, policy, drafts
        self.seen: dict[tuple[int, str], list[str]] = {}

    def violations(self, launch: Launch) -> list[str] | None:
        """The contract's violations at the launch's point; None where there is no point (bad tp or dtype)."""
        return self.at(resolve_launch(launch).tp, launch.dtype)

    def at(self, tp: int, dtype: str | None) -> list[str] | None:
        """The contract's violations at (tp, dtype); None where there is no such point."""
        if tp not in self.model.tp_domain or dtype is None:
            return None
        key = (tp, dtype)
        if key not in self.seen:
            try:
                d = self.drafts
                point = plan_point(self.model, tp, dtype, self.policy, drafts=d.count, draft_dtype=d.dtype,
                                   bound=d.bound)
                self.seen[key] = [f"{p}: {v[0].message}" for p, v in point.violations.items() if v]
            except ConfigError as err:
                self.seen[key] = [f"the planner refuses the point: {err}"]
        return self.seen[key]


def fix_for(launch: Launch, model: ModelGeometry, cases: tuple[Assumptions, ...], must: tuple[Rule, ...],
            contract: Contract | None, search: Search, avoid: tuple[tuple[int, str], ...] = ()) -> Fix:
    """smallest_fix, or why there is none. Where the cache contract must hold, a launch whose
    point fails it is no fix (each point planned once, only where the search weighs a launch
    there), and neither is one at a point of `avoid`."""

    def fails(tp: int, dtype: str | None) -> bool:
        return (tp, dtype) in avoid or (contract is not None and bool(contract.at(tp, dtype)))

    try:
        fix = smallest_fix(launch, model, cases, must, fails, search.deadline, count_flags=search.count_flags)
    except OutOfTime:
        return f"no fix found within {search.limit:g} s (--time-limit)"
    return "no launch within the search bounds fixes it" if fix is None else fix.launch


@dataclass(frozen=True)
class Violation:
    """One violated rule (or the cache contract) at a launch, with its fix."""

    rule: str
    reason: str
    why: str
    source: str
    engine_enforces: Enforced
    only_if: str | None  # the assumption under which alone it is violated
    fix: Fix


def check(launch: Launch, model: ModelGeometry, tiled: bool | None, policy: Policy, rules: tuple[Rule, ...],
          search: Search, drafts: Drafts = NO_DRAFTS, check_contract: bool = True
          ) -> tuple[list[Violation], Fix | None]:
    """Every violated rule and the contract at the launch's point, each with its fix, and the fix
    for all at once where more than one is violated."""
    cases = assumption_cases(tiled)
    broken = {c: set(violated(launch, model, c, rules)) for c in cases}
    held = tuple(r for r in rules if not any(r in b for b in broken.values()))
    base = tuple(r for r in rules if r.name in BASE)
    contract = Contract(model, policy, drafts)
    contract_now = contract.violations(launch) if check_contract else None
    keep_contract = None if contract_now else contract  # a launch with no point yet must not fix onto a bad one
    resolved = resolve_launch(launch)
    found = []
    broken_rules = [r for r in rules if r not in held]
    calls = len(broken_rules) + bool(contract_now)
    calls += calls > 1  # the fix for all at once
    for rule in broken_rules:
        only = [c for c in cases if rule in broken[c]]
        only_if = None if len(only) == len(cases) else "merge_state_head_tiled=" + (
            "yes" if only[0].merge_state_head_tiled else "no")
        must = tuple(r for r in rules if r in held or r in base or r is rule)
        fix = fix_for(launch, model, cases, must, keep_contract, search.share(calls))
        calls -= 1
        found.append(Violation(rule.name, rule.detail(resolved, model), rule.why, rule.source, rule.engine_enforces,
                               only_if, fix))
    if contract_now:
        assert launch.dtype is not None  # the contract found violations, so there is a point
        point = (resolved.tp, launch.dtype)
        must = tuple(r for r in rules if r in held or r in base)
        fix = fix_for(launch, model, cases, must, contract, search.share(calls), (point,))
        if isinstance(fix, str) and any(v.startswith("padding_bound") for v in contract_now):
            fix += "; or accept more padding with --max-padding X|inf"
        calls -= 1
        found.append(Violation(
            CONTRACT, f"at tp {point[0]} {point[1]} with {drafts.count} draft layer(s) under policy {policy.name}: "
            + "; ".join(contract_now),
            "the cache plan at the launch's (tp, dtype) point must satisfy every named property",
            "kvproof.spec.prover (verify prove)", elsewhere("boot check of the planner"), None, fix))
    whole = fix_for(launch, model, cases, rules, contract, search.share(calls)) if len(found) > 1 else None
    return found, whole
