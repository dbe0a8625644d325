"""`verify engine sglang`: SGLang's hybrid pools at every point of each model's domain.

A point is (attention tp, --kv-cache-dtype, page size, --enable-unified-memory). At each, SGLang's own
classes build the pools on the meta device: the separate pools (planner.py), every allocation (a Mamba
state tensor, a full-attention layer's K/V buffer), or with unified memory the one buffer both share
(unified.py), each sub-pool; each is read into a plan document and checked with the shared encoding, and the
allocations' verdicts merge into the point's: a finding names its allocation, the point is a
counterexample when any allocation has one. SGLang's own code refusing a point (an assertion in
its state shapes, a ValueError resolving the dtype) is that point's `boots` counterexample.

Where SGLang's launch reads the point's values from:
- tp: the model's layers assert their head split (Recipe.tps, each recipe's lines cited). Every tp
  up to the head count that passes those asserts is in the domain; what SGLang's pool code then
  refuses at one of them is a finding.
- --kv-cache-dtype: the choices of arg_groups/fields/model.py:209-218 that the non-unified hybrid
  path stores in its plain MHA or MLA pool (DTYPES), and for an MHA model mxfp8, its block-scaled pool
  (MXFP8); SGLang has no fp16 choice.
- page size: MHA_PAGES or MLA_PAGES, each with the line that sets it; mxfp8 only at MXFP8_PAGES.
- unified memory: UNIFIED_VALUES, off (the default) and on.
- the Mamba state dtypes (VARIED): each value but the default at every tp, the other axes at their
  first value (Recipe.points says why that plans every layout the other combinations have).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvproof.cli import progress
from kvproof.engines import shards, spread, verdict
from kvproof.engines.interface import Adapter, EngineAdapter
from kvproof.engines.sglang import loader, mutants, pairs, sizing
from kvproof.engines.stubs import StubUsed
from kvproof.engines.verdict import AdapterGap, EngineError, EngineRun, Finding, PointResult, RecipeResult
from kvproof.spec.catalog import ConfigError

if TYPE_CHECKING:  # the planner imports torch: at run time only when SGLang plans
    from kvproof.engines.sglang.planner import Patches

ENGINE = "sglang"
BASELINE = Path(__file__).with_name("baseline.json")  # the known findings of the released version
# "auto" resolves to the checkpoint's dtype and "bf16" to bfloat16 (mem_cache/kv_cache_dtype.py:49-75);
# both fp8 formats are stored as uint8 by MHATokenToKVPool (memory_pool.py:2030-2031).
DTYPES = ("auto", "bf16", "fp8_e4m3", "fp8_e5m2")
# the block-scaled pool the hybrid path builds for an MHA model (kv_cache_configurator.py:2736-2739); an MLA
# model gets its MLA pool before that test (2734-2735), storing mxfp8 as float8_e4m3fn (kv_cache_dtype.py:72-73)
# exactly as fp8_e4m3 (67-71): the same pool, the same layout, so no MLA recipe plans it
MXFP8 = "mxfp8"
# MHATokenToKVPoolMXFP8 writes only the scale layout it interleaves at page 128 (memory_pool.py:3918, 4040-4042),
# the page FA4, the backend mxfp8 is for (arg_groups/fields/model.py:203-204), forces for an MHA model
# (arg_groups/overrides.py:1294-1296)
MXFP8_PAGES = (128,)
# and only with unified memory off: _init_unified_mamba_pools hands the unified pool the torch dtype alone
# (kv_cache_configurator.py:901), float8_e4m3fn for mxfp8 as for fp8_e4m3, so it is fp8_e4m3's pool, with no
# scale buffers (unified_memory_pool.py allocates none)
MXFP8_UNIFIED = ("off",)
DEFAULT_PAGE = 1  # where no backend sets one, on every platform but MUSA (arg_groups/overrides.py:1361-1362)
MHA_PAGES = (
    DEFAULT_PAGE,
    64,  # what the TensorRT-LLM MHA backend changes an unsupported page to (arg_groups/overrides.py:1183-1187);
    # the sm_100 default with trtllm_mha for Qwen3-Next (model_overrides/qwen3_5.py:48) and Nemotron-H
    # with speculative decoding (model_overrides/nemotron_h.py:130-132)
    128,  # the page FA4 forces on sm_100 for a model that is not MLA (arg_groups/overrides.py:1294-1296)
)
MLA_PAGES = (
    DEFAULT_PAGE,
    64,  # FlashMLA's, and what TensorRT-LLM MLA changes an unsupported page to (arg_groups/overrides.py:1147-1163)
)
PAGE = "page_size"  # an --assume axis: page size has no flag of its own in `verify engine`
UNIFIED = "unified"  # an --assume axis: --enable-unified-memory (arg_groups/fields/memory.py:78-85), off or on
# off: the launch default (the separate pools of planner.py); on: one byte buffer for both (unified.py), built
# for every hybrid Mamba model of RECIPES (kv_cache_configurator.py:619-624)
UNIFIED_VALUES = ("off", "on")
# --assume axes: the Mamba state dtypes, the default first. The conv states' from SGLANG_MAMBA_CONV_DTYPE
# (environ.py:1628: bfloat16 unset; configs/mamba_utils.py:64-68 maps the three), the SSM states' from
# --mamba-ssm-dtype (arg_groups/fields/exec_.py:490-496), unset the config's mamba_ssm_dtype or float32
# (mamba_utils.py:70-92): float32 for every recipe here (a test reads it from SGLang)
MAMBA_CONV, MAMBA_SSM = "mamba_conv", "mamba_ssm"
MAMBA_CONV_VALUES = ("bfloat16", "float32", "float16")
MAMBA_SSM_VALUES = ("float32", "bfloat16", "float16")
ALSO_NOT_MODELLED = ("speculative decoding in the planned pools' layouts (sizing.py sizes its Mamba buffers); "
                     "pipeline stages; transfers")
FP4_NOT_MODELLED = (
    "--kv-cache-dtype nvfp4 / fp4_mx_block16 (a quant method's packed data and scales, "
    "mem_cache/kv_cache_configurator.py:436-455, whose buffers follow the attention backends the launch resolves, "
    "layers/quantization/fp4_kv_cache_quant_method.py:143-158, 572-660)"
)
NOT_MODELLED = f"not modelled yet: {FP4_NOT_MODELLED}; {ALSO_NOT_MODELLED}"
MLA_NOT_MODELLED = (
    f"not modelled yet: {FP4_NOT_MODELLED} for an MLA pool; mxfp8 is not planned for one: it gets the plain MLA pool "
    f"in float8_e4m3fn (kv_cache_configurator.py:2734-2735), fp8_e4m3's layout; {ALSO_NOT_MODELLED}"
)


@dataclass(frozen=True)
class Recipe:
    """A model SGLang serves, from its published config.json, and the head counts its layers
    assert tp divides."""

    name: str
    config: str  # under kvproof.engines: the published config file (its sources: vllm/models/SOURCES.md)
    pages: tuple[int, ...]
    # config keys (of the text config where the checkpoint has one; a dotted key reads a nested one): counts
    # tp must divide
    divides: tuple[str, ...]
    kv: str | None = None  # config key: KV heads, which tp divides or which are replicated to tp
    groups: str | None = None  # config key: groups, which tp divides or which are one
    limits: str = NOT_MODELLED
    dtypes: tuple[str, ...] = (*DTYPES, MXFP8)

    def hf(self) -> dict[str, Any]:
        text: dict[str, Any] = json.loads(resources.files("kvproof.engines").joinpath(self.config)
                                          .read_text(encoding="utf-8"))
        return text

    def tps(self, hf: dict[str, Any]) -> tuple[int, ...]:
        """Every tp the model's layers accept, up to its smallest divided count."""
        def count(key: str) -> int:
            value: Any = hf.get("text_config", hf)
            for step in key.split("."):
                value = value[step]
            return int(value)

        counts = [count(key) for key in self.divides]
        kv = count(self.kv) if self.kv else None
        groups = count(self.groups) if self.groups else 1
        return tuple(tp for tp in range(1, min(counts) + 1)
                     if all(c % tp == 0 for c in counts) and (kv is None or (kv % tp if kv >= tp else tp % kv) == 0)
                     and (groups % tp == 0 or groups == 1))

    def points(self) -> list[dict[str, Any]]:
        """Every tp, dtype and value of each --assume axis (ASSUMED), the Mamba state dtypes (VARIED) at
        their defaults; then at every tp the other values of VARIED, paired off in order, with every other
        axis at its first value. That plans every layout the other combinations have: the Mamba pool is
        built from none of the KV axes (HybridReqToTokenPool's arguments, kv_cache_configurator.py:1718-1752)
        and the KV pool from neither Mamba dtype (it is handed the built MambaPool, 2692-2712), and the conv
        and SSM states are tensors of their own (memory_pool.py: MambaPool.__init__), each of one dtype. That
        holds for the separate pools only: with unified memory both share one buffer, and the other Mamba dtypes
        are not planned there."""
        tps = self.tps(self.hf())
        values = {axis: of(self) for axis, of in ASSUMED.items()}
        fixed = {axis: vs[0] for axis, vs in values.items() if axis in VARIED}
        out = [{"tp": tp, "dtype": dtype, **dict(zip(ASSUMED, chosen, strict=True))}
               for tp in tps for dtype in self.dtypes
               for chosen in itertools.product(*((fixed[a],) if a in fixed else vs for a, vs in values.items()))
               if dtype != MXFP8 or _mxfp8(dict(zip(ASSUMED, chosen, strict=True)))]
        first = {axis: vs[0] for axis, vs in values.items()}
        others = itertools.zip_longest(*(values[axis][1:] for axis in VARIED))
        return out + [{"tp": tp, "dtype": self.dtypes[0], **first,
                       **{axis: v if v is not None else first[axis] for axis, v in zip(VARIED, pair, strict=True)}}
                      for pair in others for tp in tps]


