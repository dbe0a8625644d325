"""kvproof's CUDA platform for vLLM: the only answers planning gets that would need a GPU.

vLLM asks its current platform which attention backend the built layers use, whether the hybrid
KV-cache manager is supported, the device capability and, at some points, the CUDA runtime's
major version and whether FlashInfer's TRTLLM kernels are obtainable. On a CPU kvproof installs
one platform that answers these for the point being planned, each from the point's assumptions,
selects a backend where vLLM selects one while planning (a DSpark draft's) as CudaPlatform does
among the dense MLA backends, and raises StubUsed for anything else. Triton counts as usable, as
on a GPU (HAS_TRITON, which picks the model runner). Backends are imported under it (load_backend), with the
guarded stand-ins of stand_ins.py for the GPU packages their modules bind; the catalog and the
planner both use it, so it imports neither.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.util
import logging
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvproof.engines.stubs import StubUsed
from kvproof.engines.vllm import stand_ins


@dataclass(frozen=True)
class Answers:
    """What kvproof's platform answers while one point is planned: the point's GPU and backend,
    and the deployment facts the point assumes (None: it assumes none, and a question raises)."""

    capability: tuple[int, int]
    backends: list[type]  # the backends vLLM finds on the rank's built layers
    trtllm: bool | None = None
    cuda_runtime: int | None = None
    # the assumptions planning asked for, each with the answer given (a point that differs in another plans alike)
    asked: dict[str, bool | int | None] = field(default_factory=dict)


class Unsupported(Exception):
    """This vLLM lacks what kvproof's adapter follows (the engine core's planning entry, the
    platform's block-size hooks): `verify engine` exits 2 with one line, `unsupported: ...`."""


# The functions EngineCore._initialize_kv_caches (vllm/v1/engine/core.py) calls to plan the KV cache, by
# the name core.py imports each under: what the adapter plans through. Required: the engine core's entry
# and the layout it resolves first; optional: what only some releases call (0.33.0 groups the whole model
# first, get_global_kv_cache_groups, and passes the groups to get_kv_cache_configs).
ENTRY = "get_kv_cache_configs"
REQUIRED = (ENTRY, "resolve_kv_cache_layout")
OPTIONAL = ("get_global_kv_cache_groups", "register_all_kvcache_specs")


@dataclass(frozen=True)
class EngineCore:
    """What EngineCore._initialize_kv_caches calls, each resolved as core.py's own import resolves
    it (read with ast, so core.py and its zmq and msgspec imports are never run)."""

    calls: dict[str, Callable[..., Any]]  # name -> the function core.py imports under that name
    modules: dict[str, str]  # name -> the module core.py imports it from
    source: str  # core.py, for messages

    def get(self, name: str) -> Callable[..., Any] | None:
        return self.calls.get(name)


@dataclass(frozen=True)
class Vllm:
    """The vLLM modules planning calls into, by what kvproof uses each for."""

    config: types.ModuleType  # vllm.config
    platforms: types.ModuleType  # vllm.platforms
    interface: types.ModuleType  # vllm.platforms.interface
    kvi: types.ModuleType  # vllm.v1.kv_cache_interface
    planning: types.ModuleType  # the module core.py imports get_kv_cache_configs from (kv_cache_planning in 0.33.0,
    # kv_cache_utils before): the seeded bugs patch the planning helpers there
    core: EngineCore  # what EngineCore._initialize_kv_caches calls
    worker_utils: types.ModuleType  # vllm.v1.worker.utils
    backend_utils: types.ModuleType  # vllm.v1.attention.backends.utils
    registry: types.ModuleType  # vllm.v1.attention.backends.registry
    models: types.ModuleType  # vllm.model_executor.models
    torch_utils: types.ModuleType  # vllm.utils.torch_utils
    dist_utils: types.ModuleType  # vllm.distributed.utils


