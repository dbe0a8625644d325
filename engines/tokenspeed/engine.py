"""`verify engine tokenspeed`: every recipe tokenspeed registers, at every point it supports.

The recipe list is the engine's own registry (recipes/setup.py `_RECIPES`), so a recipe added
upstream shows up here as NOT VERIFIED until kvproof can plan it, rather than being skipped.

One recipe's trouble is that recipe's verdict: where kvproof's adapter cannot drive a recipe at
this revision (a module that does not load, an entry or attribute it relies on missing, a call
shape changed, a stand-in used), that recipe is NOT VERIFIED (adapter) with the call that failed
and why, and every other recipe is still planned and checked. Only bad input (an unknown recipe
or axis value, no tokenspeed at --engine-path, a release without the recipes package) ends the
run (EngineError, exit 2).
"""

from __future__ import annotations

import dataclasses
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from kvproof.cli import progress
from kvproof.engines import shards, user_config, verdict
from kvproof.engines.interface import Adapter, EngineAdapter
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import (
    deepseek_v4,
    kimi_k3,
    loader,
    mutants,
    nemotron_h,
    ordinary,
    pipeline,
    qwen35,
)
from kvproof.engines.tokenspeed.configs import STRICT
from kvproof.engines.tokenspeed.mutants import NEWER
from kvproof.engines.tokenspeed.profile import Profile, configs
from kvproof.engines.user_config import UserConfig
from kvproof.engines.verdict import AdapterGap, Coverage, EngineError, EngineRun, PointResult, RecipeResult
from kvproof.spec.catalog import ConfigError

ENGINE = "tokenspeed"
BASELINE = Path(__file__).with_name("baseline.json")  # the known findings of the released version


PROFILES: dict[str, Profile] = {
    "kimi_k3": Profile(kimi_k3.MODELS, kimi_k3.MODULES, kimi_k3.points, kimi_k3.build, drafts=(kimi_k3.DRAFT,)),
    "mla": Profile((*ordinary.MLA_MODELS, *ordinary.MLA_DRAFT_FILES), ordinary.MODULES, ordinary.mla_points,
                   ordinary.build_mla, ordinary.MLA_LIMITS, drafts=ordinary.MLA_DRAFT_FILES),
    "dsa": Profile(ordinary.DSA_MODELS, ordinary.MODULES, ordinary.dsa_points, ordinary.build_dsa,
                   ordinary.LIMITS),
    "mha": Profile((*ordinary.MHA_MODELS, *ordinary.MHA_DRAFT_FILES), ordinary.MODULES, ordinary.mha_points,
                   ordinary.build_mha, ordinary.MHA_LIMITS, drafts=ordinary.MHA_DRAFT_FILES),
    "qwen_gdn": Profile(qwen35.MODELS, qwen35.MODULES, qwen35.points, qwen35.build, qwen35.LIMITS),
    "mamba2": Profile(nemotron_h.MODELS, nemotron_h.MODULES, nemotron_h.points, nemotron_h.build,
                      nemotron_h.LIMITS),
    "deepseek_v4": Profile(deepseek_v4.MODELS, deepseek_v4.MODULES, deepseek_v4.points, deepseek_v4.build,
                           deepseek_v4.LIMITS, deepseek_v4.points, deepseek_v4.ALSO_ASSUMES),
}
# The recipes whose adapter modules export their own PROFILE (and seeded bugs: mutants.NEWER).
PROFILES |= {name: m.PROFILE for name, m in NEWER.items()}


NO_CONFIG = "no published config and domain for this family in kvproof yet"
SETUP = Path("runtime/layers/attention/kv_cache/recipes/setup.py")
FIRST = "tokenspeed's one-pipeline-per-family recipes (upstream #1117, 2026-08-17) and later"


def registered(source: loader.Source) -> tuple[tuple[str, ...], AdapterGap | None]:
    """The families the engine registers, in its own order (`setup._RECIPES`), and the gap that
    keeps kvproof from importing that module, if one does (the families are then read from its
    source, and each is NOT VERIFIED (adapter) with that gap). A release without the recipes
    package at all is not supported (exit 2)."""
    if not (source.package_dir / SETUP).is_file():
        raise loader.SourceError(f"unsupported: {source.describe()} has no {SETUP}; kvproof plans {FIRST}")
    try:
        return tuple(loader.load(source, ("setup",))["setup"]._RECIPES), None
    except (loader.SourceError, AttributeError, StubUsed, AdapterGap) as err:
        gap = AdapterGap(f"import {loader.RECIPES}.setup", f"{type(err).__name__}: {verdict.one_line(err)}")
        return _declared_families(source.package_dir / SETUP, err), gap


