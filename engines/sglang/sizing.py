"""SGLang's pool sizing from a memory budget, called as the server calls it, against the pools it then builds.

A target worker sizes its pools in `KVCacheConfigurator._resolve_memory_pool_config`
(mem_cache/kv_cache_configurator.py:3174-3190): the rest memory of `_profile_available_bytes`
(2990-3060), the Mamba share `_handle_max_mamba_cache` prices and takes from it (3229-3409), the KV
tokens `config_from_budget` derives from what is left (3192-3227), the request slots
`resolve_max_num_reqs` (3119-3172); `_build_hybrid_req_pool` (1700-1753) then builds the Mamba pool at
those sizes. Here each of these is SGLang's own:
- the launch: a `ServerArgs` for the point's tp, --kv-cache-dtype, page size and speculative flags,
  resolved by SGLang (`resolve_once`) and published in a context of its own (`create_context`,
  `use_context`, runtime_context.py:1518-1540), on a stated device (DEVICES: the platform facts
  `override_platform` takes, runtime_context.py:1950, and the capacity `get_device_memory_capacity`
  reads from nvidia-smi, utils/common.py:990). Resolution picks the default --mem-fraction-static
  from that capacity (arg_groups/memory_hook.py:281-343), the speculative defaults, and refuses what
  SGLang refuses;
- the configurator: `KVCacheConfigurator` on the meta device over the `ModelConfig` SGLang reads from
  the published config.json (`ModelConfig.from_server_args`);
- the pools: `_build_hybrid_req_pool` at the sizes the configurator derived.
The one input a CPU cannot measure is the free memory around the weights load (`rest_gib`, its
assumptions stated there). What `_handle_max_mamba_cache` takes from the rest memory is the Mamba
share's price; the Mamba pool's tensors (their storages' bytes) are what it allocates; the two are
compared by `priced_covers_allocated`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import tempfile
import types
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvproof.engines.stubs import StubUsed
from kvproof.engines.verdict import EngineError, Finding, PointResult
from kvproof.spec import properties as P

if TYPE_CHECKING:  # the planner imports torch: at run time only when SGLang plans
    from kvproof.engines.sglang.planner import Patches

GIB = 1 << 30
CONFIGURATOR = "sglang.srt.mem_cache.kv_cache_configurator"
DEVICE = "device"  # the --assume axes of the sizing check: the GPU, and the speculative flags
SPEC = "spec"
# what nvidia-smi reports as each GPU's memory (MiB), which SGLang's get_nvgpu_memory_capacity reads:
# H100 80 GB 81,559 MiB, H200 141 GB 143,771 MiB (published, docs/engines/sglang.md); both Hopper (sm_90)
_HOPPER = {"is_cuda": True, "is_hip": False, "is_npu": False, "is_xpu": False, "is_musa": False, "is_mps": False,
           "is_sm90": True, "is_sm100": False, "is_sm100_or_sm110": False, "is_sm110": False, "is_sm120": False,
           "is_blackwell": False, "is_hopper_with_cuda_12_3": True, "has_amx": False, "has_flashinfer": True,
           "device_sm": 90, "device_capability": (9, 0)}
DEVICES: dict[str, tuple[int, dict[str, Any]]] = {"h100": (81_559, _HOPPER), "h200": (143_771, _HOPPER)}
# the speculative flags of a launch (none: no speculative decoding). NEXTN is the MTP head the checkpoint
# ships; SGLang's own choice for these architectures is 3 steps, topk 1, 4 draft tokens
# (arg_groups/speculative_hook.py:1460-1461, taken when no step count is given: 1159-1174); with topk 1
# the draft tokens are steps + 1 (1255-1266), so a chain is named by its steps: 1 (the shortest) and 7
# (the longest step count of SGLang's default adaptive config, speculative/adaptive_spec_params.py:28-40);
# the tree 5 steps x topk 4 x 8 draft tokens is SGLang's own choice for Llama and Grok (1439-1440,
# 1458-1459); adaptive starts from SGLang's choice and may switch up to the default config's 7 steps
# (8 draft tokens: spec_info.py:268-289)
_NEXTN = {"speculative_algorithm": "NEXTN"}
SPECS: dict[str, dict[str, Any]] = {
    "none": {},
    "auto": _NEXTN,
    "steps1": {**_NEXTN, "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2},
    "steps7": {**_NEXTN, "speculative_num_steps": 7, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 8},
    "tree5x4": {**_NEXTN, "speculative_num_steps": 5, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8},
    "adaptive": {**_NEXTN, "speculative_adaptive": True},
}
# the recipes whose published checkpoint ships an MTP head SGLang drafts with (NEXTN): Qwen3-Next's
# (ModelConfig's draft rewrite to Qwen3NextForCausalLMMTP, configs/model_config.py:1134-1135) and
# Nemotron-3 Ultra's (num_nextn_predict_layers 1 in its config.json; NemotronHForCausalLMMTP, 1199-1202).
# Kimi-Linear's config has num_nextn_predict_layers 0 and Nemotron-3 Nano's none: EAGLE would need a
# separate draft checkpoint, which kvproof does not have.
SPECULATES = ("qwen3-next-80b-a3b", "nemotron-3-ultra-550b-a55b-bf16")
# the points sized: the launch defaults of --kv-cache-dtype (auto), the page size (1 where no backend sets
# one, arg_groups/overrides.py:1361-1362) and the non-unified pools; every tp
SIZED = {"dtype": "auto", "page_size": 1, "unified": "off", "mamba_conv": "bfloat16", "mamba_ssm": "float32"}


def axes(recipe: str) -> dict[str, tuple[str, ...]]:
    """The sizing axes' values for a recipe; every one in the default run."""
    return {DEVICE: tuple(DEVICES), SPEC: tuple(SPECS) if recipe in SPECULATES else ("none",)}


