"""`verify engine --shard K/N`: the K-th of N parts of an engine's recipes, one part per job of a CI matrix.

Each recipe goes whole to one shard: its cross-point checks compare its own points with each other, and a
verdict over a family is its recipe's. So the N shards' runs together are the unsharded run: the same
recipes, points and findings, and the same baseline comparison (baseline.compare judges an entry stale only
at a point its run planned). The recipes are dealt by cost, the costliest first, each to the shard with the
least cost so far (the lower shard on a tie, the name breaking ties between recipes of equal cost), so the
same recipes and costs are dealt alike on every run and every machine. A shard's run narrowed past its recipes
(a tp, a dtype) could find no point where another shard's finds some, so an adapter deals only unnarrowed runs.
"""

from __future__ import annotations

import re

from kvproof.engines.verdict import EngineError

Shard = tuple[int, int]  # (K, N): the K-th of N shards, from 1


def parse(text: str) -> Shard:
    """K/N with 1 <= K <= N, or one line naming the form."""
    found = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
    if found is None or not 1 <= int(found.group(1)) <= int(found.group(2)):
        raise EngineError(f"--shard {text}: give K/N, the K-th of N shards, with 1 <= K <= N (e.g. 2/4)")
    return int(found.group(1)), int(found.group(2))


def deal(costs: dict[str, int], count: int) -> list[list[str]]:
    """The recipes of each of `count` shards, each in the order `costs` lists them; with positive costs and
    no more shards than recipes, every shard holds one."""
    loads = [0] * count
    dealt: list[set[str]] = [set() for _ in range(count)]
    for name in sorted(costs, key=lambda recipe: (-costs[recipe], recipe)):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        loads[lightest] += costs[name]
        dealt[lightest].add(name)
    return [[name for name in costs if name in shard] for shard in dealt]


def chosen(costs: dict[str, int], shard: Shard, engine: str) -> list[str]:
    """The recipes of the shard (costs positive); more shards than recipes, which would leave one without, are
    refused."""
    k, n = shard
    if n > len(costs):
        raise EngineError(f"--shard {k}/{n}: {engine} has {len(costs)} recipes to deal here, so at most "
                          f"{len(costs)} shards")
    return deal(costs, n)[k - 1]


def unsharded(engine: str) -> EngineError:
    """The refusal of an engine whose whole default run is one job within the gate's budget."""
    return EngineError(f"--shard does not apply to {engine}: its whole default run is one job's; vllm deals its "
                       "models into shards")
