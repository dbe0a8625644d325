"""The engines kvproof verifies, by name: `verify engine`'s choices, the gate's engine runs and the
engines' seeded bugs in `verify mutants` all come from here.

Each name maps to its adapter module, whose `ADAPTER` is a kvproof.engines.interface.EngineAdapter;
adding an engine is its folder and one line here. A module is imported by name when its engine is
used, not when this module is: an adapter needs its engine's dependencies (torch for tokenspeed's
recipes, the vllm wheel for vLLM's planner), and a command that uses no engine imports none.
"""

from __future__ import annotations

import importlib

from kvproof.engines.interface import EngineAdapter

ENGINES: dict[str, str] = {
    "tokenspeed": "kvproof.engines.tokenspeed.engine",
    "vllm": "kvproof.engines.vllm.engine",
    "sglang": "kvproof.engines.sglang.engine",
}


def adapter(name: str) -> EngineAdapter:
    """The adapter registered as `name` (a KeyError for a name not registered)."""
    module = importlib.import_module(ENGINES[name])
    found: EngineAdapter = module.ADAPTER
    if found.name != name:
        raise RuntimeError(f"{ENGINES[name]}.ADAPTER is named {found.name!r}, registered as {name!r}")
    return found


def adapters() -> list[EngineAdapter]:
    """Every registered adapter, in registry order."""
    return [adapter(name) for name in ENGINES]