def _mxfp8(values: dict[str, Any]) -> bool:
    """Whether SGLang builds the block-scaled pool at these --assume values (MXFP8_PAGES, MXFP8_UNIFIED)."""
    return values[PAGE] in MXFP8_PAGES and values[UNIFIED] in MXFP8_UNIFIED


# the axes with no flag of their own in `verify engine` (--assume NAME=VALUE): each recipe's values, every
# value in the default domain
ASSUMED: dict[str, Callable[[Recipe], tuple[Any, ...]]] = {
    PAGE: lambda recipe: recipe.pages,
    UNIFIED: lambda recipe: UNIFIED_VALUES,
    MAMBA_CONV: lambda recipe: MAMBA_CONV_VALUES,
    MAMBA_SSM: lambda recipe: MAMBA_SSM_VALUES,
}
VARIED = (MAMBA_CONV, MAMBA_SSM)  # planned apart from the product of the others (Recipe.points)


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    # Qwen3HybridAttentionDecoderLayer: heads divide by tp, KV heads divide or are replicated
    # (models/qwen3_next.py:623-634)
    Recipe("qwen3-next-80b-a3b", "vllm/models/qwen3-next-80b-a3b.json", MHA_PAGES, ("num_attention_heads",),
           kv="num_key_value_heads"),
    # Qwen3_5AttentionDecoderLayer: heads divide by tp, KV heads divide or are replicated
    # (models/qwen3_5.py:1293-1299); Qwen3_5MoeForConditionalGeneration (models/qwen3_5.py:3021)
    *(Recipe(name, f"vllm/models/{name}.json", MHA_PAGES, ("num_attention_heads",), kv="num_key_value_heads")
      for name in ("qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b")),
    # KimiLinearModel: heads divide by tp (models/kimi_linear.py:693-696); MLA keeps one latent head
    Recipe("kimi-linear-48b-a3b", "vllm/models/kimi-linear-48b-a3b.json", MLA_PAGES, ("num_attention_heads",),
           limits=MLA_NOT_MODELLED, dtypes=DTYPES),
    # KimiK3ForConditionalGeneration (models/kimi_k3.py:3876): its KDA heads divide by tp (KimiK3DeltaAttention,
    # models/kimi_k3.py:1542) and its MLA heads (KimiK3MLAAttention, a DeepseekV2AttentionMLA:
    # models/deepseek_v2.py:2057)
    Recipe("kimi-k3", "tokenspeed/models/kimi-k3.json", MLA_PAGES,
           ("num_attention_heads", "linear_attn_config.num_heads"), limits=MLA_NOT_MODELLED, dtypes=DTYPES),
    # NemotronHAttention: heads divide, KV heads divide or are replicated (models/nemotron_h.py:696-706);
    # MambaMixer2: Mamba heads divide, groups divide or are one (layers/attention/mamba/mamba.py:245-252)
    *(Recipe(name, f"vllm/models/{name}.json", MHA_PAGES, ("num_attention_heads", "mamba_num_heads"),
             kv="num_key_value_heads", groups="n_groups")
      for name in ("nemotron-3-nano-30b-a3b-bf16", "nemotron-3-ultra-550b-a55b-bf16")),
)}


