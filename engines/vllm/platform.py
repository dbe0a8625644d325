"""kvproof's CUDA platform for vLLM: the only answers planning gets that would need a GPU.

vLLM asks its current platform which attention backend the built layers use, whether the hybrid
KV-cache manager is supported, the device capability and, at some points, the CUDA runtime's
major version and whether FlashInfer's TRTLLM kernels are obtainable. On a CPU kvproof installs
one platform that answers these for the point being planned, each from the point's assumptions,
and raises StubUsed for anything else. Backends are imported under it (load_backend), with the
guarded stand-ins of stand_ins.py for the GPU packages their modules bind; the catalog and the
planner both use it, so it imports neither.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Vllm:
    """The vLLM modules planning calls into, by what kvproof uses each for."""

    config: types.ModuleType  # vllm.config
    platforms: types.ModuleType  # vllm.platforms
    interface: types.ModuleType  # vllm.platforms.interface
    kvi: types.ModuleType  # vllm.v1.kv_cache_interface
    planning: types.ModuleType  # vllm.v1.core.kv_cache_planning
    worker_utils: types.ModuleType  # vllm.v1.worker.utils
    backend_utils: types.ModuleType  # vllm.v1.attention.backends.utils
    registry: types.ModuleType  # vllm.v1.attention.backends.registry
    models: types.ModuleType  # vllm.model_executor.models
    torch_utils: types.ModuleType  # vllm.utils.torch_utils
    dist_utils: types.ModuleType  # vllm.distributed.utils


def modules() -> Vllm:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the config is a local file; never reach for a hub
    # vLLM's warnings about the plans (padding it wastes, layers it pads) are kvproof's findings to
    # report, and thousands of them per run would bury an error; VLLM_LOGGING_LEVEL=WARNING shows them.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # requests (a vLLM dependency) warns at import that it has no charset detector: it would need
    # one only to decode a response body, and planning makes no request
    warnings.filterwarnings("ignore", message="Unable to find acceptable character detection dependency")
    logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())  # vLLM's own reading
    load = importlib.import_module
    return Vllm(
        config=load("vllm.config"), platforms=load("vllm.platforms"), interface=load("vllm.platforms.interface"),
        kvi=load("vllm.v1.kv_cache_interface"), planning=load("vllm.v1.core.kv_cache_planning"),
        worker_utils=load("vllm.v1.worker.utils"), backend_utils=load("vllm.v1.attention.backends.utils"),
        registry=load("vllm.v1.attention.backends.registry"), models=load("vllm.model_executor.models"),
        torch_utils=load("vllm.utils.torch_utils"), dist_utils=load("vllm.distributed.utils"),
    )


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
        def _find_non_ssm_backends(cls, vllm_config: Any) -> list[type]:
            return list(cls._answers().backends)  # the point's backend: vLLM finds it on built layers

        @classmethod
        def support_hybrid_kv_cache(cls) -> bool:
            return True  # vllm/platforms/cuda.py:683

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return interface.DeviceCapability(*cls._answers().capability)

        @classmethod
        def get_cuda_runtime_major(cls) -> int:
            """CudaPlatform's (torch.version.cuda's major, cuda.py:286): the point's assumption."""
            major = cls._answers().cuda_runtime
            if major is None:
                raise StubUsed("vLLM asked the CUDA runtime's major version (get_cuda_runtime_major) at a point "
                               "that assumes none; give the point a cuda_runtime axis")
            return major

    _ASSUMED[base] = CudaAssumed()
    return _ASSUMED[base]


@contextlib.contextmanager
def point_answers(platform: Any, capability: tuple[int, int], backends: list[type], trtllm: bool | None = None,
                  cuda_runtime: int | None = None) -> Iterator[None]:
    """The platform installed as vLLM's current_platform, answering for one point, and vLLM's
    has_nvidia_artifactory answering the point's `trtllm` assumption (never a network request).

    vLLM caches supports_trtllm_attention per process (vllm/utils/flashinfer.py:674), where one GPU
    and one deployment never change; kvproof plans many points in one process, so the cache is
    emptied on entering and leaving each point. vllm.utils.flashinfer binds current_platform when
    first imported (:24), which happens before any point, under this machine's CPU platform, so its
    platform is the point's for the point too."""
    platforms: Any = importlib.import_module("vllm.platforms")
    flashinfer: Any = importlib.import_module("vllm.utils.flashinfer")
    envs: Any = importlib.import_module("vllm.envs")
    if trtllm and envs.VLLM_BATCH_INVARIANT:
        raise StubUsed("VLLM_BATCH_INVARIANT is set in this process, so vLLM turns TRTLLM attention off "
                       "(vllm/utils/flashinfer.py:683) whatever the point assumes; unset it to plan")

    def has_nvidia_artifactory() -> bool:
        if trtllm is None:
            raise StubUsed("vLLM asked whether FlashInfer's TRTLLM kernels are obtainable (has_nvidia_artifactory) "
                           "at a point that assumes neither; give the point a trtllm axis")
        return trtllm

    previous, asked, bound = platforms._current_platform, flashinfer.has_nvidia_artifactory, flashinfer.current_platform
    type(platform)._point = Answers(capability, backends, trtllm, cuda_runtime)
    platforms._current_platform = platform
    flashinfer.has_nvidia_artifactory, flashinfer.current_platform = has_nvidia_artifactory, platform
    flashinfer.supports_trtllm_attention.cache_clear()
    try:
        yield
    finally:
        type(platform)._point = None
        platforms._current_platform = previous
        flashinfer.has_nvidia_artifactory, flashinfer.current_platform = asked, bound
        flashinfer.supports_trtllm_attention.cache_clear()


def load_backend(path: str, capability: tuple[int, int]) -> Any:
    """A backend class, its module imported (if first here) with kvproof's platform as
    current_platform, answering for `capability`, and with the guarded stand-ins of
    stand_ins.py for the GPU packages it binds; a module bound to another platform raises."""
    module_name, cls = path.split(":")
    platform = cuda_assumed(modules())
    with point_answers(platform, capability, []), stand_ins.installed():
        module = importlib.import_module(module_name)
    bound = vars(module).get("current_platform", platform)
    if bound is not platform:
        raise StubUsed(f"{module_name} was imported before planning under {type(bound).__name__}, so its answers "
                       "are not the point's; plan in a process that has not imported it")
    return getattr(module, cls)
