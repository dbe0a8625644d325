"""Prove the named properties of a policy's plans at every (tp, dtype) point a model accepts.

Per point the geometry is concrete (tp and dtype fix every field's shape), the policy's packing
is solved from its constraints, the plan is derived from the contract (spec/contract.py), and
each property is decided by the encoding in spec/encoding.py with the parent count N and the
page ids symbolic. A property is proved when no point has a witness against it.

With draft layers a point is (tp, dtype, drafts, draft dtype). The engine checks no padding once
a draft is in, so `search` stops at the first candidate that meets every other property, and
`padding_bound` is proved against the bound the user accepts (the target bound by default).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from kvproof.spec import properties as P
from kvproof.spec.catalog import CACHE_DTYPES, ModelGeometry
from kvproof.spec.contract import DRAFT_DTYPE, MAX_PADDING, Layout, plan_for, recipe_layout
from kvproof.spec.encoding import CHECKS, Violation
from kvproof.spec.facts import Facts
from kvproof.spec.plan_reader import symbolic_facts
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
    drafts: int = 0
    draft_dtype: str = DRAFT_DTYPE

    def as_dict(self) -> dict:
        return {
            "tp": self.tp, "dtype": self.dtype, "drafts": self.drafts, "draft_dtype": self.draft_dtype,
            "property": self.property, "packing": self.packing,
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
    draft_dtype: str = DRAFT_DTYPE

    @property
    def drafts(self) -> int:
        return self.layout.drafts

    @property
    def accepted(self) -> bool:
        return not any(self.violations.values())


@dataclass(frozen=True)
class DerivedPlan:
    """The plan the contract gives one packing, as its document and the facts read from it."""

    document: dict
    facts: Facts


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
    def vacuous(self) -> tuple[str, ...]:
        """Properties no field or group of any plan gives anything to check (P.DECLARED_BY)."""
        return tuple(prop for prop in self.properties if prop in P.DECLARED_BY
                     and not any(item.get(P.DECLARED_BY[prop]) for p in self.points
                                 for item in (*p.plan["fields"], *p.plan["groups"])))

    @property
    def proved(self) -> bool:
        return not self.counterexamples


class _Point:
    """Decides properties of plans at one point, each at most once per packing: `search` asks
    whether candidates boot (stopping at the first violated property), the proof asks for all."""

    def __init__(self, layout: Layout, seconds: dict[str, float], bound: Fraction | None) -> None:
        self.layout, self.seconds, self.bound = layout, seconds, bound
        self.plans: dict[tuple, DerivedPlan] = {}
        self.verdicts: dict[tuple, dict[str, tuple[Violation, ...]]] = {}

    def plan(self, packing: dict[str, int]) -> DerivedPlan:
        key = tuple(sorted(packing.items()))
        if key not in self.plans:
            plan = plan_for(self.layout, packing, self.bound)
            self.plans[key] = DerivedPlan(plan, symbolic_facts(plan))
        return self.plans[key]

    def violations(self, packing: dict[str, int], prop: str) -> tuple[Violation, ...]:
        verdict = self.verdicts.setdefault(tuple(sorted(packing.items())), {})
        if prop not in verdict:
            facts = self.plan(packing).facts
            start = time.perf_counter()
            verdict[prop] = tuple(CHECKS[prop](facts))
            self.seconds[prop] = self.seconds.get(prop, 0.0) + time.perf_counter() - start
        return verdict[prop]

    def accepted(self, packing: dict[str, int]) -> bool:
        """The engine's boot verdict: every property, padding against the engine's own bound."""
        if any(self.violations(packing, prop) for prop in CHECKS if prop != "padding_bound"):
            return False
        engine = self.layout.engine_bound
        if engine == self.bound:
            return not self.violations(packing, "padding_bound")
        parent = self.plan(packing).document["parent_bytes"]
        return engine is None or all(
            P.padding_within(parent, packing[g], self.layout.raw(g), engine) for g in self.layout.groups
        )


def bound_flag(bound: Fraction | None) -> str:
    """The --max-padding value that reproduces `bound` ("" for the target bound, the default)."""
    if bound == MAX_PADDING:
        return ""
    return " --max-padding " + ("inf" if bound is None else f"{float(bound):g}")


def replay_command(model: ModelGeometry, config: str | None, tp: int, dtype: str, policy: str,
                   drafts: int = 0, draft_dtype: str = DRAFT_DTYPE,
                   bound: Fraction | None = MAX_PADDING) -> str:
    source = f"--config {config}" if config else f"--model {model.name}"
    draft = f" --drafts {drafts} --draft-dtype {draft_dtype}" if drafts else ""
    return f"verify plan {source} --tp {tp} --dtype {dtype} --policy {policy}{draft}{bound_flag(bound)}"


def plan_point(model: ModelGeometry, tp: int, dtype: str, policy: Policy,
               seconds: dict[str, float] | None = None, drafts: int = 0, draft_dtype: str = DRAFT_DTYPE,
               bound: Fraction | None = MAX_PADDING) -> PointPlan:
    """`bound`: the padding bound the user accepts (None: none); the engine's own decides
    acceptance and still applies where it has one (Layout.checked_bound)."""
    layout = recipe_layout(model, tp, dtype, drafts, draft_dtype)
    point = _Point(layout, {} if seconds is None else seconds, layout.checked_bound(bound))
    packing = choose(policy, layout, point.accepted)
    verdict = {prop: point.violations(packing, prop) for prop in CHECKS}
    return PointPlan(tp, dtype, layout, point.plan(packing).document, verdict, draft_dtype)


def draft_points(drafts: Iterable[int], draft_dtypes: Iterable[str]) -> list[tuple[int, str]]:
    """(drafts, draft dtype) pairs; with no draft the draft dtype means nothing, so it is one."""
    dtypes = tuple(draft_dtypes)
    return [(d, dt) for d in dict.fromkeys(drafts) for dt in (dtypes if d else dtypes[:1])]


def prove(
    model: ModelGeometry,
    policy: Policy,
    properties: Sequence[str] = tuple(P.PROPERTIES),
    tps: Iterable[int] | None = None,
    dtypes: Iterable[str] = CACHE_DTYPES,
    config: str | None = None,
    drafts: Iterable[int] = (0,),
    draft_dtypes: Iterable[str] = (DRAFT_DTYPE,),
    bound: Fraction | None = MAX_PADDING,
) -> Proof:
    start = time.perf_counter()
    tps = tuple(model.tp_domain if tps is None else tps)
    for tp in tps:
        model.check_tp(tp)
    seconds: dict[str, float] = {}
    proof = Proof(model.name, policy.name, tuple(properties))
    for n, draft_dtype in draft_points(drafts, draft_dtypes):
        for dtype in dtypes:
            for tp in tps:
                point = plan_point(model, tp, dtype, policy, seconds, n, draft_dtype, bound)
                proof.points.append(point)
                planes = {p["id"]: p["bytes"] for p in point.plan["planes"]}
                packing = {g["id"]: g["packing"] for g in point.plan["groups"]}
                replay = replay_command(model, config, tp, dtype, policy.name, n, draft_dtype, bound)
                proof.counterexamples += [
                    Counterexample(tp, dtype, prop, packing, point.plan["parent_bytes"], planes,
                                   tuple(v.message for v in point.violations[prop]), replay, n, draft_dtype)
                    for prop in properties
                    if point.violations[prop]
                ]
    proof.solver_seconds = {prop: seconds.get(prop, 0.0) for prop in properties}
    proof.seconds = time.perf_counter() - start
    return proof
