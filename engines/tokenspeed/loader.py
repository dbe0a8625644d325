"""Import tokenspeed's cache recipes on a CPU, from the installed package or a checkout.

tokenspeed's package `__init__` chain pulls in transformers and a GPU kernel package that raises
without a GPU. The recipes themselves are integer geometry plus a few torch dtypes, so we import
them with the packages *above* `recipes/` replaced by empty package modules whose `__path__` is
the real folder (their own `__init__` never runs; `recipes/__init__.py` does). A handful of
modules the recipes import but must not need for planning are replaced by `Replaced` modules:
importing a name from one succeeds, and any use of that name raises `StubUsed` naming the module
and the name. A verifier that planned with an invented number would prove nothing, so nothing a
replaced module hands out can be read as a value.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import tomllib
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

from kvproof.engines.checkout import commit_at
from kvproof.engines.stubs import StubUsed, Unavailable, root_of
from kvproof.engines.tokenspeed import partial

ATTENTION = "tokenspeed.runtime.layers.attention"
RECIPES = f"{ATTENTION}.kv_cache.recipes"
# Packages whose __init__ is skipped: every package above recipes/, and two the recipes reach
# into whose __init__ imports the whole runtime (transformers, CUDA utilities).
_SKIPPED_INITS = (
    "tokenspeed",
    "tokenspeed.runtime",
    "tokenspeed.runtime.layers",
    "tokenspeed.runtime.layers.attention",
    "tokenspeed.runtime.layers.attention.kv_cache",
    "tokenspeed.runtime.configs",
    "tokenspeed.runtime.utils",
    "tokenspeed.runtime.distributed",
)
# Modules replaced wholesale, with why planning must never need them.
REPLACED: dict[str, str] = {
    "tokenspeed_kernel": "the GPU kernel package (raises without a GPU); its answers are GPU facts",
    "tokenspeed_scheduler": "the C++ scheduler; only capacity sizing (parents_needed) asks it",
    "tokenspeed.runtime.configs.model_config": "builds configs through transformers; kvproof passes "
    "a strict model_config made from the published config.json",
    "tokenspeed.runtime.utils.server_args": "the launch-flag parser; kvproof passes a strict server_args",
    "tokenspeed.runtime.utils.env": "environment switches; a recipe that reads one needs it as an "
    "explicit assumption",
}


# GPU- or environment-dependent answers a recipe's path asks, each an assumption axis whose
# every value the default domain runs: name -> (values, where tokenspeed asks it).
ASSUMPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "TOKENSPEED_MAMBA_SSM_DTYPE": (("float32", "bfloat16"),
                                   "runtime/utils/env.py (default float32); read by recipes/qwen35.py for the SSM "
                                   "state dtype of qwen_gdn, qwen4_exp and mamba2"),
    "platform": (("sm_90", "sm_100"), "tokenspeed_kernel.platform.current_platform(); asked by "
                 "configs/dsa.py DSAConfig.generate (fp8 DSA cache needs Blackwell or CDNA4), and before 0.1.1 by "
                 "recipes/deepseek_v4.py _use_fp4_indexer (arch_version.major >= 10: the mxfp4 indexer row)"),
    "dsv4_indexer_cache_format": (("fp8_scaled", "mxfp4"),
                                  "tokenspeed_kernel.ops.attention.dsv4.dsv4_indexer_cache_format(requested); "
                                  "asked by recipes/deepseek_v4.py _use_fp4_indexer (the indexer row bytes)"),
    "INKLING_FP8_SCONV": (("0", "1"),
                          "os.environ, read by recipes/inkling.py _fp8_sconv (`os.environ.get(\"INKLING_FP8_SCONV\", "
                          "\"0\") != \"0\"`: \"0\" or unset is off, any other string on): the hiddenconv dtype and "
                          "the padding bound"),
}
class ArchVersion(NamedTuple):
    """A GPU's compute capability, as `current_platform().arch_version` gives it (major, minor)."""

    major: int
    minor: int


