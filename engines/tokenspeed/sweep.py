"""Families through the real engine: tokenspeed's kimi_k3 recipe over a family of geometries.

A recipe is reused for the next checkpoint of its family, so the question is which geometries it
refuses or lays out wrongly. Each member (num_layers, mla_every, kda_heads, head_dim,
kv_lora_rank, tp, dtype; spec.sweep_family) becomes a config.json: the published Kimi-K3 config
with the member's geometry written over it, so every key the recipe reads that the family does
not vary (mla_use_nope, the conv kernel, rope dim) stays the published fact. The engine's recipe
plans it and kvproof checks the plan for every N, as `verify engine` does.

There is no formula to prove here, only the engine's code to run: a family small enough is
enumerated (every member), a larger one is searched by hypothesis, which shrinks what it finds to
a minimal failing member. A search that finds nothing says "no counterexample in N geometries
(searched)", never PROVED.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from kvproof.cli import progress
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import engine, kimi_k3, loader, mutants
from kvproof.engines.verdict import AdapterGap, EngineError, PointResult, from_refusal, planned
from kvproof.spec.sweep import describe_set
from kvproof.spec.sweep_family import Family, Member, divisors

ENUMERATE_UP_TO = 4096  # members; larger families are searched
PATTERN_UP_TO = 256  # values of one parameter enumerated to describe the failing set


@dataclass(frozen=True)
class Cause:
    """One way members fail: a property and the engine's message with its numbers taken out."""

    property: str
    message: str  # the minimal member's own message
    count: int  # failing members with this cause (enumerated); 1 when searched: the minimised member
    member: Member  # enumerated: the smallest by Member.key; searched: minimised parameter by parameter
    patterns: dict[str, str]  # parameter -> its failing set for this cause, the others fixed

    def as_dict(self) -> dict[str, Any]:
        return {"property": self.property, "message": self.message, "count": self.count,
                "member": self.member.as_dict(), "patterns": self.patterns}


@dataclass(frozen=True)
class EngineSweep:
    engine: str  # the tokenspeed under test (version, origin, folder, commit)
    members: int  # the family's size
    tried: int  # distinct members the recipe ran at
    refused: int  # of those, the ones the recipe declared unsupported
    enumerated: bool
    causes: tuple[Cause, ...]  # smallest member first
    seconds: float

    @property
    def failed(self) -> bool:
        """A counterexample, or nothing verified: every member run was refused as unsupported."""
        return bool(self.causes) or self.refused == self.tried

    def verdict(self) -> str:
        if self.causes:
            return "COUNTEREXAMPLE"
        if self.refused == self.tried:
            return f"NOT VERIFIED: the recipe refused all {self.tried:,} members run as unsupported"
        how = "enumerated" if self.enumerated else "searched"
        refused = f"; {self.refused:,} of them refused as unsupported" if self.refused else ""
        return f"no counterexample in {self.tried:,} members ({how}){refused}"


def cause_of(result: PointResult) -> tuple[str, str] | None:
    """(property, message stem) of a failing result; None when it passes."""
    if result.verdict != "counterexample":
        return None
    finding = result.findings[0]
    return finding.property, re.sub(r"\d[\d,.]*", "#", finding.message)


def member_config(published: dict, family: Family, m: Member) -> dict:
    """The published config with the member's geometry over it."""
    out = copy.deepcopy(published)
    text = out.get("text_config", out)
    varied = family.config(m)["text_config"]
    linear = varied.pop("linear_attn_config")
    text.update(varied)
    text["linear_attn_config"].update(linear)
    return out


class Runner:
    """The engine's recipe at members of one family (the modules are loaded once)."""

    def __init__(self, source: loader.Source, family: Family) -> None:
        profile = engine.PROFILES["kimi_k3"]
        self.family = family
        self.source = source
        self.modules = loader.load(source, profile.modules)
        self.published = engine.configs(profile)

    def run(self, m: Member) -> PointResult:
        configs = {**self.published, kimi_k3.MODELS[0]: member_config(self.published[kimi_k3.MODELS[0]],
                                                                       self.family, m)}
        point = {"tp": m.tp, "dtype": _flag(m.dtype), "drafts": 0}
        loader.ASSUMED.point({})  # K3's path asks no GPU or environment question
        try:
            outcome = engine.pipeline.run(lambda: kimi_k3.build(self.modules, configs, point),
                                          self.modules["plan"], self.source.package_dir)
        except AdapterGap as gap:  # kvproof's adapter cannot drive the recipe: no verdict for the family
            raise EngineError(f"kimi_k3 at {m.text()}: NOT VERIFIED (adapter): {gap}") from None
        replay = m.text()
        if isinstance(outcome, engine.pipeline.Refused):
            return from_refusal("kimi_k3", m.as_dict(), outcome.message, outcome.unsupported, replay, outcome.packing)
        return planned("kimi_k3", m.as_dict(), outcome.documents, replay)


def _flag(dtype: str) -> str:
    return {"bf16": "bfloat16", "fp8": "fp8"}[dtype]


def members(family: Family) -> Iterator[Member]:
    """Every member, in one fixed order (chunk i of k is every k-th from the i-th)."""
    r = family.ranges
    return (Member(layers, heads, hd, rank, every, tp, dtype)
            for layers in r["num_layers"].all() for every in r["mla_every"].all()
            for heads in r["kda_heads"].all() for hd in r["head_dim"].all() for rank in r["kv_lora_rank"].all()
            for tp in divisors(heads) for dtype in family.dtypes)


Failing = dict[tuple[str, str], list[Member]]  # cause -> the members failing with it


