"""What an engine check says about one point, for every engine.

A point is one configuration a recipe claims to support. Its verdict is one of
- `ok`: the engine planned it and every plan property holds for every parent count N;
- `counterexample`: the engine refused it (`boots`, with the engine's own message) or planned
  a layout that violates a plan property (each violation named);
- `refused`: the recipe itself declares the point unsupported (NotImplementedError): not a bug.
A recipe kvproof cannot plan (no published config, an unmodelled family) is NOT VERIFIED,
which counts against the exit code like a counterexample: silence is not a proof.

Who raised decides what an exception means (`blame`, `judge`): the engine's own code refusing a
point it claims to support (a ValueError or an assertion) is the engine's verdict (`boots`, or
`refused` for an exception the adapter declares as "unsupported"); kvproof's adapter code failing
(an import or attribute it relies on missing at this revision, a call shape changed, a stand-in
used: StubUsed), or the engine's code raising what is no refusal (a TypeError), is an
`AdapterGap`, which makes that recipe NOT VERIFIED (adapter) while every other recipe is still
planned and checked (`adapter_result`). An adapter gap is never baselined.
"""

from __future__ import annotations

import hashlib
import pickle
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from kvproof.engines.stubs import StubUsed
from kvproof.spec import properties as P
from kvproof.spec.encoding import violations
from kvproof.spec.facts import Facts
from kvproof.spec.plan_reader import affine_facts

BOOTS = "boots"  # an engine verdict, not a plan property: the engine refuses a supported point
NOT_VERIFIED = "not_verified"  # baseline property: kvproof has no config and domain for a recipe
NOT_VERIFIED_ADAPTER = "not_verified_adapter"  # baseline property: kvproof's adapter failed; never baselined
ADAPTERS = Path(__file__).resolve().parent  # kvproof.engines, resolved: every adapter's code is in here
STUBS = ADAPTERS / "stubs.py"  # the stand-ins every adapter shares


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
class Coverage:
    """What a recipe's points stand for when they are not a published checkpoint's: the members
    of a stated family (kvproof.engines.families), or a user's own config.json."""

    family: dict[str, Any] | None = None  # Family.as_dict(); None for a user's config
    members: int | None = None  # the whole family's size
    enumerated: int | None = None  # members planned by this run
    citations: tuple[dict[str, Any], ...] = ()  # the published values the family fixes
    config: str | None = None  # the user's config.json, planned as a checkpoint


@dataclass(frozen=True)
class RecipeResult:
    recipe: str
    points: tuple[PointResult, ...]
    not_verified: str | None = None  # why kvproof could not plan this recipe
    limits: str = ""  # what of its supported domain kvproof does not model yet
    adapter: bool = False  # not_verified is kvproof's adapter failing at this engine revision (an AdapterGap)
    coverage: Coverage | None = None  # None: the published checkpoints the adapter ships

    @property
    def over_family(self) -> bool:
        return self.coverage is not None and self.coverage.family is not None

    @property
    def baseline_property(self) -> str | None:
        """The recipe's own baseline property: None when verified."""
        if self.not_verified is None:
            return None
        return NOT_VERIFIED_ADAPTER if self.adapter else NOT_VERIFIED

    @property
    def reason(self) -> str | None:
        """Why it is NOT VERIFIED, an adapter gap prefixed `adapter: ` (the JSON `reason`)."""
        if self.not_verified is None:
            return None
        return f"adapter: {self.not_verified}" if self.adapter else self.not_verified

    def as_dict(self) -> dict[str, Any]:
        c = self.coverage or Coverage()
        return {"recipe": self.recipe, "verified": self.not_verified is None, "reason": self.reason,
                "limits": self.limits, "coverage": "family" if self.over_family else "checkpoint",
                "family": c.family, "members": c.members, "enumerated": c.enumerated,
                "citations": list(c.citations), "config": c.config, "points": [p.as_dict() for p in self.points]}


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