# What current_platform() answers on each assumed GPU: Hopper (H100/H200) and Blackwell (B200).
PLATFORMS: dict[str, dict[str, bool | ArchVersion]] = {
    "sm_90": {"is_nvidia": True, "is_amd": False, "is_hopper": True, "is_blackwell_plus": False,
              "is_cdna4_plus": False, "arch_version": ArchVersion(9, 0)},
    "sm_100": {"is_nvidia": True, "is_amd": False, "is_hopper": False, "is_blackwell_plus": True,
               "is_cdna4_plus": False, "arch_version": ArchVersion(10, 0)},
}


@dataclass
class Assumed:
    """The assumption values of the point being planned, and which of them planning read."""

    values: dict[str, str] = field(default_factory=dict)
    consulted: set[str] = field(default_factory=set)
    # Where each was asked: (file, function) of the engine's code that read it.
    asked_in: dict[str, set[tuple[str, str]]] = field(default_factory=dict)

    def point(self, values: dict[str, str]) -> None:
        self.values, self.consulted, self.asked_in = dict(values), set(), {}


ASSUMED = Assumed()


def _answer(name: str, what: str) -> str:
    if name not in ASSUMED.values:
        raise StubUsed(f"planning asked {what}, which the point does not assume; "
                       f"make {name} an assumption axis of the recipe")
    ASSUMED.consulted.add(name)
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    ASSUMED.asked_in.setdefault(name, set()).add((frame.f_code.co_filename, frame.f_code.co_name))
    return ASSUMED.values[name]


class _Platform:
    """current_platform() on the point's assumed GPU: the listed facts, anything else Unavailable."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        facts = PLATFORMS[_answer("platform", f"current_platform().{attr}")]
        if attr in facts:
            return facts[attr]
        return Unavailable(f"tokenspeed_kernel.platform.current_platform().{attr}", REPLACED["tokenspeed_kernel"])


def _indexer_cache_format(requested: object = None) -> str:
    """The kernel package's DeepSeek-V4 indexer cache format ("mxfp4" or "fp8_scaled") when
    neither the launch flag nor the checkpoint asks for one: the GPU's default, so the point's
    assumption answers it. An explicit request is a question kvproof has no pinned answer to."""
    if requested is not None:
        raise StubUsed(f"planning asked tokenspeed_kernel.ops.attention.dsv4.dsv4_indexer_cache_format("
                       f"{requested!r}); kvproof answers only the platform default (requested None)")
    return _answer("dsv4_indexer_cache_format",
                   "tokenspeed_kernel.ops.attention.dsv4.dsv4_indexer_cache_format(None)")


class _Switch:
    """One environment switch, answered by the point's assumption (tokenspeed's EnvField API)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def get(self) -> str:
        return _answer(self.name, f"the environment switch {self.name}")

    @property
    def value(self) -> str:
        return self.get()

    def get_set_value_or(self, default: object) -> str:
        return self.get()


