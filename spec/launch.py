"""Launch rules for attention data parallelism: one table, each rule with its reason and source.

A launch is the engine's parallelism flags as given (unset flags stay None). `resolve` applies
the engine's own defaulting (tokenspeed 0.1.1, `ServerArgs.resolve_parallelism`): the world is
pp x attention tp x dp when not given, tp / dp fill the stage world, the dense tp follows the
attention tp, `--enable-expert-parallel` makes EP the stage world, MoE tp fills what EP leaves.
Every rule is a formula over the resolved sizes, so the same definition decides a launch and
each candidate that `smallest_fix` weighs.

The cache contract at the resulting (tp, dtype) point is the prover's (kvproof.spec.prover); it
is not a rule here, because it is decided by a proof, not by a formula over the flags.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

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
DTYPE_CODES = ("fp8", "bf16", None)  # the resolved dtype is its index here

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
    """Every size the engine derives from a launch."""

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


def all_(*xs: Any) -> Any:
    return all(xs)


def any_(*xs: Any) -> Any:
    return any(xs)


def implies(a: Any, b: Any) -> Any:
    return not a or b


def div(a: Any, b: Any) -> Any:
    """Floor division of sizes. A stage of 0 ranks (pp above the world) resolves tp to 0; dividing
    by it gives 0, which world_product then rejects."""
    return a // b if b else 0


def divides(part: Any, whole: Any) -> Any:
    """part >= 1 and part divides whole; a resolved size can be 0 (more dp than ranks)."""
    return part >= 1 and whole % part == 0


def member(x: Any, values: tuple[int, ...]) -> Any:
    return x in values


def resolve(v: Mapping[str, Any]) -> Resolved:
    """tokenspeed 0.1.1's defaulting of the parallel sizes (ServerArgs.resolve_parallelism), from
    a launch's fields by name (a size not given is None)."""
    pp, tp_given, dp_given = v["pp"], v["tp"], v["dp"]
    world = pp * (tp_given or 1) * (dp_given or 1) if v["world"] is None else v["world"]
    stage = div(world, pp)
    tp = (stage if dp_given is None else div(stage, dp_given)) if tp_given is None else tp_given
    dp = div(stage, tp) if dp_given is None else dp_given
    ep = stage if v["enable_ep"] and v["ep"] == 1 else v["ep"]
    return Resolved(
        world=world, stage=stage, pp=pp, tp=tp, dp=dp, dense_tp=tp if v["dense_tp"] is None else v["dense_tp"],
        ep=ep, moe_tp=div(stage, ep) if v["moe_tp"] is None else v["moe_tp"], dcp=v["dcp"],
        nnodes=1 if v["nnodes"] is None else v["nnodes"], dist_init_addr=v["dist_init_addr"], prefill=v["prefill"],
        dtype=DTYPE_CODES.index(v["dtype"]),
    )


def resolve_launch(launch: Launch) -> Resolved:
    return resolve(vars(launch))


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
    """The fix search used up its time budget before it had its answer."""


@dataclass(frozen=True)
class Fix:
    launch: Launch
    changed: tuple[str, ...]  # the Launch fields changed


def _divisors(n: int) -> set[int]:
    return {d for d in range(1, min(n, SEARCH_MAX) + 1) if n % d == 0}


def candidate_sizes(launch: Launch, model: ModelGeometry) -> tuple[int, ...]:
    """The sizes a fix may set a flag to: the divisors of the head counts and of every size the
    launch gives or resolves (world, stage), and the powers of two. A finite domain keeps the
    search small."""
    r = resolve_launch(launch)
    seeds = {model.mla_heads, model.kda_heads, r.world, r.stage,
             *(v for v in (getattr(launch, n) for n in SIZE_FLAGS) if v is not None)}
    sizes = {2**k for k in range(SEARCH_MAX.bit_length()) if 2**k <= SEARCH_MAX}
    for seed in seeds:
        if seed >= 1:
            sizes |= _divisors(seed)
    return tuple(sorted(sizes))




# The Launch fields world, stage, pp, tp and dp resolve from (the core), and what each other
# resolved size resolves from: its own Launch fields, and the core sizes it reads (resolve above).
CORE = ("pp", "world", "tp", "dp")
CORE_RESOLVED = frozenset({"world", "stage", "pp", "tp", "dp"})
RESOLVED_FROM = {"dense_tp": ("dense_tp",), "ep": ("ep", "enable_ep"), "moe_tp": ("moe_tp", "ep", "enable_ep"),
                 "dcp": ("dcp",), "nnodes": ("nnodes",), "dist_init_addr": ("dist_init_addr",),
                 "prefill": ("prefill",), "dtype": ("dtype",)}
CORE_READ = {"dense_tp": ("tp",), "ep": ("stage",), "moe_tp": ("stage",)}
Cost = tuple[int, ...]  # the objectives in order, compared as a tuple


class _Reads:
    """A resolved launch that records the sizes a rule reads: a rule evaluates every argument of
    its connectives before combining them, so one call sees all it reads."""

    def __init__(self, r: Resolved) -> None:
        self._r, self.names = r, set[str]()

    def __getattr__(self, name: str) -> Any:
        self.names.add(name)
        return getattr(self._r, name)


