"""`verify engine vllm`: vLLM's planner at every point of each model's domain, checked for every N.

A point is (tp, kv dtype, mamba state dtype, prefix caching, backend). Each is planned by vLLM's
own functions (planner.py) and its plan checked with the same encoding and properties as every
engine (verdict.planned). One check spans points: a disaggregated deployment transfers KV blocks
between a prefill and a decode instance that may run at different tp, and block ids only mean
the same tokens when the block size is equal, so every point whose block size differs from the
same configuration at tp 1 gets the `tp_block_size` finding (vllm#41037). It is not a plan
property: no single plan can violate it.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import re
import sys
import time
import traceback
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from kvproof.cli import progress
from kvproof.engines import shards, spread, user_config, verdict
from kvproof.engines.checkout import commit_at
from kvproof.engines.interface import Adapter, EngineAdapter
from kvproof.engines.user_config import UserConfig
from kvproof.engines.verdict import EngineError, EngineRun, Finding, PointResult
from kvproof.engines.vllm import catalog, mutants, planner, platform
from kvproof.impl import faults
from kvproof.spec.catalog import ConfigError
from kvproof.spec.contract import MAX_PADDING

ENGINE = "vllm"
BASELINE = Path(__file__).with_name("baseline.json")  # the known findings of the released version
TP_BLOCK_SIZE = "tp_block_size"  # the cross-point finding: block size differs across tp
PP_BLOCK_SIZE = "pp_block_size"  # the cross-rank finding: pipeline stages of one point plan different blocks
CROSS_POINT = (TP_BLOCK_SIZE, PP_BLOCK_SIZE)  # findings across points: `verify engine` exits 3 on these alone
PIPELINE = (2, 4, 8)  # pipeline sizes planned (each stage planned on its own; see _grid)
DTYPES = ("auto", "fp8")
MAMBA_DTYPES = ("auto", "float32")
TARGET_DTYPE = "target"  # --assume draft_dtype=target: the points whose draft has no KV dtype of its own
TARGET_BACKEND = "target"  # --assume draft_backend=target: the points whose draft's layers take the target's backend
TRTLLM = ("on", "off")  # FlashInfer's TRTLLM kernels obtainable: flashinfer-cubin installed or NVIDIA's artifactory
# vLLM states no padding bound for its pages; by default its plans are held to the contract's as the
# contract holds its own (spec/contract.py): a group's pages may pad at most a quarter of their payload,
# and a plan with draft tokens states no bound. `--max-padding X|inf` holds every point to X or none.
PADDING_BOUND = MAX_PADDING
CONTRACT: Literal["contract"] = "contract"
Bound = Fraction | None | Literal["contract"]
CUDA_RUNTIMES = (12, 13)  # the CUDA runtime's major version: vLLM's check is >= 13 (qwen_gdn_linear_attn.py:253)
# A run of this many stage plannings or more is spread over one process per core (_spread): below it, starting a
# worker (importing vLLM and the backends, seconds of CPU) costs more than it saves.
SPREAD_FROM = 200
# Chunks of the run's points per process: a faster process takes more of them, and the last chunk is the time one
# process may work on alone at the end, so they are small; each chunk costs a little of its own (docs/benchmarks.md).
CHUNKS_PER_PROCESS = 64
Outcome = tuple[PointResult, int | None] | verdict.AdapterGap  # a point's result and block size, or its gap
Only = dict[str, Sequence[Any] | None]


def version() -> str:
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        raise EngineError("vllm is not installed: run `make .venv/.vllm` (pip install --no-deps -r "
                          "engines/vllm-requirements.txt)") from None


def points(model: catalog.Model, only: dict[str, Sequence[Any] | None] | None = None) -> list[dict[str, Any]]:
    """Every point of the model's domain within the narrowing `only`; `spec` (speculative tokens) only where it
    speculates (by its own draft or by ngram), `trtllm` only at FLASHINFER points (the target's or the draft's) and
    `cuda_runtime` only at the GPUs where planning asks it, `draft_dtype` only at a drafted point whose draft's KV
    dtype `--speculative-config` names, `draft_backend` only at one whose draft's backend it names (the axes are
    added where they change vLLM's answer), and a backend only at the KV-cache dtypes its class declares (vLLM's
    validate_configuration rejects any other, so the platform selects the next backend there: FLASH_ATTN_MLA has no
    fp8). A backend is narrowed by its name (every GPU) or name@gpu. Only the backends of points left by the
    narrowing are imported; one that does not import raises."""
    chosen, gaps = _domain(model, only)
    if gaps:
        raise gaps[0][1]
    return chosen


def _domain(model: catalog.Model, only: dict[str, Sequence[Any] | None] | None = None
            ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], verdict.AdapterGap]]]:
    """points(), and the points of the backends kvproof cannot import at this vLLM, each with the
    adapter gap its import is (those points' dtypes unfiltered: the class that declares them is what
    did not load)."""
    def wanted(p: dict[str, Any], axis: str, want: Sequence[Any] | None) -> bool:
        if not want:
            return True
        if axis in ("backend", "draft_backend"):  # by label or by name (every GPU); a draft's `target`: the draft's
            label = p.get(axis, TARGET_BACKEND)  # layers at the target's backend, or no draft
            return label in want or label.split("@")[0] in want
        if axis == "draft_dtype":  # `target`: the draft at the target's KV dtype (no dtype of its own), or no draft
            return p.get(axis, TARGET_DTYPE) in want
        return p.get(axis) in want

    chosen = [p for p in _grid(model) if all(wanted(p, axis, want) for axis, want in (only or {}).items())]
    backends = {b.label: b for b in model.every_backend}
    declared: dict[str, Any] = {}
    causal_only: set[str] = set()  # a DFLASH draft's candidate backends whose class takes no non-causal attention
    failed: dict[str, verdict.AdapterGap] = {}
    for label in dict.fromkeys(label for p in chosen for label in (p["backend"], p.get("draft_backend")) if label):
        try:
            loaded = backends[label].load()
        except Exception as err:  # kvproof cannot import the backend's module at this vLLM
            failed[label] = _gap(err, f"importing {backends[label].path} (backend {label})")
            continue
        declared[label] = loaded.supported_kv_cache_dtypes
        # a DFLASH draft asks its backend for non-causal attention where any of its layers is non-causal
        # (dflash/utils.py:31, dflash_has_any_non_causal: every full-attention layer of the one planned is, a test
        # checks), and vLLM refuses a pin that cannot take it (backend.py:336)
        if model.draft == "dflash" and not loaded.supports_non_causal():
            causal_only.add(label)
    kept = [p for p in chosen if not any(p.get(axis) in failed for axis in ("backend", "draft_backend"))
            and p.get("draft_backend") not in causal_only]
    return ([p for p in kept if p["dtype"] in declared[p["backend"]] and _draft_declared(model, p, declared)],
            [(p, failed[failing]) for p in chosen if (failing := next((p[axis] for axis in ("backend", "draft_backend")
                                                                      if p.get(axis) in failed), None))])


def _draft_declared(model: catalog.Model, point: dict[str, Any], declared: dict[str, Collection[str]]) -> bool:
    """Whether a point's draft dtype is one the draft's backend can take. Model Runner V2 builds an MTP or EAGLE3
    draft under the target's attention config but for what --speculative-config sets (eagle/utils.py:86,
    config/speculative.py:396-403): its `draft_backend` where the point has one, else the point's backend, which a
    point with a draft dtype of its own assumes pinned by --attention-backend. vLLM validates that backend at the
    draft's dtype (v1/attention/backend.py:306-307) and refuses it where its class does not declare it. A DFLASH
    draft's backend is the one pinned (`draft_backend`) or, unpinned, selected for its non-causal attention
    (dflash/utils.py:26-33), FLASH_ATTN on sm_90, which declares both dtypes; a DSpark draft's at its dtype, pinned or
    not (kimi_k3_dspark.built)."""
    if "draft_backend" in point:
        return point.get("draft_dtype", point["dtype"]) in declared[point["draft_backend"]]
    return "draft_dtype" not in point or model.draft == "dspark" or point["draft_dtype"] in declared[point["backend"]]


def _grid(model: catalog.Model) -> list[dict[str, Any]]:
    """Pipeline stages: pp 2 at every tp, pp 4 and 8 at tp 1. Which stage lacks an attention
    layer (pp_block_size) depends on pp alone and a stage's block on tp alone, so deeper pipelines
    at tp > 1 repeat what these points show, and each stage costs a planning: pp 4 and 8 at every
    tp up to 8 made the domain 7,080 stage plannings, 2 min 43 s of CPU and 4 min 35 s wall on the
    2 shared cores (the gate allows 5), against 3,240 here. A backend whose assumption axes multiply
    its points (FLASHINFER) plans pp 2 at tp 1 only; a model class that is not SupportsPP, none."""
    hf = json.loads(model.config_text())
    specs: tuple[int | None, ...] = model.speculative or (None,)
    shapes = [(tp, pp) for pp in (1, *PIPELINE) for tp in model.tps(hf)
              if (pp <= 2 or tp == 1) and (pp == 1 or model.pipeline(hf))]
    # a user's config.json names its points, so that its findings are its own in a baseline
    named = {"model": model.user_config.name} if model.user_config else {}
    return [{**named, "tp": tp, "dtype": dtype, "mamba_dtype": mamba, "prefix": "on" if prefix else "off",
             "backend": backend.label, **({} if spec is None else {"spec": spec}), **draft_axis, **drafted, "pp": pp,
             **assumed}
            for backend in model.backends for prefix in model.prefix_caching for spec in specs
            for drafted in _draft_backends(model, backend, spec)
            for assumed in _assumptions(model, backend, drafted.get("draft_backend"))
            for dtype in DTYPES for draft_axis in _draft_dtypes(model, spec, dtype)
            for mamba in MAMBA_DTYPES for tp, pp in shapes
            if (pp == 1 or not spec) and (backend.all_stages or pp == 1 or (tp, pp) == (1, 2))]


def _draft_dtypes(model: catalog.Model, spec: int | None, dtype: str) -> list[dict[str, str]]:
    """A drafted point's draft KV dtypes: the target's (no axis: `--speculative-config` gives none), and each other
    one as the draft's own (its kv_cache_dtype, which vLLM builds the draft's layers under: v1/worker/gpu/
    spec_decode/eagle/utils.py:86 and config/speculative.py:396-403, dspark/utils.py:104-112, dflash/utils.py:
    34-41); the target's own named too where the draft's layers keep the copy of the cache config vLLM makes for
    any named dtype (catalog.Model.draft_keeps_cache_config)."""
    if not spec or model.draft in (None, "ngram"):
        return [{}]
    return [{}, *({"draft_dtype": named} for named in DTYPES if named != dtype or model.draft_keeps_cache_config)]


def _draft_backends(model: catalog.Model, backend: catalog.Backend, spec: int | None) -> list[dict[str, str]]:
    """A drafted point's draft backends: the target's (no axis), and each of catalog.Model.draft_backends. Unpinned,
    the draft's layers select their backend at the draft's KV dtype, one of these (on sm_90 an MLA draft at bf16 gets
    FLASH_ATTN_MLA where an fp8 target gets FLASHMLA, cuda.py:150-153)."""
    if not spec:
        return [{}]
    return [{}, *({"draft_backend": other.label} for other in model.draft_backends(backend))]


def _stages(model: catalog.Model) -> int:
    """The stage plannings of the model's whole domain: what a shard is dealt by (a planning's CPU differs about
    tenfold between the catalog's models, their stage plannings fiftyfold)."""
    return sum(p["pp"] for p in _grid(model))


