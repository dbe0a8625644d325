"""Plan one point with vLLM's own planner on a CPU, and translate its KV-cache config.

What runs is vLLM's: `ModelConfig` reads the published config.json from a folder (offline),
`VllmConfig` applies the model's own config hooks, `Platform.update_block_size_for_backend`
(with `_align_hybrid_block_size`) picks the block size, the backend's spec hook and each state
layer's own `get_kv_cache_spec` give the per-layer page sizes, and the KV-cache config is planned
through the functions `EngineCore._initialize_kv_caches` calls at this release (found from
core.py's imports, platform.engine_core: `get_kv_cache_configs`, with the whole model grouped
first by `get_global_kv_cache_groups` where it does so), then placed at each parent count, with
the vLLM config current as in vLLM's worker. Call shapes follow each function's signature and the
hooks its classes have, never a version string. kvproof replaces exactly the answers that need a
GPU, a deployment or built layers, each loudly (see `CudaAssumed` and `point_answers` in
platform.py, and `_LayerShells`): which attention backend the CUDA platform selected (the point's
`backend` assumption; a DSpark draft's, which vLLM selects while building the draft, is selected as
the CUDA platform selects it), that the platform supports the hybrid KV-cache manager
(vllm/platforms/cuda.py:683), that Triton is usable (as on a GPU), the device capability (the
point's `gpu`), and, only at points that assume them, the CUDA runtime's major version and
whether FlashInfer's TRTLLM kernels are obtainable (vllm/utils/flashinfer.py:647). Everything else
it would need raises `StubUsed`, the guarded stand-ins that let three backends' modules import on a
CPU included (stand_ins.py).
"""

from __future__ import annotations

import importlib
import inspect
import math
import pickle
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from kvproof.engines.stubs import StubUsed
from kvproof.engines.vllm import kept
from kvproof.engines.vllm.catalog import MODELS, Model
from kvproof.engines.vllm.parts import Backend, draft_cache_config
from kvproof.engines.vllm.platform import ENTRY, Answers, Vllm, cuda_assumed, modules, point_answers
from kvproof.impl import faults

# Replaces vLLM functions for one planning call (the seeded historical bugs): a context manager.
Patches = Callable[[Vllm], AbstractContextManager[None]]