@dataclass(frozen=True)
class _Constraint:
    reads: frozenset[str]  # resolved sizes
    holds: Callable[[Resolved], bool]


@dataclass(frozen=True)
class _Group:
    """Launch fields no constraint ties to another group's: given the core, their best values are
    found alone, and a launch's cost is the sum of its groups' and its core's."""

    fields: tuple[str, ...]
    resolved: tuple[str, ...]  # the resolved sizes these fields set (with the core)
    needs: tuple[str, ...]  # the core sizes its resolution and constraints read
    constraints: tuple[_Constraint, ...]


def _rule(rule: Rule, model: ModelGeometry, cases: tuple[Assumptions, ...], sample: Resolved) -> _Constraint:
    reads = _Reads(sample)
    rule.holds(reads, model, cases[0])  # type: ignore[arg-type]  # records, as a Resolved
    return _Constraint(frozenset(reads.names), lambda r: all(rule.holds(r, model, c) for c in cases))


def _domain(name: str, sizes: tuple[int, ...]) -> tuple[Any, ...]:
    if name in SIZE_FLAGS:
        return ((None,) if name in OPTIONAL else ()) + sizes
    return DTYPE_CODES if name == "dtype" else (False, True)


def _groups(constraints: list[_Constraint], sizes: tuple[int, ...]) -> list[_Group]:
    """The groups: the fields a resolved size resolves from are one group, and so are the fields
    of every size one constraint reads, outside the core. Smallest first: a core whose group has
    no valid values is dropped after the fewest tries."""
    merged: list[set[str]] = [set(f) for f in RESOLVED_FROM.values()]
    merged += [{f for n in c.reads - CORE_RESOLVED for f in RESOLVED_FROM[n]} for c in constraints]
    groups: list[set[str]] = []
    for part in merged:
        for g in [g for g in groups if g & part]:
            groups.remove(g)
            part = part | g
        if part:
            groups.append(part)
    out = []
    for g in groups:
        resolved = tuple(n for n, f in RESOLVED_FROM.items() if set(f) <= g)
        mine = tuple(c for c in constraints if c.reads & set(resolved))
        needs = {n for c in mine for n in c.reads & CORE_RESOLVED} | {n for r in resolved for n in CORE_READ.get(r, ())}
        out.append(_Group(tuple(f.name for f in fields(Launch) if f.name in g), resolved, tuple(sorted(needs)), mine))
    return sorted(out, key=lambda g: (math.prod(len(_domain(n, sizes)) for n in g.fields), g.fields))