def _assumptions(model: catalog.Model, backend: catalog.Backend, draft_backend: str | None = None
                 ) -> list[dict[str, Any]]:
    """The deployment facts a backend's points assume, every value of each: whether FlashInfer's
    TRTLLM kernels are obtainable (FLASHINFER asks, the target's backend or the draft's), the CUDA runtime's major
    version (where the model's state layer asks it)."""
    out: list[dict[str, Any]] = [{}]
    drafts = [b for b in model.every_backend if b.label == draft_backend]
    if any(b.trtllm_kernels is not None for b in (backend, *drafts)):
        out = [{**a, "trtllm": value} for a in out for value in TRTLLM]
    if backend.gpu in model.cuda_runtime_at:
        out = [{**a, "cuda_runtime": major} for a in out for major in CUDA_RUNTIMES]
    return out


def verify(recipes: Sequence[str] | None, tps: Sequence[int] | None, dtypes: Sequence[str] | None,
           engine_path: str | None, drafts: Sequence[int] | None = None, models: Sequence[str] | None = None,
           assume: Sequence[str] | None = None, padding_bound: Bound = CONTRACT,
           config: str | None = None, shard: shards.Shard | None = None,
           algorithms: Sequence[str] | None = None) -> EngineRun:
    """The installed vLLM, or the checkout at --engine-path (its Python files plan; the installed
    wheel's dependencies serve it, and no compiled extension is needed); `shard`, one part of the
    chosen models (engines/shards.py)."""
    given = [flag for flag, value in (("--drafts", drafts), ("--algorithm", algorithms), ("--model", models)) if value]
    if given:
        raise EngineError(f"{' and '.join(given)} {'do' if len(given) > 1 else 'does'} not apply to vllm: --recipe "
                          "names the model, and its drafts are --assume spec=")
    mine = user_config.load(config, recipes)
    checkout = use_checkout(engine_path) if engine_path else None
    release = checkout[0] if checkout else version()
    _supported(release)
    try:
        return run(recipes, {"tp": tps, "dtype": dtypes, **_assumed(assume)}, padding_bound, checkout, shard=shard,
                   user_config=mine)
    except EngineError:
        raise
    except platform.Unsupported as err:  # this vLLM lacks what the adapter follows (platform.modules)
        raise EngineError(f"unsupported: vllm {release}: {err}") from None
    except Exception as err:  # loading vLLM's modules, before any point plans
        raise _adapter_error(err) from None


