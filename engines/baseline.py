"""Known findings of an engine, kept the way linters keep baselines.

A baseline is a JSON file {"findings": [{"engine", "version", "recipe", "point", "property"}]},
one entry per known finding, `point` the domain axes as a sorted "k=v,k=v" string and `property`
a plan property, `boots`, `unsupported` or `not_verified`. With a baseline a run fails only on
findings it does not list, and lists the entries that no longer occur as stale (fixed upstream:
delete them).

An entry matches a finding on (engine, recipe, point, property), whatever the version: a merge
gate runs on the engine's main branch plus one change, whose version string is not the release
the baseline was written at, and a known finding must stay known there. `version` is kept in the
file as the version the entry was recorded at (optional when reading), and reports, JSON and
docs still carry the run's version and commit. Stale entries are judged per engine.

`not_verified_adapter` (kvproof's adapter could not drive a recipe at this revision) is never
baselined: `--write-baseline` refuses a run that has one, a file that lists one is refused, and
such a finding is always new, so an adapter gap cannot hide behind a baseline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvproof.engines.verdict import NOT_VERIFIED_ADAPTER, RecipeResult
from kvproof.spec.catalog import ConfigError, read_json

Key = tuple[str, str, str, str, str]  # engine, version, recipe, point, property (as a run reports it)
Match = tuple[str, str, str, str]  # engine, recipe, point, property: what an entry is matched on
FIELDS = ("engine", "version", "recipe", "point", "property")


def point_key(point: dict[str, Any]) -> str:
    return ",".join(f"{k}={point[k]}" for k in sorted(point))


def match(key: Key) -> Match:
    """What a finding and a baseline entry are matched on: the key without its version."""
    return key[0], key[2], key[3], key[4]


def findings(engine: str, version: str, results: Iterable[RecipeResult]) -> list[Key]:
    """One key per (point, property), in order. A refused point is kept too (property
    `unsupported`): a point a release newly declares unsupported is news to its maintainers."""
    keys: dict[Key, None] = {}
    for recipe in results:
        if recipe.baseline_property is not None:
            keys[engine, version, recipe.recipe, "", recipe.baseline_property] = None
        for p in recipe.points:
            if p.verdict != "ok":
                keys.update(dict.fromkeys((engine, version, recipe.recipe, point_key(p.point), f.property)
                                          for f in p.findings))
    return list(keys)


def adapter_gaps(keys: Iterable[Key]) -> list[str]:
    """The recipes whose findings include an adapter gap, which no baseline may list."""
    return sorted({k[2] for k in keys if k[4] == NOT_VERIFIED_ADAPTER})


def load(path: str | Path) -> set[Key]:
    """The entries of a baseline file; an entry without a version (it is not matched on) reads as
    version ""."""
    doc = read_json(Path(path), "baseline")
    entries = doc.get("findings") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"baseline {path}: expected an object with a 'findings' list")
    keys: set[Key] = set()
    for i, entry in enumerate(entries):
        required = ("engine", "recipe", "point", "property")
        if (not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in required)
                or not isinstance(entry.get("version", ""), str)):
            raise ConfigError(f"baseline {path}: findings[{i}] needs string keys {', '.join(required)} "
                              "(and version, when present, a string)")
        if entry["property"] == NOT_VERIFIED_ADAPTER:
            raise ConfigError(f"baseline {path}: findings[{i}] is {NOT_VERIFIED_ADAPTER} ({entry['recipe']}): "
                              "kvproof's adapter failing is never baselined; remove the entry")
        keys.add((entry["engine"], entry.get("version", ""), entry["recipe"], entry["point"], entry["property"]))
    return keys


def dump(keys: Iterable[Key]) -> str:
    """A baseline file of these findings, each with the version it was found at (not matched on).
    Refuses adapter gaps (ValueError): they are never baselined."""
    chosen = sorted(set(keys))
    gaps = adapter_gaps(chosen)
    if gaps:
        raise ValueError(f"{NOT_VERIFIED_ADAPTER} is never baselined: {', '.join(gaps)}")
    return json.dumps({"findings": [dict(zip(FIELDS, k, strict=True)) for k in chosen]}, indent=1) + "\n"


@dataclass(frozen=True)
class Comparison:
    new: list[Key]
    known: list[Key]
    stale: list[Key]


def ran(results: Iterable[RecipeResult]) -> set[tuple[str, str]]:
    """(recipe, point) of every point that ran, and (recipe, "") of every recipe that was tried."""
    return {(r.recipe, "") for r in results} | {(r.recipe, point_key(p.point)) for r in results for p in r.points}


def compare(found: list[Key], baseline: set[Key], engine: str, version: str | None,
            tried: set[tuple[str, str]]) -> Comparison:
    """Match the run's findings with the baseline on (engine, recipe, point, property); `version`
    (the run's) is not matched on, and is taken so that callers need not change. An adapter gap
    is always new. Stale entries are judged only for this engine, and only at points that ran (a
    run narrowed by --tp or --recipe says nothing about the rest)."""
    del version  # every version of the engine shares its baseline
    listed = {match(k) for k in baseline}
    seen = {match(k) for k in found}
    known = [k for k in found if match(k) in listed and k[4] != NOT_VERIFIED_ADAPTER]
    kept = set(known)
    return Comparison(
        new=[k for k in found if k not in kept],
        known=known,
        stale=sorted(k for k in baseline if k[0] == engine and (k[2], k[3]) in tried and match(k) not in seen),
    )
