"""A few top-level definitions of a tokenspeed module that cannot be imported on a CPU.

tokenspeed's start-up builds a layer's attention config in `attention/registry.py`
(`_create_attn_config`) and picks the cache family there (`_resolve_cache_family`), but that
module imports the whole runtime (backends, the arena, CUDA utilities). A `PartialModule` is the
module as its own source defines it, taken one name at a time: reading `registry._create_attn_config`
runs exactly the statements that define it and what they reference (the `_CONFIG_CLS` table, the
functions it calls, the imports those name), in source order, compiled from the engine's file so
that tracebacks name the engine's lines. Nothing else of the module runs.

An imported name is resolved the way the engine's own modules resolve it here:
- the standard library, torch and numpy are imported;
- the attention configs and the recipes (`WHOLE`), and any tokenspeed module already imported
  through the loader, are the very modules the recipes use (one `MLAConfig` class for both);
- a name the loader's stand-ins answer (the environment switches, the GPU's platform, the
  kernel package) comes from the stand-in, so an assumption still answers it;
- any other tokenspeed module's name is taken from its source the same way (a PartialModule of it:
  `AttentionArch` from configs/model_config.py, whose module kvproof replaces);
- anything else (transformers, yaml) is an `Unavailable`: using it raises StubUsed.
A name the module does not define at top level is an AttributeError, so `hasattr` tells what a
revision has. A definition that fails to run is an AdapterGap naming it.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvproof.engines.stubs import StubUsed, Unavailable
from kvproof.engines.verdict import AdapterGap

WHOLE = ("tokenspeed.runtime.layers.attention.configs", "tokenspeed.runtime.layers.attention.kv_cache")
IMPORTED = frozenset({"torch", "numpy"})  # third-party packages the recipes themselves import

Unit = tuple[int, ast.stmt, ast.alias | None]  # source order, the statement, the alias of an import it binds


def _bound(stmt: ast.stmt) -> list[tuple[str, ast.alias | None]]:
    """The top-level names a statement binds (each import alias its own unit)."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [(stmt.name, None)]
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return [((a.asname or a.name).split(".")[0], a) for a in stmt.names if a.name != "*"]
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        targets = [stmt.target]
    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return [(name, None) for name in names]


def _referenced(stmt: ast.stmt, alias: ast.alias | None, lazy_annotations: bool) -> set[str]:
    """Names a unit reads when it runs: annotations left out where the module has
    `from __future__ import annotations` (they are then never evaluated). Over-approximate: a local
    that shares a top-level name pulls that definition in too."""
    if alias is not None:
        return set()
    skip: set[int] = set()
    if not lazy_annotations:
        return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    for node in ast.walk(stmt):
        if isinstance(node, ast.arg) and node.annotation is not None:
            skip.update(id(n) for n in ast.walk(node.annotation))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            skip.update(id(n) for n in ast.walk(node.returns))
        elif isinstance(node, ast.AnnAssign):
            skip.update(id(n) for n in ast.walk(node.annotation))
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and id(n) not in skip}


def _type_checking_only(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test)


class PartialModule(types.ModuleType):
    """The top-level definitions of one engine module, each run the first time it is read."""

    def __init__(self, name: str, path: Path, resolve: Callable[[str, str, str], Any]) -> None:
        super().__init__(name, f"kvproof: definitions of {path}, taken as they are read")
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        self.__file__ = str(path)
        object.__setattr__(self, "_kv_path", path)
        self.__package__ = name if path.name == "__init__.py" else name.rpartition(".")[0]
        flags = 0
        units: dict[str, list[Unit]] = {}
        for index, stmt in enumerate(tree.body):
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                for alias in stmt.names:
                    flags |= getattr(__future__, alias.name).compiler_flag
                continue
            if _type_checking_only(stmt):
                continue
            for bound, binding in _bound(stmt):
                units.setdefault(bound, []).append((index, stmt, binding))
        object.__setattr__(self, "_kv_units", units)
        object.__setattr__(self, "_kv_flags", flags)
        object.__setattr__(self, "_kv_ran", set())  # (index, alias name) of units already run
        object.__setattr__(self, "_kv_resolve", resolve)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr.startswith("_kv_"):
            raise AttributeError(attr)
        units: dict[str, list[Unit]] = object.__getattribute__(self, "_kv_units")
        if attr not in units:
            raise AttributeError(f"{self.__name__} ({self.__file__}) defines no {attr!r} at top level")
        self._kv_define(attr)
        return self.__dict__[attr]

    def _kv_define(self, name: str) -> None:
        """Run the units that bind `name` and, first, every unit they reference, in source order."""
        units: dict[str, list[Unit]] = self._kv_units
        needed: dict[tuple[int, str | None], Unit] = {}
        todo = [name]
        while todo:
            for unit in units.get(todo.pop(), ()):
                key = (unit[0], unit[2].name if unit[2] else None)
                if key in needed or key in self._kv_ran:
                    continue
                needed[key] = unit
                lazy = bool(self._kv_flags & __future__.annotations.compiler_flag)
                todo += [n for n in _referenced(unit[1], unit[2], lazy) if n in units]
        for key in sorted(needed, key=lambda k: (k[0], k[1] or "")):
            _, stmt, alias = needed[key]
            self._kv_ran.add(key)
            try:
                if alias is not None:
                    self._kv_import(stmt, alias)
                else:
                    code = compile(ast.Module(body=[stmt], type_ignores=[]), str(self._kv_path), "exec",
                                   flags=self._kv_flags, dont_inherit=True)
                    exec(code, self.__dict__)
            except (StubUsed, AdapterGap):
                raise
            except Exception as err:
                raise AdapterGap(f"taking {name!r} from {self._kv_path.name}:{stmt.lineno}",
                                 f"{type(err).__name__}: {' '.join(str(err).split())[:200]}") from err

    def _kv_import(self, stmt: ast.stmt, alias: ast.alias) -> None:
        bound = alias.asname or alias.name
        if isinstance(stmt, ast.Import):
            if alias.asname is None:  # `import a.b` binds `a`
                root = alias.name.split(".")[0]
                self.__dict__[root] = self._kv_resolve(root, "", self.__name__)
            else:
                self.__dict__[bound] = self._kv_resolve(alias.name, "", self.__name__)
            return
        assert isinstance(stmt, ast.ImportFrom)
        module = stmt.module or ""
        if stmt.level:
            base = (self.__package__ or "").split(".")
            module = ".".join(base[: len(base) - stmt.level + 1] + ([module] if module else []))
        self.__dict__[bound] = self._kv_resolve(module, alias.name, self.__name__)


def standard(root: str) -> bool:
    return root in sys.stdlib_module_names or root in IMPORTED


def import_name(module: str, attr: str) -> Any:
    """`from module import attr` (or `import module` with attr empty), as Python does it."""
    found = importlib.import_module(module)
    if not attr:
        return found
    try:
        return getattr(found, attr)
    except AttributeError:
        return importlib.import_module(f"{module}.{attr}")


def unavailable(module: str, attr: str) -> Unavailable:
    return Unavailable(f"{module}.{attr}" if attr else module,
                       "a package kvproof does not load to plan (only the standard library, torch and numpy)")
