"""`verify engine tokenspeed`: every recipe tokenspeed registers, at every point it supports.

The recipe list is the engine's own registry (recipes/setup.py `_RECIPES`), so a recipe added
upstream shows up here as NOT VERIFIED until kvproof can plan it, rather than being skipped.
"""

from __future__ import annotations

import json
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from kvproof.engines import verdict
from kvproof.engines.tokenspeed import kimi_k3, loader, mutants, pipeline
from kvproof.engines.verdict import EngineError, EngineRun, PointResult, RecipeResult

ENGINE = "tokenspeed"


@dataclass(frozen=True)
class Profile:
    """How kvproof plans one tokenspeed recipe: its published config and its domain."""

    config: str  # a file in engines/tokenspeed/models
    modules: tuple[str, ...]  # what loader.load imports for it
    dtypes: tuple[str, ...]  # --kv-cache-dtype values it accepts
    tp_domain: Callable[[dict], tuple[int, ...]]
    build: Callable[[dict[str, types.ModuleType], dict, int, str], Any]  # the recipe at (config, tp, dtype)


PROFILES: dict[str, Profile] = {
    "kimi_k3": Profile("kimi-k3.json", kimi_k3.MODULES, kimi_k3.CACHE_DTYPES, kimi_k3.tp_domain, kimi_k3.build),
}


def registered(source: loader.Source) -> tuple[str, ...]:
    """The families the engine registers, in its own order."""
    return tuple(loader.load(source, ("setup",))["setup"]._RECIPES)


def config(profile: Profile) -> dict:
    text = resources.files("kvproof.engines.tokenspeed").joinpath("models", profile.config).read_text()
    return json.loads(text)


def verify(recipes: Sequence[str] | None, tps: Sequence[int] | None, dtypes: Sequence[str] | None,
           engine_path: str | None) -> EngineRun:
    """`verify engine tokenspeed`: the installed release, or the package at --engine-path."""
    try:
        source = loader.path_source(engine_path) if engine_path else loader.installed_source()
        return run(source, recipes, tps, dtypes, engine_path)
    except loader.SourceError as err:
        raise EngineError(str(err)) from None
    except loader.StubUsed as err:
        raise EngineError(f"{err}; the adapter must model this before the point can be checked") from None


def run(source: loader.Source, recipes: Sequence[str] | None = None, tps: Sequence[int] | None = None,
        dtypes: Sequence[str] | None = None, engine_path: str | None = None) -> EngineRun:
    start = time.perf_counter()
    source = mutants.mutated(source)
    families = registered(source)
    unknown = sorted(set(recipes or ()) - set(families))
    if unknown:
        raise loader.SourceError(f"{source.describe()} registers no recipe {unknown[0]!r}; it has: "
                                 + ", ".join(families))
    results = []
    for family in recipes or families:
        profile = PROFILES.get(family)
        if profile is None:
            results.append(RecipeResult(family, (), "no published config and domain for this family in kvproof yet"))
            continue
        results.append(RecipeResult(family, tuple(_points(source, family, profile, tps, dtypes, engine_path))))
    return EngineRun(ENGINE, source.version, source.describe(), source.commit, tuple(results),
                     time.perf_counter() - start)


def plan(source: loader.Source, family: str, tp: int, dtype: str) -> pipeline.Planned | pipeline.Refused:
    """One point through the engine's own recipe (tests and the differential use this)."""
    profile = PROFILES[family]
    modules = loader.load(source, profile.modules)
    return pipeline.run(profile.build(modules, config(profile), tp, dtype), modules["plan"])


def _points(source: loader.Source, family: str, profile: Profile, tps: Sequence[int] | None,
            dtypes: Sequence[str] | None, engine_path: str | None) -> list[PointResult]:
    modules = loader.load(source, profile.modules)
    published = config(profile)
    out = []
    for dtype in profile.dtypes:
        if dtypes and dtype not in dtypes:
            continue
        for tp in profile.tp_domain(published):
            if tps and tp not in tps:
                continue
            point = {"tp": tp, "dtype": dtype}
            replay = " ".join(["verify engine tokenspeed", f"--recipe {family}", f"--tp {tp}", f"--dtype {dtype}",
                               *([f"--engine-path {engine_path}"] if engine_path else [])])
            outcome = pipeline.run(profile.build(modules, published, tp, dtype), modules["plan"])
            if isinstance(outcome, pipeline.Refused):
                out.append(verdict.refused(family, point, outcome.message, outcome.unsupported, replay,
                                           outcome.packing))
            else:
                out.append(verdict.planned(family, point, outcome.documents, replay))
    return out