def verify(recipes: Sequence[str] | None, tps: Sequence[int] | None, dtypes: Sequence[str] | None,
           engine_path: str | None, drafts: Sequence[int] | None = None, models: Sequence[str] | None = None,
           assume: Sequence[str] | None = None, padding_bound: Fraction | None = None,
           config: str | None = None, shard: shards.Shard | None = None, workers: int | None = None,
           algorithms: Sequence[str] | None = None) -> EngineRun:
    """The installed SGLang, or the checkout at --engine-path; SGLang states no padding bound, and
    none is held by default (`padding_bound`: --max-padding). `workers`: the processes that plan the
    points (default: spread.processes, one per core)."""
    if shard:
        raise shards.unsharded(ENGINE)
    if drafts or algorithms or models or config:
        raise EngineError("--drafts, --algorithm, --model and --config do not apply to sglang: --recipe names the "
                          "model, and no recipe plans draft layers yet")
    unknown = sorted(set(recipes or ()) - set(RECIPES))
    if unknown:
        raise EngineError(f"sglang has no recipe {unknown[0]!r}; kvproof plans: {', '.join(RECIPES)}")
    chosen = [RECIPES[name] for name in recipes or RECIPES]
    assume, sized = sizing.narrowing(assume)  # the sizing check's own axes (sizing.axes)
    only: dict[str, list[Any]] = {"tp": list(tps or ()), "dtype": list(dtypes or ()), **_assumed(assume)}
    domains = {r.name: r.points() for r in chosen}
    _check_narrowing(domains, only)
    wanted = {name: [p for p in points if all(not v or p[a] in v for a, v in only.items())]
              for name, points in domains.items()}
    # a recipe asked for by name must be planned, or the run says less than asked; one the narrowing
    # leaves no point of otherwise is named in the source, not reported as verified with no point
    empty = [name for name, points in wanted.items() if not points]
    if empty and (recipes or len(empty) == len(wanted)):
        raise EngineError(f"the narrowing leaves {', '.join(empty)} no point (each value is some recipe's, not "
                          "every combination)")
    source = loader.source_of(engine_path)
    start = time.perf_counter()
    try:
        with loader.session(source) as mods:
            results = _run(mods, source, [(r, wanted[r.name]) for r in chosen if wanted[r.name]], engine_path,
                           padding_bound, sized, workers)
    except (StubUsed, AdapterGap, ImportError) as err:  # importing SGLang's modules, before any point
        raise EngineError(f"loading sglang {source.version} ({source.where}): {type(err).__name__}: "
                          f"{verdict.one_line(err)}; the adapter must follow it first") from None
    where = f"sglang {source.version} ({source.where}, pools built on the meta device)"
    if empty:
        where += f", narrowed out: {', '.join(empty)} (no point of theirs matches)"
    if mutants.active():
        where += f", mutated: {', '.join(mutants.active())}"
    return EngineRun(ENGINE, source.version, where, source.commit, tuple(results), time.perf_counter() - start)


