"""Known findings of an engine, kept the way linters keep baselines.

A baseline is a JSON file {"findings": [{"engine", "version", "recipe", "point", "property"}]},
one entry per known finding, `point` the domain axes as a sorted "k=v,k=v" string and `property`
a plan property, `boots`, `unsupported` or `not_verified`. With a baseline a run fails only on
findings it does not list, and lists the entries that no longer occur as stale (fixed upstream:
delete them).

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

Key = tuple[str, str, str, str, str]  # engine, version, recipe, point, property
FIELDS = ("engine", "version", "recipe", "point", "property")


def point_key(point: dict[str, Any]) -> str:
    return ",".join(f"{k}={point[k]}" for k in sorted(point))


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
    doc = read_json(Path(path), "baseline")
    entries = doc.get("findings") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"baseline {path}: expected an object with a 'findings' list")
    keys: set[Key] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in FIELDS):
            raise ConfigError(f"baseline {path}: findings[{i}] needs string keys {', '.join(FIELDS)}")
        if entry["property"] == NOT_VERIFIED_ADAPTER:
            raise ConfigError(f"baseline {path}: findings[{i}] is {NOT_VERIFIED_ADAPTER} ({entry['recipe']}): "
                              "kvproof's adapter failing is never baselined; remove the entry")
        keys.add(tuple(entry[f] for f in FIELDS))
    return keys


def dump(keys: Iterable[Key]) -> str:
    """A baseline file of these findings. Refuses adapter gaps (ValueError): they are never
    baselined."""
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


def compare(found: list[Key], baseline: set[Key], engine: str, version: str, tried: set[tuple[str, str]]) -> Comparison:
    """An adapter gap is always new. Stale entries are judged only for this engine and version,
    and only at points that ran (a run narrowed by --tp or --recipe says nothing about the rest)."""
    known = [k for k in found if k in baseline and k[4] != NOT_VERIFIED_ADAPTER]
    return Comparison(
        new=[k for k in found if k not in known],
        known=known,
        stale=sorted(k for k in baseline
                     if k[:2] == (engine, version) and (k[2], k[3]) in tried and k not in set(found)),
    )
