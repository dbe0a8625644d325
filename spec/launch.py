"""Launch rules for attention data parallelism: one table, each rule with its reason and source.

A launch is the engine's parallelism flags as given (unset flags stay None). `resolve` applies
the engine's own defaulting (tokenspeed 0.1.1, `ServerArgs.resolve_parallelism`): the world is
pp x attention tp x dp when not given, tp / dp fill the stage world, the dense tp follows the
attention tp, `--enable-expert-parallel` makes EP the stage world, MoE tp fills what EP leaves.
Every rule is written with + * % comparisons and the connectives below, so the same definition
decides a concrete launch (ints) and builds the z3 term that `smallest_fix` searches over.

The cache contract at the resulting (tp, dtype) point is the prover's (kvproof.spec.prover); it
is not a rule here, because it is decided by a proof, not by a formula over the flags.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import z3

from kvproof.spec.catalog import ModelGeometry

# merge_state without head tiling puts every head of a token in one block, 16 threads per head:
# past 64 heads that is more than 1024 threads per block (kvproof's kernels/merge_state.py
# THREADS_PER_HEAD and MAX_THREADS; tests/test_config.py ties them).
MERGE_STATE_THREADS_PER_HEAD = 16
MAX_THREADS_PER_BLOCK = 1024
MERGE_STATE_UNTILED_MAX_HEADS = MAX_THREADS_PER_BLOCK // MERGE_STATE_THREADS_PER_HEAD

# The cache dtypes the contract covers, by the engine's --kv-cache-dtype spelling. tokenspeed:
# "auto" and "bfloat16" store bf16 rows, "fp8" is "fp8_e4m3"; "mxfp8" needs an MHA backend.
KV_CACHE_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "mxfp8": None}
DTYPE_CODES = ("fp8", "bf16", None)  # the dtype as an int for z3: its index here

SIZE_FLAGS = ("tp", "dp", "pp", "world", "dense_tp", "ep", "moe_tp", "dcp", "nnodes")
# Flags whose absence means "the engine resolves it" (the rest have a number as their default).
OPTIONAL = frozenset({"tp", "dp", "world", "dense_tp", "moe_tp", "nnodes"})
DEFAULTS = {"pp": 1, "ep": 1, "dcp": 1}


@dataclass(frozen=True)
class Launch:
    """The parallelism flags of one launch, as given; None means not passed."""

    tp: int | None = None
    dp: int | None = None
    pp: int = 1
    world: int | None = None
    dense_tp: int | None = None
    ep: int = 1
    moe_tp: int | None = None
    dcp: int = 1
    nnodes: int | None = None
    enable_ep: bool = False
    dist_init_addr: bool = False  # given, as host:port
    prefill: bool = False  # --disaggregation-mode prefill
    dtype: str | None = "bf16"  # the contract's name; None for a dtype the contract does not cover


@dataclass(frozen=True)
class Resolved:
    """Every size the engine derives from a launch (ints, or z3 terms during a search)."""

    world: Any
    stage: Any
    pp: Any
    tp: Any
    dp: Any
    dense_tp: Any
    ep: Any
    moe_tp: Any
    dcp: Any
    nnodes: Any
    dist_init_addr: Any
    prefill: Any
    dtype: Any  # index into DTYPE_CODES


def _symbolic(x: Any) -> bool:
    return isinstance(x, z3.ExprRef)


def ite(c: Any, a: Any, b: Any) -> Any:
    return z3.If(c, a, b) if _symbolic(c) else (a if c else b)


def all_(*xs: Any) -> Any:
    return z3.And(*xs) if any(map(_symbolic, xs)) else all(xs)


def any_(*xs: Any) -> Any:
    return z3.Or(*xs) if any(map(_symbolic, xs)) else any(xs)


def implies(a: Any, b: Any) -> Any:
    return any_(z3.Not(a) if _symbolic(a) else not a, b)


def div(a: Any, b: Any) -> Any:
    """Floor division of sizes, on ints and z3 Int terms alike. A stage of 0 ranks (pp above the
    world) resolves tp to 0; dividing by it gives 0, which world_product then rejects."""
    if _symbolic(a) or _symbolic(b):
        return a / b
    return a // b if b else 0


def divides(part: Any, whole: Any) -> Any:
    """part >= 1 and part divides whole; a resolved size can be 0 (more dp than ranks)."""
    if _symbolic(part) or _symbolic(whole):
        return z3.And(part >= 1, whole % part == 0)
    return part >= 1 and whole % part == 0


def member(x: Any, values: tuple[int, ...]) -> Any:
    return z3.Or(*(x == v for v in values)) if _symbolic(x) else x in values


@dataclass(frozen=True)
class Flag:
    """A launch flag as the resolution sees it: its value and whether it was given."""

    given: Any
    value: Any

    def or_else(self, default: Any) -> Any:
        return ite(self.given, self.value, default)


def resolve(f: Mapping[str, Flag], enable_ep: Any, dist: Any, dtype: Any, prefill: Any) -> Resolved:
    """tokenspeed 0.1.1's defaulting of the parallel sizes (ServerArgs.resolve_parallelism)."""
    pp = f["pp"].value
    world = f["world"].or_else(pp * f["tp"].or_else(1) * f["dp"].or_else(1))
    stage = div(world, pp)
    tp = f["tp"].or_else(ite(f["dp"].given, div(stage, f["dp"].value), stage))
    dp = f["dp"].or_else(div(stage, tp))
    ep = ite(all_(enable_ep, f["ep"].value == 1), stage, f["ep"].value)
    return Resolved(
        world=world, stage=stage, pp=pp, tp=tp, dp=dp, dense_tp=f["dense_tp"].or_else(tp), ep=ep,
        moe_tp=f["moe_tp"].or_else(div(stage, ep)), dcp=f["dcp"].value, nnodes=f["nnodes"].or_else(1),
        dist_init_addr=dist, prefill=prefill, dtype=dtype,
    )