def _declared_families(path: Path, err: Exception) -> tuple[str, ...]:
    """The string keys of setup.py's `_RECIPES = {...}`, read from its source."""
    import ast

    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.AnnAssign | ast.Assign):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if isinstance(target, ast.Name) and target.id == "_RECIPES" and isinstance(node.value, ast.Dict):
            keys = tuple(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
            if keys:
                return keys
    raise loader.SourceError(f"{path}: cannot import it ({type(err).__name__}: {verdict.one_line(err)}) and its "
                             "_RECIPES table is no literal dict kvproof can read the families from")


def verify(recipes: Sequence[str] | None, tps: Sequence[int] | None, dtypes: Sequence[str] | None,
           engine_path: str | None, drafts: Sequence[int] | None = None, models: Sequence[str] | None = None,
           assume: Sequence[str] | None = None, padding_bound: Fraction | None = None,
           config: str | None = None, shard: shards.Shard | None = None,
           algorithms: Sequence[str] | None = None) -> EngineRun:
    """`verify engine tokenspeed`: the installed release, or the package at --engine-path;
    `config`, a user's config.json that the one recipe named plans as its checkpoint."""
    if shard:
        raise shards.unsharded(ENGINE)
    try:
        source = loader.source_of(engine_path)
        only = {"tp": tps, "dtype": dtypes, "drafts": drafts, "algorithm": algorithms, "model": models,
                "assume": _assumed(assume)}
        return run(source, recipes, only, engine_path, padding_bound, config=user_config.load(config, recipes))
    except loader.SourceError as err:
        raise EngineError(str(err)) from None
    except (StubUsed, AdapterGap) as err:  # outside any one recipe (its gaps are its verdict): no verdict at all
        raise EngineError(f"{err}; the adapter must model this first") from None


def run(source: loader.Source, recipes: Sequence[str] | None = None,
        only: dict[str, Sequence[Any] | None] | None = None, engine_path: str | None = None,
        padding_bound: Fraction | None = None, *, config: UserConfig | None = None,
        everything: bool = False) -> EngineRun:
    """Every point of every chosen recipe; `only` narrows axes ({"tp": [8], "dtype": None, ...});
    `config` plans a user's config.json in place of the recipe's checkpoints; `everything` plans
    a family's every member, not its default list."""
    start = time.perf_counter()
    source = mutants.mutated(source)
    families, trouble = registered(source)
    unknown = sorted(set(recipes or ()) - set(families))
    if unknown:
        raise loader.SourceError(f"{source.describe()} registers no recipe {unknown[0]!r}; it has: "
                                 + ", ".join(families))
    if config is not None and recipes and recipes[0] in PROFILES:
        _check_config(recipes[0], PROFILES[recipes[0]], config)
    _check_narrowing([PROFILES[f] for f in recipes or families if f in PROFILES], only or {}, config)
    results = []
    for family in recipes or families:
        profile = PROFILES.get(family)
        if profile is None:
            results.append(RecipeResult(family, (), NO_CONFIG))
        elif trouble is not None:
            results.append(verdict.adapter_result(family, [(None, trouble)], _stated_limits(profile, config)))
        else:
            ask = Ask(only or {}, engine_path, padding_bound, config, everything)
            results.append(_recipe(source, family, profile, ask))
    planned = [r for r in results if r.recipe in PROFILES and not r.adapter]
    if planned and not any(r.points for r in planned):
        example = PROFILES[planned[0].recipe]
        raise EngineError(f"no point of {', '.join(r.recipe for r in planned)} matches the narrowing; points look "
                          "like: " + "; ".join(_describe(p) for p in example.points(_configs(example, config))[:4])
                          + " ...")
    return EngineRun(ENGINE, source.version, source.describe(), source.commit, tuple(results),
                     time.perf_counter() - start)


@dataclass(frozen=True)
class Ask:
    """What a run asks of each recipe past its name: the narrowing, the engine's folder (for
    replay lines), the padding bound, a user's config, and whether families run whole."""

    only: dict[str, Sequence[Any] | None]
    engine_path: str | None
    padding_bound: Fraction | None
    config: UserConfig | None
    everything: bool


def _configs(profile: Profile, config: UserConfig | None, everything: bool = False) -> dict[str, dict]:
    return configs(profile, everything, (config.name, config.config) if config else None)


def _recipe(source: loader.Source, family: str, profile: Profile, ask: Ask) -> RecipeResult:
    """One recipe: its points' verdicts, or NOT VERIFIED (adapter) where kvproof's adapter could
    not drive it at this revision (loading it, or at any point); with what they cover."""
    # A member named past the default list (a sweep's replay line) is planned from the whole family.
    everything = ask.everything or bool(profile.family and ask.only.get("model"))
    outcomes = _points(source, family, profile, dataclasses.replace(ask, everything=everything))
    result = verdict.adapter_result(family, outcomes, _stated_limits(profile, ask.config))
    if ask.config is not None:
        result = dataclasses.replace(result, coverage=Coverage(config=ask.config.path))
    elif profile.family is not None:
        planned = {p.point.get("model") for p in result.points}
        result = dataclasses.replace(result, coverage=Coverage(
            profile.family.as_dict(), profile.family.size(), len(planned - {None}),
            tuple(profile.family.citations())))
    if not result.adapter and result.points and all(p.verdict == "refused" for p in result.points):
        return dataclasses.replace(result, not_verified="every point refused as unsupported")
    return result


def _stated_limits(profile: Profile, config: UserConfig | None) -> str:
    """What a recipe's verdict states it does not model: a family's way of planning first; at a user's
    --config, the file in the family's place."""
    first = f"planned at --config {config.path}" if config is not None else profile.family_limits
    return "; ".join(part for part in (first, profile.limits) if part)


def _check_narrowing(chosen: Sequence[Profile], only: dict[str, Sequence[Any] | None],
                     config: UserConfig | None) -> None:
    """A narrowing that no chosen recipe's domain has an axis (or assumption) for would be
    ignored, and the run would look like an answer to it: refuse it instead."""
    if not chosen:
        return
    points = [p for profile in chosen for p in profile.points(_configs(profile, config, bool(only.get("model"))))]
    axes = {axis for p in points for axis in p}
    assumed = {pair.split("=", 1)[0] for p in points for pair in p.get("assume", "").split(",") if pair}
    assumed |= {name for profile in chosen for name in profile.may_assume}
    for axis, wanted in only.items():
        if not wanted:
            continue
        flag = "--model" if axis == "model" else f"--{axis}"
        if axis == "assume":
            missing = sorted({pair.split("=", 1)[0] for pair in wanted} - assumed)
            if missing:
                raise EngineError(f"--assume {missing[0]}: no point of the chosen recipes makes that assumption")
        elif axis not in axes:
            raise EngineError(f"{flag}: the chosen recipes' points have no {axis} axis (not modelled there)")
        else:
            have = sorted({str(p[axis]) for p in points if axis in p},
                          key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))
            missing = [str(w) for w in wanted if str(w) not in have]
            if missing:
                raise EngineError(f"{flag} {missing[0]}: no point of the chosen recipes has it; {axis} takes "
                                  + ", ".join(have))


