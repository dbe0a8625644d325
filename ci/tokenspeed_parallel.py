"""tokenspeed's own parallel resolution, loaded without its GPU-bound package chain.

`tokenspeed/runtime/distributed/mapping.py` (Mapping, `_resolve_parallelism_sizes` and the DCP
validator) is pure Python, but importing it the ordinary way runs `tokenspeed/__init__` and
`tokenspeed/runtime/distributed/__init__`, which pull in torch and the engine's kernels. So the
packages above it are replaced by sealed package modules whose `__path__` is the real folder:
the submodule loads from the installed wheel, and any other use of a sealed package raises,
naming the package and the attribute (nothing is ever invented in its place).

`ServerArgs.resolve_parallelism` itself lives in server_args.py, which imports the kernel
package at module level, so it cannot be loaded here: `engine_verdict` repeats its defaulting
steps (facts read from tokenspeed 0.1.1) around the loaded module's own functions. This is a
minimal local loader; the general one belongs in kvproof.engines (tokenspeed).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import traceback
import types
from functools import cache
from pathlib import Path

from kvproof.spec.launch import RULES, Launch

MODULE = "tokenspeed.runtime.distributed.mapping"
# The rules whose breaking launches the loaded resolution itself rejects.
ENFORCED_BY_RESOLUTION = frozenset(r.name for r in RULES if r.engine_enforces.startswith(("Mapping", "resolve_")))


class EngineUnavailable(ValueError):
    """tokenspeed is not installed where this interpreter can read it; the message says how."""


class _Sealed(types.ModuleType):
    """A stand-in for a package whose __init__ is not run: only its submodules are reachable."""

    def __getattr__(self, attr: str) -> object:
        raise AttributeError(
            f"{self.__name__}.{attr}: kvproof loaded only {MODULE} from this package; "
            f"its __init__ (which needs a GPU stack) was not run"
        )


def _sealed_package(name: str, folder: Path) -> types.ModuleType:
    module = _Sealed(name)
    module.__path__ = [str(folder)]
    module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=True)
    module.__spec__.submodule_search_locations = [str(folder)]
    return module


@cache
def load_mapping() -> types.ModuleType:
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    spec = importlib.util.find_spec("tokenspeed")
    if spec is None or not spec.submodule_search_locations:
        raise EngineUnavailable("tokenspeed is not installed: pip install --no-deps tokenspeed==0.1.1")
    root = Path(spec.submodule_search_locations[0])
    for name in ("tokenspeed", "tokenspeed.runtime", "tokenspeed.runtime.distributed"):
        folder = root.joinpath(*name.split(".")[1:])
        if not folder.is_dir():  # tokenspeed.runtime is a namespace package: no __init__.py
            raise EngineUnavailable(f"{folder} is not a tokenspeed package folder; reinstall tokenspeed==0.1.1")
        sys.modules.setdefault(name, _sealed_package(name, folder))
    return importlib.import_module(MODULE)


def _message(err: BaseException) -> str:
    if str(err):
        return f"{type(err).__name__}: {err}"
    frame = traceback.extract_tb(err.__traceback__)[-1]
    return f"{type(err).__name__} in {frame.name}: {frame.line}"


def engine_verdict(launch: Launch) -> str | None:
    """None when tokenspeed's parallel resolution accepts the launch, else its error, one line."""
    mapping = load_mapping()
    pp = launch.pp
    world = launch.world if launch.world is not None else pp * (launch.tp or 1) * (launch.dp or 1)
    if world % pp:  # resolve_parallelism's own check, before any Mapping
        return f"ValueError: world_size ({world}) must be divisible by --pipeline-parallel-size ({pp})"
    stage = world // pp
    try:
        tp, dp = mapping._resolve_parallelism_sizes(stage, launch.tp, launch.dp)
        ep = stage if launch.enable_ep and launch.ep == 1 else launch.ep
        resolved = mapping.Mapping(
            world_size=world, attn_tp_size=tp, attn_dp_size=dp, attn_dcp_size=launch.dcp,
            dense_tp_size=tp if launch.dense_tp is None else launch.dense_tp,
            moe_tp_size=stage // ep if launch.moe_tp is None else launch.moe_tp, moe_ep_size=ep,
            pp_size=pp, nnodes=launch.nnodes or 1,
        )
    except (AssertionError, ValueError, ZeroDivisionError) as err:
        return _message(err)
    if resolved.moe.has_tp and resolved.moe.has_ep:  # resolve_parallelism's check after the Mapping
        return "ValueError: MoE TP and EP cannot be both > 1"
    return None