def concrete_flags(launch: Launch) -> dict[str, Flag]:
    return {name: Flag(getattr(launch, name) is not None, getattr(launch, name) or 1) for name in SIZE_FLAGS}


def resolve_launch(launch: Launch) -> Resolved:
    return resolve(concrete_flags(launch), launch.enable_ep, launch.dist_init_addr,
                   DTYPE_CODES.index(launch.dtype), launch.prefill)


@dataclass(frozen=True)
class Assumptions:
    """What the launch cannot show: facts about the engine's build, stated by the user."""

    merge_state_head_tiled: bool


def _heads(m: ModelGeometry) -> str:
    return f"{m.mla_heads} MLA" + (f", {m.kda_heads} KDA" if m.hybrid else "")


@dataclass(frozen=True)
class Enforced:
    """Where tokenspeed 0.1.1 itself rejects a launch that breaks a rule: in its parallel
    resolution (Mapping, resolve_parallelism: what `verify config --engine` runs), elsewhere
    (ServerArgs at start, a guarantee, the planner's boot check), or nowhere. `text` is shown."""

    text: str
    by: Literal["resolution", "elsewhere", "nowhere"]


def resolution(text: str) -> Enforced:
    return Enforced(text, "resolution")


def elsewhere(text: str) -> Enforced:
    return Enforced(text, "elsewhere")


def nowhere(effect: str = "") -> Enforced:
    return Enforced(f"no ({effect})" if effect else "no", "nowhere")


@dataclass(frozen=True)
class Rule:
    name: str
    flags: tuple[str, ...]  # the engine's flag spellings the rule is about
    why: str
    source: str
    engine_enforces: Enforced
    holds: Callable[[Resolved, ModelGeometry, Assumptions], Any]
    detail: Callable[[Resolved, ModelGeometry], str]  # the numbers that break it, on a concrete launch