class _Envs:
    """tokenspeed's `envs`: declared switches answer from the point's assumptions, any other is
    Unavailable."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in ASSUMPTIONS and name.isupper():
            return _Switch(name)
        return Unavailable(f"tokenspeed.runtime.utils.env.envs.{name}", REPLACED["tokenspeed.runtime.utils.env"])


class _Environ:
    """`os.environ` as a tokenspeed module sees it: a declared (upper-case) assumption answers the
    point's value, any other variable, the whole environment, or a write raises StubUsed, so the
    machine kvproof runs on never decides a plan."""

    def _read(self, name: object) -> str:
        if not (isinstance(name, str) and name in ASSUMPTIONS and name.isupper()):
            raise StubUsed(f"planning read the environment variable {name!r}, which kvproof does not answer "
                           "from the machine; make it an assumption axis")
        return _answer(name, f"the environment variable {name}")

    def __getitem__(self, name: object) -> str:
        return self._read(name)

    def get(self, name: object, default: object = None) -> str:
        return self._read(name)

    def __contains__(self, name: object) -> bool:
        return self._read(name) is not None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise StubUsed(f"planning used os.environ.{attr}, the whole environment; kvproof answers only "
                       "single reads of declared assumptions")

    def __setitem__(self, name: str, value: str) -> None:
        raise StubUsed(f"planning wrote the environment variable {name!r}")

    def __iter__(self) -> Any:
        raise StubUsed("planning iterated os.environ, the whole environment")

    def __len__(self) -> int:
        raise StubUsed("planning took len(os.environ), the whole environment")


_ENVIRON = _Environ()


class _Os(types.ModuleType):
    """`os` for tokenspeed's modules: the real module, but every way to read the environment
    answers as `_Environ` does (`environ`, `getenv`) or raises (the bytes and write forms)."""

    environ = _ENVIRON

    @staticmethod
    def getenv(key: str, default: object = None) -> str:
        return _ENVIRON[key]

    def __getattr__(self, attr: str) -> Any:
        if attr in ("environb", "getenvb", "putenv", "unsetenv"):
            raise StubUsed(f"planning used os.{attr}; kvproof answers only reads of declared assumptions")
        return getattr(os, attr)


_OS = _Os("os", "kvproof: os with the environment answered from the point's assumptions")


def _import(name: str, globals: Any = None, locals: Any = None, fromlist: Sequence[str] | None = (),
            level: int = 0) -> Any:
    """`__import__` for tokenspeed's modules: `import os` (and `from os import environ`) is `_OS`."""
    if level == 0 and (name == "os" or (name.startswith("os.") and not fromlist)):
        return _OS
    return builtins.__import__(name, globals, locals, fromlist or (), level)


_BUILTINS = {**builtins.__dict__, "__import__": _import}


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """A tokenspeed source module, run with `_import` as its `__import__` (at import and in its
    functions alike)."""

    def exec_module(self, module: types.ModuleType) -> None:
        module.__dict__["__builtins__"] = _BUILTINS
        super().exec_module(module)


# What the replaced modules answer themselves, from the point's assumptions.
_ANSWERED: dict[tuple[str, str], Callable[[], Any]] = {
    ("tokenspeed.runtime.utils.env", "envs"): _Envs,
    ("tokenspeed_kernel.platform", "current_platform"): lambda: _Platform,
    ("tokenspeed_kernel.ops.attention.dsv4", "dsv4_indexer_cache_format"): lambda: _indexer_cache_format,
}


class _ReplacedModule(types.ModuleType):
    """A replaced module: `from it import x` works, and x is an Unavailable."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        answer = _ANSWERED.get((self.__name__, attr))
        if answer is not None:
            return answer()
        return Unavailable(f"{self.__name__}.{attr}", REPLACED[root_of(self.__name__, REPLACED) or self.__name__])


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the replaced modules (and any submodule of them) and the skipped-init packages."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None) -> Any:
        if root_of(fullname, REPLACED):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if fullname in _SKIPPED_INITS:
            folder = self.package_dir.parent.joinpath(*fullname.split("."))
            spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            spec.submodule_search_locations = [str(folder)]
            return spec
        if fullname.startswith("tokenspeed."):
            found = importlib.machinery.PathFinder.find_spec(fullname, path)
            if found is not None and type(found.loader) is importlib.machinery.SourceFileLoader:
                found.loader = _SourceLoader(fullname, found.loader.path)
            return found
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name in _SKIPPED_INITS:
            module = types.ModuleType(spec.name, "kvproof: package __init__ skipped")
        else:
            module = _ReplacedModule(spec.name, "kvproof: replaced module")
        module.__path__ = list(spec.submodule_search_locations or [])
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: a skipped __init__ or a replaced module has no code."""


