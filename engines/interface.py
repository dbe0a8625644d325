"""What `verify` asks of an engine adapter: the one interface every engine is driven through.

An engine is one folder, kvproof/engines/<name>/, and one line in kvproof/engines/registry.py
(`"<name>": "kvproof.engines.<name>.engine"`). The folder's adapter module defines

    ADAPTER: EngineAdapter = Adapter(name=..., verify=..., cross_point=..., mutants=..., baseline=...)

and mypy checks that assignment: `verify` must take what `verify engine` passes it. What the
members are for:

- `name`: what `verify engine <name>` takes, and the first field of the adapter's baseline keys.
- `verify(recipes, tps, dtypes, engine_path, **narrowing) -> EngineRun`: load the engine's own
  planner (the installed release, or the checkout or package at `engine_path`), plan every point of
  every chosen recipe (`recipes` None: every recipe the engine registers; a recipe kvproof cannot
  plan is NOT VERIFIED, not skipped) and check each plan with kvproof.engines.verdict (`planned`
  for a plan, `from_refusal` for a refusal). `tps` and `dtypes` narrow the points to those attention
  tp and --kv-cache-dtype values, `narrowing` (a `Narrowing`) to the rest. A narrowing the chosen
  recipes' points have no axis for is refused, never ignored. The returned EngineRun says where the
  engine's code came from (`source`, `commit`) and its `version`, which the reports carry (baseline
  entries match whatever the version). Bad input (no engine there, an unknown recipe or axis value,
  an engine the adapter does not follow at all) is an `EngineError` with one line, and `verify
  engine` exits 2. A recipe the adapter cannot drive at this engine revision (a moved function, a
  changed call shape, a stand-in used: `StubUsed`) is that recipe's NOT VERIFIED (adapter), from
  kvproof.engines.verdict's `adapter_result`; every other recipe is still planned. `shard` is no
  axis but a choice of recipes: an adapter deals them whole with kvproof.engines.shards' `chosen`,
  or refuses with its `unsharded`.
- `cross_point`: the finding properties that span points rather than belong to one plan (vLLM's
  block size that differs across tp); when every new finding is one of these, `verify engine`
  exits 3 instead of 1. Empty for an engine that has none.
- `mutants`: the engine's seeded bugs for `verify mutants`, each a `Mutant` whose fault the
  adapter's own code switches on (`kvproof.impl.faults.active(name)`; the module that holds the
  hook declares the fault's description with `faults.declare`) and whose checks must kill it.
- `baseline`: the engine's baseline of known findings in its released version (baseline.json in
  the folder), which the gate runs `verify engine <name> --baseline` with.

Importing the adapter module must not import the engine or its heavy dependencies (torch, the
engine's wheel): `verify mutants` and the gate import every adapter to read its members, and only
`verify` loads the engine. What an adapter hands the engine in place of what a CPU lacks is in
kvproof.engines.stubs (`StubUsed`, `Unavailable`); verdicts in kvproof.engines.verdict; baselines in
kvproof.engines.baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Protocol, TypedDict, Unpack

from kvproof.engines.shards import Shard
from kvproof.engines.verdict import EngineRun


class Narrowing(TypedDict, total=False):
    """What `verify engine` narrows past --recipe, --tp and --dtype; a key is absent when its flag
    is not given."""

    drafts: Sequence[int]  # --drafts: draft-layer counts
    algorithms: Sequence[str]  # --algorithm: the drafts' --speculative-algorithm values
    models: Sequence[str]  # --model: checkpoints, for recipes that serve several
    assume: Sequence[str]  # --assume NAME=VALUE: assumption axes (a GPU or environment answer)
    # --max-padding: the padding bound to hold a plan to when its engine sets none; None holds it to
    # none. Absent: the adapter's own default.
    padding_bound: Fraction | None
    config: str  # --config FILE: a user's config.json, the one --recipe's checkpoint
    shard: Shard  # --shard K/N: only the recipes the K-th of N shards is dealt (kvproof.engines.shards)


class Verify(Protocol):
    """An adapter's planning call (see the module docstring)."""

    def __call__(self, recipes: Sequence[str] | None, tps: Sequence[int] | None, dtypes: Sequence[str] | None,
                 engine_path: str | None, /, **narrowing: Unpack[Narrowing]) -> EngineRun: ...


@dataclass(frozen=True)
class Mutant:
    """A seeded bug and the checks that must kill it: a fault of kvproof.impl.faults (switched on
    by name while the checks run), or a historical policy (the checks run with --policy `policy`).
    A check is a pytest node id or a `verify` command line. With `expect`, a check kills it only by
    a counterexample or finding for that property, not by any failure."""

    name: str
    checks: tuple[str, ...]
    policy: str | None = None
    expect: str | None = None

    @property
    def fault(self) -> str | None:
        return None if self.policy else self.name


class EngineAdapter(Protocol):
    """An engine as `verify engine`, `verify mutants` and the gate drive it (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def cross_point(self) -> frozenset[str]: ...

    @property
    def mutants(self) -> tuple[Mutant, ...]: ...

    @property
    def baseline(self) -> Path: ...

    def verify(self, recipes: Sequence[str] | None, tps: Sequence[int] | None, dtypes: Sequence[str] | None,
               engine_path: str | None, /, **narrowing: Unpack[Narrowing]) -> EngineRun: ...


@dataclass(frozen=True)
class Adapter:
    """An EngineAdapter made of an adapter module's own function and tables."""

    name: str
    verify: Verify
    cross_point: frozenset[str]
    mutants: tuple[Mutant, ...]
    baseline: Path
