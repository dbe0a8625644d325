"""What the vLLM catalog and its family modules cite a point's pages by: the attention backend a point
assumes, the kernels that read its attention pages there, and the code that reads its state pages, each
recorded from its source (backends.py holds vLLM's own, a family module its model's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvproof.engines.families import Axis
from kvproof.engines.vllm.platform import load_backend


@dataclass(frozen=True)
class Kernel:
    """The attention kernel a backend runs on its GPU, with the page limits its own source sets
    (never the backend class's declaration: that is what a bug like vllm#25811 gets wrong)."""

    name: str
    block: int  # the kernel's pages must be a multiple of this many tokens (1: any)
    max_tokens: int | None  # the most tokens per page it supports; None: no limit in its source
    source: str  # repository, file and line of the check (or of the arithmetic that sets none)
    power_of_two: bool = False  # its source also requires a power-of-two page


@dataclass(frozen=True)
class Reader:
    """Code that reads state pages besides vLLM's own views, and how it steps from page to page,
    recorded from its source: `page` (the tensor's stride, so the plan's padded page) or `payload`
    (the bytes the page's states hold)."""

    name: str
    walks: str  # page | payload
    source: str


V033 = "vllm-project/vllm@v0.33.0 "


def model_dtype(unnamed: str, page: str, states: str) -> Axis:
    """The model dtype as a family's axis where its sources name none (`unnamed` says so): the dtype of `page`
    at --kv-cache-dtype auto and of `states` at --mamba-cache-dtype auto, each of the two vLLM's `auto` plans."""
    return Axis("dtype", ("bfloat16", "float16"),
                f"{unnamed} (vLLM would read the weights' safetensors dtype then, transformers_utils/"
                f"model_arch_config_convertor.py:210-237): the model dtype is {page} at --kv-cache-dtype auto and "
                f"{states} at --mamba-cache-dtype auto, and vLLM's `auto` keeps a 16-bit checkpoint dtype and "
                "downcasts a float32 one to a 16-bit dtype (vllm/config/model.py:2440-2445), so these two are all "
                "it plans")


def draft_cache_config(vllm_config: Any) -> Any:
    """The cache config a model's own draft layers are built under: the target's, or, where `--speculative-config`
    gives the draft a KV dtype (any, the target's own too), vLLM's copy of it at that dtype (vllm.config.replace, as
    apply_draft_overrides makes it, config/speculative.py:1917-1927; eagle/utils.py:89-94 in 0.30.0). The copy is
    made when the model is built, before the worker aligns the block (v1/executor/uniproc_executor.py:74-75), as
    the planner's `built` runs: a layer that keeps it reads the block it held then."""
    speculative = vllm_config.speculative_config
    if speculative is None or speculative.kv_cache_dtype is None:
        return vllm_config.cache_config
    from vllm.config import replace

    return replace(vllm_config.cache_config, cache_dtype=speculative.kv_cache_dtype)


def cache_config_of(vllm_config: Any, draft_layers: Callable[[Any], list[tuple[str, str]]]) -> Callable[[str], Any]:
    """The cache config each cache layer of a planning is built under, by its name: draft_cache_config's for the
    model's own draft layers (`draft_layers` of the draft's HF config), the target's for every other."""
    speculative = vllm_config.speculative_config
    drafts = {name for name, _ in draft_layers(speculative.draft_model_config.hf_config)} if speculative else set()
    target, draft = vllm_config.cache_config, draft_cache_config(vllm_config)
    return lambda name: draft if name in drafts else target


@dataclass(frozen=True)
class Backend:
    name: str  # vLLM's AttentionBackendEnum name
    path: str  # module:class
    gpu: str  # the GPU the assumption is made for
    capability: tuple[int, int]
    why: str  # the cited reason the CUDA platform selects it there
    kernels: tuple[Kernel, ...] = ()  # the kernels that read its pages there
    # FLASHINFER: the kernels that also read them when FlashInfer's TRTLLM kernels are obtainable (the
    # point's trtllm axis: vLLM's has_nvidia_artifactory, vllm/utils/flashinfer.py:647)
    trtllm_kernels: tuple[Kernel, ...] | None = None
    # pipeline stages at every shape the domain plans; False: pp 2 at tp 1 only (a backend whose assumption axes
    # multiply its points; which stage lacks an attention layer depends on pp alone, shown at the other backends)
    all_stages: bool = True
    via: str | None = None  # the module vLLM imports the backend's module through (platform.load_backend)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.gpu}"

    def kernels_at(self, trtllm: bool | None) -> tuple[Kernel, ...]:
        return self.kernels + (self.trtllm_kernels or () if trtllm else ())

    def load(self) -> Any:
        """The class, imported under kvproof's platform answering for this GPU (platform.load_backend)."""
        return load_backend(self.path, self.capability, self.via)