def _check_config(recipe: str, profile: Profile, config: UserConfig) -> None:
    """A user's config.json must be of a class the recipe plans (its checkpoints' or its family's
    `architectures`: kvproof builds each class's model config its own way), and hold every key the
    recipe's points are read from; else one line, naming the classes or the key."""
    own = sorted({tuple(c.get("architectures") or ()) for name, c in configs(profile, everything=True).items()
                  if name not in profile.drafts})
    named = config.config.get("architectures")
    if not isinstance(named, list) or not all(isinstance(a, str) for a in named):
        raise EngineError(f"--config {config.path}: architectures is {named!r}; a config.json names its model "
                          "classes in a list")
    given = tuple(named)
    if given not in own:
        raise EngineError(f"--config {config.path}: architectures {list(given)} is not a class recipe "
                          f"{recipe} plans ({' or '.join(str(list(a)) for a in own)}); name its recipe with "
                          "--recipe")
    try:
        profile.points(_configs(profile, config))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise EngineError(f"--config {config.path}: recipe {recipe} reads its points from keys the file "
                          f"lacks or holds otherwise ({type(err).__name__}: {verdict.one_line(err)})") from None


def plan(source: loader.Source, family: str, point: dict[str, Any]) -> pipeline.Planned | pipeline.Refused:
    """One point through the engine's own recipe (tests and the differential use this); an
    AdapterGap propagates."""
    profile = PROFILES[family]
    modules = loader.load(source, profile.modules)
    return _plan(profile, modules, configs(profile, everything=True), point, source.package_dir,
                 profile.family.name if profile.family else None)


def _plan(profile: Profile, modules: dict[str, types.ModuleType], published: dict[str, dict],
          point: dict[str, Any], engine: Path, strict: str | None) -> pipeline.Planned | pipeline.Refused:
    """The recipe at `point`, with the point's assumptions the only answers a switch can give;
    `strict` names the family whose member this is (its config has no key to default)."""
    loader.ASSUMED.point(dict(pair.split("=", 1) for pair in point.get("assume", "").split(",") if pair))
    STRICT.family = strict
    STRICT.absent = frozenset(profile.family.absent if strict and profile.family else ())
    try:
        return pipeline.run(lambda: profile.build(modules, published, point), modules["plan"], engine)
    finally:
        STRICT.family, STRICT.absent = None, frozenset()


Outcome = PointResult | tuple[dict[str, Any] | None, AdapterGap]


