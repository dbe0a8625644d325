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
- `torchvision`, `torchvision.transforms`, `torchvision.transforms.v2`, while a point is planned
  (`planning`): torchvision has no CPU wheel for torch 2.13.0+cpu, and vLLM's Qwen3.5 / 3.6 module
  (which MiniCPM-V 4.6's imports, `minicpmv4_6.py:66`) imports qwen3_vl.py (`qwen3_5.py:88`), which imports
  transformers' Qwen2-VL image processor module (`qwen3_vl.py:38`), whose first lines bind
  `from torchvision.transforms.v2 import functional` (transformers 5.20.2,
  `models/qwen2_vl/image_processing_qwen2_vl.py:26`) whether or not torchvision is installed; LFM2-VL's
  module imports transformers' LFM2-VL image processor (`lfm2_vl.py:16`), which binds the same
  (`models/lfm2_vl/image_processing_lfm2_vl.py:18`). vLLM imports the model class in this process
  (`resolve_model_cls`) and, to inspect it, in a subprocess (`model_executor/models/registry.py:1123`,
  `_run_in_subprocess`, on a miss of its model-info cache), so the stand-in is put in both: here in
  sys.modules, there by a sitecustomize on the subprocess's PYTHONPATH. transformers' own answer to
  whether torchvision is installed (`is_torchvision_available`, kept by its lru_cache,
  `utils/import_utils.py:846`) is asked before the stand-in goes in, so it stays this machine's: absent.

vLLM swallows what a model class's import raises (`_try_load_model_cls` and `_try_inspect_model_cls`
log it and go on, registry.py:1141-1166, and ModelConfig then raises a ValueError that would read as
vLLM refusing the point), so a guard also writes each use to a file while a point is planned, in
either process, and `planning` raises StubUsed naming it when the point is done.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
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
TORCHVISION = ("torchvision", "torchvision.transforms", "torchvision.transforms.v2")
USES = "KVPROOF_STAND_IN_USES"  # while a point is planned: the file each use of a guard is written to


class _Guarded(type):
    """A stand-in name: a class (so a backend may subclass it or write `A | B` at import), and
    any use of it raises."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise _used(f"planning called {cls.__qualname__}, kvproof's stand-in for a package's entry point "
                    "(engines/vllm/stand_ins.py); the plan may not depend on it")

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):  # Python's own probing (inspect, typing: __origin__, __wrapped__) is no use
            raise AttributeError(name)
        raise _used(f"planning read {cls.__qualname__}.{name}, kvproof's stand-in for a package "
                    "(engines/vllm/stand_ins.py); the plan may not depend on it")


def _used(message: str) -> StubUsed:
    """The StubUsed of a guard's use, written first to the point's file of uses (USES) where one is set."""
    uses = os.environ.get(USES)
    if uses:
        with open(uses, "a", encoding="utf-8") as out:
            out.write(f"{message} (in process {os.getpid()})\n")
    return StubUsed(message)


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


def _torchvision_in() -> list[str]:
    """The torchvision stand-ins put in sys.modules (those not there already), transformers having
    answered first whether torchvision is installed."""
    from transformers.utils.import_utils import is_torchvision_available

    is_torchvision_available()  # kept: asked now, it is this machine's answer, not the stand-in's
    added = [name for name in TORCHVISION if name not in sys.modules]
    for name in added:
        module = _StandInModule(name)
        module.__path__ = []
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:  # a package's submodule is its attribute too (`import torchvision.transforms.v2 as v2`)
            setattr(sys.modules[parent], child, module)
    return added


_FOLDER: list[tempfile.TemporaryDirectory[str]] = []  # the subprocesses' sitecustomize, removed at exit
SITECUSTOMIZE = "from kvproof.engines.vllm import stand_ins\nstand_ins.in_subprocess(__file__)\n"


def _folder() -> Path:
    """The folder holding the subprocesses' sitecustomize and each planning process's file of uses
    (a forked worker keeps its parent's folder and writes its own file there)."""
    if not _FOLDER:
        _FOLDER.append(tempfile.TemporaryDirectory(prefix="kvproof-stand-ins-"))
        (Path(_FOLDER[0].name) / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return Path(_FOLDER[0].name)


def in_subprocess(own: str) -> None:
    """A subprocess started while a point is planned (vLLM's model inspection): torchvision's
    stand-ins for its whole life (it inspects one class and exits), then the sitecustomize this one
    shadows, if the environment has one."""
    _torchvision_in()
    folder = Path(own).resolve().parent
    shadowed = importlib.machinery.PathFinder.find_spec(
        "sitecustomize", [p for p in sys.path if p and Path(p).resolve() != folder])
    if shadowed is not None and shadowed.loader is not None:
        shadowed.loader.exec_module(importlib.util.module_from_spec(shadowed))


_REAL_TORCHVISION: list[bool] = []  # whether this machine has torchvision, asked once (before any stand-in)


@contextmanager
def planning() -> Iterator[None]:
    """torchvision's stand-ins while one point is planned, here and in any subprocess started
    meanwhile (none where torchvision is installed); every guard's use recorded, and StubUsed raised
    once the point is done if there was one, even where vLLM swallowed the guard's own."""
    folder = _folder()
    uses = folder / f"uses-{os.getpid()}"
    if os.environ.get(USES) == str(uses):  # within a point already (a backend imported while one plans)
        yield
        return
    if not _REAL_TORCHVISION:
        _REAL_TORCHVISION.append(importlib.util.find_spec("torchvision") is not None)
    uses.write_text("", encoding="utf-8")
    saved = {name: os.environ.get(name) for name in (USES, "PYTHONPATH")}
    added = [] if _REAL_TORCHVISION[0] else _torchvision_in()
    os.environ[USES] = str(uses)
    if not _REAL_TORCHVISION[0]:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(folder), *filter(None, [saved["PYTHONPATH"]])])
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for name in added:
            del sys.modules[name]
        found = uses.read_text(encoding="utf-8").splitlines()
        if found:  # raised over whatever the point raised, which stays its __context__
            raise StubUsed(found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