class AdapterGap(Exception):
    """kvproof's adapter cannot drive a recipe at this engine revision: `call` is what it called
    (a file:line and its source, or the engine entry it looked for) and `why` what went wrong. Not a
    verdict on the engine: the recipe is NOT VERIFIED (adapter)."""

    def __init__(self, call: str, why: str) -> None:
        super().__init__(f"{call}: {why}")
        self.call, self.why = call, why

    def __reduce__(self) -> tuple[type[AdapterGap], tuple[str, str]]:
        return AdapterGap, (self.call, self.why)  # a worker process hands its gaps back pickled


@dataclass(frozen=True)
class Blame:
    """Whose code an exception came from: the engine's (`engine` True) or kvproof's adapter's, and
    the frame that decided it (None when no frame of either was on the traceback)."""

    engine: bool
    frame: traceback.FrameSummary | None
    root: Path | None  # the folder that frame's file is in (the engine's or kvproof's), for naming it


def _under(filename: str, roots: Sequence[Path]) -> Path | None:
    if filename.startswith("<"):
        return None
    path = Path(filename).resolve()
    return next((root for root in roots if path.is_relative_to(root)), None)


def blame(err: BaseException, engine: Sequence[Path | str], adapter: Sequence[Path | str] = (ADAPTERS,),
          stand_ins: Sequence[Path | str] = (STUBS,)) -> Blame:
    """Whose code raised `err`: the innermost traceback frame that is in the engine's code (`engine`:
    its package folders) or in kvproof's (`adapter`) decides, whatever the exception's type: a
    ValueError raised by kvproof's adapter is the adapter's, an AttributeError raised by the
    engine's recipe the engine's. Frames of neither (torch, the standard library) are passed over,
    so the engine calling into torch is still the engine.

    `stand_ins` are kvproof's files that hand the engine what it lacks (Unavailable, strict
    configs, replaced modules): an exception raised in one is the adapter's even when the engine
    called it, and the frame named is its caller's (the engine's line that used the stand-in). A
    StubUsed or an AdapterGap is always the adapter's. With no frame of either, the adapter's:
    kvproof cannot say the engine raised."""
    engines = [Path(p).resolve() for p in engine]
    adapters = [Path(p).resolve() for p in adapter]
    standing = [Path(p).resolve() for p in stand_ins]
    used_stand_in = isinstance(err, StubUsed | AdapterGap)
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if _under(frame.filename, standing) is not None:
            used_stand_in = True
            continue
        if (root := _under(frame.filename, engines)) is not None:
            return Blame(not used_stand_in, frame, root)
        if (root := _under(frame.filename, adapters)) is not None:
            return Blame(False, frame, root)
    return Blame(False, None, None)


def one_line(err: BaseException, limit: int = 300) -> str:
    return " ".join(str(err).split())[:limit] or type(err).__name__


def where(b: Blame) -> str:
    """`file:line `source`` of the deciding frame, the file relative to its root's parent
    (tokenspeed/runtime/..., engines/tokenspeed/...)."""
    if b.frame is None:
        return "kvproof's adapter"
    path = Path(b.frame.filename).resolve()
    shown = path.relative_to(b.root.parent) if b.root is not None else path
    line = " ".join((b.frame.line or "").split())
    return f"{shown}:{b.frame.lineno}" + (f" `{line}`" if line else "")


def gap(err: BaseException, b: Blame) -> AdapterGap:
    """The adapter gap an exception of kvproof's adapter is: the call it failed at, and why."""
    if isinstance(err, AdapterGap):
        return err
    return AdapterGap(where(b), f"{type(err).__name__}: {one_line(err)}")


REFUSALS: tuple[type[BaseException], ...] = (ValueError, AssertionError)  # an engine refusing a point


def undeclared(err: BaseException, b: Blame) -> AdapterGap:
    """An exception the engine's code raised that is no refusal (a TypeError, a KeyError): kvproof
    cannot tell an engine bug from an input its adapter handed the engine wrongly, so it gives no
    verdict; the recipe is NOT VERIFIED (adapter), which no baseline can hide."""
    return AdapterGap(where(b), f"the engine's code raised {type(err).__name__}: {one_line(err)}, which is no "
                      "refusal kvproof can judge")