def engine_core_imports(core_py: Path) -> dict[str, str]:
    """The planning functions EngineCore._initialize_kv_caches calls (REQUIRED and those of OPTIONAL
    it calls), each with the module core.py's own module-level `from X import name` takes it from;
    core.py is read with ast, never run. Unsupported when core.py has no such method or it calls no
    imported get_kv_cache_configs: the engine core plans its cache some other way than the one followed."""
    shown = "vllm/v1/engine/core.py"
    if not core_py.is_file():
        raise Unsupported(f"this vLLM has no {shown}, whose EngineCore._initialize_kv_caches kvproof plans through")
    tree = ast.parse(core_py.read_text(encoding="utf-8"), filename=str(core_py))
    imported = {alias.asname or alias.name: node.module for node in tree.body
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                for alias in node.names}
    method = next((item for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "EngineCore"
                   for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "_initialize_kv_caches"),
                  None)
    if method is None:
        raise Unsupported(f"{shown} has no EngineCore._initialize_kv_caches, the engine core's KV-cache planning "
                          "that kvproof follows")
    called = {node.func.id for node in ast.walk(method)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    missing = [name for name in REQUIRED if name not in called or name not in imported]
    if missing:
        raise Unsupported(f"{shown}: EngineCore._initialize_kv_caches calls no imported {', '.join(missing)}, "
                          "the planning entry kvproof follows")
    return {name: imported[name] for name in (*REQUIRED, *OPTIONAL) if name in called and name in imported}


def engine_core(package: Path) -> EngineCore:
    """engine_core_imports of the package's core.py, each function imported as core.py imports it."""
    modules_of = engine_core_imports(package / "v1" / "engine" / "core.py")
    calls = {}
    for name, module in modules_of.items():
        found = getattr(importlib.import_module(module), name, None)
        if not callable(found):
            raise Unsupported(f"vllm/v1/engine/core.py imports {name} from {module}, which has no such function here")
        calls[name] = found
    return EngineCore(calls, modules_of, "vllm/v1/engine/core.py")


# The Platform hooks that set the block size and align it for a hybrid model (the adapter runs them as
# they are). Platform._align_hybrid_block_size entered in vLLM 0.20.0 (vllm/platforms/interface.py:502):
# 0.19.1 and earlier align in HybridAttentionMambaModelConfig (vllm/model_executor/models/config.py:156,
# padding at :308), read from the releases' wheels on PyPI.
PLATFORM_HOOKS = ("update_block_size_for_backend", "_align_hybrid_block_size")
ALIGNMENT_SINCE = "0.20.0"

# Modules that compute a GPU answer with a compiled op when first imported under a CUDA platform, and
# decide nothing a KV-cache page depends on: kvproof imports them first under this machine's platform,
# as vLLM 0.32.0 and later import them themselves (vllm.v1.worker.utils imports w8a8_utils). w8a8_utils
# sets CUTLASS_BLOCK_FP8_SUPPORTED (the fp8 GEMM's path) from torch.ops._C, which a CPU build lacks.
IMPORT_FIRST = ("vllm.model_executor.layers.quantization.utils.w8a8_utils",)


def check_hooks(base: type) -> None:
    """Unsupported unless vLLM's Platform has the block-size hooks the adapter runs (PLATFORM_HOOKS)."""
    missing = [hook for hook in PLATFORM_HOOKS if not callable(getattr(base, hook, None))]
    if missing:
        raise Unsupported(f"this vLLM's Platform has no {', '.join(missing)}: kvproof follows the hybrid block "
                          f"alignment there, which entered Platform in vLLM {ALIGNMENT_SINCE} (before, "
                          "HybridAttentionMambaModelConfig in vllm/model_executor/models/config.py)")


_LOADED: dict[str, Vllm] = {}  # vllm's package folder -> its modules (core.py is read once)


def modules() -> Vllm:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the config is a local file; never reach for a hub
    # vLLM's warnings about the plans (padding it wastes, layers it pads) are kvproof's findings to
    # report, and thousands of them per run would bury an error; VLLM_LOGGING_LEVEL=WARNING shows them.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # requests (a vLLM dependency) warns at import that it has no charset detector: it would need
    # one only to decode a response body, and planning makes no request
    warnings.filterwarnings("ignore", message="Unable to find acceptable character detection dependency")
    level, logger = os.environ["VLLM_LOGGING_LEVEL"].upper(), logging.getLogger("vllm")  # vLLM's own reading
    if logger.level != logging.getLevelName(level):  # setLevel empties every logger's cache: once per point
        logger.setLevel(level)
    load = importlib.import_module
    imported = sys.modules.get("vllm") or load("vllm")  # import_module looks it up slower, once a planning
    package = Path(imported.__file__ or "").parent
    if str(package) in _LOADED:
        return _LOADED[str(package)]
    engine_core_imports(package / "v1" / "engine" / "core.py")  # what the adapter follows is there (read, not run)
    check_hooks(load("vllm.platforms.interface").Platform)
    for name in IMPORT_FIRST:
        if importlib.util.find_spec(name) is not None:
            load(name)
    core = engine_core(package)
    v = Vllm(
        config=load("vllm.config"), platforms=load("vllm.platforms"), interface=load("vllm.platforms.interface"),
        kvi=load("vllm.v1.kv_cache_interface"), planning=load(core.modules[ENTRY]), core=core,
        worker_utils=load("vllm.v1.worker.utils"), backend_utils=load("vllm.v1.attention.backends.utils"),
        registry=load("vllm.v1.attention.backends.registry"), models=load("vllm.model_executor.models"),
        torch_utils=load("vllm.utils.torch_utils"), dist_utils=load("vllm.distributed.utils"),
    )
    _remember_dtype_sizes(v.torch_utils)
    _inspect_here(load("vllm.model_executor.models.registry"))
    _LOADED[str(package)] = v
    return v


def _inspect_here(registry: types.ModuleType) -> None:
    """vLLM's model registry reads what a model class declares (is it hybrid, does it take pipeline
    stages) in a fresh Python process, to keep CUDA out of the server's own (registry.py,
    _run_in_subprocess: "Performed in another process to avoid initializing CUDA"), unless its cache
    under VLLM_CACHE_ROOT holds the class file's answer. No CUDA is initialised here, so the same
    function runs in this process: each class cost a cold run seconds of a fresh interpreter importing
    vLLM, with the answers the same (a 3-model run's JSON was identical either way)."""
    if callable(getattr(registry, "_run_in_subprocess", None)):
        registry._run_in_subprocess = _call  # type: ignore[attr-defined]


def _call(fn: Callable[[], Any]) -> Any:
    return fn()


def _remember_dtype_sizes(torch_utils: types.ModuleType) -> None:
    """vLLM's get_dtype_size, each dtype's answer kept: it builds an empty tensor to read the dtype's
    element size, a pure function of the dtype, and the planner asks it for every layer each time it
    sizes a page (about a quarter of a point's planning went to building those tensors). It is the same
    function for each module that bound it by name, and modules imported later bind the kept one."""
    original = torch_utils.get_dtype_size
    if hasattr(original, "cache_info"):  # kept already
        return
    kept = functools.cache(original)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("vllm") and getattr(module, "get_dtype_size", None) is original:
            module.get_dtype_size = kept  # type: ignore[attr-defined]


_ASSUMED: dict[Any, Any] = {}  # vllm's Platform class -> the one CudaAssumed instance of this process


def cuda_assumed(v: Vllm) -> Any:
    """The one Platform of this process that answers as the CUDA platform would on the point's GPU
    with the point's backend, and runs the interface's own block-size logic. It is one instance for
    every point because vLLM modules bind `current_platform` when first imported (kda.py, the
    backends): each answers the point being planned (`point_answers`), so one process plans sm_90
    and sm_100 points alike; asked outside a point it raises StubUsed. Its hooks are the only
    answers kvproof gives; a hook it does not override and vLLM's interface leaves abstract raises."""
    interface = v.interface
    base: Any = interface.Platform
    if base in _ASSUMED:
        return _ASSUMED[base]

    class CudaAssumed(base):
        _enum = interface.PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        _point: Answers | None = None

        @classmethod
        def _answers(cls) -> Answers:
            if cls._point is None:
                raise StubUsed("vLLM asked kvproof's CUDA platform for the GPU outside planning a point; it "
                               "answers only for the point being planned")
            return cls._point

        @classmethod
        def support_hybrid_kv_cache(cls) -> bool:
            return True  # vllm/platforms/cuda.py:683

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return interface.DeviceCapability(*cls._answers().capability)

        @classmethod
        def get_cuda_runtime_major(cls) -> int:
            """CudaPlatform's (torch.version.cuda's major, cuda.py:286): the point's assumption."""
            answers = cls._answers()
            major = answers.asked["cuda_runtime"] = answers.cuda_runtime
            if major is None:
                raise StubUsed("vLLM asked the CUDA runtime's major version (get_cuda_runtime_major) at a point "
                               "that assumes none; give the point a cuda_runtime axis")
            return major

    # Where vLLM finds the attention backend on the built layers, the point's backend answers: a list
    # (_find_non_ssm_backends, 0.31.0 on; the alignment takes the first) or the first alone
    # (_find_non_ssm_backend, 0.30.0), whichever hook this vLLM's Platform has.
    finders = [name for name in FINDERS if callable(getattr(base, name, None))]
    if not finders:
        raise Unsupported(f"this vLLM's Platform has neither {' nor '.join(FINDERS)}, where kvproof answers which "
                          "attention backend the built layers use")
    for name in finders:
        setattr(CudaAssumed, name, classmethod(FINDERS[name]))
    CudaAssumed.get_attn_backend_cls = classmethod(_select)
    _ASSUMED[base] = CudaAssumed()
    return _ASSUMED[base]


def _backends(cls: Any, vllm_config: Any) -> list[type]:
    return list(cls._answers().backends)  # the point's backend: vLLM finds it on built layers


def _backend(cls: Any, vllm_config: Any) -> type | None:
    return next(iter(cls._answers().backends), None)  # the first non-SSM backend, None on a rank without attention


FINDERS: dict[str, Callable[..., Any]] = {"_find_non_ssm_backends": _backends, "_find_non_ssm_backend": _backend}

# CudaPlatform's dense MLA priorities (vllm 0.33.0, vllm/platforms/cuda.py `_get_backend_priorities`: sm_100
# :123-131, below it :150-153), read from its source: cuda.py does not import on a CPU (it loads the compiled
# vllm._C_stable_libtorch, :23). The sparse backends after them decline a dense layer (v1/attention/backend.py:321).
MLA_PRIORITIES = {10: ("FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"),
                  9: ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA")}


def _select(cls: Any, selected_backend: Any, attn_selector_config: Any, num_heads: int | None = None) -> str:
    """CudaPlatform.get_attn_backend_cls (cuda.py:420-518) for a dense MLA layer whose backend vLLM selects while
    kvproof plans (a DSpark draft's, selected apart from the target's): the pinned backend where one is, else the
    first of the priorities that validate_configuration accepts (vLLM validates each and takes the valid one of
    highest priority: the same one). A backend's supports_combination may ask the machine for its compiled
    kernels (FlashAttention MLA's, FlashMLA's), which a CPU lacks: a backend it alone declines raises StubUsed,
    and so does one whose module does not import here (vLLM counts it invalid, which a CPU cannot tell)."""
    config = attn_selector_config
    capability = cls._answers().capability
    if not config.use_mla or config.use_sparse or capability[0] not in MLA_PRIORITIES:
        raise StubUsed(f"vLLM selected an attention backend for a layer other than dense MLA on sm_90 or sm_100 "
                       f"({config!r} at capability {capability}); kvproof holds only those priority lists")
    registry = importlib.import_module("vllm.v1.attention.backends.registry")
    device = importlib.import_module("vllm.platforms.interface").DeviceCapability(*capability)
    names = (selected_backend.name,) if selected_backend is not None else MLA_PRIORITIES[capability[0]]
    invalid = {}
    for name in names:
        module, _, class_name = registry.AttentionBackendEnum[name].get_path().rpartition(".")
        try:
            backend = load_backend(f"{module}:{class_name}", capability)
        except (ImportError, OSError) as err:  # what vLLM counts as a backend unavailable (cuda.py:405)
            raise StubUsed(f"vLLM's attention backend selection reaches {name}, whose module does not import on "
                           f"this CPU ({err}); on a GPU it may") from None
        invalid[name] = backend.validate_configuration(device_capability=device, **config._asdict())
        # validate_configuration appends supports_combination's reason last (v1/attention/backend.py:356-368)
        combination = backend.supports_combination(
            config.head_size, config.dtype, config.kv_cache_dtype, config.block_size, config.use_mla,
            config.has_sink, config.use_sparse, config.use_mm_prefix, device)
        if invalid[name] == [combination]:
            raise StubUsed(f"vLLM's attention backend selection reaches {name}, which declines the layer for a "
                           f"reason of its own that may be this CPU's ({combination}); on the point's GPU it may not")
        if not invalid[name]:
            return f"{module}.{class_name}"
    if selected_backend is not None:
        raise ValueError(f"Selected backend {selected_backend} is not valid for this configuration. Reason: "
                         f"{invalid[selected_backend.name]}")
    raise ValueError(f"No valid attention backend found for cuda with {config!r}. Reasons: {invalid}.")


@contextlib.contextmanager
def point_answers(platform: Any, capability: tuple[int, int], backends: list[type], trtllm: bool | None = None,
                  cuda_runtime: int | None = None) -> Iterator[Answers]:
    """The platform installed as vLLM's current_platform, answering for one point, and vLLM's
    has_nvidia_artifactory answering the point's `trtllm` assumption (never a network request);
    the block gets the answers, which record the assumptions asked (Answers.asked).

    vLLM caches supports_trtllm_attention per process (vllm/utils/flashinfer.py:674), where one GPU
    and one deployment never change; kvproof plans many points in one process, so the cache is
    emptied on entering and leaving each point. vllm.utils.flashinfer binds current_platform when
    first imported (:24), which happens before any point, under this machine's CPU platform, so its
    platform is the point's for the point too. The stand-ins a model class's module needs to import
    (stand_ins.planning: torchvision, for the Qwen3.5, MiniCPM-V 4.6 and LFM2-VL classes) are in place for
    the point and gone after it."""
    platforms: Any = importlib.import_module("vllm.platforms")
    flashinfer: Any = importlib.import_module("vllm.utils.flashinfer")
    # vLLM keeps each selection by the layer's inputs alone (selector.py:206), not the GPU it was made for
    selected: Any = importlib.import_module("vllm.v1.attention.selector")._cached_get_attn_backend
    # VllmConfig runs Model Runner V2 only where Triton is usable (HAS_TRITON, config/vllm.py:752; 0.30.0 to
    # 0.32.0 ask it of any platform), as it is on a GPU, whose CUDA wheel depends on triton, and not on a machine
    # without a GPU driver, where triton finds no active one
    configs: Any = importlib.import_module("vllm.config.vllm")
    triton = vars(configs).get("HAS_TRITON")
    envs: Any = importlib.import_module("vllm.envs")
    answers = Answers(capability, backends, trtllm, cuda_runtime)
    if envs.VLLM_BATCH_INVARIANT:
        answers.asked["trtllm"] = trtllm  # kvproof asks it here
        if trtllm:
            raise StubUsed("VLLM_BATCH_INVARIANT is set in this process, so vLLM turns TRTLLM attention off "
                           "(vllm/utils/flashinfer.py:683) whatever the point assumes; unset it to plan")

    def has_nvidia_artifactory() -> bool:
        answers.asked["trtllm"] = trtllm
        if trtllm is None:
            raise StubUsed("vLLM asked whether FlashInfer's TRTLLM kernels are obtainable (has_nvidia_artifactory) "
                           "at a point that assumes neither; give the point a trtllm axis")
        return trtllm

    previous, asked, bound = platforms._current_platform, flashinfer.has_nvidia_artifactory, flashinfer.current_platform
    outer = type(platform)._point  # a point's, where a backend is imported while it plans (a draft's selection)
    type(platform)._point = answers
    platforms._current_platform = platform
    flashinfer.has_nvidia_artifactory, flashinfer.current_platform = has_nvidia_artifactory, platform
    flashinfer.supports_trtllm_attention.cache_clear()
    selected.cache_clear()
    if triton is not None:
        configs.HAS_TRITON = True
    try:
        with stand_ins.planning():
            yield answers
    finally:
        type(platform)._point = outer
        platforms._current_platform = previous
        flashinfer.has_nvidia_artifactory, flashinfer.current_platform = asked, bound
        flashinfer.supports_trtllm_attention.cache_clear()
        selected.cache_clear()
        if triton is not None:
            configs.HAS_TRITON = triton


def load_backend(path: str, capability: tuple[int, int], via: str | None = None) -> Any:
    """A backend class, its module imported (if first here) with kvproof's platform as
    current_platform, answering for `capability`, and with the guarded stand-ins of
    stand_ins.py for the GPU packages it binds; a module bound to another platform raises.
    `via`: the module vLLM imports it through, imported first (a backend module that imports
    its importer back fails to import on its own)."""
    module_name, cls = path.split(":")
    platform = cuda_assumed(modules())
    module = sys.modules.get(module_name)
    if module is None or _IMPORTED.get(module_name) is not module:
        _import_backend(via or module_name, platform, capability)
        module = _IMPORTED[module_name] = importlib.import_module(module_name)
    bound = vars(module).get("current_platform", platform)
    if bound is not platform:
        raise StubUsed(f"{module_name} was imported before planning under {type(bound).__name__}, so its answers "
                       "are not the point's; plan in a process that has not imported it")
    return getattr(module, cls)


# a backend module's name -> the module load_backend imported, while it is the one imported (importing it again
# would return it too, after entering the answers and stand-ins only its first import reads, once a planning)
_IMPORTED: dict[str, Any] = {}


def _import_backend(module_name: str, platform: Any, capability: tuple[int, int]) -> None:
    with point_answers(platform, capability, []):
        try:
            with stand_ins.installed():
                importlib.import_module(module_name)
        except ImportError as err:  # the module imports a compiled package unconditionally (vLLM 0.30.0, 0.31.0)
            compiled = stand_ins.compiled_missing(err)
            if compiled is None:
                raise
            with stand_ins.installed((compiled,)):
                importlib.import_module(module_name)