def _assumed(assume: Sequence[str] | None) -> dict[str, list[Any]]:
    """--assume NAME=VALUE ...: for each axis of ASSUMED, the values asked for (none: every value),
    each one some recipe's."""
    known = {axis: sorted({v for r in RECIPES.values() for v in values(r)}) for axis, values in ASSUMED.items()}
    out: dict[str, list[Any]] = {axis: [] for axis in ASSUMED}
    for pair in assume or ():
        key, _, value = pair.partition("=")
        spelled = {str(v): v for v in known.get(key, ())}
        if value not in spelled:
            takes = "; ".join(f"{axis}={'|'.join(map(str, values))}" for axis, values in known.items())
            raise EngineError(f"--assume {pair}: sglang takes {takes}")
        out[key].append(spelled[value])
    return out


def _check_narrowing(domains: dict[str, list[dict[str, Any]]], only: dict[str, list[Any]]) -> None:
    """A narrowed value no chosen recipe's point has is refused, never ignored."""
    for axis, want in only.items():
        have = sorted({p[axis] for points in domains.values() for p in points}, key=str)
        missing = [str(w) for w in want if w not in have]
        if missing:
            flag = f"--assume {axis}" if axis in ASSUMED else f"--{axis}"
            raise EngineError(f"{flag} {', '.join(missing)}: no point of {', '.join(domains)} has it; "
                              f"{axis} takes {', '.join(map(str, have))}")