def judge(recipe: str, point: dict[str, Any], err: BaseException, replay: str, engine: Sequence[Path | str],
          declared: tuple[type[BaseException], ...] = (NotImplementedError,),
          refusals: tuple[type[BaseException], ...] = REFUSALS, packing: dict[str, int] | None = None,
          adapter: Sequence[Path | str] = (ADAPTERS,), stand_ins: Sequence[Path | str] = (STUBS,)
          ) -> PointResult | AdapterGap:
    """An exception raised while planning a point, judged by whose code raised it (`blame`) and
    then by its type: the engine's code raising a `declared` type -> `refused` (the recipe
    declares the point unsupported), a `refusals` type -> a `boots` counterexample with the
    engine's own message (its type named unless it is a ValueError), any other type -> an
    AdapterGap (`undeclared`); kvproof's adapter code raising anything -> an AdapterGap. A gap makes
    the recipe NOT VERIFIED (adapter) (`adapter_result`). The shared entry for every adapter;
    tokenspeed's adds its own rules (a default seam, a declined GPU) in
    engines/tokenspeed/pipeline.py. `adapter` and `stand_ins` as for blame."""
    b = blame(err, engine, adapter, stand_ins)
    if not b.engine:
        return gap(err, b)
    if not isinstance(err, declared + refusals):
        return undeclared(err, b)
    message = one_line(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {one_line(err)}"
    return from_refusal(recipe, point, message, isinstance(err, declared), replay, packing)


def adapter_result(recipe: str, outcomes: Iterable[PointResult | tuple[dict[str, Any] | None, AdapterGap]],
                   limits: str = "") -> RecipeResult:
    """A recipe's result from its points' outcomes: each a PointResult, or (point, gap) where the
    adapter could not drive the recipe (point None: before any point, e.g. loading it). Any gap
    makes the recipe NOT VERIFIED (adapter), naming the first gap and how many points it hit; the
    points that did plan keep their verdicts."""
    points: list[PointResult] = []
    gaps: list[tuple[dict[str, Any] | None, AdapterGap]] = []
    for outcome in outcomes:
        if isinstance(outcome, PointResult):
            points.append(outcome)
        else:
            gaps.append(outcome)
    if not gaps:
        return RecipeResult(recipe, tuple(points), None, limits)
    at, first = gaps[0]
    reason = str(first)
    if at is not None:
        axes = " ".join(f"{k}={v}" for k, v in at.items())
        reason += f" (at {axes}; {len(gaps)} of {len(gaps) + len(points)} points)"
    return RecipeResult(recipe, tuple(points), reason, limits, adapter=True)


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


Checked = dict[bytes, PointResult]  # a run's verdicts by the pickle of their documents and bound (planned_once)


def planned_once(checked: Checked | None, recipe: str, point: dict[str, Any], documents: dict[int, dict],
                 replay: str, padding_bound: Fraction | None = None) -> PointResult:
    """planned(), once per distinct plan: a verdict is the documents' and the bound's alone, so a point
    whose plan pickles as one checked before takes that verdict, with its own recipe, point and replay;
    every time where `checked` is None (under a seeded bug). Unpickling gives back an equal value of the
    same types, so equal bytes are equal plans; equal plans that pickle apart (keys in another order,
    lists shared otherwise) are only checked again. Pickle writes once what many fields of a plan share
    (kernel and reader lists), where JSON writes it per field: far fewer bytes and far less time."""
    if checked is None:
        return planned(recipe, point, documents, replay, padding_bound)
    key = hashlib.sha256(pickle.dumps([documents, str(padding_bound)], protocol=pickle.HIGHEST_PROTOCOL)).digest()
    if key not in checked:
        checked[key] = planned(recipe, point, documents, replay, padding_bound)
        return checked[key]
    return replace(checked[key], recipe=recipe, point=point, replay=replay, packing=dict(checked[key].packing))


def worst_padding(facts: Facts) -> Fraction:
    return max(P.padding(facts.parent_bytes, g.packing, facts.raw(g.id)) for g in facts.groups)