# The oldest vLLM release the adapter follows: it plans 0.30.0 to 0.33.0 through the functions each one's
# engine core calls (docs/engines/vllm-releases.md). An older release is refused by its version stamp; a
# checkout without one is planned if it has what the adapter follows, and refused (platform.Unsupported)
# if it does not.
OLDEST = (0, 30)


def _supported(release: str) -> None:
    found = re.match(r"(\d+)\.(\d+)", release)
    if found and (int(found.group(1)), int(found.group(2))) < OLDEST:
        raise EngineError(f"unsupported: vllm {release} is older than {OLDEST[0]}.{OLDEST[1]}.0, the oldest release "
                          "kvproof's adapter follows (docs/engines/vllm-releases.md); the hybrid block alignment it "
                          f"runs entered Platform._align_hybrid_block_size in {platform.ALIGNMENT_SINCE}")


def _adapter_error(err: Exception, where: str = "") -> EngineError:
    """One line for what the adapter cannot plan before any point: a piece it does not model
    (StubUsed), or a vLLM whose functions moved from the ones it follows (a checkout)."""
    if isinstance(err, planner.StubUsed):
        return EngineError(f"{where}{err}; the adapter must model this first")
    return EngineError(f"{where}{type(err).__name__}: {_one_line(err)}; kvproof's adapter follows vLLM 0.30.0 to "
                       "0.33.0 and this vLLM differs there: the adapter must follow it first")