# One point's outcome, and what it tells the disaggregation transfer (None: it takes no part in the pairs)
Outcome = PointResult | tuple[dict[str, Any] | None, AdapterGap]
Planned = tuple[Outcome, tuple[PointResult, pairs.Transfer | None] | None]
Chunk = tuple[str, list[dict[str, Any]], str | None, Fraction | None]  # recipe, its points, --engine-path, bound


def _run(mods: dict[str, Any], source: loader.Source, chosen: list[tuple[Recipe, list[dict[str, Any]]]],
         engine_path: str | None, padding_bound: Fraction | None, sized: dict[str, list[str]],
         workers: int | None) -> list[RecipeResult]:
    """Every recipe's result: its points planned in chunks of one tp each (a tp's pools share documents: the
    Mamba pool's at every dtype and page, checked once in the process that plans them) by `workers` processes
    (engines/spread.py), forked after SGLang's modules and the planner's are imported; then, here, the pairs
    and the sizing of each recipe over its points in their order."""
    # imported before a worker forks, which would import torch again otherwise (only when SGLang plans)
    from kvproof.engines.sglang import planner, unified  # noqa: F401

    of = {recipe.name: points for recipe, points in chosen}
    parts = [(name, [i for i, p in enumerate(points) if p["tp"] == tp])
             for name, points in of.items() for tp in dict.fromkeys(p["tp"] for p in points)]
    chunks: list[Chunk] = [(name, [of[name][i] for i in at], engine_path, padding_bound) for name, at in parts]
    _WORKER[:] = [(mods, source)]
    _SEEN.clear()
    try:
        with progress.task(sum(map(len, of.values())), "sglang", "points") as shown:
            planned = spread.run(chunks, _chunk, partial(_chunk, shown=shown),
                                 spread.processes(len(chunks)) if workers is None else workers,
                                 lambda i: shown.advance(len(chunks[i][1]), chunks[i][0]))
    finally:
        _WORKER.clear()
    at: dict[str, dict[int, Planned]] = {name: {} for name in of}
    for (name, indices), each in zip(parts, planned, strict=True):
        at[name].update(zip(indices, each, strict=True))
    return [_finished(mods, source, recipe, [at[recipe.name][i] for i in range(len(points))], sized)
            for recipe, points in chosen]


_WORKER: list[tuple[dict[str, Any], loader.Source]] = []  # SGLang's modules and their source, a forked worker's too
# a run's verdicts by their documents (verdict.planned_once), each process's own: a document of one recipe's
# point is checked once for every point and recipe of the run that builds it (the bound is the run's); never
# under a seeded bug
_SEEN: verdict.Checked = {}


def _chunk(chunk: Chunk, shown: progress.Task | None = None) -> list[Planned]:
    """One chunk's points planned; `shown`: the run's progress, each point counted (this process's chunks)."""
    (mods, source), = _WORKER
    name, points, engine_path, padding_bound = chunk
    patches = mutants.applied if mutants.active() else None
    return _planned(mods, source, RECIPES[name], shown.each(points, name) if shown else points, engine_path,
                    padding_bound, patches)


