"""Import SGLang's pool modules and config classes on a CPU, from the installed package or a checkout.

SGLang's package `__init__` imports its whole frontend (`sglang/__init__.py`: the HF patches,
`lang.api`), and `sglang/srt/configs/__init__.py` imports every config class, the vision-language
ones with torchvision, which has no CPU wheel here. So `sglang` is an empty package whose
`__path__` is the real folder (its `__init__` never runs), and `sglang.srt.configs` is an empty
package that resolves each name its real `__init__` imports from the submodule that `__init__`
names, on first use. What the imported modules bind but planning must not need is a replaced
module (`REPLACED`): importing a name from one succeeds, and any use of the name raises `StubUsed`.
The replaced modules are in `sys.modules` only while SGLang imports and plans (`session`), and a
module of the same name that was there before comes back after.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import re
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from kvproof.engines.checkout import commit_at
from kvproof.engines.stubs import StubUsed, Unavailable, root_of
from kvproof.engines.verdict import EngineError

CONFIGS = "sglang.srt.configs"
# packages whose __init__ never runs (an empty package over the real folder): sglang's imports the
# frontend; disaggregation/common's imports its conn.py, whose CommonKVReceiver opens a zmq.Context in
# its class body (common/conn.py:2476), while kvproof needs only the transfer's slicing arithmetic
SKIPPED = {"sglang": "", "sglang.srt.disaggregation.common": "srt/disaggregation/common"}
# name -> why kvproof replaces it (and what binds it)
REPLACED: dict[str, str] = {
    "zmq": "the scheduler's IPC (pyzmq); bound at import by sglang/srt/utils/common.py, never used to size a pool",
    "tvm_ffi": "the JIT kernels' FFI (apache-tvm-ffi); bound at import by kernel wrappers, never used to size a pool",
    "IPython": "notebook display helpers; bound at import by sglang/utils.py (which configs/model_config.py imports)",
    "sglang.srt.multimodal.internvl_utils": "imports torchvision (no CPU wheel); a vision model's image helpers",
    "sglang.srt.configs.deepseek_ocr": "imports torchvision (no CPU wheel); a vision-language config class",
    "sglang.srt.configs.internvl": "imports sentencepiece and sglang/utils.py; a vision-language config class",
}
# SGLang's fused_moe.py:93 tries vLLM's custom ops on a platform that is not CUDA. kvproof's own vLLM
# adapter imports that package; a vLLM first imported by SGLang, under the replaced zmq, would keep the
# stand-in, so while SGLang imports a vLLM not yet imported is absent (the fallback SGLang takes
# without vLLM: its native MoE ops, which no pool reads).
ABSENT = ("vllm",)


def _why(name: str) -> str:
    """Why the replaced module that `name` lies under is replaced."""
    return REPLACED[root_of(name, REPLACED) or name]


class _Guard(type):
    """A name imported from a replaced module: a class (a module may subclass it or use it in a
    type annotation); calling it raises StubUsed."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise StubUsed(f"planning called {cls.__qualname__}, which kvproof replaced "
                       f"({_why(cls.__qualname__)}); the plan may not depend on it")

    def __getattr__(cls, name: str) -> Any:
        """An attribute is an Unavailable: naming it is allowed (SGLang's config registry keys classes
        by their model_type at import, hf_transformers/common.py:117), deciding anything with it raises."""
        if name.startswith("__"):
            raise AttributeError(name)
        return Unavailable(f"{cls.__qualname__}.{name}", _why(cls.__qualname__))


class _ReplacedModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Guard(name, (), {"__qualname__": f"{self.__name__}.{name}", "__module__": "kvproof.stand_in"})