@dataclass(frozen=True)
class Source:
    """Where the tokenspeed under test comes from: its package folder, version and commit."""

    package_dir: Path  # the folder named tokenspeed
    version: str
    origin: str  # "installed" or "path"
    commit: str | None = None

    def describe(self) -> str:
        at = f" at commit {self.commit}" if self.commit else ""
        return f"tokenspeed {self.version} ({self.origin}: {self.package_dir}{at})"


class SourceError(ValueError):
    """No tokenspeed where the user pointed. One line, naming the fix."""


def source_of(engine_path: str | None) -> Source:
    """--engine-path DIR when given, else the installed distribution."""
    return path_source(engine_path) if engine_path else installed_source()


def installed_source() -> Source:
    try:
        dist = metadata.distribution("tokenspeed")
    except metadata.PackageNotFoundError:
        raise SourceError("tokenspeed is not installed; pip install --no-deps tokenspeed==0.1.1 "
                          "(or pass --engine-path DIR)") from None
    folder = Path(str(dist.locate_file("tokenspeed")))
    if not (folder / "runtime").is_dir():
        raise SourceError(f"installed tokenspeed {dist.version} has no runtime/ folder at {folder}")
    return Source(folder, dist.version, "installed")


def path_source(path: str | Path) -> Source:
    """A tokenspeed checkout (python/tokenspeed inside it) or an unpacked package folder."""
    root = Path(path).resolve()
    for candidate in (root / "python" / "tokenspeed", root / "tokenspeed", root):
        if (candidate / "runtime" / "layers" / "attention" / "kv_cache").is_dir() and candidate.name == "tokenspeed":
            return Source(candidate, _version_at(candidate), "path", commit_at(root))
    raise SourceError(f"--engine-path {path}: no tokenspeed package (looked for python/tokenspeed, "
                      "tokenspeed/, and the folder itself)")


def _version_at(package_dir: Path) -> str:
    """[project] version of the checkout's pyproject.toml, else version.py's __version__."""
    for project in (package_dir.parent / "pyproject.toml", package_dir.parent.parent / "pyproject.toml"):
        if project.is_file():
            try:
                version = tomllib.loads(project.read_text(encoding="utf-8", errors="replace"))["project"]["version"]
            except (tomllib.TOMLDecodeError, KeyError, TypeError):
                continue  # no static version there (a dynamic one, or not a project file)
            if isinstance(version, str):
                return version
    version_file = package_dir / "version.py"
    if version_file.is_file():
        for line in version_file.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("__version__"):
                return line.partition("=")[2].strip().strip('"\'')
    return "unknown"


_OWNED = ("tokenspeed", "tokenspeed_kernel", "tokenspeed_scheduler")
# The package folder loaded now, and the modules taken in part from it (partial.PartialModule).
_LOADED: list[Path] = []
_PARTIALS: dict[str, partial.PartialModule] = {}


def _purge() -> None:
    for name in [n for n in sys.modules if n.split(".")[0] in _OWNED]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
    _LOADED.clear()
    _PARTIALS.clear()


def _source_file(module: str) -> Path | None:
    base = _LOADED[0].parent.joinpath(*module.split("."))
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def partial_module(module: str) -> partial.PartialModule:
    """`module` of the package loaded now, as its source defines it, one name at a time."""
    if module not in _PARTIALS:
        path = _source_file(module) if _LOADED else None
        if path is None:
            raise ModuleNotFoundError(f"No module named {module!r} (no source file for it)", name=module)
        if any(module == r or module.startswith(r + ".") for r in REPLACED):
            importlib.import_module(module)  # the stand-in keeps the module's name for importers
        _PARTIALS[module] = partial.PartialModule(module, path, _resolve)
        _PARTIALS[module].__dict__["__builtins__"] = _BUILTINS
        # Classes defined in it look their module up (dataclasses does): the stand-in's, or this.
        sys.modules.setdefault(module, _PARTIALS[module])
    return _PARTIALS[module]