RULES: tuple[Rule, ...] = (
    Rule("world_product", ("--world-size", "--pipeline-parallel-size", "--tp", "--data-parallel-size"),
         "the world is pp x attention tp x dp: pipeline stages split the world, and attention tp and dp "
         "tile one stage",
         "tokenspeed server_args.py resolve_parallelism and mapping.py _resolve_parallelism_sizes",
         resolution("Mapping (assert)"),
         lambda r, m, a: all_(divides(r.pp, r.world), r.tp * r.dp == r.stage),
         lambda r, m: f"world {r.world} is not pp {r.pp} x attention tp {r.tp} x dp {r.dp}"),
    Rule("tp_divides_heads", ("--tp",),
         "attention tp shards the MLA heads (and the KDA heads of a hybrid) evenly over its ranks",
         "the model's config.json head counts (kvproof.spec.catalog tp_domain)",
         nowhere("fails later, in the model's weight loading"),
         lambda r, m, a: any_(r.tp < 1, member(r.tp, m.tp_domain)),
         lambda r, m: f"attention tp {r.tp} does not divide the head counts ({_heads(m)})"),
    Rule("dense_tp_is_attention_tp", ("--dense-tp-size", "--tp", "--data-parallel-size"),
         "under attention DP a dense group spanning DP ranks deadlocks: K3's dense MLP bypasses the "
         "communication manager and returns early on zero tokens, so token-holding ranks enter the dense "
         "all-reduce while idle ranks skip ahead into the MoE all-gather",
         "tokenspeed Kimi-K3 deployment notes (docs/commands/config.md)",
         nowhere(),
         lambda r, m, a: implies(r.dp > 1, r.dense_tp == r.tp),
         lambda r, m: f"dense tp {r.dense_tp} != attention tp {r.tp} under attention dp {r.dp}"),
    Rule("dense_tp_tiles_stage", ("--dense-tp-size",),
         "dense tp and dense dp tile one pipeline stage's ranks",
         "tokenspeed mapping.py DenseLayerMapping",
         resolution("Mapping (assert)"),
         lambda r, m, a: divides(r.dense_tp, r.stage),
         lambda r, m: f"dense tp {r.dense_tp} does not divide the stage's {r.stage} ranks"),
    Rule("merge_state_heads", ("--tp",),
         f"merge_state without head tiling holds every head of a rank in one block: past "
         f"{MERGE_STATE_UNTILED_MAX_HEADS} heads per rank ({MERGE_STATE_THREADS_PER_HEAD} threads each, "
         f"> {MAX_THREADS_PER_BLOCK} per block) every cross-chunk merge is rejected at launch; attention "
         "tp 1 runs all heads on each rank",
         "K3: 96 MLA heads per rank at tp 1 (docs/commands/config.md); kvproof kernels/merge_state.py launch_config",
         nowhere("the kernel launch fails at the first cross-chunk merge"),
         lambda r, m, a: any_(a.merge_state_head_tiled, r.tp < 1, r.tp * MERGE_STATE_UNTILED_MAX_HEADS >= m.mla_heads),
         lambda r, m: f"{-(-m.mla_heads // r.tp)} MLA heads per rank at attention tp {r.tp} "
                      f"> {MERGE_STATE_UNTILED_MAX_HEADS}"),
    Rule("dist_init_addr", ("--dist-init-addr", "--data-parallel-size", "--nnodes"),
         "a data-parallel or multi-node launch on bare metal needs --dist-init-addr host:port (only a "
         "launcher such as Slurm can derive it)",
         "tokenspeed server_args.py PortArgs.init_new",
         elsewhere("PortArgs.init_new (raises at start)"),
         lambda r, m, a: implies(any_(r.dp > 1, r.nnodes > 1), r.dist_init_addr),
         lambda r, m: f"dp {r.dp} on {r.nnodes} node(s) without --dist-init-addr host:port"),
    Rule("moe_tiles_stage", ("--ep-size", "--moe-tp-size", "--enable-expert-parallel"),
         "MoE tp x EP must tile one stage's ranks (MoE dp takes the rest)",
         "tokenspeed mapping.py MoeLayerMapping",
         resolution("Mapping (assert)"),
         lambda r, m, a: divides(r.moe_tp * r.ep, r.stage),
         lambda r, m: f"MoE tp {r.moe_tp} x EP {r.ep} does not divide the stage's {r.stage} ranks"),
    Rule("moe_tp_or_ep", ("--ep-size", "--moe-tp-size", "--enable-expert-parallel"),
         "MoE tp and EP are not both above 1",
         "tokenspeed server_args.py resolve_parallelism",
         resolution("resolve_parallelism (raises)"),
         lambda r, m, a: any_(r.moe_tp == 1, r.ep == 1),
         lambda r, m: f"MoE tp {r.moe_tp} and EP {r.ep} are both above 1"),
    Rule("dcp_divides_tp", ("--decode-context-parallel-size", "--tp"),
         "decode context parallelism shards KV pages over a subgroup of attention tp",
         "tokenspeed mapping.py _resolve_dcp_size",
         resolution("Mapping (raises)"),
         lambda r, m, a: any_(r.tp < 1, divides(r.dcp, r.tp)),
         lambda r, m: f"DCP {r.dcp} does not divide attention tp {r.tp}"),
    Rule("nodes_tile_world", ("--nnodes", "--world-size"),
         "every node runs the same number of ranks",
         "tokenspeed mapping.py Mapping (nprocs_per_node x nnodes)",
         resolution("Mapping (assert)"),
         lambda r, m, a: divides(r.nnodes, r.world),
         lambda r, m: f"{r.nnodes} nodes do not divide the world of {r.world} ranks"),
    Rule("pp_without_attention_dp", ("--pipeline-parallel-size", "--data-parallel-size"),
         "pipeline stages with attention DP are not supported",
         "tokenspeed server_args.py (pipeline checks)",
         elsewhere("ServerArgs (raises at start)"),
         lambda r, m, a: implies(r.dp > 1, r.pp == 1),
         lambda r, m: f"pp {r.pp} with attention dp {r.dp}"),
    Rule("pp_needs_prefill_role", ("--pipeline-parallel-size", "--disaggregation-mode"),
         "pipeline parallelism is a prefill-node chunk-pipeline feature: a stage needs the prefill role's "
         "guarantees (no decode token feedback)",
         "tokenspeed server_args.py resolve_disaggregation",
         elsewhere("ServerArgs.resolve_disaggregation (raises at start)"),
         lambda r, m, a: implies(r.pp > 1, r.prefill),
         lambda r, m: f"pp {r.pp} without --disaggregation-mode prefill"),
    Rule("pp_within_layers", ("--pipeline-parallel-size",),
         "each pipeline stage runs a window of the model's layers; past one stage per layer a stage has none",
         "tokenspeed pp_stage.py pp_stage_windows (the even split)",
         nowhere("the even split hands a stage an empty window"),
         lambda r, m, a: any_(r.stage < 1, r.pp <= m.num_layers),  # a stage of no ranks is world_product's
         lambda r, m: f"pp {r.pp} stages for {m.num_layers} layers"),
    Rule("kv_cache_dtype", ("--kv-cache-dtype",),
         "the cache contract covers fp8 (e4m3) and bf16 latent pages; mxfp8 needs an MHA backend",
         "tokenspeed server_args.py --kv-cache-dtype help; kvproof.spec.catalog CACHE_DTYPES",
         nowhere(),
         lambda r, m, a: r.dtype != DTYPE_CODES.index(None),
         lambda r, m: "--kv-cache-dtype mxfp8 is outside the cache contract"),
)
RULE_NAMES = tuple(rule.name for rule in RULES)