def narrowing(assume: Sequence[str] | None) -> tuple[list[str], dict[str, list[str]]]:
    """--assume pairs of the sizing axes taken out (a value no recipe has exits 2), the rest returned."""
    known = {DEVICE: tuple(DEVICES), SPEC: tuple(SPECS)}
    rest: list[str] = []
    only: dict[str, list[str]] = {DEVICE: [], SPEC: []}
    for pair in assume or ():
        key, _, value = pair.partition("=")
        if key not in known:
            rest.append(pair)
        elif value not in known[key]:
            raise EngineError(f"--assume {pair}: sglang's sizing takes {key}={'|'.join(known[key])}")
        else:
            only[key].append(value)
    return rest, only


def params(recipe: str) -> int | None:
    """The checkpoint's parameters as its published name states them (80b: 80 x 10^9); None where it states none."""
    found = re.search(r"-(\d+)b-", recipe)
    return int(found.group(1)) * 10**9 if found else None


def rest_gib(capacity_mib: int, fraction: float, weight_bytes: int, tp: int) -> float:
    """What `_profile_available_bytes` hands `_handle_max_mamba_cache` (kv_cache_configurator.py:3000-3038),
    in GiB: available - pre x (1 - --mem-fraction-static), with no multimodal reservation (a text model:
    mm_runtime_reservation_gb, 202-230) and no post-capture floor (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING is
    off by default, environ.py:640). Assumed, as a CPU measures neither: the free memory before the
    weights load (pre) is the device's whole capacity (no other process, the CUDA context not counted),
    and after it, that less the checkpoint's bytes split evenly over the tp ranks."""
    pre = capacity_mib / 1024
    return pre - weight_bytes / tp / GIB - pre * (1 - fraction)


def fits(capacity_mib: int, weight_bytes: int, tp: int) -> bool:
    """Whether a rank's weights can leave any KV memory: the default --mem-fraction-static reserves at
    least 10 GiB on a device over 60 GiB (arg_groups/memory_hook.py:314-315, the path without post-capture
    sizing), so at most capacity - 10 GiB holds the weights and the pools. A launch that cannot fit is not
    resolved (what resolving it costs is most of a sizing's time)."""
    return weight_bytes / tp < (capacity_mib - 10 * 1024) * (1 << 20)


@dataclass(frozen=True)
class Sized:
    """One launch's Mamba share: what the sizing priced, what the pool allocated, in bytes."""

    priced: int
    allocated: int
    bound: int  # the over-pricing SGLang's pool design accounts for: the conv windows priced whole
    detail: str


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _tensors(getattr(value, f.name))


def allocated_bytes(mamba_pool: Any) -> int:
    """The bytes of every storage the Mamba pool's state views lie in, each storage once (a
    deduplicated conv window's overlapping view and its buffer are one storage)."""
    storages: dict[int, int] = {}
    for t in _tensors(mamba_pool.mamba_cache):
        base = t._base if t._base is not None else t
        storages[id(base)] = base.untyped_storage().nbytes()
    return sum(storages.values())


@contextmanager
def _swapped(module: Any, **values: Any) -> Iterator[None]:
    """A module's attributes set for the block, restored after."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


@contextmanager
def _launch(mods: dict[str, types.ModuleType], folder: str, device: str, flags: dict[str, Any]) -> Iterator[Any]:
    """SGLang's resolved ServerArgs, published in a context of its own, on the stated device."""
    runtime = mods["sglang.srt.runtime_context"]
    server_args = importlib.import_module("sglang.srt.server_args")
    capacity, facts = DEVICES[device]
    # the capacity nvidia-smi would report (utils/common.py:990-1017); the memory hook is its only
    # reader during resolution (arg_groups/memory_hook.py:78)
    with _swapped(importlib.import_module("sglang.srt.arg_groups.memory_hook"),
                  get_device_memory_capacity=lambda device=None: capacity), runtime.override_platform(**facts):
        args = server_args.ServerArgs(model_path=folder, device="cuda", **flags)
        with runtime.use_context(runtime.create_context(args, role="scheduler")):
            yield args