def _cores(sizes: tuple[int, ...], bound: int) -> Iterator[dict[str, Any]]:
    """Every assignment of the core flags whose world is well formed (pp divides it, attention tp
    x dp is its stage) and at most `bound`: world_product and the world bound hold on every fix
    (check's BASE), so no other core is worth resolving. The given world comes first: of two
    launches equal on every objective, `--world-size N` is written rather than `--tp N`."""
    for pp in sizes:
        for world in sizes:
            if world % pp:
                continue
            stage = world // pp
            yield {"pp": pp, "world": world, "tp": None, "dp": None}
            for part in (s for s in sizes if stage % s == 0):
                yield {"pp": pp, "world": world, "tp": part, "dp": None}
                yield {"pp": pp, "world": world, "tp": None, "dp": part}
                if stage // part in sizes:
                    yield {"pp": pp, "world": world, "tp": part, "dp": stage // part}
        for tp in (None, *sizes):
            for dp in (None, *sizes):
                if pp * (tp or 1) * (dp or 1) > bound:
                    break  # sizes ascend
                yield {"pp": pp, "world": None, "tp": tp, "dp": dp}


def _changes(launch: Launch, names: tuple[str, ...], level: int, sizes: tuple[int, ...]
             ) -> Iterator[dict[str, Any]]:
    """Every assignment of `names` that changes exactly `level` of them, in a fixed order."""
    for changed in itertools.combinations(names, level):
        domains = [[v for v in _domain(n, sizes) if v != getattr(launch, n)] for n in changed]
        for values in itertools.product(*domains):
            yield dict(zip(changed, values, strict=True))


def _cost(launch: Launch, before: Resolved, names: Iterable[str], new: Mapping[str, Any], after: Resolved,
          resolved: Iterable[str], count_flags: bool) -> Cost:
    """The objectives over the fields `names` (`new` sets some of them) and the resolved sizes
    `resolved`: fields changed, change of the resolved sizes, flags given of those the engine can
    resolve, sum of the sizes given."""
    values = {n: new.get(n, getattr(launch, n)) for n in names}
    cost = (sum(v != getattr(launch, n) for n, v in values.items()),
            sum(abs(getattr(after, n) - getattr(before, n)) for n in resolved if n in SIZE_FLAGS),
            sum(v is not None for n, v in values.items() if n in OPTIONAL),
            sum(v or 0 for n, v in values.items() if n in SIZE_FLAGS))
    return cost if count_flags else cost[1:]


class _Search:
    """One smallest_fix: the well-formed cores in order of their own cost, each completed by the
    best values of every group (found once per core size the group reads, in order of fields
    changed). The groups only add to each objective, so the first core that costs more than the
    best launch so far ends the search."""

    def __init__(self, launch: Launch, constraints: list[_Constraint], sizes: tuple[int, ...], bound: int,
                 deadline: float | None, count_flags: bool) -> None:
        self.launch, self.sizes, self.bound = launch, sizes, bound
        self.deadline, self.count_flags = deadline, count_flags
        self.values, self.before = vars(launch), resolve_launch(launch)
        self.core = tuple(c for c in constraints if c.reads <= CORE_RESOLVED)
        self.groups = _groups(constraints, sizes)
        self.best_of: dict[tuple[int, tuple[Any, ...]], tuple[Cost, dict[str, Any]] | None] = {}
        self.tried = 0

    def _tick(self) -> None:
        self.tried += 1
        if self.deadline is not None and self.tried % 256 == 0 and time.monotonic() > self.deadline:
            raise OutOfTime

    def group_best(self, i: int, core: dict[str, Any], r: Resolved) -> tuple[Cost, dict[str, Any]] | None:
        g = self.groups[i]
        key = (i, tuple(getattr(r, n) for n in g.needs))
        if key in self.best_of:
            return self.best_of[key]
        best: tuple[Cost, dict[str, Any]] | None = None
        for level in range(len(g.fields) + 1):
            if self.count_flags and best is not None:
                break  # every later level changes more fields
            for new in _changes(self.launch, g.fields, level, self.sizes):
                self._tick()
                after = resolve({**core, **new})
                if all(c.holds(after) for c in g.constraints):
                    cost = _cost(self.launch, self.before, g.fields, new, after, g.resolved, self.count_flags)
                    if best is None or cost < best[0]:
                        best = (cost, new)
        self.best_of[key] = best
        return best

    def run(self) -> Launch | None:
        levels: dict[int, list[dict[str, Any]]] = {}  # the cores by flags changed (one level without that objective)
        for new in _cores(self.sizes, self.bound):
            changed = sum(v != self.values[n] for n, v in new.items())
            levels.setdefault(changed if self.count_flags else 0, []).append(new)
        best: tuple[Cost, dict[str, Any]] | None = None
        for level in sorted(levels):
            if self.count_flags and best is not None and best[0][0] < level:
                break  # a core that changes more flags than the best launch cannot beat it
            cores = []
            for order, new in enumerate(levels[level]):
                self._tick()
                core = {**self.values, **new}
                r = resolve(core)
                if all(c.holds(r) for c in self.core):
                    cost = _cost(self.launch, self.before, CORE, new, r, CORE, self.count_flags)
                    cores.append((cost, order, core, r))
            cores.sort(key=lambda c: c[:2])
            for cost, _, core, r in cores:
                if best is not None and cost > best[0]:
                    break  # the groups only add to every objective
                fixed = core
                for i in range(len(self.groups)):
                    self._tick()
                    found = self.group_best(i, core, r)
                    if found is None:
                        break
                    cost = tuple(a + b for a, b in zip(cost, found[0], strict=True))
                    fixed = {**fixed, **found[1]}
                else:
                    if best is None or cost < best[0]:
                        best = (cost, fixed)
        return None if best is None else Launch(**best[1])


def smallest_fix(launch: Launch, model: ModelGeometry, cases: tuple[Assumptions, ...],
                 must_hold: tuple[Rule, ...], fails: Callable[[int, str | None], bool] | None = None,
                 deadline: float | None = None, count_flags: bool = True) -> Fix | None:
    """The launch closest to `launch` on which every rule of `must_hold` holds under every case,
    with a well-formed world of at most SEARCH_MAX ranks (or the launch's own, if larger), at a
    (tp, dtype) point that `fails` does not reject (where the cache contract fails). Closest: fewest flags
    changed, then the smallest change of the resolved sizes, then the fewest flags given (dropping
    a flag, leaving it to the engine, beats writing its value), then the smallest sum of flag
    values; among launches equal on all four the first in the search's fixed order wins. Each
    size is one of candidate_sizes. None: no such launch; OutOfTime: the search had not ended by
    `deadline` (time.monotonic()). count_flags=False drops the first objective (a seeded fault's hook)."""
    if deadline is not None and deadline - time.monotonic() < 0.001:
        raise OutOfTime
    before = resolve_launch(launch)
    constraints = [_rule(rule, model, cases, before) for rule in must_hold]
    if fails is not None:
        point_fails = fails
        constraints.append(_Constraint(frozenset({"tp", "dtype"}),
                                       lambda r: not point_fails(r.tp, DTYPE_CODES[r.dtype])))
    sizes = candidate_sizes(launch, model)
    fixed = _Search(launch, constraints, sizes, max(SEARCH_MAX, before.world), deadline, count_flags).run()
    if fixed is None:
        return None
    return Fix(fixed, tuple(f.name for f in fields(Launch) if getattr(fixed, f.name) != getattr(launch, f.name)))