def assumption_cases(tiled: bool | None) -> tuple[Assumptions, ...]:
    """The assumptions to check under: the one stated, or both when none is."""
    return tuple(Assumptions(t) for t in ((False, True) if tiled is None else (tiled,)))


def violated(launch: Launch, model: ModelGeometry, assume: Assumptions,
             rules: tuple[Rule, ...] = RULES) -> tuple[Rule, ...]:
    r = resolve_launch(launch)
    return tuple(rule for rule in rules if not rule.holds(r, model, assume))


# ---- the smallest change: fewest flags changed, then the smallest change of the resolved sizes

SEARCH_MAX = 4096  # no size above this is ever suggested


class OutOfTime(Exception):
    """The fix search used up its time budget before z3 answered."""


@dataclass(frozen=True)
class Fix:
    launch: Launch
    changed: tuple[str, ...]  # the Launch fields changed


def _divisors(n: int) -> set[int]:
    return {d for d in range(1, min(n, SEARCH_MAX) + 1) if n % d == 0}


def candidate_sizes(launch: Launch, model: ModelGeometry) -> tuple[int, ...]:
    """The sizes a fix may set a flag to: the divisors of the head counts and of every size the
    launch gives or resolves (world, stage), and the powers of two. A finite domain keeps z3's
    nonlinear search small: primes near SEARCH_MAX made it run for minutes."""
    r = resolve_launch(launch)
    seeds = {model.mla_heads, model.kda_heads, r.world, r.stage,
             *(v for v in (getattr(launch, n) for n in SIZE_FLAGS) if v is not None)}
    sizes = {2**k for k in range(SEARCH_MAX.bit_length()) if 2**k <= SEARCH_MAX}
    for seed in seeds:
        if seed >= 1:
            sizes |= _divisors(seed)
    return tuple(sorted(sizes))