def size(mods: dict[str, types.ModuleType], folder: str, weight_bytes: int, tp: int, dtype: str, page: int,
         device: str, spec: str) -> Sized | None:
    """One launch's Mamba share, priced and allocated; None where the checkpoint's `weight_bytes` leave no memory."""
    import torch

    from kvproof.engines.sglang import planner

    configurator = importlib.import_module(CONFIGURATOR)
    memory_pool = mods["sglang.srt.mem_cache.memory_pool"]
    model_config = mods["sglang.srt.configs.model_config"]
    runtime = mods["sglang.srt.runtime_context"]
    spec_info = importlib.import_module("sglang.srt.speculative.spec_info")
    layers = importlib.import_module("sglang.srt.model_executor.model_runner_components.layer_setup")
    aux = importlib.import_module("sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state")
    flags = {"tp_size": tp, "kv_cache_dtype": dtype, "page_size": page, **SPECS[spec]}
    if not fits(DEVICES[device][0], weight_bytes, tp):
        return None
    with ExitStack() as stack:
        args = stack.enter_context(_launch(mods, folder, device, flags))
        stack.enter_context(planner._meta_device_module(torch))
        # the pool module's platform flags, read at its import (memory_pool.py:117-119), as on the
        # stated CUDA device: they pick the conv windows' deduplicated layout (135-150)
        stack.enter_context(_swapped(memory_pool, _is_cpu=False, _is_npu=False))
        config = model_config.ModelConfig.from_server_args(args)
        _, kv_dtype = mods["sglang.srt.mem_cache.kv_cache_dtype"].configure_kv_cache_dtype(
            server_args_kv_cache_dtype=dtype, model=None, model_dtype=config.dtype, is_draft_worker=False,
            is_dflash=False, speculative_draft_attention_backend=None)
        algorithm = spec_info.SpeculativeAlgorithm.from_string(args.speculative_algorithm)
        n = config.num_hidden_layers
        # model_runner.py:656-689's arguments for a target worker of one pipeline stage, no attention dp;
        # the layer range resolve_layer_indices gives one stage with no model split (layer_setup.py:140-180)
        kvc = configurator.KVCacheConfigurator(
            device="meta", gpu_id=0, attn_dp_size=1, pp_size=1, pp_group=None, model=None, model_config=config,
            server_args=args, kv_cache_dtype=kv_dtype, kv_cache_dtype_str=dtype, model_dtype=config.dtype,
            page_size=runtime.get_schedule().page_size, sliding_window_size=None, spec_algorithm=algorithm,
            is_draft_worker=False, post_capture_kv_active=False,
            spec_aux_config=aux.resolve_spec_aux_hidden_state_config(
                server_args=args, model_config=config, spec_algorithm=algorithm, is_draft_worker=False),
            is_hybrid_swa=False, is_hybrid_swa_compress=False,
            use_mla_backend=config.attention_arch == model_config.AttentionArch.MLA,
            layer_info=layers.ModelLayerInfo(start_layer=0, end_layer=n, num_effective_layers=n),
            forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None, memory_pool_config=None)
        schedule = runtime.get_schedule()
        rest = rest_gib(DEVICES[device][0], schedule.mem_fraction_static, weight_bytes, tp)
        if rest <= 0:
            return None  # _profile_available_bytes' own refusal (3043-3058): the weights leave no KV memory
        left = kvc._handle_max_mamba_cache(rest)
        priced = round((rest - left) * GIB)
        budget = kvc.config_from_budget(int(left * GIB))
        reqs = kvc.resolve_max_num_reqs(budget.max_total_num_tokens)
        pool = kvc._build_hybrid_req_pool(max_num_reqs=reqs,
                                          extra_max_context_len=configurator.get_req_to_token_extra_context_len())
        mamba = pool.mamba_pool
        drafts = runtime.get_spec().speculative_num_draft_tokens
        cache = kvc.mambaish_config.mamba2_cache_params  # the text config's for Qwen3.5 (kv_cache_configurator.py:380)
        conv_per_req = cache.mamba_cache_per_req - _ssm_bytes(cache)
        # the conv windows' whole price per spec slot: D states where the pool keeps D + window - 1 rows
        # (memory_pool.py:598-628); the slots priced: capped_reqs + 1 (kv_cache_configurator.py:3372-3376)
        capped = min(max(1, schedule.max_running_requests or 1), schedule.max_mamba_cache_size
                     // kvc._calculate_mamba_ratio()) if drafts else 0
        bound = (capped + 1) * (drafts or 0) * conv_per_req
        detail = (f"--mem-fraction-static {schedule.mem_fraction_static}, rest {rest:.2f} GiB, "
                  f"max_mamba_cache_size {schedule.max_mamba_cache_size}, max_running_requests "
                  f"{schedule.max_running_requests}, max_num_reqs {reqs}, draft tokens {drafts} "
                  f"(largest {runtime.max_speculative_num_draft_tokens()})")
        sized = Sized(priced, allocated_bytes(mamba), bound, detail)
    return sized


def _assuming(replay: str, pairs: list[str]) -> str:
    """A point's replay with more NAME=VALUE pairs in its one --assume list (the flag takes them all)."""
    at = replay.index("--assume ")
    end = replay.find(" --", at + 1)
    end = len(replay) if end < 0 else end
    return replay[:end] + "".join(f" {pair}" for pair in pairs) + replay[end:]


def _with_configurator(mods: dict[str, types.ModuleType]) -> dict[str, types.ModuleType]:
    """The loaded modules and the configurator's, whose functions a seeded bug may replace."""
    return {**mods, CONFIGURATOR: importlib.import_module(CONFIGURATOR)}


def _itemsize(hf: dict[str, Any]) -> int:
    import torch

    text = hf.get("text_config", hf)  # ModelConfig's dtype is its text config's (model_config.py:881)
    stated = text.get("torch_dtype") or text.get("dtype")
    if not isinstance(stated, str) or not isinstance(getattr(torch, stated, None), torch.dtype):
        raise StubUsed(f"the config states no dtype the weights' bytes can be read from ({stated!r})")
    itemsize: int = getattr(torch, stated).itemsize
    return itemsize


def _ssm_bytes(cache: Any) -> int:
    """One slot's temporal (SSM) state over every Mamba layer (mamba_utils.py's per-request bytes less the conv)."""
    import math

    return int(math.prod(cache.shape.temporal) * cache.dtype.temporal.itemsize * len(cache.layers))


def check(mods: dict[str, types.ModuleType], recipe: str, hf: dict[str, Any], points: list[PointResult],
          only: dict[str, list[str]], patches: Patches | None = None) -> tuple[list[PointResult], str]:
    """Each point at a sized launch (SIZED_DTYPES, SIZED_PAGES) with a finding for every device and spec
    whose priced Mamba share does not cover its allocation, or over-prices it past the bound; and what
    was sized, in words."""
    values = {axis: [v for v in vs if not only[axis] or v in only[axis]] for axis, vs in axes(recipe).items()}
    count = params(recipe)
    # at the checkpoint's own dtype, as ModelConfig's dtype "auto" takes it from config.json
    weight_bytes = (count or 0) * _itemsize(hf)
    sized = unfit = 0
    out = []
    with tempfile.TemporaryDirectory(prefix="kvproof-sglang-") as folder:
        (Path(folder) / "config.json").write_text(json.dumps(hf), encoding="utf-8")
        for p in points:
            if any(p.point.get(axis, value) != value for axis, value in SIZED.items()) or count is None:
                out.append(p)
                continue
            found: list[Finding] = []
            failed: dict[str, set[str]] = {DEVICE: set(), SPEC: set()}
            for device in values[DEVICE]:
                for spec in values[SPEC]:
                    with patches(_with_configurator(mods)) if patches else nullcontext():
                        got = size(mods, folder, weight_bytes, p.point["tp"], p.point["dtype"], p.point["page_size"],
                                   device, spec)
                    if got is None:
                        unfit += 1
                        continue
                    sized += 1
                    if not P.priced_covers_allocated(got.priced, got.allocated, got.bound):
                        found.append(Finding(P.PRICED_COVERS_ALLOCATED, f"sizing on {device}, spec {spec}: Mamba "
                                             f"share priced {got.priced:,} B, allocated {got.allocated:,} B (bound "
                                             f"{got.bound:,} B over); {got.detail}"))
                        failed[DEVICE].add(device)
                        failed[SPEC].add(spec)
            if found:
                replay = _assuming(p.replay, [f"{a}={v}" for a, vs in failed.items() for v in sorted(vs)])
                p = PointResult(p.recipe, p.point, "counterexample", (*p.findings, *found), p.packing, p.parent_bytes,
                                p.worst_padding, p.parents, replay)
            out.append(p)
    if count is None:
        return out, "sizing: not sized (its name states no parameter count, which the weights' bytes need)"
    return out, f"sizing: {sized} launches sized, {unfit} whose weights leave no memory"
