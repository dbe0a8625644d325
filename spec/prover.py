"""Prove the named properties of a policy's plans at every (tp, dtype) point a model accepts.

Per point the geometry is concrete (tp and dtype fix every field's shape), the policy's packing
is solved from its constraints, the plan is derived from the contract (spec/contract.py), and
each property is decided by the encoding in spec/encoding.py with the parent count N and the
page ids symbolic. A property is proved when no point has a witness against it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kvproof.spec import properties as P
from kvproof.spec.catalog import CACHE_DTYPES, ModelGeometry
from kvproof.spec.contract import Layout, plan_for, recipe_layout
from kvproof.spec.encoding import CHECKS, Facts, Violation, symbolic_facts
from kvproof.spec.policy import Policy, choose


@dataclass(frozen=True)
class Counterexample:
    tp: int
    dtype: str
    property: str
    packing: dict[str, int]
    parent_bytes: int
    plane_bytes: dict[str, int]
    messages: tuple[str, ...]  # every violation of the property at this point
    replay: str

    def as_dict(self) -> dict:
        return {
            "tp": self.tp, "dtype": self.dtype, "property": self.property, "packing": self.packing,
            "parent_bytes": self.parent_bytes, "plane_bytes": self.plane_bytes,
            "message": self.messages[0], "violations": len(self.messages), "replay": self.replay,
        }


@dataclass(frozen=True)
class PointPlan:
    """What the prover derived at one point, with every property's verdict."""

    tp: int
    dtype: str
    layout: Layout
    plan: dict
    violations: dict[str, tuple[Violation, ...]]

    @property
    def accepted(self) -> bool:
        return not any(self.violations.values())


@dataclass
class Proof:
    model: str
    policy: str
    properties: tuple[str, ...]
    points: list[PointPlan] = field(default_factory=list)
    counterexamples: list[Counterexample] = field(default_factory=list)
    solver_seconds: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def proved(self) -> bool:
        return not self.counterexamples


class _Point:
    """Decides properties of plans at one point, each at most once per packing: `search` asks
    whether candidates boot (stopping at the first violated property), the proof asks for all."""

    def __init__(self, layout: Layout, seconds: dict[str, float]) -> None:
        self.layout, self.seconds = layout, seconds
        self.plans: dict[tuple, tuple[dict, Facts]] = {}
        self.verdicts: dict[tuple, dict[str, tuple[Violation, ...]]] = {}

    def plan(self, packing: dict[str, int]) -> tuple[dict, Facts]:
        key = tuple(sorted(packing.items()))
        if key not in self.plans:
            plan = plan_for(self.layout, packing)
            self.plans[key] = (plan, symbolic_facts(plan))
        return self.plans[key]

    def violations(self, packing: dict[str, int], prop: str) -> tuple[Violation, ...]:
        verdict = self.verdicts.setdefault(tuple(sorted(packing.items())), {})
        if prop not in verdict:
            facts = self.plan(packing)[1]
            start = time.perf_counter()
            verdict[prop] = tuple(CHECKS[prop](facts))
            self.seconds[prop] = self.seconds.get(prop, 0.0) + time.perf_counter() - start
        return verdict[prop]

    def accepted(self, packing: dict[str, int]) -> bool:
        return not any(self.violations(packing, prop) for prop in CHECKS)


def replay_command(model: ModelGeometry, config: str | None, tp: int, dtype: str, policy: str) -> str:
    source = f"--config {config}" if config else f"--model {model.name}"
    return f"verify plan {source} --tp {tp} --dtype {dtype} --policy {policy}"


def plan_point(model: ModelGeometry, tp: int, dtype: str, policy: Policy,
               seconds: dict[str, float] | None = None) -> PointPlan:
    layout = recipe_layout(model, tp, dtype)
    point = _Point(layout, {} if seconds is None else seconds)
    packing = choose(policy, layout, point.accepted)
    verdict = {prop: point.violations(packing, prop) for prop in CHECKS}
    return PointPlan(tp, dtype, layout, point.plan(packing)[0], verdict)


def prove(
    model: ModelGeometry,
    policy: Policy,
    properties: Sequence[str] = tuple(P.PROPERTIES),
    tps: Iterable[int] | None = None,
    dtypes: Iterable[str] = CACHE_DTYPES,
    config: str | None = None,
) -> Proof:
    start = time.perf_counter()
    tps = tuple(model.tp_domain if tps is None else tps)
    for tp in tps:
        model.check_tp(tp)
    seconds: dict[str, float] = {}
    proof = Proof(model.name, policy.name, tuple(properties))
    for dtype in dtypes:
        for tp in tps:
            point = plan_point(model, tp, dtype, policy, seconds)
            proof.points.append(point)
            planes = {p["id"]: p["bytes"] for p in point.plan["planes"]}
            packing = {g["id"]: g["packing"] for g in point.plan["groups"]}
            proof.counterexamples += [
                Counterexample(tp, dtype, prop, packing, point.plan["parent_bytes"], planes,
                               tuple(v.message for v in point.violations[prop]),
                               replay_command(model, config, tp, dtype, policy.name))
                for prop in properties
                if point.violations[prop]
            ]
    proof.solver_seconds = {prop: seconds.get(prop, 0.0) for prop in properties}
    proof.seconds = time.perf_counter() - start
    return proof