def smallest_fix(launch: Launch, model: ModelGeometry, cases: tuple[Assumptions, ...],
                 must_hold: tuple[Rule, ...], avoid: tuple[tuple[int, str], ...] = (),
                 deadline: float | None = None, count_flags: bool = True) -> Fix | None:
    """The launch closest to `launch` on which every rule of `must_hold` holds under every case,
    avoiding the (tp, dtype) points in `avoid` (where the cache contract fails). Closest:
    fewest flags changed, then the smallest change of the resolved sizes, then the fewest flags
    given (dropping a flag, leaving it to the engine, beats writing its value), then the
    smallest sum of flag values, so ties are broken the same way every run. Each size is one of
    candidate_sizes. None: no such launch; OutOfTime: z3 had not answered by `deadline`
    (time.monotonic()). count_flags=False drops the first objective (a seeded fault's hook)."""
    timeout_ms = None if deadline is None else int((deadline - time.monotonic()) * 1000)
    if timeout_ms is not None and timeout_ms < 1:
        raise OutOfTime
    # A fresh context per search: in a long-lived process the shared one carried state from earlier
    # searches, which changed the answers among ties and let calls overrun their timeout.
    ctx = z3.Context()
    opt = z3.Optimize(ctx=ctx)
    if timeout_ms is not None:
        opt.set("timeout", timeout_ms)
    given = {n: z3.Bool(f"given_{n}", ctx) for n in SIZE_FLAGS}
    value = {n: z3.Int(f"value_{n}", ctx) for n in SIZE_FLAGS}
    enable_ep, dist, prefill = z3.Bool("enable_ep", ctx), z3.Bool("dist", ctx), z3.Bool("prefill", ctx)
    dtype = z3.Int("dtype", ctx)
    flags = {n: Flag(given[n], value[n]) for n in SIZE_FLAGS}
    r = resolve(flags, enable_ep, dist, dtype, prefill)
    before = resolve_launch(launch)
    sizes = candidate_sizes(launch, model)
    changes = []
    for n in SIZE_FLAGS:
        orig = getattr(launch, n)
        opt.add(member(value[n], sizes))
        if n not in OPTIONAL:
            opt.add(given[n])
            changes.append(value[n] != orig)
        elif orig is None:
            opt.add(implies(z3.Not(given[n]), value[n] == 1))
            changes.append(given[n])
        else:
            changes.append(z3.Or(z3.Not(given[n]), value[n] != orig))
    changes += [enable_ep != launch.enable_ep, dist != launch.dist_init_addr, prefill != launch.prefill,
                dtype != DTYPE_CODES.index(launch.dtype)]
    opt.add(dtype >= 0, dtype < len(DTYPE_CODES), r.world <= max(SEARCH_MAX, before.world))
    for case in cases:
        opt.add(*(rule.holds(r, model, case) for rule in must_hold))
    for tp, dt in avoid:
        opt.add(z3.Not(z3.And(r.tp == tp, dtype == DTYPE_CODES.index(dt))))
    goals = (
        z3.Sum([z3.If(c, 1, 0) for c in changes]),
        z3.Sum([z3.If(a >= b, a - b, b - a) for a, b in ((getattr(r, n), getattr(before, n)) for n in SIZE_FLAGS)]),
        z3.Sum([z3.If(given[n], 1, 0) for n in sorted(OPTIONAL)]),
        z3.Sum([z3.If(given[n], value[n], 0) for n in SIZE_FLAGS]),
    )
    for goal in goals[0 if count_flags else 1:]:
        opt.minimize(goal)
    # z3's own timeout is not always honoured inside Optimize (one call ran 6 s past 0.3 s in a
    # fuzz): a timer interrupts the context as well.
    timer = None if timeout_ms is None else threading.Timer(timeout_ms / 1000, opt.ctx.interrupt)
    if timer is not None:
        timer.start()
    try:
        answer = opt.check()
    finally:
        if timer is not None:
            timer.cancel()
    if answer == z3.unknown:
        raise OutOfTime
    if answer != z3.sat:
        return None
    m = opt.model()
    new: dict[str, Any] = {n: m.eval(value[n]).as_long() if z3.is_true(m.eval(given[n])) else None for n in SIZE_FLAGS}
    fixed = replace(launch, **new, enable_ep=z3.is_true(m.eval(enable_ep)),
                    dist_init_addr=z3.is_true(m.eval(dist)), prefill=z3.is_true(m.eval(prefill)),
                    dtype=DTYPE_CODES[m.eval(dtype).as_long()])
    changed = tuple(f.name for f in fields(Launch) if getattr(fixed, f.name) != getattr(launch, f.name))
    return Fix(fixed, changed)