def _resolve(module: str, attr: str, importer: str) -> Any:
    """A name a partial module imports, resolved as partial.py's docstring says."""
    root = module.split(".")[0]
    if module == "os":
        return getattr(_OS, attr) if attr else _OS
    if partial.standard(root):
        return partial.import_name(module, attr)
    if root not in _OWNED:
        return partial.unavailable(module, attr)
    if any(module == r or module.startswith(r + ".") for r in REPLACED):
        if (module, attr) in _ANSWERED or root != "tokenspeed" or _source_file(module) is None:
            return partial.import_name(module, attr)  # the stand-in (an answer, or an Unavailable)
        # A class or function of a replaced module is the engine's own definition; a value of one
        # (a global table, a switch) stays the stand-in's.
        source = partial_module(module)
        if any(stmt.__class__.__name__ in ("ClassDef", "FunctionDef")
               for _, stmt, _ in source._kv_units.get(attr, ())):
            return getattr(source, attr)
        return partial.import_name(module, attr)
    if module in sys.modules or module.startswith(partial.WHOLE):
        return partial.import_name(module, attr)
    return getattr(partial_module(module), attr)


def switch(name: str) -> str:
    """An environment switch as tokenspeed's `envs.<name>.get()` answers it here: from the point's
    assumption (for a config property kvproof derives as tokenspeed's config class does)."""
    return _answer(name, f"the environment switch {name}")


def class_defines(module: str, attr: str) -> bool:
    """Whether a class of tokenspeed's `module` ("runtime.configs.<name>") in the package loaded
    now defines `attr` (a method, property or class attribute): what that revision's config class
    has, read from its source, for a module kvproof does not import (it needs transformers)."""
    path = _source_file(f"tokenspeed.{module}") if _LOADED else None
    if path is None:
        return False
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == attr:
                return True
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and attr in {
                    n.id for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
                    for n in ast.walk(t) if isinstance(n, ast.Name)}:
                return True
    return False


def load(source: Source, modules: Sequence[str]) -> dict[str, types.ModuleType]:
    """Import `modules` from `source`: recipe modules by their name in recipes/ ("kimi_k3",
    "plan"), attention config modules as "configs.<name>", any other as "runtime.<path>"; a
    trailing "?" marks a module that older releases lack (left out of the result when absent), a
    trailing "!" one taken in part (partial.PartialModule: only the definitions read run).

    Any tokenspeed imported before is dropped first, so a test can load the installed release and
    then a checkout (or a mutated copy) in one process. A module that does not import is a
    LoadError naming it.
    """
    _purge()
    sys.meta_path.insert(0, _Finder(source.package_dir))
    _LOADED.append(source.package_dir)
    loaded: dict[str, types.ModuleType] = {}
    outside = ASSUMED.values, ASSUMED.consulted
    ASSUMED.point({})  # a module reading the environment as it imports answers for no one point
    try:
        _import_all(source, modules, loaded)
    finally:
        ASSUMED.values, ASSUMED.consulted = outside
    return loaded


def _import_all(source: Source, modules: Sequence[str], loaded: dict[str, types.ModuleType]) -> None:
    for wanted in modules:
        name = wanted.rstrip("?!")
        full = (f"{ATTENTION}.{name}" if name.startswith("configs.")
                else f"tokenspeed.{name}" if name.startswith("runtime.") else f"{RECIPES}.{name}")
        try:
            if wanted.endswith("!"):
                loaded[name] = partial_module(full)
                continue
            if wanted.endswith("?") and importlib.util.find_spec(full) is None:
                continue
            loaded[name] = importlib.import_module(full)
        except ImportError as err:
            raise LoadError(full, f"{source.describe()}: cannot import {full}: {err}") from None


class LoadError(SourceError):
    """A module of the engine kvproof plans with does not import from this source."""

    def __init__(self, module: str, message: str) -> None:
        super().__init__(message)
        self.module = module