REFUSALS = (ValueError, NotImplementedError, AssertionError)  # vLLM's own ways of refusing a point


def _gap(err: Exception, call: str | None = None) -> verdict.AdapterGap:
    """The adapter gap an exception is (the call that failed: `call`, or the frame that decided it)."""
    if isinstance(err, verdict.AdapterGap):
        return err
    found = verdict.blame(err, [_package()])
    if call is not None:
        return verdict.AdapterGap(f"{call}, at {verdict.where(found)}", f"{type(err).__name__}: {_one_line(err)}")
    return verdict.gap(err, found)


def _judge(err: Exception) -> verdict.AdapterGap | None:
    """None when vLLM refused the point (one of REFUSALS, raised in vLLM's code: a `boots`
    counterexample); else the adapter gap it is: kvproof's code failing (a moved function, a call
    shape, a stand-in used), or vLLM failing in a way that is no refusal (an import, a missing name)."""
    if isinstance(err, REFUSALS) and verdict.blame(err, [_package()]).engine:
        return None
    return _gap(err)


def _package() -> Path:
    return Path(importlib.import_module("vllm").__file__ or "").parent


def use_checkout(path: str) -> tuple[str, str, str | None]:
    """Put a vLLM checkout first on sys.path: (version, where, commit). Its version is what its
    build wrote to vllm/_version.py (`pip install --no-deps -e` writes it), else `unknown`."""
    root = Path(path).resolve()
    if not (root / "vllm" / "__init__.py").is_file():
        raise EngineError(f"--engine-path {path}: no vllm/__init__.py there; give the root of a vLLM checkout")
    loaded = sys.modules.get("vllm")
    if loaded is not None and not Path(loaded.__file__ or "").resolve().is_relative_to(root):
        raise EngineError(f"--engine-path {path}: vllm is already imported from {loaded.__file__}")
    sys.path.insert(0, str(root))
    # a vLLM that inspects a model class in a subprocess (model_executor/models/registry.py,
    # _run_in_subprocess, where platform._inspect_here finds no such function) must import the checkout
    # there too, not the installed wheel
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
    stamp = root / "vllm" / "_version.py"
    found = re.search(r"""__version__ = version = ['"]([^'"]+)""", stamp.read_text()) if stamp.is_file() else None
    return found.group(1) if found else "unknown", f"checkout {root}", commit_at(root, short=True)