class _LazyConfigs(types.ModuleType):
    """sglang.srt.configs without its __init__: a name it exports is imported from the submodule
    its `from ... import` names (read from the real __init__'s source)."""

    def __init__(self, name: str, folder: Path) -> None:
        super().__init__(name, "kvproof: package __init__ skipped, names resolved on use")
        self.__path__ = [str(folder)]
        self._where: dict[str, str] = {}
        for node in ast.parse((folder / "__init__.py").read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self._where[alias.asname or alias.name] = node.module

    def __getattr__(self, name: str) -> Any:
        where = self.__dict__.get("_where", {}).get(name)
        if where is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the replaced modules, the skipped `sglang` package and the lazy configs package."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None) -> Any:
        if root_of(fullname, ABSENT):
            raise ModuleNotFoundError(f"No module named {fullname!r} (absent while SGLang imports)", name=fullname)
        if root_of(fullname, REPLACED) or fullname in SKIPPED or fullname == CONFIGS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name == CONFIGS:
            return _LazyConfigs(spec.name, self.package_dir / "srt" / "configs")
        if spec.name in SKIPPED:
            module = types.ModuleType(spec.name, "kvproof: package __init__ skipped")
            module.__path__ = [str(self.package_dir / SKIPPED[spec.name])]
            return module
        module = _ReplacedModule(spec.name, "kvproof: replaced module")
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: a skipped __init__ or a replaced module has no code."""


@dataclass(frozen=True)
class Source:
    package_dir: Path  # the folder named sglang
    version: str
    where: str  # "installed" or "checkout DIR"
    commit: str | None = None


def source_of(engine_path: str | None) -> Source:
    """The installed sglang, or the checkout at engine_path (DIR/python/sglang, as SGLang's repository
    lays it out, or DIR/sglang)."""
    if engine_path is None:
        try:
            dist = metadata.distribution("sglang")
        except metadata.PackageNotFoundError:
            raise EngineError("sglang is not installed: run `make .venv/.sglang` (pip install --no-deps -r "
                              "engines/sglang-requirements.txt)") from None
        return Source(Path(str(dist.locate_file("sglang"))), dist.version, "installed")
    root = Path(engine_path).resolve()
    for package in (root / "python" / "sglang", root / "sglang"):
        if (package / "srt" / "mem_cache" / "memory_pool.py").is_file():
            # the version its build wrote (sglang/_version.py, generated by vcs-versioning); version.py's
            # own literal is only its fallback for a checkout never built (0.0.0.dev0), which says nothing
            stamp = package / "_version.py"
            found = (re.search(r"""__version__ = version = ['"]([^'"]+)""", stamp.read_text())
                     if stamp.is_file() else None)
            return Source(package, found.group(1) if found else "unknown", f"checkout {root}",
                          commit_at(root, short=True))
    raise EngineError(f"--engine-path {engine_path}: no sglang/srt/mem_cache/memory_pool.py under python/sglang or "
                      "sglang there; give the root of an SGLang checkout")


MODULES = ("sglang.srt.mem_cache.memory_pool", "sglang.srt.configs.model_config", "sglang.srt.configs.qwen3_next",
           "sglang.srt.configs.qwen3_5", "sglang.srt.configs.kimi_linear", "sglang.srt.configs.kimi_k3",
           "sglang.srt.configs.nemotron_h", "sglang.srt.configs.hybrid_arch", "sglang.srt.runtime_context",
           "sglang.srt.environ", "sglang.srt.utils.hf_transformers.common", "sglang.srt.mem_cache.kv_cache_dtype",
           "sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.mem_cache.device_pool_info",
           "sglang.srt.mem_cache.unified_memory_pool", "sglang.srt.mem_cache.allocator.unified_sub_pool",
           "sglang.srt.mem_cache.layout.token_major",
           "sglang.srt.disaggregation.utils", "sglang.srt.disaggregation.common.staging_buffer")


@contextmanager
def session(source: Source) -> Iterator[dict[str, types.ModuleType]]:
    """SGLang's modules (MODULES, and the config modules imported through them), imported from
    `source` with the replaced modules in place; afterwards the replaced modules leave sys.modules
    (what was there before under their names comes back), SGLang's own modules stay imported."""
    loaded = sys.modules.get("sglang")
    if loaded is not None and Path(getattr(loaded, "__path__", [""])[0]).resolve() != source.package_dir.resolve():
        raise EngineError(f"sglang is already imported from {list(loaded.__path__)}, not {source.package_dir}")
    saved = {name: module for name, module in sys.modules.items() if root_of(name, REPLACED)}
    for name in saved:
        del sys.modules[name]
    finder = _Finder(source.package_dir)
    sys.meta_path.insert(0, finder)
    try:
        yield {name: importlib.import_module(name) for name in MODULES}
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if root_of(n, REPLACED)]:
            del sys.modules[name]
        sys.modules.update(saved)