@dataclass(frozen=True)
class Planned:
    block_size: int
    documents: dict[int, dict]  # the plan bound at several parent counts
    mamba_padded: int | None  # the padded state page, when vLLM padded one
    kernel_tokens: int | None  # tokens per page vLLM hands the attention kernel; None: the rank has none
    layers: tuple[int, int]  # the rank's hidden layers [start, end) (vLLM's get_pp_indices)
    attention: bool  # the rank owns an attention layer (so vLLM finds a backend on it)
    asked: dict[str, bool | int | None] = field(default_factory=dict)  # the assumptions asked (platform.Answers)
    configs: dict[int, Any] = field(default_factory=dict)  # vLLM's KVCacheConfig at each parent count
    layout: Any = None  # the KV-cache layout vLLM resolved
    # each attention layer's backend record (None: a side cache's own, unrecorded) and the tokens vLLM hands its
    # kernels (_kernel_blocks)
    kernels: dict[str, tuple[Backend | None, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    model: Model
    tp: int
    dtype: str  # --kv-cache-dtype
    mamba_dtype: str  # --mamba-cache-dtype
    prefix: bool  # --enable-prefix-caching
    backend: Backend
    spec: int = 0  # num_speculative_tokens of the model's own draft (its MTP layers)
    pp: int = 1  # --pipeline-parallel-size
    rank: int = 0  # the pipeline stage planned (each stage's worker plans its own layers)
    trtllm: bool | None = None  # FlashInfer's TRTLLM kernels obtainable (has_nvidia_artifactory); None: not assumed
    cuda_runtime: int | None = None  # the CUDA runtime's major version (get_cuda_runtime_major); None: not assumed
    draft_dtype: str | None = None  # --speculative-config's kv_cache_dtype: the draft's own; None: the target's
    # the backend of an MTP, EAGLE3 or DFLASH draft's layers where it is not the target's: --speculative-config's
    # attention_backend, or, unpinned, the one vLLM selects at the draft's own KV dtype; None: the target's
    draft_backend: Backend | None = None


BIND_AT = (1, 2, 3, 1000)  # parent counts: the plan must be affine in N (checked, not assumed)


class _LayerShells(dict):
    """The model's built layers, which kvproof never builds: vLLM reads them through
    compilation_config.static_forward_context (get_layers_from_vllm_config). Each value is the
    real layer class without its constructor run, so a method that only returns a class-level
    answer works and one that reads constructor state raises StubUsed."""


def _shell(cls: type) -> Any:
    return object.__new__(cls)


def _check_shell_call(fn: Callable[[], Any], what: str, shells: dict[str, Any]) -> Any:
    """fn(), with an attribute missing from one of the layer shells named as what it is: state a
    constructor sets. Any other AttributeError (a vLLM whose API moved) is vLLM's own and propagates."""
    try:
        return fn()
    except AttributeError as err:
        if not any(err.obj is shell for shell in shells.values()):
            raise
        raise StubUsed(f"planning used {what} ({err}), which a layer sets in its constructor; kvproof "
                       "builds no layers") from None


def plan(point: Point, patches: Patches | None = None, made: ModelConfigs | None = None) -> Planned:
    """The point through vLLM's planner. `patches(v)` may replace vLLM functions for the call (the
    seeded historical bugs do)."""
    return _plan(modules(), point, _checkpoint(point.model.config_text()), patches, made)


_CHECKPOINTS: dict[str, tempfile.TemporaryDirectory[str]] = {}  # config.json's text -> a folder holding only it


def _checkpoint(text: str) -> str:
    """The folder vLLM reads the model from: config.json alone, one folder per text in a process
    (removed at its exit). vLLM never writes there and keeps what it lists of a folder by its path
    (list_repo_files is cached), so every point of a model reads the same unchanged folder."""
    if text not in _CHECKPOINTS:
        folder = _CHECKPOINTS[text] = tempfile.TemporaryDirectory(prefix="kvproof-vllm-")
        (Path(folder.name) / "config.json").write_text(text, encoding="utf-8")
    return _CHECKPOINTS[text].name


def _rank_layers(v: Vllm, layers: list[tuple[str, str]], hf: Any,
                 point: Point) -> tuple[tuple[int, int], list[tuple[str, str]]]:
    """The hidden layers a pipeline stage builds: vLLM's own split (make_layers asks
    get_pp_indices, vllm/distributed/utils.py:198), each cache layer in the decoder layer its name says."""
    start, end = v.dist_utils.get_pp_indices(hf.num_hidden_layers, point.rank, point.pp)
    return (start, end), [(name, kind) for name, kind in layers if start <= point.model.hidden_layer(name, hf) < end]


def _plan(v: Vllm, point: Point, folder: str, patches: Patches | None, made: ModelConfigs | None) -> Planned:
    config = v.config
    backend = point.backend.load()
    draft_backend = point.draft_backend.load() if point.draft_backend is not None else backend
    found = [backend]
    platform = cuda_assumed(v)
    with point_answers(platform, point.backend.capability, found, point.trtllm, point.cuda_runtime) as answers:
        model_config, parallel, speculative = _configs(config, folder, point, answers, made)
        span, layers = _rank_layers(v, point.model.layers(model_config.hf_text_config), model_config.hf_text_config,
                                    point)
        attends = any(kind == "attention" for _, kind in layers)
        if not attends:  # vLLM finds backends on the layers this rank built (interface.py:763): none
            found.clear()
        cache_config = config.CacheConfig(cache_dtype=point.dtype, mamba_cache_dtype=point.mamba_dtype,
                                          enable_prefix_caching=point.prefix)
        vllm_config = config.VllmConfig(
            model_config=model_config, cache_config=cache_config, parallel_config=parallel,
            speculative_config=speculative, device_config=config.DeviceConfig(device="cuda"))
        drafts = point.model.draft_layers(speculative.draft_model_config.hf_config) if speculative else []
        layers += drafts  # the draft's layers keep pages in the same cache
        draft_names = {name for name, _ in drafts}
        model_cls: Any
        model_cls, _ = v.models.ModelRegistry.resolve_model_cls(model_config.architecture,
                                                                    model_config=model_config)
        shells = {name: _shell(point.model.state_layer_class()) for name, kind in layers if kind == "state"}
        if point.model.state_init is not None and shells:
            # what each layer's constructor would set, from vLLM's code: a function of the planning's config and
            # platform, so one answer serves every state layer of the planning
            state = point.model.state_init(vllm_config)
            for shell in shells.values():
                vars(shell).update(state)
        # the model's other cache layers, each its own class with what its constructor sets (and writes to the
        # config: vLLM's worker builds the model before it picks the block, v1/executor/uniproc_executor.py:71-75)
        built = point.model.built(vllm_config, backend, layers) if point.model.built is not None else {}
        if attends:  # the layers' own backends are among those vLLM finds on them (interface.py:763)
            found += [b for b in dict.fromkeys(_own_backend(shell) for shell in built.values()) if b is not None
                      and b not in found]
            if drafts and draft_backend not in found:  # the draft's layers come after the target's
                found.append(draft_backend)
        vllm_config.compilation_config.static_forward_context = _LayerShells({**shells, **built})
        context = patches(v) if patches else nullcontext()
        # vLLM's worker plans with its config current (worker_base.py:350, :358: initialize_from_config,
        # where the model runner asks select_common_block_size); backends read it (flashinfer.py:590)
        with context, config.set_current_vllm_config(vllm_config):
            _check_shell_call(lambda: platform.update_block_size_for_backend(vllm_config),
                              f"{point.model.state_layer_class().__name__} layer state", shells)
            specs = _specs(v, vllm_config, model_cls, (backend, draft_backend), layers, shells, built, draft_names)
            layout_names = [lay.name for lay in v.backend_utils.get_supported_kv_cache_layouts(
                [*found, point.model.state_backend(v.registry)] if attends
                else [point.model.state_backend(v.registry)])]
            layout = v.core.calls["resolve_kv_cache_layout"](vllm_config, [layout_names], list(specs.values()))
            with kept.layer_block_strides(v.planning):
                configs = engine_core_configs(v, platform, vllm_config, specs)
            kernels = _kernel_blocks(v, point, (backend, draft_backend), built, draft_names,
                                     {name for name, kind in drafts if kind == "draft"}, configs)
        first = next((name for name, kind in layers if kind == "attention"), None)
        kernel_tokens = kernels[first][1] if first is not None else None
        documents = _documents(point, configs, layout, kernels)
        return Planned(cache_config.block_size, documents, cache_config.mamba_page_size_padded, kernel_tokens,
                       span, attends, dict(answers.asked), configs, layout, kernels)


def _kernel_blocks(v: Vllm, point: Point, backends: tuple[Any, Any], built: dict[str, Any], drafts: set[str],
                   checkpoint: set[str], configs: dict[int, Any]) -> dict[str, tuple[Backend | None, int]]:
    """Each attention layer's backend record at the point's GPU (the kernels that read its pages) and the tokens of
    the kernel block vLLM picks for them: vLLM's own prepare_kernel_block_sizes (v1/worker/utils.py:630-680 in
    0.33.0) over the config's groups, each with its attention groups as the model runner builds them, one per
    backend and layer spec (v1/worker/gpu/attn_utils.py:248-262). A layer's backend is the one its built layer names
    (a DSpark draft's, selected apart from the target's; a side cache's), else, of `backends` (the target's, the
    draft's), the draft's for the draft's layers (`drafts`: an MTP draft's or a draft checkpoint's) and the target's
    for the rest. The draft's layers take the pick over the draft's own attention groups, as Model Runner V2's
    speculator builds them (spec_decode/speculator.py:297-302, attn_utils.py:220-224); at a draft of the target's
    backend it is the group's. A side cache's own backend that kvproof has no record of reads its pages with kernels
    not recorded (None); a draft checkpoint's layer's (`checkpoint`) raises StubUsed. Where the release's
    AttentionGroup.create_metadata_builders picks again per attention group (0.32.0 on, v1/worker/utils.py:291-299:
    select_common_block_size over its own backend and spec), each attention group's layers take that pick, and a
    group no size suits raises vLLM's own ValueError, as the worker does when it builds the metadata
    (v1/worker/gpu/attn_utils.py:288-300)."""
    config = next(iter(configs.values()))
    backend, draft_backend = backends
    own = {name: b for name, layer in built.items() if (b := _own_backend(layer)) is not None}
    own.update({name: draft_backend for name in drafts if name not in own})
    records = {backend: point.backend, draft_backend: point.draft_backend or point.backend}

    def kernel_blocks(active: set[str] | None) -> dict[str, int]:
        groups = []
        for g, group in enumerate(config.kv_cache_groups):
            alike: dict[tuple[Any, Any], Any] = {}
            for name in group.layer_names if active is None else active.intersection(group.layer_names):
                key = (own.get(name, backend), layer_spec(group, name))
                if key not in alike:
                    alike[key] = v.worker_utils.AttentionGroup(key[0], [], key[1], g)
                alike[key].layer_names.append(name)
            groups.append(list(alike.values()))
        sizes = [int(n) for n in v.worker_utils.prepare_kernel_block_sizes(config, groups)]
        if len(sizes) != len(groups):  # it skips an encoder-only group, which no model here has
            raise StubUsed(f"prepare_kernel_block_sizes gave {len(sizes)} kernel blocks for {len(groups)} cache groups")
        repicks = _repicks(v.worker_utils.AttentionGroup)
        return {name: int(v.worker_utils.select_common_block_size(size, [a.backend], [a.kv_cache_spec]))
                if repicks and isinstance(a.kv_cache_spec, v.kvi.AttentionSpec) else size
                for size, alike in zip(sizes, groups, strict=True) for a in alike for name in a.layer_names}

    targets, draft = kernel_blocks(None), kernel_blocks(drafts) if drafts else {}
    out: dict[str, tuple[Backend | None, int]] = {}
    for group in config.kv_cache_groups:
        for name in group.layer_names:
            if hasattr(layer_spec(group, name), "shapes"):
                continue  # a state layer's page: read by its readers, never an attention kernel
            # a built layer that names the point's backend (or the draft's) is read as any other
            chosen = own.get(name, backend)
            found = records[chosen] if chosen in records else _record(chosen, point.backend.capability)
            if found is None and name in checkpoint:
                raise StubUsed(f"vLLM selected {chosen.get_name()} for the draft layer {name} at "
                               f"{point.backend.gpu}; kvproof has no record of the kernels that read its pages there")
            out[name] = found, (draft if name in drafts else targets)[name]
    return out


@lru_cache(maxsize=8)
def _repicks(attention_group: Any) -> bool:
    """Whether the release's AttentionGroup picks a kernel block again per attention group when it builds its
    metadata builders (0.32.0 on): read from its create_metadata_builders, as the planning functions are read from
    the release's own engine core (platform.engine_core)."""
    return "select_common_block_size" in inspect.getsource(attention_group.create_metadata_builders)


def layer_spec(group: Any, name: str) -> Any:
    """A layer's own spec in its cache group: the group's, or its entry where the group holds specs per layer
    (UniformTypeKVCacheSpecs, as vLLM reads it, v1/worker/gpu/attn_utils.py:248-249)."""
    return getattr(group.kv_cache_spec, "kv_cache_specs", {}).get(name, group.kv_cache_spec)


def _record(backend: type, capability: tuple[int, int]) -> Backend | None:
    """kvproof's record of a backend class vLLM selected at a GPU (the kernels that read its pages there), among
    those the catalog's models plan; None where it has none."""
    path = f"{backend.__module__}:{backend.__qualname__}"
    return next((b for model in MODELS.values() for b in model.backends
                 if b.path == path and b.capability == capability), None)


# (folder, backend) -> each ModelConfig built there, with the assumptions building it asked; with (tp, pp, spec)
# added -> each ModelConfig, ParallelConfig and SpeculativeConfig of a point with a draft. Each is kept pickled:
# a copy is its pickle loaded, the state deepcopy would copy, in C (vLLM's configs define no __deepcopy__)
ModelConfigs = dict[tuple[Any, ...], list[tuple[bytes, dict[str, bool | int | None]]]]


def _configs(config: Any, folder: str, point: Point, answers: Answers, made: ModelConfigs | None) -> tuple[Any, ...]:
    """vLLM's ModelConfig of the checkpoint, the point's ParallelConfig and, with a draft, its
    SpeculativeConfig (which builds the draft's own ModelConfig: most of a drafted point's planning).
    With `made`, each is built once per set of inputs and a copy handed to each point: the inputs are
    the same there (the arguments, the folder, every answer the platform gives while they are built),
    and each point's VllmConfig changes its own copy. The three of a drafted point are copied together,
    so that its SpeculativeConfig holds the very ModelConfig and ParallelConfig its VllmConfig does."""
    def model() -> Any:
        return config.ModelConfig(model=folder, skip_tokenizer_init=True, dtype="auto")

    def parallel() -> Any:
        return config.ParallelConfig(tensor_parallel_size=point.tp, pipeline_parallel_size=point.pp)

    def drafted(model_config: Any) -> tuple[Any, ...]:
        par = parallel()
        # a draft checkpoint of its own is read from its folder, as the target's is
        own = {"model": _checkpoint(draft)} if (draft := point.model.draft_text()) else {}
        if point.draft_dtype is not None:
            own["kv_cache_dtype"] = point.draft_dtype
        if point.draft_backend is not None:
            own["attention_backend"] = point.draft_backend.name
        return model_config, par, config.SpeculativeConfig(
            method=point.model.draft, num_speculative_tokens=point.spec, target_model_config=model_config,
            target_parallel_config=par, **own)

    if made is None:
        return drafted(model()) if point.spec else (model(), parallel(), None)
    key = (folder, point.backend)
    built, asked = _made(made, key, point, answers, lambda: pickle.dumps(model()))
    if not point.spec:
        return pickle.loads(built), parallel(), None
    drafting = (point.tp, point.pp, point.spec, point.model.draft, point.model.draft_config, point.draft_dtype,
                point.draft_backend)
    return pickle.loads(_made(made, (*key, *drafting), point, answers,
                              lambda: pickle.dumps(drafted(pickle.loads(built))), asked)[0])


def _made(made: ModelConfigs, key: tuple[Any, ...], point: Point, answers: Answers, build: Callable[[], bytes],
          inherited: dict[str, bool | int | None] | None = None) -> tuple[bytes, dict[str, bool | int | None]]:
    """The object made[key] holds for the point's assumptions, built first where it holds none, and the
    assumptions it depends on: those building it asked, and `inherited`, those of what it is built from.
    They are the point's answers too. One built at a point that differs only in assumptions (trtllm,
    cuda_runtime) it does not depend on serves this point as well: every other answer the platform gives
    while it is built is the backend's, which the key holds (as planner.Plans reuses a plan)."""
    alike = made.setdefault(key, [])
    found = next(((built, asked) for built, asked in alike
                  if all(getattr(point, axis) == answer for axis, answer in asked.items())), None)
    if found is None:
        before = dict(answers.asked)
        answers.asked.clear()
        found = build(), {**(inherited or {}), **answers.asked}
        alike.append(found)
        answers.asked.update(before)
    answers.asked.update(found[1])
    return found


def _documents(point: Point, configs: dict[int, Any], layout: Any,
               kernels: dict[str, tuple[Backend | None, int]]) -> dict[int, dict]:
    translated: Translated = {}
    return {n: document(cfg, layout, n, kernel_fields(point, kernels), reader_fields(point), translated)
            for n, cfg in configs.items()}


def kernel_fields(point: Point, kernels: dict[str, tuple[Backend | None, int]]) -> dict[str, list[dict]]:
    """Each attention layer's kernels as the plan document lists them, at the point's assumptions (its trtllm)."""
    return {name: [{"name": k.name, "tokens": tokens, "block": k.block, "max_tokens": k.max_tokens,
                    **({"power_of_two": True} if k.power_of_two else {})}
                   for k in backend.kernels_at(point.trtllm)] if backend is not None else []
            for name, (backend, tokens) in kernels.items()}


def reader_fields(point: Point) -> list[dict]:
    return [{"name": r.name, "walks": r.walks} for r in point.model.state_readers()]


# (group, layer, plane@offset in its page, the spec object's id, block stride) -> the layer's fields and stride
# alignment, for the configs of one planning: each parent count's KVCacheConfig holds the same groups and spec
# objects, so a layer whose slot, spec and stride are those of another count's translates to the same fields
Translated = dict[tuple[str, str, str, int, int], tuple[list[dict], int]]


class Plans:
    """A run's plannings, each one reused for a point that differs from its own only in assumptions
    (trtllm, cuda_runtime) that planning it never asked (FlashInfer's TRTLLM kernels on sm_90): vLLM
    cannot tell such points apart, so it plans them alike. Only their documents differ: a point's
    kernels are read from its own assumptions."""

    def __init__(self) -> None:
        self._done: dict[Point, list[Planned]] = {}
        self._made: ModelConfigs = {}

    def plan(self, point: Point, patches: Patches | None = None) -> Planned:
        if point.trtllm is None and point.cuda_runtime is None:
            return plan(point, patches, self._made)
        alike = replace(point, trtllm=None, cuda_runtime=None)
        for before in self._done.get(alike, []):
            if all(getattr(point, axis) == answer for axis, answer in before.asked.items()):
                return _reread(before, point)
        planned = plan(point, patches, self._made)
        self._done.setdefault(alike, []).append(planned)
        return planned


def _reread(planned: Planned, point: Point) -> Planned:
    """`planned` with the documents of `point`, made under its own answers as planning makes them."""
    backend = point.backend.load()
    with point_answers(cuda_assumed(modules()), point.backend.capability, [backend] if planned.attention else [],
                       point.trtllm, point.cuda_runtime):
        return replace(planned, documents=_documents(point, planned.configs, planned.layout, planned.kernels))


# The engine core's memory for one worker's KV cache, handed to get_kv_cache_configs: any amount whose
# blocks hold a request of the model's max_model_len passes its admission check (kvproof's models need
# tens of GB at most), and the plan is then bound at each parent count of BIND_AT as the engine core
# re-plans a rank at a block count.
MEMORY = 1 << 40


def engine_core_configs(v: Vllm, platform: Any, vllm_config: Any, specs: dict[str, Any]) -> dict[int, Any]:
    """The KVCacheConfig of each parent count in BIND_AT, planned as EngineCore._initialize_kv_caches
    plans it, through the functions its core.py imports (platform.engine_core): the specs registered
    (register_all_kvcache_specs), the whole model grouped first where it does so
    (get_global_kv_cache_groups, passed only where get_kv_cache_configs takes global_kv_cache_groups),
    then get_kv_cache_configs for this one worker. Its groups are then placed at N + 1 blocks (the
    null block) by what get_kv_cache_configs places a rank's groups with at a block count: the
    platform's KV-cache config builder where the Platform has get_kv_cache_config_builder_cls
    (0.33.0), else the planning module's get_kv_cache_config_from_groups; each called with a block
    count or its bytes, as its signature asks."""
    core = v.core
    register = core.get("register_all_kvcache_specs")
    if register is not None:
        register(vllm_config)
    entry = core.calls[ENTRY]
    takes = parameters(entry)
    args: list[Any] = [vllm_config, [specs], [MEMORY]]
    if "global_kv_cache_groups" in takes:
        grouping = core.get("get_global_kv_cache_groups")
        if grouping is None:
            raise StubUsed(f"{core.modules[ENTRY]}.{ENTRY} takes global_kv_cache_groups, but {core.source}'s "
                           "EngineCore._initialize_kv_caches calls no get_global_kv_cache_groups to make them")
        args.append(grouping(vllm_config, [specs]))
    (first,) = entry(*args)
    if not first.kv_cache_tensors:
        raise StubUsed(f"{ENTRY} planned no KV-cache tensor for a hybrid model (an attention-free plan)")
    per_block = first.kv_cache_tensors[0].size // first.num_blocks
    place = _placement(v, platform, vllm_config)
    counts = parameters(place)
    if "num_blocks" in counts:
        return {n: place(vllm_config, first.kv_cache_groups, n + 1) for n in BIND_AT}
    if "available_memory" in counts:
        return {n: place(vllm_config, first.kv_cache_groups, (n + 1) * per_block) for n in BIND_AT}
    raise StubUsed(f"{getattr(place, '__qualname__', place)} takes neither num_blocks nor available_memory "
                   f"(it takes {', '.join(counts)}); kvproof places the groups at a block count with one of them")


def _placement(v: Vllm, platform: Any, vllm_config: Any) -> Callable[..., Any]:
    """What places a worker's groups at a block count: the Platform's KV-cache config builder, chosen by
    get_kv_cache_config_builder_cls (a class path; the CUDA platform keeps Platform's default, vLLM's
    DefaultKVCacheConfigBuilder), or, on a Platform without that hook, the planning module's function."""
    chooser = getattr(platform, "get_kv_cache_config_builder_cls", None)
    if chooser is None:
        return v.planning.get_kv_cache_config_from_groups
    module, _, name = chooser(vllm_config).rpartition(".")
    builder = getattr(importlib.import_module(module), name)()
    return builder.get_kv_cache_config_from_groups


def parameters(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The names of the parameters inspect.signature(fn) gives: a call shape kvproof follows, read once per
    function (a bound method's from its function, less the first)."""
    if inspect.ismethod(fn):
        return _parameters(fn.__func__)[1:]
    return _parameters(fn)


@lru_cache(maxsize=256)  # a seeded bug's replacement is a new function each planning: the oldest go
def _parameters(fn: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


def _draft_windows(method: str, hf: Any) -> list[int | None]:
    """Each layer's sliding window as the draft's own class reads it from its config: a DFLASH draft's by
    qwen3_dflash.py's own _resolve_layer_attention (its layer_types, or dflash_config's use_swa), an EAGLE3
    draft's from its layer_types (llama.py:184-204)."""
    if method == "dflash":
        resolve = importlib.import_module("vllm.model_executor.models.qwen3_dflash")._resolve_layer_attention
        return [resolve(hf, i)[0] for i in range(hf.num_hidden_layers)]
    kinds = getattr(hf, "layer_types", None) or ()
    return [getattr(hf, "sliding_window", None) if kind == "sliding_attention" else None for kind in kinds]


# Spec fields kvproof passes only where this vLLM's spec class has them: a layer of a release without
# the field cannot pass it (MLAAttentionSpec.max_tp_shards, which the MLA layer sets to 1, from 0.31.0).
WHERE_DECLARED = frozenset({"max_tp_shards"})


def _spec(cls: type, **fields: Any) -> Any:
    declared = parameters(cls)
    return cls(**{k: value for k, value in fields.items() if k in declared or k not in WHERE_DECLARED})


def _own_backend(shell: Any) -> Any:
    """The backend a built cache layer names (AttentionLayerBase.get_attn_backend: an MLA layer the one the
    platform selected for it, an indexer's cache its own), None for a class that names none."""
    return shell.get_attn_backend() if hasattr(type(shell), "get_attn_backend") else None


def _specs(v: Vllm, vllm_config: Any, model_cls: Any, backends: tuple[Any, Any], layers: list[tuple[str, str]],
           shells: dict[str, Any], built: dict[str, Any] | None = None,
           drafts: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """Each layer's KVCacheSpec. An attention layer's is built with vLLM's spec classes from the
    inputs its own get_kv_cache_spec reads (attention.py:611, mla_attention.py:1371), and customized by its
    backend: of `backends`, the target's, or the draft's for the draft's layers (`drafts`). A state layer's
    is the layer class's own get_kv_cache_spec, run on its shell (mamba/abstract.py:72 and each
    class's override, mamba_mixer2.py:1108, kda.py:901, qwen_gdn_linear_attn.py:739): the shell's
    state shapes and dtypes are the model class's (get_mamba_state_shape_from_config and
    get_mamba_state_dtype_from_config, what vLLM's own hybrid alignment sizes the state page by), and
    anything else it reads of the constructor's state raises StubUsed naming it."""
    kvi, cache, model = v.kvi, vllm_config.cache_config, vllm_config.model_config
    backend, draft_backend = backends
    speculative = vllm_config.speculative_config
    # a draft's layers are built under the speculative config's KV dtype where it gives one (config/speculative.py:
    # 396-403, applied by eagle/utils.py:86; llm_base_proposer.py:1292-1299 in Model Runner V1)
    draft_cache_dtype = draft_cache_config(vllm_config).cache_dtype
    # as the GPU model runner hands each attention layer's spec to its backend (get_kv_cache_spec,
    # gpu_model_runner.py:7111): customize_attention_spec where vllm.v1.worker.utils has it (0.32.0 on,
    # which also keeps a block splittable into the backend's kernel blocks), else the backend's customize_spec
    customize = getattr(v.worker_utils, "customize_attention_spec", None)

    def customized(owner: Any, spec: Any) -> Any:
        return customize(owner, spec) if customize is not None else owner.customize_spec(spec)

    def attention_at(cache_dtype: str, owner: Any) -> Any:
        quant, torch_dtype = kvi.get_kv_quant_mode(cache_dtype), v.torch_utils.kv_cache_dtype_str_to_dtype(cache_dtype,
                                                                                                             model)
        if model.use_mla:
            return customized(owner, _spec(
                kvi.MLAAttentionSpec, block_size=cache.block_size, num_kv_heads=1, max_tp_shards=1,
                head_size=model.get_head_size(), dtype=torch_dtype, cache_dtype_str=cache_dtype, kv_quant_mode=quant))
        return customized(owner, _spec(
            kvi.FullAttentionSpec, block_size=cache.block_size,
            num_kv_heads=model.get_num_kv_heads(vllm_config.parallel_config), head_size=model.get_head_size(),
            dtype=torch_dtype, kv_quant_mode=quant))

    attention = attention_at(cache.cache_dtype, backend)
    # the model's own draft layers (MTP) are the target's attention at the draft's dtype, under the draft's backend
    draft_attention = (attention if draft_cache_dtype == cache.cache_dtype and draft_backend is backend
                       else attention_at(draft_cache_dtype, draft_backend))
    # a draft checkpoint's own attention layers at its geometry, those of a draft whose layers are built excepted
    if any(kind == "draft" and name not in (built or {}) for name, kind in layers):
        draft = speculative.draft_model_config
        if any(window is not None for window in _draft_windows(speculative.method, draft.hf_config)):
            raise StubUsed(f"the draft checkpoint {draft.architectures} has sliding-window layers, whose specs kvproof "
                           "does not build")
        # its heads and head size are the draft config's (llama.py:143-159; qwen3_dflash.py:189-199, the same
        # reading); its KV dtype the draft's cache dtype above, resolved against the target's ModelConfig, which
        # the draft's config keeps and Attention reads the model dtype from (attention.py:275, :323-324). Its backend
        # is the draft's: Model Runner V2 builds an EAGLE3 draft under the target's attention config but for the
        # speculative config's attention_backend (v1/worker/gpu/spec_decode/eagle/utils.py:86), a DFLASH draft under
        # it too, for its non-causal attention (dflash/utils.py:26-33), and unpinned, at the one target backend a
        # DFLASH recipe plans, FLASH_ATTN on sm_90, vLLM's selection is FLASH_ATTN (cuda.py:169-178)
        drafted = _spec(kvi.FullAttentionSpec, block_size=cache.block_size,
                        num_kv_heads=draft.get_num_kv_heads(speculative.draft_parallel_config),
                        head_size=draft.get_head_size(),
                        dtype=v.torch_utils.kv_cache_dtype_str_to_dtype(draft_cache_dtype, model),
                        kv_quant_mode=kvi.get_kv_quant_mode(draft_cache_dtype))
        drafted = customized(draft_backend, drafted)
        if faults.active("adapter_draft_at_target_geometry"):
            drafted = attention
    shapes = tuple(model_cls.get_mamba_state_shape_from_config(vllm_config))
    dtypes = tuple(model_cls.get_mamba_state_dtype_from_config(vllm_config))
    out: dict[str, Any] = {}
    for name, kind in layers:
        if built and name in built:  # the layer's own get_kv_cache_spec, on its shell, customized by its backend
            layer = built[name]
            spec = _check_shell_call(partial(type(layer).get_kv_cache_spec, layer, vllm_config),
                                     f"{type(layer).__name__}.get_kv_cache_spec", built)
            own = _own_backend(layer)
            out[name] = customized(own or backend, spec)
            continue
        if kind in ("attention", "draft"):
            out[name] = drafted if kind == "draft" else draft_attention if name in drafts else attention
            continue
        shell = shells[name]
        # the model class's answer, unless the model's state_init computed the layer's own (the two differ
        # where a model class drops what its layer keeps, vllm#57721)
        vars(shell).setdefault("get_state_shape", lambda: shapes)
        vars(shell).setdefault("get_state_dtype", lambda: dtypes)
        out[name] = _check_shell_call(partial(type(shell).get_kv_cache_spec, shell, vllm_config),
                                      f"{type(shell).__name__}.get_kv_cache_spec", shells)
    # vLLM's runner marks the spec of each layer the proposer added (is_draft_layer, llm_base_proposer.py:1333-1335)
    # as the draft's (gpu_model_runner.py:7114-7115), where its class has the field: an EAGLE/MTP draft's group is
    # then an EAGLE group (kv_cache_planning.py:1650-1656)
    return {name: replace(spec, is_draft=True) if name in drafts and "is_draft" in {f.name for f in fields(spec)}
            else spec for name, spec in out.items()}


def _dtype(torch_dtype: Any) -> str:
    return str(torch_dtype).removeprefix("torch.")


def document(kv_config: Any, layout: Any, parents: int, kernels: dict[str, list[dict]] | None = None,
             readers: list[dict] | None = None, translated: Translated | None = None) -> dict:
    """vLLM's KVCacheConfig as kvproof's plan document.

    Block 0 is vLLM's null block, so num_blocks = N + 1 parents. vLLM 0.33.0 allocates one buffer
    and views it per layer in the resolved layout (create_kv_cache_views, v1/kv_cache_interface.py:
    418); a hybrid model's mixed page shapes narrow that to a block-compact layout
    (resolve_kv_cache_layout, v1/attention/backends/utils.py:336-337), LBNHC at every point planned
    here: [layer, block, token, head, K | V]. So every KVCacheTensor aliases one allocation, its
    i-th layer owns [offset + i x layer_stride, ...), block b of it starts block_stride bytes after
    block b - 1, and one layer's page is one contiguous run of payload bytes (each token's heads,
    each head's K then V), padded at its end to the block stride. (0.33.0 has no separate pass
    that re-strides a hybrid model's attention caches: the layout is this generic one.) Each such
    layer slot is a plane of block_stride bytes per parent; every group puts one page (packing 1)
    in each slot it has a layer in. State fields are views sliced out of the page, one state after
    another, so their stride is the page (P) and not their payload. An attention field declares an
    exact stride only where vLLM splits its block into kernel pages (see _fields). `kernels`: each attention
    layer's, which read its pages (each handed pages of its `tokens`; none where a layer has none listed);
    `readers` read the state pages.
    `translated`: the layers translated for the other parent counts of the same planning, the
    configs' spec objects alive while it is (its keys hold their ids).
    """
    translated = {} if translated is None else translated
    if kv_config.num_blocks != parents + 1:
        raise StubUsed(f"vLLM sized {kv_config.num_blocks} blocks for {parents} parents plus the null block")
    listed = kernels or {}

    def reading(name: str) -> list[dict]:
        return listed.get(name, [])

    if layout.is_block_outermost:
        return _block_outermost(kv_config, layout, parents, reading, readers or [], translated)
    planes: dict[int, tuple[str, int]] = {}

    def slot(t: Any, i: int) -> tuple[str, int, int]:
        base = t.offset + i * t.layer_stride
        plane = planes.setdefault(base, (f"slot{len(planes)}", t.block_stride))
        if plane[1] != t.block_stride:
            raise StubUsed(f"two tensors alias the slot at byte {base} with block strides {plane[1]} and "
                           f"{t.block_stride}; kvproof does not translate that yet")
        return plane[0], t.block_stride, 0

    groups, fields, alignment = _groups(kv_config, slot, reading, readers or [], translated)
    sizes = {t.size for t in kv_config.kv_cache_tensors}
    ordered = sorted(planes.items())
    parent = sum(stride for _, (_, stride) in ordered)
    return {
        "num_parents": parents, "parent_bytes": parent, "alignment": alignment, "max_padding": None,
        "arena_bytes": max(sizes),
        "planes": [{"id": pid, "bytes": stride, "arena_offset": base} for base, (pid, stride) in ordered],
        "groups": groups, "fields": fields,
    }


def _block_outermost(kv_config: Any, layout: Any, parents: int, kernels: Callable[[str], list[dict]],
                     readers: list[dict], translated: Translated) -> dict:
    """A block-outermost layout (BLHNC: a cache with a layer whose backend admits no other, as GLM-5.3-Flash's
    indexer tail ring) as kvproof's plan document. vLLM 0.33.0 lays such a cache out as one block after another,
    each block the same packing of every group's layers (get_kv_cache_config_from_groups, v1/core/
    kv_cache_planning.py:676-733: every tensor's block stride is bytes_per_block, a group's layers one after
    another from byte 0 of the block at offset + i x layer_stride, the groups aliasing from byte 0;
    allocate_kv_cache, v1/worker/utils.py:563-628, views them at offset + l x layer_stride + b x block_stride).
    So the parent is one plane of bytes_per_block at arena offset 0, a group takes the whole block (its page),
    and each layer's fields sit at the layer's offset in it, stepping by the block."""
    strides = {t.block_stride for t in kv_config.kv_cache_tensors}
    if len(strides) != 1 or any(t.size != kv_config.num_blocks * t.block_stride for t in kv_config.kv_cache_tensors):
        raise StubUsed(f"the block-outermost layout {layout.name} with tensors of block strides {sorted(strides)} "
                       "that do not each span num_blocks blocks is not translated by kvproof yet")
    (stride,) = strides
    groups, fields, alignment = _groups(
        kv_config, lambda t, i: ("slot0", stride, t.offset + i * t.layer_stride), kernels, readers, translated)
    return {
        "num_parents": parents, "parent_bytes": stride, "alignment": alignment, "max_padding": None,
        "arena_bytes": kv_config.num_blocks * stride,
        "planes": [{"id": "slot0", "bytes": stride, "arena_offset": 0}], "groups": groups, "fields": fields,
    }



def _groups(kv_config: Any, slot: Callable[[Any, int], tuple[str, int, int]], kernels: Callable[[str], list[dict]],
            readers: list[dict], translated: Translated) -> tuple[list[dict], list[dict], int]:
    """Each group of the config (packing 1, a page a block), its layers' fields and their stride alignment.
    `slot(tensor, i)`: the plane, block stride and byte offset in that plane's page of the tensor's i-th layer;
    `kernels(layer)`: the kernels that read the layer's attention pages."""
    by_layer = {name: (t, i) for t in kv_config.kv_cache_tensors for i, name in enumerate(t.layers)}
    groups, fields, alignment = [], [], 1
    for g, group in enumerate(kv_config.kv_cache_groups):
        gid = f"g{g}"
        groups.append({"id": gid, "packing": 1, "page_count": kv_config.num_blocks})
        for name in group.layer_names:
            plane, stride, at = slot(*by_layer[name])
            spec = layer_spec(group, name)
            key = (gid, name, f"{plane}@{at}", id(spec), stride)
            if key not in translated:
                layer = _fields(f"{gid}.{name}", gid, plane, spec, stride, kernels(name), readers)
                translated[key] = ([{**f, "offset": f["offset"] + at} for f in layer] if at else layer,
                                   _stride_alignment(spec))
            layer_fields, layer_alignment = translated[key]
            alignment = math.lcm(alignment, layer_alignment)
            fields += layer_fields
    return groups, fields, alignment

def _stride_alignment(spec: Any) -> int:
    """The bytes a layer's block stride must be a multiple of, read as this vLLM's planner reads it:
    get_block_stride_alignment() (0.32.0 on, which resolves a MultipleOf), else the spec's
    block_stride_alignment field, None meaning 1 (0.31.0, _get_kv_cache_bytes_per_block), and 1 where
    specs have neither (0.30.0 aligns no block stride)."""
    method = getattr(spec, "get_block_stride_alignment", None)
    return int(method()) if method is not None else int(getattr(spec, "block_stride_alignment", None) or 1)


def _fields(prefix: str, group: str, plane: str, spec: Any, stride: int, kernels: list[dict],
            readers: list[dict]) -> list[dict]:
    if hasattr(spec, "shapes"):  # MambaSpec: states one after another in the page
        out, offset = [], 0
        for k, (shape, dtype) in enumerate(zip(spec.shapes, spec.dtypes, strict=True)):
            itemsize = dtype.itemsize
            out.append({"id": f"{prefix}.state{k}", "group": group, "plane": plane, "shape": list(shape),
                        "dtype": _dtype(dtype), "offset": offset, "stride": stride, "exact_stride": False,
                        "readers": readers})
            offset += itemsize * math.prod(int(d) for d in shape)
        return out
    # a state per token, or per tokens_per_state tokens (an indexer's pooled keys, v1/kv_cache_interface.py:569-573)
    states = spec.num_states if getattr(spec, "tokens_per_state", 1) != 1 else spec.block_size
    per_state = spec.real_page_size_bytes // states  # the payload: a padded page shows as stride > payload
    dtype = _dtype(spec.dtype)
    itemsize = spec.dtype.itemsize
    return [{"id": f"{prefix}.kv", "group": group, "plane": plane,
             "shape": [states, per_state // itemsize], "dtype": dtype, "offset": 0,
             "stride": stride, "exact_stride": _split(spec.block_size, kernels), "tokens": spec.block_size,
             "kernels": kernels}]


def _split(block: int, kernels: list[dict]) -> bool:
    """Whether an attention page's stride must equal its payload: only where vLLM splits the
    block into smaller kernel pages. The kernels whose code was read step from page to page by
    their cache tensor's own stride(0), so a padded page is read right: FlashAttention 3 sets k_batch_stride =
    k.stride(0) (vllm-project/flash-attention@617264c hopper/flash_api.cpp:155; only the last dim
    must be contiguous, :794), FlashMLA k_batch_stride = kcache.stride(0) (deepseek-ai/FlashMLA@9241ae3
    csrc/api/dense_decode.h:147; :49), Triton unified attention physical_block_idx x k.stride(0)
    (triton_unified_attention.py:1179, :482) and Triton MLA decode the real page stride, "don't
    assume PAGE_SIZE * token stride" (triton_decode_attention.py:58-64, :252). Splitting is another
    matter: vLLM views a block as `ratio` kernel pages at block_stride / ratio each, which tile the
    page only when the block stride is the dense page, so it refuses a padded page there
    (create_kv_cache_views, v1/kv_cache_interface.py:438-456; compute_layout_strides, :396-399).
    Kimi's 1,920-token block handed to FlashMLA or FlashInfer's MLA decode as 64-token pages is
    such a split (FlashInfer's own stride handling was not read: split, it needs the exact stride
    whatever it does)."""
    return any(k["tokens"] < block for k in kernels)