def run(recipes: Sequence[str] | None = None, only: dict[str, Sequence[Any] | None] | None = None,
        padding_bound: Bound = CONTRACT, checkout: tuple[str, str, str | None] | None = None,
        workers: int | None = None, shard: shards.Shard | None = None,
        user_config: UserConfig | None = None) -> EngineRun:
    """The run; `workers` processes plan it (this one included; default: see _spread); `shard`: only the
    chosen models that shard is dealt, by their stage plannings (_stages); `user_config`: a config.json
    planned at the one recipe's points in place of its own (--config)."""
    start = time.perf_counter()
    release, where, commit = checkout or (version(), "installed", None)
    unknown = sorted(name for name in recipes or () if name not in catalog.FAMILIES and catalog.model(name) is None)
    if unknown:
        raise EngineError(f"kvproof plans no vllm model {unknown[0]!r}; it has: {', '.join(catalog.MODELS)}; and "
                          f"the stated families: {', '.join(catalog.FAMILIES)}")
    names = _named(recipes, user_config) if recipes else list(catalog.MODELS)
    if user_config is not None and len(names) != 1:
        raise EngineError("--config FILE is one checkpoint of one recipe: name that recipe with --recipe R")
    models = _models(names, user_config)
    part = ""
    if shard:
        if any((only or {}).values()):
            raise EngineError("--shard deals whole models: choose them with --recipe, not a narrowing of their points "
                              "(--tp, --dtype, --assume), which could leave one shard no point where another has some")
        everyone = len(names)
        names = shards.chosen({name: _stages(models[name]) for name in names}, shard, ENGINE)
        part = f", shard {shard[0]} of {shard[1]}: {len(names)} of {everyone} models ({', '.join(names)})"
    platform.cuda_assumed(platform.modules())  # what the adapter follows is there, or platform.Unsupported
    domains = {name: _domain(models[name], only) for name in names}
    chosen = {name: domain[0] for name, domain in domains.items()}
    empty = [name for name in names if not chosen[name] and not domains[name][1]]
    if len(empty) == len(names):
        raise EngineError(_no_point([models[name] for name in names], only))
    if recipes and empty:  # a model asked for by name must be planned, or the run says less than asked
        raise EngineError(f"--recipe {empty[0]}: the narrowing leaves it no point; "
                          f"{_no_point([models[empty[0]]], only)}")
    plannings = {name: chosen[name] + _tp1_references(models[name], chosen[name])
                 for name in names if name not in empty}
    planned = _spread(models, plannings, only, padding_bound, workers, user_config)
    results = []
    for name, planning in plannings.items():
        checked = iter(cross_tp([o for o in planned[name] if not isinstance(o, verdict.AdapterGap)]))
        outcomes: list[PointResult | tuple[dict[str, Any] | None, verdict.AdapterGap]] = [
            (p, o) if isinstance(o, verdict.AdapterGap) else next(checked)
            for p, o in zip(planning, planned[name], strict=True)]
        # a point kvproof's adapter cannot plan at this vLLM makes its model NOT VERIFIED (adapter); the
        # tp-1 references (after the chosen points) are not the run's
        result = verdict.adapter_result(name, [*outcomes[:len(chosen[name])], *domains[name][1]],
                                        models[name].stated_limits)
        # a family member's points stand for its family, never for a checkpoint; of its members, the run's
        results.append(replace(result, coverage=_coverage(models[name], [m for n, m in models.items()
                                                                          if n not in empty])))
    source = f"vllm {release} ({where}, planned on CPU){part}"
    if empty:
        source += f", narrowed out: {', '.join(empty)} (no point of theirs matches)"
    if mutants.active():
        source += f", mutated: {', '.join(mutants.active())}"
    return EngineRun(ENGINE, release, source, commit, tuple(results), time.perf_counter() - start)


def _named(recipes: Sequence[str], user_config: UserConfig | None) -> list[str]:
    """The models the recipes name: a stated family's name names its default members, or with a user's
    config.json its first (the file is one checkpoint, planned at a member's points)."""
    names: list[str] = []
    for name in recipes:
        members = [m.name for m in catalog.FAMILIES[name][0].members()] if name in catalog.FAMILIES else [name]
        names += members[:1] if user_config is not None else members
    return list(dict.fromkeys(names))


def _models(names: list[str], user_config: UserConfig | None) -> dict[str, catalog.Model]:
    """The models by name (the caller checked each is one kvproof plans), the one named planning
    `user_config` where given (the caller checked that one alone is named)."""
    models = {name: model for name in names if (model := catalog.model(name)) is not None}
    if user_config is not None:
        models[names[0]] = catalog.at_config(models[names[0]], user_config)
    return models


def _coverage(model: catalog.Model, planned: list[catalog.Model]) -> verdict.Coverage | None:
    """What the model's points stand for, a family's members enumerated counted in the run's models (all of
    them, whichever shard plans each, as the unsharded run would count them)."""
    coverage, member = model.coverage, model.member
    if coverage is None or member is None:
        return coverage
    return replace(coverage, enumerated=sum(1 for m in planned if m.member and m.member.family is member.family))


def _no_point(models: list[catalog.Model], only: dict[str, Sequence[Any] | None] | None) -> str:
    """Which narrowed value no point of these models has, and the values they do have."""
    names = [m.recipe for m in models] if len(models) <= 3 else [f"the {len(models)} models chosen"]
    grids = [p for model in models for p in _grid(model)]
    for axis, want in (only or {}).items():
        have = sorted({str(p[axis]) for p in grids if axis in p} | (
            {str(p[axis]).split("@")[0] for p in grids} if axis == "backend" else set()),
            key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))
        missing = [str(w) for w in want or () if str(w) not in have]
        if missing:
            return (f"no point of {', '.join(names)} has {axis} {', '.join(missing)}; "
                    f"{axis} takes {', '.join(have) if have else 'no value there'}")
    example = grids[:2]
    return ("no point matches the narrowing as a whole; points look like: "
            + "; ".join(map(_describe, example)))


