"""tokenspeed's own parallel resolution (`verify config --engine tokenspeed`).

`tokenspeed/runtime/distributed/mapping.py` (Mapping, `_resolve_parallelism_sizes` and the DCP
validator) is pure Python; the adapter's loader imports it with the packages above it left
uninitialised (their `__init__` pulls in torch and the engine's kernels).

`ServerArgs.resolve_parallelism` itself lives in server_args.py, which imports the kernel
package at module level, so it cannot be loaded here: `engine_verdict` repeats its defaulting
steps (facts read from tokenspeed 0.1.1) around the loaded module's own functions.
"""

from __future__ import annotations

import traceback
import types

from kvproof.engines.tokenspeed import loader
from kvproof.impl import faults
from kvproof.spec.launch import RULES, Launch

# The rules whose breaking launches the loaded resolution itself rejects.
ENFORCED_BY_RESOLUTION = frozenset(r.name for r in RULES if r.engine_enforces.by == "resolution")


def load_mapping() -> types.ModuleType:
    """tokenspeed's mapping.py from the installed release, through the adapter's loader."""
    return loader.load(loader.installed_source(), ("runtime.distributed.mapping",))["runtime.distributed.mapping"]


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
    dropped = faults.active("launch_engine_moe_check_dropped")
    if resolved.moe.has_tp and resolved.moe.has_ep and not dropped:  # resolve_parallelism's, after the Mapping
        return "ValueError: MoE TP and EP cannot be both > 1"
    return None