def _finished(mods: dict[str, Any], source: loader.Source, recipe: Recipe, planned: list[Planned],
              sized: dict[str, list[str]]) -> RecipeResult:
    """The recipe's result from its points' outcomes: the pairs across its tp and the sizing checked."""
    patches = mutants.applied if mutants.active() else None
    outcomes = [outcome for outcome, _ in planned]
    transfers = [transfer for _, transfer in planned if transfer is not None]
    try:
        with patches(mods) if patches else nullcontext():
            crossed = pairs.cross(mods, transfers)
        # the pools as the server sizes them from a memory budget (sizing.py): priced_covers_allocated
        checked, said = sizing.check(mods, recipe.name, recipe.hf(), crossed, sized, patches)
    except Exception as err:  # what no pair's or launch's refusal is (pairs.py takes SGLang's ValueErrors as findings)
        b = verdict.blame(err, [source.package_dir])
        gap = verdict.undeclared(err, b) if b.engine else verdict.gap(err, b)
        return verdict.adapter_result(recipe.name, [*outcomes, (None, gap)], recipe.limits)
    each = iter(checked)
    return verdict.adapter_result(recipe.name, [next(each) if isinstance(o, PointResult) else o for o in outcomes],
                                  f"{recipe.limits}; {said}")


def _planned(mods: dict[str, Any], source: loader.Source, recipe: Recipe, points: Iterable[dict[str, Any]],
             engine_path: str | None, padding_bound: Fraction | None, patches: Patches | None) -> list[Planned]:
    """Each point's outcome, and what each planned point tells the disaggregation transfer."""
    from kvproof.engines.sglang import planner, unified  # import torch: only when SGLang plans

    hf = recipe.hf()
    out: list[Planned] = []
    for p in points:
        replay = (f"verify engine sglang --recipe {recipe.name} --tp {p['tp']} --dtype {p['dtype']} --assume "
                  + " ".join(f"{axis}={p[axis]}" for axis in ASSUMED)
                  + (f" --engine-path {engine_path}" if engine_path else "")
                  + (f" --max-padding {float(padding_bound)}" if padding_bound is not None else ""))
        point = planner.Point(p["tp"], p["dtype"], p[PAGE], p[MAMBA_CONV], p[MAMBA_SSM])
        try:
            if p[UNIFIED] == "on":  # checked as built (unified.py); what its transfer is told is not read yet
                checked, transfer = unified.checked(mods, hf, recipe.name, p, point, replay, patches), None
            else:
                documents, transfer = planner.plan(mods, hf, point, patches)
        except Exception as err:  # SGLang refusing the point, or the adapter failing to drive it
            judged = verdict.judge(recipe.name, p, err, replay, [source.package_dir])
            out.append((judged, (judged, None)) if isinstance(judged, PointResult) else ((p, judged), None))
            continue
        try:
            if p[UNIFIED] == "off":
                seen = None if patches else _SEEN
                checked = {name: verdict.planned_once(seen, recipe.name, p, docs, replay, padding_bound)
                           for name, docs in documents.items()}
        except ConfigError as err:  # a view the plan schema cannot hold (an empty buffer: a pool with no heads)
            out.append(((p, AdapterGap("planner.document", f"SGLang's pools read into a plan kvproof refuses: "
                                       f"{verdict.one_line(err)}")), None))
            continue
        result = merged(recipe.name, p, checked, replay)
        out.append((result, (result, transfer)))
    return out


def merged(recipe: str, point: dict[str, Any], allocations: dict[str, PointResult], replay: str) -> PointResult:
    """One point's result from its allocations': every finding prefixed by its allocation, the
    groups' packings together, the largest allocation's parent bytes, the worst padding, and the N
    range every allocation was checked over."""
    findings = tuple(Finding(f.property, f"{name}: {f.message}") for name, r in allocations.items()
                     for f in r.findings)
    results = list(allocations.values())
    ranges = [r.parents for r in results if r.parents]
    parents = (max(lo for lo, _ in ranges), min(hi for _, hi in ranges)) if len(ranges) == len(results) else None
    return PointResult(recipe, point, "counterexample" if findings else "ok", findings,
                       {g: k for r in results for g, k in r.packing.items()},
                       max((r.parent_bytes for r in results if r.parent_bytes is not None), default=None),
                       max((r.worst_padding for r in results if r.worst_padding is not None), default=None),
                       parents, replay)


# a prefill and a decode instance at different tp (pairs.py): findings no single point's pools show
ADAPTER: EngineAdapter = Adapter(name=ENGINE, verify=verify, cross_point=frozenset(pairs.CROSS_POINT),
                                 mutants=mutants.MUTANTS, baseline=BASELINE)
