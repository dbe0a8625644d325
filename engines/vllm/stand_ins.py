"""Guarded stand-ins that let a vLLM attention backend's module import on a CPU.

Some backends' modules bind names of GPU packages when imported, though planning reads none of
them (it reads the class's own block sizes, spec and layouts). For the import only, kvproof puts
in place what they bind, and each name handed out is a guard: calling it, instantiating it or
reading an attribute of it raises StubUsed naming it, so a plan can never rest on one.

- `flashinfer`, `flashinfer.decode`, `flashinfer.prefill`, `flashinfer.utils`: FlashInfer is not
  installed (vLLM 0.33.0 pins flashinfer-python 0.7.2.post1, a 426 MB CUDA package);
  `vllm.v1.attention.backends.mla.flashinfer_mla` imports its MLA decode entry points
  (`flashinfer_mla.py:8-12`), `vllm.v1.attention.backends.flashinfer` its wrappers and the
  trtllm-gen entry points (`flashinfer.py:12-26`). The stand-ins are removed from sys.modules once the backend has
  imported, so vLLM's own presence checks (`vllm.utils.flashinfer.has_flashinfer`, find_spec)
  still see this machine: no FlashInfer.
- `vllm.v1.attention.backends.fa_utils.{flash_attn_varlen_func, get_scheduler_metadata}`:
  fa_utils binds these from the compiled `vllm.vllm_flash_attn` only when first imported under a
  CUDA platform (`fa_utils.py:22-28`); vLLM imports it on this machine's CPU platform, so
  `vllm.v1.attention.backends.mla.flashattn_mla` (`:29-34`) finds neither. They are set on fa_utils
  for the import and deleted after; flashattn_mla keeps the guards.
- `vllm.vllm_flash_attn` itself, only for a backend module that imports it unconditionally and so
  cannot import on a CPU (vLLM 0.30.0 and 0.31.0's `flashattn_mla.py:35` binds its entry points
  from it; its `__init__` raises ImportError without the CUDA extensions): the import is retried
  with a guarded package in its place (`compiled_missing`), which is gone again afterwards.
"""

from __future__ import annotations

import importlib
import sys
import traceback
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kvproof.engines.stubs import StubUsed

FLASHINFER = ("flashinfer", "flashinfer.decode", "flashinfer.prefill", "flashinfer.utils")
FA_UTILS = "vllm.v1.attention.backends.fa_utils"
FA_ENTRY_POINTS = ("flash_attn_varlen_func", "get_scheduler_metadata")
FLASH_ATTN = "vllm.vllm_flash_attn"  # the compiled FlashAttention package (raises ImportError on a CPU)


class _Guarded(type):
    """A stand-in name: a class (so a backend may subclass it or write `A | B` at import), and
    any use of it raises."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise StubUsed(f"planning called {cls.__qualname__}, kvproof's stand-in for a GPU package's entry point "
                       "(engines/vllm/stand_ins.py); the plan may not depend on it")

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):  # Python's own probing (inspect, typing: __origin__, __wrapped__) is no use
            raise AttributeError(name)
        raise StubUsed(f"planning read {cls.__qualname__}.{name}, kvproof's stand-in for a GPU package "
                       "(engines/vllm/stand_ins.py); the plan may not depend on it")


def guard(name: str) -> type:
    return _Guarded(name.rsplit(".", 1)[-1], (), {"__qualname__": name, "__module__": "kvproof.stand_in"})


class _StandInModule(types.ModuleType):
    """A package that hands out a guard for every name imported from it."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return guard(f"{self.__name__}.{name}")


def compiled_missing(err: ImportError) -> str | None:
    """The compiled package whose import raised `err` (its own __init__ refusing a CPU), if it is one
    kvproof stands in for a backend's import: vllm.vllm_flash_attn."""
    parts = FLASH_ATTN.split(".")
    for frame in traceback.extract_tb(err.__traceback__):
        if Path(frame.filename).parts[-len(parts) - 1:] == (*parts, "__init__.py"):
            return FLASH_ATTN
    return None


@contextmanager
def installed(compiled: tuple[str, ...] = ()) -> Iterator[None]:
    """The stand-ins in place for importing a backend module, and gone afterwards; `compiled`: the
    compiled packages (compiled_missing) to stand in for too."""
    added = [name for name in (*FLASHINFER, *compiled) if name not in sys.modules]
    for name in added:
        module = _StandInModule(name)
        module.__path__ = []  # a package, so its submodules import from sys.modules
        sys.modules[name] = module
    fa_utils = importlib.import_module(FA_UTILS)
    entries = [name for name in FA_ENTRY_POINTS if not hasattr(fa_utils, name)]
    for name in entries:
        setattr(fa_utils, name, guard(f"{FA_UTILS}.{name}"))
    try:
        yield
    finally:
        for name in entries:
            delattr(fa_utils, name)
        for name in added:
            del sys.modules[name]