def failing(runner: Runner, chosen: Iterable[Member]) -> tuple[Failing, int, int]:
    """Run the recipe at each chosen member: (failing members by cause, members run, refused)."""
    found: Failing = {}
    tried = refused = 0
    for m in chosen:
        tried += 1
        result = runner.run(m)
        refused += result.verdict == "refused"
        if (cause := cause_of(result)) is not None:
            found.setdefault(cause, []).append(m)
    return found, tried, refused


def chunk(family: Family, index: int, count: int) -> Iterator[Member]:
    """The index-th of count disjoint slices that together are every member."""
    return islice(members(family), index, None, count)


def verify(engine_path: str | None, family: Family, examples: int) -> EngineSweep:
    """`verify sweep --engine tokenspeed`: the installed release, or the package at --engine-path."""
    try:
        source = loader.source_of(engine_path)
        return sweep(mutants.mutated(source), family, examples)
    except loader.SourceError as err:
        raise EngineError(str(err)) from None
    except (StubUsed, AdapterGap) as err:
        raise EngineError(f"NOT VERIFIED (adapter): {err}; the adapter must model this before the family can be "
                          "checked") from None


def sweep(source: loader.Source, family: Family, examples: int = 200) -> EngineSweep:
    start = time.perf_counter()
    runner = Runner(source, family)
    if family.size() <= ENUMERATE_UP_TO:
        with progress.task(family.size(), "sweep tokenspeed kimi_k3", "members") as shown:
            return summary(source, runner, *failing(runner, shown.each(members(family))), True, start)
    found: Failing = {}
    seen: dict[Member, str] = {}  # member -> its verdict

    def bad(m: Member) -> bool:
        result = runner.run(m)
        seen[m] = result.verdict
        return cause_of(result) is not None

    first = _search(family, bad, examples)
    if first is not None:
        cause = cause_of(runner.run(first))
        assert cause is not None
        found[cause] = [_minimise(family, first, lambda m: cause_of(runner.run(m)) == cause)]
    refused = sum(v == "refused" for v in seen.values())
    return summary(source, runner, found, len(seen), refused, False, start)


def summary(source: loader.Source, runner: Runner, found: Failing, tried: int, refused: int, enumerated: bool,
            start: float) -> EngineSweep:
    """Each cause's smallest member, its message and the failing set's pattern around it."""
    family = runner.family
    causes = []
    for (prop, stem), failed in found.items():
        smallest = min(failed, key=Member.key)
        same = lambda m, c=(prop, stem): cause_of(runner.run(m)) == c  # noqa: E731
        causes.append(Cause(prop, runner.run(smallest).findings[0].message, len(failed), smallest,
                            _patterns(family, smallest, same)))
    causes.sort(key=lambda c: c.member.key())
    return EngineSweep(source.describe(), family.size(), tried, refused, enumerated, tuple(causes),
                       time.perf_counter() - start)


def _search(family: Family, bad: Callable[[Member], bool], examples: int) -> Member | None:
    """hypothesis.find: the first failing member it meets, shrunk to a minimal one. Derandomised,
    so the same family and engine give the same answer on every run."""
    from hypothesis import HealthCheck, find, settings
    from hypothesis import strategies as st
    from hypothesis.errors import NoSuchExample

    r = family.ranges

    def pick(name: str) -> Any:
        listed = r[name].values
        return st.sampled_from(listed) if listed is not None else st.integers(r[name].lo, r[name].hi)

    geometry = st.tuples(*(pick(p) for p in ("num_layers", "mla_every", "kda_heads", "head_dim", "kv_lora_rank")))
    strategy = geometry.flatmap(lambda g: st.tuples(
        st.just(g), st.sampled_from(divisors(g[2])), st.sampled_from(family.dtypes))).map(
        lambda t: Member(t[0][0], t[0][2], t[0][3], t[0][4], t[0][1], t[1], t[2]))
    config = settings(max_examples=examples, database=None, deadline=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
    try:
        return find(strategy, bad, settings=config)
    except NoSuchExample:
        return None


def _minimise(family: Family, m: Member, same: Callable[[Member], bool]) -> Member:
    """hypothesis shrinks well but not to the minimum; then each parameter in the family's order
    takes its smallest value that still fails for the same cause (tp and dtype last, tp among the
    divisors of the member's heads)."""
    for name in ("num_layers", "kda_heads", "head_dim", "kv_lora_rank", "mla_every"):
        for value in family.ranges[name].all()[:PATTERN_UP_TO]:
            if value >= getattr(m, name):
                break
            candidate = Member(**{**m.as_dict(), name: value})
            if candidate.kda_heads % candidate.tp == 0 and same(candidate):
                m = candidate
                break
    for tp in divisors(m.kda_heads):
        if tp < m.tp and same(smaller := Member(**{**m.as_dict(), "tp": tp})):
            m = smaller
            break
    return m


def _patterns(family: Family, at: Member, bad: Callable[[Member], bool]) -> dict[str, str]:
    """Each parameter over its whole range with every other parameter held at the failing member
    (kda_heads keeps the member's tp only where it still divides the heads)."""
    out = {}
    for name in ("num_layers", "mla_every", "kda_heads", "head_dim", "kv_lora_rank"):
        values = family.ranges[name].all()
        if len(values) > PATTERN_UP_TO:
            out[name] = f"not computed: more than {PATTERN_UP_TO} values"
            continue
        fields = {**at.as_dict()}
        tried = [v for v in values if name != "kda_heads" or v % at.tp == 0]
        failing = [v for v in tried if bad(Member(**{**fields, name: v}))]
        out[name] = describe_set(failing, tuple(tried))
    return out