def _tp1_references(model: catalog.Model, chosen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tp-1 points that `tp_block_size` compares the chosen points with, where the narrowing
    left them out: planned for their block size only (their own findings are not the run's), so a
    narrowed run checks what the full run checks and finds a known finding live, never stale."""
    def key(p: dict[str, Any]) -> tuple:
        return tuple(sorted(p.items()))

    in_grid, seen = {key(p) for p in _grid(model)}, {key(p) for p in chosen}
    out: list[dict[str, Any]] = []
    for p in chosen:
        reference = {**p, "tp": 1}
        if key(reference) in in_grid and key(reference) not in seen:
            seen.add(key(reference))
            out.append(reference)
    return out


def _spread(models: dict[str, catalog.Model], plannings: dict[str, list[dict[str, Any]]], only: Only | None,
            padding_bound: Bound, workers: int | None, user_config: UserConfig | None) -> dict[str, list[Outcome]]:
    """Each model's outcomes (_plan_all), its points planned in chunks by `workers` processes, this one
    included; by default one per core once the run has SPREAD_FROM stage plannings. A worker is forked
    where the platform forks (it starts with this process's vLLM modules and backends, imported before
    any point planned: importing them again cost each worker seconds of CPU), else spawned to start as
    this process did (vLLM's modules, then each model's backends in order); either way with the seeded
    faults on that are on here. This process takes chunks from the end while the workers take them from
    the start."""
    stages = sum(p["pp"] for points in plannings.values() for p in points)
    if workers is None:
        workers = _cores() if stages >= SPREAD_FROM else 1
    seen = Seen()
    with progress.task(sum(map(len, plannings.values())), "vllm", "points") as shown:
        if workers <= 1:
            return {name: _plan_all(models[name], points, padding_bound, seen, shown)
                    for name, points in plannings.items()}
        return _spread_over(models, plannings, (only, user_config), padding_bound, workers, stages, seen, shown)


Chunk = tuple[str, list[dict[str, Any]], list[int]]  # a model, some of its points, and their indices in its list


def _spread_over(models: dict[str, catalog.Model], plannings: dict[str, list[dict[str, Any]]],
                 asked: tuple[Only | None, UserConfig | None], padding_bound: Bound, workers: int, stages: int,
                 seen: Seen, shown: progress.Task) -> dict[str, list[Outcome]]:
    size = -(-stages // (workers * CHUNKS_PER_PROCESS))
    # models of one class next to each other: two checkpoints of one geometry (Qwen3.5 and its Qwen3.6 release)
    # often plan alike, and a process checks a plan once (Seen), so one process had better plan both
    by_class = sorted(plannings, key=lambda name: str(json.loads(models[name].config_text()).get("architectures")))
    chunks = [(name, [plannings[name][i] for i in part], part) for name in by_class
              for part in _parts(plannings[name], size)]

    def here(chunk: Chunk) -> list[Outcome]:
        return _plan_all(models[chunk[0]], chunk[1], padding_bound, seen, shown)

    def counted(i: int) -> None:
        shown.advance(len(chunks[i][1]), chunks[i][0])

    done = spread.run(chunks, partial(_plan_chunk, padding_bound), here, workers, counted, _START,
                      _prepare_worker, (list(plannings), *asked, faults.switched_on()))
    at: dict[str, dict[int, Outcome]] = {name: {} for name in plannings}
    for (name, _, part), outcomes in zip(chunks, done, strict=True):
        at[name].update(zip(part, outcomes, strict=True))
    return {name: [outcomes[i] for i in range(len(outcomes))] for name, outcomes in at.items()}


# How a worker starts: forked, where it can be, before this process has planned anything or started a thread
# of its own (the executor forks every worker at its first submit, before its own thread starts).
_START = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# The axes whose values often plan alike: the assumptions planner.Plans may plan once, and prefix caching,
# which at many points leaves the plan as it is (a plan checked once per process: _check).
ALIKE = ("trtllm", "cuda_runtime", "prefix")


def _parts(points: list[dict[str, Any]], size: int) -> Iterator[list[int]]:
    """The points' indices in runs of about `size` stage plannings each (a point of pp k plans k), points
    that differ only in ALIKE next to each other, so that one process plans and checks them."""
    alike: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        alike.setdefault(tuple((k, v) for k, v in p.items() if k not in ALIKE), []).append(i)
    part: list[int] = []
    stages = 0
    for group in alike.values():
        part += group
        stages += sum(points[i]["pp"] for i in group)
        if stages >= size:
            yield part
            part, stages = [], 0
    if part:
        yield part


@dataclass
class Seen:
    """What a process has planned and checked in a run: each distinct configuration is planned once
    (planner.Plans), each distinct plan checked once (_check)."""

    plans: planner.Plans = field(default_factory=planner.Plans)
    checks: verdict.Checked = field(default_factory=dict)


_SEEN = Seen()  # a worker's (a worker serves one run)
_MODELS: dict[str, catalog.Model] = {}  # the models of a worker's run, as _models made them


def _prepare_worker(names: list[str], only: Only | None, user_config: UserConfig | None,
                    on: frozenset[str]) -> None:
    faults.switch_on(on)
    platform.cuda_assumed(platform.modules())
    _MODELS.update(_models(names, user_config))
    for name in names:
        _domain(_MODELS[name], only)


def _plan_chunk(padding_bound: Bound, chunk: Chunk) -> list[Outcome]:
    return _plan_all(_MODELS[chunk[0]], chunk[1], padding_bound, _SEEN)


def _plan_all(model: catalog.Model, chosen: list[dict[str, Any]], padding_bound: Bound,
              seen: Seen | None = None, shown: progress.Task | None = None) -> list[Outcome]:
    """Each point's result and block size, or the adapter gap that kept kvproof from planning it;
    `seen`: what was planned and checked before in the run; `shown`: the run's progress, each point counted."""
    seen = Seen() if seen is None else seen
    backends = {b.label: b for b in model.every_backend}
    out: list[Outcome] = []
    for p in chosen:
        backend = backends[p["backend"]]
        bound = (None if p.get("spec") else PADDING_BOUND) if padding_bound == CONTRACT else padding_bound
        takes_draft_dtype = len(_draft_dtypes(model, p.get("spec"), p["dtype"])) > 1
        takes_draft_backend = len(_draft_backends(model, backend, p.get("spec"))) > 1
        replay = (f"verify engine vllm --recipe {model.recipe} --tp {p['tp']} --dtype {p['dtype']} --assume "
                  f"backend={backend.label} mamba_dtype={p['mamba_dtype']} prefix={p['prefix']}"
                  + (f" spec={p['spec']}" if "spec" in p else "")
                  + (f" draft_dtype={p.get('draft_dtype', TARGET_DTYPE)}" if takes_draft_dtype else "")
                  + (f" draft_backend={p.get('draft_backend', TARGET_BACKEND)}" if takes_draft_backend else "")
                  + f" pp={p['pp']}"
                  + "".join(f" {axis}={p[axis]}" for axis in ("trtllm", "cuda_runtime") if axis in p)
                  + (f" --config {model.user_config.path}" if model.user_config else ""))
        ranks: list[tuple[PointResult, planner.Planned]] = []
        stopped: PointResult | verdict.AdapterGap | None = None
        for rank in range(p["pp"]):
            try:
                planned = seen.plans.plan(planner.Point(model, p["tp"], p["dtype"], p["mamba_dtype"],
                                                        p["prefix"] == "on", backend, p.get("spec", 0), p["pp"],
                                                        rank, p["trtllm"] == "on" if "trtllm" in p else None,
                                                        p.get("cuda_runtime"), p.get("draft_dtype"),
                                                        backends[p["draft_backend"]] if "draft_backend" in p
                                                        else None),
                                          mutants.applied)
            except Exception as err:
                gap = _judge(err)
                if gap is None:  # vLLM refused a point it supports
                    where = f"rank {rank}: " if p["pp"] > 1 else ""
                    stopped = verdict.from_refusal(model.recipe, p, f"{where}{type(err).__name__}: {_one_line(err)}",
                                                   False, replay)
                else:  # not a refusal: a piece the adapter does not model, or a function that moved
                    stopped = gap
                break
            try:
                checked = verdict.planned_once(seen.checks, model.recipe, p, planned.documents, replay, bound)
            except ConfigError as err:  # bindings that are no one plan in N: a layer whose offset moves with N
                stopped = verdict.AdapterGap("planner.document", "vLLM's plan read into a plan kvproof refuses: "
                                             + verdict.one_line(err))
                break
            ranks.append((checked, planned))
        if isinstance(stopped, verdict.AdapterGap):
            out.append(stopped)
        elif stopped is not None:
            out.append((stopped, None))
        elif p["pp"] == 1:
            out.append((ranks[0][0], ranks[0][1].block_size))
        else:
            out.append(_pipeline(ranks))
        if shown is not None:
            shown.advance(1, model.recipe)
    return out


def _pipeline(ranks: list[tuple[PointResult, planner.Planned]]) -> tuple[PointResult, int | None]:
    """One point of several pipeline stages: every stage's plan checked, and one block size for all
    of them. Each stage's worker aligns its own block size on the layers it built, and a stage that
    built no attention layer skips the alignment (interface.py:763-765), so its blocks disagree with
    the others' (vllm#51752) while the engine merges all stages' groups into one scheduler config."""
    results = [r for r, _ in ranks]
    plans = [pl for _, pl in ranks]
    findings = tuple(Finding(f.property, f"rank {i}: {f.message}") for i, r in enumerate(results) for f in r.findings)
    sizes = {pl.block_size for pl in plans}
    if len(sizes) > 1:
        at: dict[int, list[str]] = {}
        for i, pl in enumerate(plans):
            at.setdefault(pl.block_size, []).append(
                str(i) if pl.attention else f"{i} (no attention layer among layers {pl.layers[0]}-{pl.layers[1] - 1})")
        stages = "; ".join(f"{size} tokens at rank {', '.join(names)}" for size, names in at.items())
        findings += (Finding(PP_BLOCK_SIZE, f"pipeline stages plan different block sizes ({stages}): a stage "
                             "without an attention layer skips the hybrid alignment (vllm#51752)"),)
    worst = max(results, key=lambda r: r.parent_bytes or 0)
    low = max(r.parents[0] for r in results if r.parents) if all(r.parents for r in results) else None
    high = min(r.parents[1] for r in results if r.parents) if all(r.parents for r in results) else None
    merged = PointResult(worst.recipe, worst.point, "counterexample" if findings else "ok", findings, worst.packing,
                         worst.parent_bytes, max(r.worst_padding or 0.0 for r in results),
                         (low, high) if low is not None and high is not None else None, worst.replay)
    return merged, sizes.pop() if len(sizes) == 1 else None


def cross_tp(planned: list[tuple[PointResult, int | None]]) -> list[PointResult]:
    """Add `tp_block_size` to every point whose block size differs from its tp-1 sibling's."""
    def key(p: PointResult) -> tuple:
        return tuple(sorted((a, str(v)) for a, v in p.point.items() if a != "tp"))

    at_tp1 = {key(p): block for p, block in planned if p.point["tp"] == 1 and block is not None}
    out = []
    for p, block in planned:
        base = at_tp1.get(key(p))
        if block is None or base is None or base == block:
            out.append(p)
            continue
        finding = Finding(TP_BLOCK_SIZE, f"block size {block} tokens at tp={p.point['tp']} but {base} at tp=1: a "
                          "disaggregated prefill/decode pair at these tp cannot share block ids (vllm#41037)")
        replay = p.replay.replace(f"--tp {p.point['tp']} ", f"--tp 1 {p.point['tp']} ")  # the pair shows it
        out.append(PointResult(p.recipe, p.point, "counterexample", (*p.findings, finding), p.packing,
                               p.parent_bytes, p.worst_padding, p.parents, replay))
    return out


def _assumed(assume: Sequence[str] | None) -> dict[str, list[Any]]:
    """--assume NAME=VALUE ...: the backend assumed, and the axes with no flag of their own
    (spec: the speculative tokens, by the model's own draft or by ngram)."""
    known = {"backend": sorted({name for m in catalog.MODELS.values() for b in m.every_backend
                                for name in (b.name, b.label)}),
             "mamba_dtype": list(MAMBA_DTYPES), "prefix": ["on", "off"],
             "spec": sorted({str(s) for m in catalog.MODELS.values() for s in m.speculative}),
             "draft_dtype": [TARGET_DTYPE, *DTYPES],
             "draft_backend": sorted({TARGET_BACKEND} | {name for m in catalog.MODELS.values()
                                                         for b in m.every_backend for name in (b.name, b.label)}),
             "pp": [str(pp) for pp in (1, *PIPELINE)], "trtllm": list(TRTLLM),
             "cuda_runtime": [str(major) for major in CUDA_RUNTIMES]}
    out: dict[str, list[Any]] = {}
    for pair in assume or ():
        key, _, value = pair.partition("=")
        if value not in known.get(key, ()):
            takes = "; ".join(f"{k}={'|'.join(v)}" for k, v in known.items())
            raise EngineError(f"--assume {pair}: vllm takes {takes}")
        out.setdefault(key, []).append(int(value) if key in ("spec", "pp", "cuda_runtime") else value)
    return out


def _one_line(err: Exception) -> str:
    """The message, and where in vLLM it was raised (a bare assert has no message of its own)."""
    package = Path(importlib.import_module("vllm").__file__ or "").parent
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).is_relative_to(package)]
    where = f" at vllm/{Path(frames[-1].filename).relative_to(package)}:{frames[-1].lineno}" if frames else ""
    return (" ".join(str(err).split())[:300] or "assertion failed") + where


def _describe(point: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


ADAPTER: EngineAdapter = Adapter(name=ENGINE, verify=verify, cross_point=frozenset(CROSS_POINT),
                                 mutants=mutants.MUTANTS, baseline=BASELINE)