def _load(source: loader.Source, profile: Profile) -> dict[str, types.ModuleType]:
    """The modules a profile plans with, and the revision's setup() stages checked against
    kvproof's pipeline; whatever fails is an AdapterGap."""
    try:
        modules = loader.load(source, profile.modules)
    except loader.LoadError as err:
        raise AdapterGap(f"import {err.module}", verdict.one_line(err).partition(": cannot import ")[2]
                         or verdict.one_line(err)) from None
    except (StubUsed, AdapterGap) as err:  # a module's top level used a stand-in
        raise verdict.gap(err, verdict.blame(err, (source.package_dir,), stand_ins=pipeline.STAND_INS)) from None
    if "base" in modules:
        pipeline.check_stages(modules["base"].CacheRecipe)
    return modules


def _points(source: loader.Source, family: str, profile: Profile, ask: Ask) -> list[Outcome]:
    try:
        modules = _load(source, profile)
    except AdapterGap as gap:
        return [(None, gap)]
    only, padding_bound = ask.only, ask.padding_bound
    published = _configs(profile, ask.config, ask.everything)
    strict = profile.family.name if profile.family and ask.config is None else None
    out: list[Outcome] = []
    # Points whose plans are identical (DeepSeek-V4's layout reads neither tp nor the cache
    # dtype) share one check: it is a function of the documents alone, within this run.
    checked: verdict.Checked = {}
    # The domain is read from the members under the same strictness as their planning.
    STRICT.family, STRICT.absent = strict, frozenset(profile.family.absent if strict and profile.family else ())
    try:
        domain = profile.points_at(published, modules) if profile.points_at else profile.points(published)
    except (AdapterGap, StubUsed, AttributeError, OSError, TypeError) as err:
        return [(None, verdict.gap(err, verdict.blame(err, (source.package_dir,), stand_ins=pipeline.STAND_INS)))]
    finally:
        STRICT.family, STRICT.absent = None, frozenset()
    # a point without a draft has no algorithm: narrowing by one keeps drafted points only
    chosen = [point for point in domain if not any(
        wanted and (not _wanted(axis, point[axis], wanted) if axis in point else axis == "algorithm")
        for axis, wanted in only.items())]
    with progress.task(len(chosen), f"tokenspeed {family}", "points") as shown:
        for point in shown.each(chosen):
            replay = " ".join(["verify engine tokenspeed", f"--recipe {family}",
                               *(f"--{axis} {' '.join(value.split(','))}" if axis == "assume" else f"--{axis} {value}"
                                 for axis, value in point.items()),
                               *([f"--config {ask.config.path}"] if ask.config else []),
                               *([f"--engine-path {ask.engine_path}"] if ask.engine_path else []),
                               *([f"--max-padding {float(padding_bound)}"] if padding_bound is not None else [])])
            try:
                outcome = _plan(profile, modules, published, point, source.package_dir, strict)
            except AdapterGap as gap:  # kvproof's adapter could not drive the recipe here: no verdict
                out.append((point, gap))
                continue
            if isinstance(outcome, pipeline.Refused):
                out.append(verdict.from_refusal(family, point, outcome.message, outcome.unsupported, replay,
                                                outcome.packing))
            else:
                try:
                    out.append(verdict.planned_once(checked, family, point, outcome.documents, replay, padding_bound))
                except ConfigError as err:  # bindings that are no one plan in N (a cap or a threshold in bind)
                    out.append((point, AdapterGap("bind", "tokenspeed's plan read into a plan kvproof refuses: "
                                                  + verdict.one_line(err))))
    return out


def _assumed(assume: Sequence[str] | None) -> list[str] | None:
    """--assume NAME=VALUE ...: each a declared assumption and one of its values."""
    for pair in assume or ():
        name, _, value = pair.partition("=")
        if name in loader.ASSUMPTIONS and value not in loader.ASSUMPTIONS[name][0]:
            raise EngineError(f"--assume {pair}: {name} takes {'|'.join(loader.ASSUMPTIONS[name][0])}")
        if name not in loader.ASSUMPTIONS:
            known = "; ".join(f"{k}={'|'.join(v[0])}" for k, v in loader.ASSUMPTIONS.items())
            raise EngineError(f"--assume {pair}: not an assumption of tokenspeed's recipes; known: {known}")
    return list(assume) if assume else None


def _wanted(axis: str, value: Any, wanted: Sequence[Any]) -> bool:
    """An assumption point is wanted when it makes every assumption asked for that it makes."""
    if axis == "assume":
        made = dict(pair.split("=", 1) for pair in value.split(","))
        return all(made[name] == v for name, v in (pair.split("=", 1) for pair in wanted) if name in made)
    return value in wanted


def _describe(point: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


# No finding of tokenspeed's spans points: each point's plan is the whole answer.
ADAPTER: EngineAdapter = Adapter(name=ENGINE, verify=verify, cross_point=frozenset(), mutants=mutants.MUTANTS,
                                 baseline=BASELINE)
