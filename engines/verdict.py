"""What an engine check says about one point, for every engine.

A point is one configuration a recipe claims to support. Its verdict is one of
- `ok`: the engine planned it and every plan property holds for every parent count N;
- `counterexample`: the engine refused it (`boots`, with the engine's own message) or planned
  a layout that violates a plan property (each violation named);
- `refused`: the recipe itself declares the point unsupported (NotImplementedError): not a bug.
A recipe kvproof cannot plan (no published config, an unmodelled family) is NOT VERIFIED,
which counts against the exit code like a counterexample: silence is not a proof.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from kvproof.spec import properties as P
from kvproof.spec.encoding import violations
from kvproof.spec.facts import Facts
from kvproof.spec.plan_reader import affine_facts

BOOTS = "boots"  # an engine verdict, not a plan property: the engine refuses a supported point


@dataclass(frozen=True)
class Finding:
    property: str
    message: str


@dataclass(frozen=True)
class PointResult:
    recipe: str
    point: dict[str, Any]  # the domain axes: tp, dtype, ... (JSON-ready)
    verdict: str  # ok | counterexample | refused
    findings: tuple[Finding, ...] = ()
    packing: dict[str, int] = field(default_factory=dict)
    parent_bytes: int | None = None
    worst_padding: float | None = None
    parents: tuple[int, int] | None = None  # the range of N checked
    replay: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.point, "verdict": self.verdict,
            "property": self.findings[0].property if self.findings else None,
            "message": self.findings[0].message if self.findings else None,
            "findings": [{"property": f.property, "message": f.message} for f in self.findings],
            "packing": self.packing, "parent_bytes": self.parent_bytes, "worst_padding": self.worst_padding,
            "parents": list(self.parents) if self.parents else None, "replay": self.replay,
        }


@dataclass(frozen=True)
class RecipeResult:
    recipe: str
    points: tuple[PointResult, ...]
    not_verified: str | None = None  # why kvproof could not plan this recipe
    limits: str = ""  # what of its supported domain kvproof does not model yet

    def as_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "verified": self.not_verified is None, "reason": self.not_verified,
                "limits": self.limits, "points": [p.as_dict() for p in self.points]}


class EngineError(Exception):
    """The engine under test cannot be loaded or planned with as asked (no package, an unknown
    recipe, a replaced module used while planning). One line; `verify engine` exits 2."""


@dataclass(frozen=True)
class EngineRun:
    """One `verify engine` run: what was loaded, and every recipe's points."""

    engine: str
    version: str
    source: str  # where the engine's code came from, in words
    commit: str | None
    recipes: tuple[RecipeResult, ...]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "source": self.source, "commit": self.commit,
                "recipes": [r.as_dict() for r in self.recipes], "seconds": round(self.seconds, 2)}


def from_refusal(recipe: str, point: dict[str, Any], message: str, unsupported: bool, replay: str,
                 packing: dict[str, int] | None = None) -> PointResult:
    """A point the engine raised at: refused when declared unsupported, else a `boots`
    counterexample with the engine's own message."""
    if unsupported:
        return PointResult(recipe, point, "refused", (Finding("unsupported", message),), packing or {}, replay=replay)
    return PointResult(recipe, point, "counterexample", (Finding(BOOTS, message),), packing or {}, replay=replay)


def planned(recipe: str, point: dict[str, Any], documents: dict[int, dict], replay: str,
            padding_bound: Fraction | None = None) -> PointResult:
    """Check an engine's bound plans for every N the plan allows (affine_facts shows the
    bindings lie on one line in N, then the prover's encoding checks all N at once).
    `padding_bound` is the bound to hold a plan to when its engine sets none."""
    facts = affine_facts(documents)
    if facts.max_padding is None and padding_bound is not None:
        facts = replace(facts, max_padding=padding_bound)
    found = tuple(Finding(v.property, v.message) for v in violations(facts, tuple(P.PROPERTIES)))
    return PointResult(recipe, point, "counterexample" if found else "ok", found,
                       {g.id: g.packing for g in facts.groups}, facts.parent_bytes,
                       float(worst_padding(facts)), facts.parents, replay)


def worst_padding(facts: Facts) -> Fraction:
    return max(P.padding(facts.parent_bytes, g.packing, facts.raw(g.id)) for g in facts.groups)
