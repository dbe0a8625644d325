"""Prove a policy over a whole family of geometries at once, or find its smallest counterexample.

Every parameter is a z3 Int: the geometry (layers, MLA spacing, KDA heads, head dim, latent rank),
tp (any divisor of the heads), the dtype and the packings. The recipe's derived quantities
(MLA layer count, state groups, state and page bytes, K_lin, plane and parent bytes, padding)
are terms over them. Products of two unknowns stay linear because one factor is always a small
bounded count (tp, mla_every, the MLA layer count, the state-group count and sizes, K_mla,
K_lin) written as a sum of bits: x * y = sum of If(bit_i, 2^i * y, 0), exact. So each query is
linear integer arithmetic over bounded Ints and z3 covers every member; nothing is sampled.

What the encoding rests on, each checked where it is built:
- state and page bytes are linear in heads per rank and in the latent rank: both are computed
  with the contract (spec/contract.py) at every value in the family and compared with the term;
- a plane is exactly K_mla pages (exact_stride) iff K_mla x page covers K_lin states and is a
  multiple of the contract's plane alignment; there the parent is the sum of its planes (each
  plane is a multiple of lcm(alignment, every packing)), so padding is linear too;
- partition, no_overlap, in_bounds and null_page hold for every plan the contract builds once
  its strides are exact (plan_for's construction); the sweep encodes the arena and page-id
  bounds, and tests/test_sweep.py compares the sweep's verdict with the pointwise prover's
  seven checks.

`search` over a family of at most sweep_table.MAX_POINTS reduced points is decided by its
candidate loop run at every point instead (spec/sweep_table.py): the query needs a round per
K_mla candidate it learns, and on a family of every tp and dtype those rounds add up to minutes.

A counterexample is confirmed by the pointwise prover (spec/prover.py) on the member's own
config before it is reported; the prover disagreeing is an error, never a silent result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from math import lcm
from typing import Any, Protocol

import z3

from kvproof.spec import properties as P
from kvproof.spec import sweep_table
from kvproof.spec.catalog import ConfigError
from kvproof.spec.contract import ALIGNMENT, FULL, MAX_PADDING, Layout, recipe_layout
from kvproof.spec.policy import Policy
from kvproof.spec.prover import PointPlan, plan_point
from kvproof.spec.sweep_family import PARAMETERS, Family, Member, Range, divisors

PATTERN_VALUES = 256  # a parameter with more values than this gets no failing-set pattern
SEARCH_UNROLL = 4  # candidates of `search` from ceil(state / page) on, unrolled in every query


class Small:
    """A bounded count x + offset with x = sum of its bits: multiplying it keeps terms linear."""

    def __init__(self, var: Any, bits: list[Any], offset: int = 0) -> None:
        self.var, self.bits, self.offset = var, bits, offset

    @property
    def term(self) -> Any:
        return self.var + self.offset if self.offset else self.var

    def __mul__(self, other: Any) -> Any:
        if isinstance(other, int):
            return self.term * other
        product = z3.Sum([z3.If(b, (1 << i) * other, 0) for i, b in enumerate(self.bits)])
        return product + self.offset * other if self.offset else product

    __rmul__ = __mul__

    def __add__(self, other: int) -> Small:
        return Small(self.var, self.bits, self.offset + other)

    def __sub__(self, other: int) -> Small:
        return Small(self.var, self.bits, self.offset - other)

    def __lt__(self, o: Any) -> Any:
        return self.term < o

    def __le__(self, o: Any) -> Any:
        return self.term <= o

    def __gt__(self, o: Any) -> Any:
        return self.term > o

    def __ge__(self, o: Any) -> Any:
        return self.term >= o

    def __eq__(self, o: Any) -> Any:
        return self.term == o

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Shape:
    """What the contract says about one dtype or head dim, as coefficients of linear terms."""

    page_per_value: dict[str, int]  # dtype -> page bytes per latent value
    mla_multiple: dict[str, int]  # dtype -> lcm(itemsize, stride alignment) of the latent field
    lin_multiple: int  # lcm(itemsize, stride alignment) over the state fields
    state_per_head: dict[int, int]  # head_dim -> state bytes per KDA head per rank


def _unit_layout(family: Family, heads: int, head_dim: int, rank: int, dtype: str) -> Layout:
    """The contract's layout of the smallest member shape: 3 layers, MLA at 2 and 3, KDA at 1."""
    probe = Member(3, heads, head_dim, rank, 2, 1, dtype)
    return recipe_layout(family.model(probe), 1, dtype)


def _multiple(layout: Layout, full: bool) -> int:
    return lcm(*(m for f in layout.fields if (f.group == FULL) == full and f.plane == "slot.0"
                 for m in (f.itemsize, f.stride_alignment)))


def derive_shape(family: Family) -> Shape:
    """Coefficients from the contract, then the claim that state and page are linear in heads per
    rank and latent rank, checked against the contract at every value the family reaches."""
    r = family.ranges
    rope = family.base.qk_rope_head_dim
    ref = {d: _unit_layout(family, 1, r["head_dim"].lo, r["kv_lora_rank"].lo, d) for d in family.dtypes}
    page_per_value = {d: ref[d].page // (r["kv_lora_rank"].lo + rope) for d in family.dtypes}
    any_dtype = family.dtypes[0]
    per_head = {hd: _unit_layout(family, 1, hd, r["kv_lora_rank"].lo, any_dtype).state for hd in r["head_dim"].all()}
    for hd in r["head_dim"].all():
        for heads in heads_per_rank(r["kda_heads"]):
            state = _unit_layout(family, heads, hd, r["kv_lora_rank"].lo, any_dtype).state
            if state != heads * per_head[hd]:
                raise ConfigError(f"state bytes are not linear in heads at head_dim={hd}, {heads} heads per rank "
                                  f"({state} != {heads} x {per_head[hd]}); narrow --vary head_dim")
    for d in family.dtypes:
        for rank in r["kv_lora_rank"].all():
            page = _unit_layout(family, 1, r["head_dim"].lo, rank, d).page
            if page != page_per_value[d] * (rank + rope):
                raise ConfigError(f"page bytes are not linear in kv_lora_rank at {rank} ({d})")
    return Shape(page_per_value, {d: _multiple(ref[d], True) for d in family.dtypes},
                 _multiple(ref[any_dtype], False), per_head)


def heads_per_rank(heads: Range) -> list[int]:
    return sorted({h // tp for h in heads.all() for tp in divisors(h)})


@dataclass
class Encoding:
    """The family's members and one policy's verdict on each, as z3 terms."""

    family: Family
    policy: Policy
    shape: Shape
    unroll: int
    facts: list[Any] = field(default_factory=list)  # defining constraints: each term's value is unique
    vars: dict[str, Any] = field(default_factory=dict)
    copies: int = 0  # plans encoded so far (each names its own K_lin)

    def small(self, name: str, lo: int, hi: int) -> Small:
        width = max(1, hi.bit_length())
        var, bits = z3.Int(name), [z3.Bool(f"{name}.{i}") for i in range(width)]
        self.facts += [var == z3.Sum([z3.If(b, 1 << i, 0) for i, b in enumerate(bits)]), var >= lo]
        return Small(var, bits)

    def define(self, name: str, term: Any) -> Any:
        """A fresh Int equal to `term`, so products of it stay small terms."""
        var = z3.Int(name)
        self.facts.append(var == term)
        return var

    def member(self, name: str, rng: Range, var: Any = None) -> Any:
        var = z3.Int(name) if var is None else var
        self.facts.append(z3.Or([var == v for v in rng.values]) if rng.values else z3.And(var >= rng.lo, var <= rng.hi))
        self.vars[name] = var
        return var

    def build(self) -> Any:
        """Defining constraints into self.facts; returns the formula 'this member fails'."""
        r, shape = self.family.ranges, self.shape
        top = r["num_layers"].hi
        layers = self.member("num_layers", r["num_layers"])
        every = self.small("mla_every", r["mla_every"].lo, r["mla_every"].hi)
        self.member("mla_every", r["mla_every"], every.var)
        # MLA layers: ceil(L / every) (every every-th plus the last); KDA layers: the rest
        n = self.small("n_mla", 1, top)
        self.facts += [every * n.term - every.term < layers, layers <= every * n.term]
        kda = layers - n.term
        # state groups: ceil(kda / n) of them, sizes floor and ceil of kda / groups (contract item §4)
        groups = self.small("state_groups", 1, top)
        self.facts += [groups * n.term - n.term < kda, kda <= groups * n.term]
        smin, smax = self.small("smallest_group", 1, top), self.small("largest_group", 1, top)
        self.facts += [groups * smin.term <= kda, kda < groups * smin.term + groups.term,
                       smax.term == z3.If(groups * smin.term == kda, smin.term, smin.term + 1)]
        heads = self.member("kda_heads", r["kda_heads"])
        tp = self.small("tp", 1, r["kda_heads"].hi)
        per_rank = z3.Int("heads_per_rank")
        self.vars["tp"] = tp.var
        self.facts += [per_rank >= 1, heads == tp * per_rank]
        head_dim = self.member("head_dim", r["head_dim"])
        state = self.define("state", _select(head_dim, {hd: c * per_rank for hd, c in shape.state_per_head.items()}))
        rank = self.member("kv_lora_rank", r["kv_lora_rank"])
        bf16 = z3.Bool("bf16")
        self.vars["bf16"] = bf16
        dtypes = self.family.dtypes
        if len(dtypes) == 1:
            self.facts.append(bf16 if dtypes[0] == "bf16" else z3.Not(bf16))
        latent = rank + self.family.base.qk_rope_head_dim

        def by_dtype(values: dict[str, Any]) -> Any:
            return values[dtypes[0]] if len(dtypes) == 1 else z3.If(bf16, values["bf16"], values["fp8"])

        page = self.define("page", by_dtype({d: c * latent for d, c in shape.page_per_value.items()}))
        page_ok = by_dtype({d: (c * latent) % shape.mla_multiple[d] == 0 for d, c in shape.page_per_value.items()})
        caps = self._caps()
        pattern = Pattern(n, smin, smax, state, page, page_ok)
        self.pattern, self.caps = pattern, caps
        if self.policy.smallest_accepted:
            first = self.small("K_first", 1, caps["k"])
            self.facts += [first * page - page < state, state <= first * page]  # ceil(state / page)
            return z3.And([self.rejects(first + i, caps["lin_per_step"] * (i + 1) + 1) for i in range(self.unroll)])
        k = self.small("K_mla", 1, caps["k"])
        self.facts.append(self.policy.admits(k, state, page))
        # ceil: K_mla x page < state + page, so K_lin <= 1 + page / state; others: K_mla x page / state
        lin = caps["lin_per_step"] + 1 if self.policy.name == "ceil" else caps["k"] * caps["lin_per_step"]
        return z3.Not(self.accepted(k, lin))

    def rejects(self, k: Small | int, lin_cap: int) -> Any:
        """`search` does not take this candidate: not admitted, or some property fails."""
        return z3.Not(z3.And(self.policy.admits(k, self.pattern.state, self.pattern.page), self.accepted(k, lin_cap)))

    def _caps(self) -> dict[str, int]:
        """True upper bounds of K_mla and K_lin over the family (a bit width too small would drop
        members from the search, so these are bounds, not guesses)."""
        r, shape = self.family.ranges, self.shape
        state_hi = max(shape.state_per_head.values()) * max(heads_per_rank(r["kda_heads"]))
        state_lo = min(shape.state_per_head.values())
        page_hi = max(shape.page_per_value.values()) * (r["kv_lora_rank"].hi + self.family.base.qk_rope_head_dim)
        page_lo = min(shape.page_per_value.values()) * (r["kv_lora_rank"].lo + self.family.base.qk_rope_head_dim)
        k = max(-(-state_hi // page_lo), 12) + self.unroll
        return {"k": k, "lin_per_step": -(-page_hi // state_lo)}

    def accepted(self, k: Small | int, lin_cap: int) -> Any:
        """Every property holds for the plan with this K_mla (K_lin is the recipe's, at most
        lin_cap: a true bound, or members would go missing)."""
        pat = self.pattern
        self.copies += 1
        tag = self.copies
        fill = self.define(f"fill{tag}", k * pat.page)
        k_lin = self.small(f"K_lin{tag}", 1, lin_cap)
        states = self.define(f"states{tag}", k_lin * pat.state)
        quotient, rest = z3.Int(f"q{tag}"), z3.Int(f"rest{tag}")
        lin_unit = self.shape.lin_multiple
        self.facts += [
            # K_lin = max(1, K_mla x page // state)
            z3.If(fill < pat.state, k_lin.term == 1, z3.And(states <= fill, fill < states + pat.state)),
            # rest = (K_mla x page) mod (lin_unit x K_lin)
            quotient >= 0, fill == lin_unit * (k_lin * quotient) + rest, rest >= 0, rest < lin_unit * k_lin.term,
        ]
        # K_mla x itemsize and K_mla x stride alignment divide K_mla x page iff they divide the page
        aligned = z3.And(fill % ALIGNMENT == 0, pat.page_ok)
        # Planes with MLA pages only (n > smax) need no more than `aligned`, which every plane needs.
        exact = z3.And(states <= fill, aligned, rest == 0)
        parent = pat.n * fill
        bound = MAX_PADDING
        return z3.And(
            exact,
            P.padding_within(parent, 1, pat.n * fill, bound),
            P.padding_within(parent, 1, pat.smin * states, bound),
            P.padding_within(parent, 1, pat.smax * states, bound),
            2 * parent <= P.BYTES_MAX, (k.term if isinstance(k, Small) else k) <= P.PAGE_ID_MAX,
            k_lin.term <= P.PAGE_ID_MAX,
        )


@dataclass(frozen=True)
class Pattern:
    n: Small  # MLA layers (= planes)
    smin: Small  # layers of the smallest state group
    smax: Small  # layers of the largest state group (= planes shared with state)
    state: Any
    page: Any
    page_ok: Any  # the page is a multiple of lcm(itemsize, stride alignment) of the latent field


def _select(var: Any, values: dict[int, Any]) -> Any:
    keys = sorted(values)
    out = values[keys[-1]]
    for key in reversed(keys[:-1]):
        out = z3.If(var == key, values[key], out)
    return out


# ---------------------------------------------------------------- deciding a family


@dataclass
class Sweep:
    family: Family
    policy: str
    proved: bool
    size: int
    seconds: float
    counterexample: Member | None = None
    point: PointPlan | None = None  # the pointwise prover's plan at the counterexample
    refusal: str | None = None  # why the policy refuses the counterexample outright, if it does
    patterns: dict[str, str] = field(default_factory=dict)
    refinements: list[int] = field(default_factory=list)  # K_mla candidates `search` added
    evaluated: int = 0  # reduced points the table decided at (sweep_table); 0: the z3 query decided

    @property
    def failing_properties(self) -> list[str]:
        if self.point is None:
            return ["boots"] if self.refusal else []
        return [prop for prop, found in self.point.violations.items() if found]


ORDER = (*PARAMETERS, "tp", "bf16")


class Undecided(ConfigError):
    """The time budget ran out before z3 decided the family: narrow the ranges."""


class Query:
    def __init__(self, family: Family, policy: Policy, shape: Shape, unroll: int, budget: float = 600.0) -> None:
        self.start, self.budget = time.perf_counter(), budget
        self.enc = Encoding(family, policy, shape, unroll)
        fails = self.enc.build()
        self.lowest = {p: family.ranges[p].lo for p in PARAMETERS}
        self.solver = z3.SimpleSolver()  # measured fastest here, for sat and unsat alike
        self.assertions = [*self.enc.facts, fails]
        self.solver.add(*self.assertions)

    def timeout_ms(self) -> int:
        left = self.budget - (time.perf_counter() - self.start)
        if left <= 0:
            raise Undecided(f"undecided: the time budget of {self.budget:.0f} s ran out; "
                            "narrow the --vary ranges or raise --budget")
        return max(1, int(left * 1000))

    def add_candidate(self, k_mla: int) -> None:
        """Refine `search`: members where this K_mla boots are no longer counterexamples."""
        before = len(self.enc.facts)
        rejects = self.enc.rejects(k_mla, k_mla * self.enc.caps["lin_per_step"])
        self.assertions += [*self.enc.facts[before:], rejects]
        self.solver.add(*self.enc.facts[before:], rejects)

    def check(self, *extra: Any) -> dict[str, int] | None:
        """A failing member satisfying `extra`, or None when there is none. z3 giving up (the
        time budget) is neither: it raises, so an undecided query is never read as a proof."""
        self.solver.set("timeout", self.timeout_ms())
        verdict = self.solver.check(*extra)
        if verdict == z3.unknown:
            raise Undecided(f"undecided: z3 gave up ({self.solver.reason_unknown()}) after "
                            f"{time.perf_counter() - self.start:.0f} s; narrow the --vary ranges or raise --budget")
        if verdict == z3.unsat:
            return None
        model = self.solver.model()
        return {name: _value(model.eval(var, model_completion=True)) for name, var in self.enc.vars.items()}

    def smallest(self, floor: dict[str, int] | None = None) -> dict[str, int] | None:
        """The least failing member by ORDER (each key minimised in turn by bisection). `floor`:
        a member known to be no larger than the answer (the last answer, before a refinement)."""
        found = self.check()
        if found is None:
            return None
        fixed: list[Any] = []
        on_floor = floor is not None
        bottom = floor or {}  # read only while on_floor
        for name in ORDER:
            var = self.enc.vars[name]
            if name == "bf16":
                better = None if on_floor and bottom["bf16"] else self.check(*fixed, z3.Not(var))
                found = better or found
                fixed.append(var == z3.BoolVal(bool(found[name])))
                continue
            low, high = self.lowest.get(name, 1), found[name]
            if on_floor:
                low = max(low, bottom[name])
            while low < high:
                mid = (low + high) // 2
                better = self.check(*fixed, var <= mid)
                if better is None:
                    low = mid + 1
                else:
                    found, high = better, better[name]
            fixed.append(var == high)
            on_floor = on_floor and high == bottom[name]
        return found

    def fails_at(self, member: dict[str, int], name: str) -> Callable[[int], bool]:
        """Whether the member fails with `name` changed: the other parameters are substituted as
        constants first, so each check is a small query."""
        pins = [(var, z3.BoolVal(bool(member[k])) if k == "bf16" else z3.IntVal(member[k]))
                for k, var in self.enc.vars.items() if k != name and not (name == "kda_heads" and k == "tp")]
        solver = z3.SimpleSolver()
        solver.add(*(z3.simplify(z3.substitute(f, *pins)) for f in self.assertions))
        var = self.enc.vars[name]
        solver.set("timeout", self.timeout_ms())

        def fails(value: int) -> bool:
            verdict = solver.check(var == value)
            if verdict == z3.unknown:
                raise Undecided(f"undecided: z3 gave up on the pattern of {name}; drop --pattern {name}")
            return verdict == z3.sat

        return fails


def _value(v: Any) -> int:
    return int(z3.is_true(v)) if z3.is_bool(v) else v.as_long()


def _member(found: dict[str, int]) -> Member:
    return Member(**{p: found[p] for p in PARAMETERS}, tp=found["tp"], dtype="bf16" if found["bf16"] else "fp8")


def confirm(family: Family, policy: Policy, member: Member) -> tuple[PointPlan | None, str | None]:
    """The pointwise prover's verdict at a member: its plan (with violations), or the refusal."""
    try:
        return plan_point(family.model(member), member.tp, member.dtype, policy), None
    except ConfigError as err:
        return None, str(err)


def sweep(family: Family, policy: Policy, patterns: tuple[str, ...] = (), budget: float = 600.0,
          on_round: Callable[[str], None] | None = None) -> Sweep:
    """PROVED when no member fails; else the smallest failing member, confirmed pointwise.

    `search` takes the first accepted K_mla from ceil(state / page) up to 256. The query unrolls
    the first SEARCH_UNROLL candidates; a member the query finds where a later candidate boots
    (the pointwise prover says which) adds that K_mla as one more candidate every member must
    reject, and the query runs again. Each round removes at least that member, and there are at
    most 256 candidates, so it ends, and what it ends with is exact."""
    start = time.perf_counter()
    shape = derive_shape(family)
    if policy.smallest_accepted and sweep_table.fits(family):

        def on_time() -> None:
            if time.perf_counter() - start > budget:
                raise Undecided(f"undecided: the time budget of {budget:.0f} s ran out; "
                                "narrow the --vary ranges or raise --budget")

        try:
            table = sweep_table.build(family, shape.state_per_head, shape.page_per_value, shape.mla_multiple,
                                      shape.lin_multiple, on_time)
        except OverflowError:
            pass  # too large for int64: the z3 query below decides it
        else:
            return by_table(family, policy, sweep_table.Verdicts(family, table), patterns, start)
    query = Query(family, policy, shape, SEARCH_UNROLL if policy.smallest_accepted else 1, budget)
    added: list[int] = []
    floor, minimal = None, False
    while True:
        if on_round is not None:  # what the query is doing, for whoever watches (`verify sweep` on a terminal)
            on_round(f"{'minimising' if minimal else 'z3 query'}, {len(added)} refinement(s)")
        # Any failing member first; only one the pointwise prover confirms is worth minimising.
        found = query.smallest(floor) if minimal else query.check()
        if found is None:
            return Sweep(family, policy.name, True, family.size(), time.perf_counter() - start, refinements=added)
        member = _member(found)
        point, refusal = confirm(family, policy, member)
        if point is None or not point.accepted:  # confirm gives no point exactly when it refuses
            if not minimal:
                minimal = True
                continue
            result = Sweep(family, policy.name, False, family.size(), 0.0, member, point, refusal, refinements=added)
            result.patterns = failing_patterns(query, found, family, patterns)
            result.seconds = time.perf_counter() - start
            return result
        k_mla = next(g["packing"] for g in point.plan["groups"] if g["id"] == FULL)
        if not policy.smallest_accepted or k_mla in added:
            raise ConfigError(f"internal: the sweep's encoding says {member.text()} fails under {policy.name}, "
                              f"the pointwise prover accepts K_mla={k_mla}; please report")
        added.append(k_mla)
        query.add_candidate(k_mla)
        if minimal:
            floor = found  # the answer is no smaller: refining only removes members


def by_table(family: Family, policy: Policy, verdicts: sweep_table.Verdicts, patterns: tuple[str, ...],
             start: float) -> Sweep:
    """The table's verdict; its smallest failing member confirmed by the pointwise prover."""
    member = verdicts.smallest()
    evaluated = sweep_table.points(family)
    if member is None:
        return Sweep(family, policy.name, True, family.size(), time.perf_counter() - start, evaluated=evaluated)
    point, refusal = confirm(family, policy, member)
    if point is not None and point.accepted:
        k_mla = next(g["packing"] for g in point.plan["groups"] if g["id"] == FULL)
        raise ConfigError(f"internal: the sweep's table says {member.text()} fails under {policy.name}, "
                          f"the pointwise prover accepts K_mla={k_mla}; please report")
    result = Sweep(family, policy.name, False, family.size(), 0.0, member, point, refusal, evaluated=evaluated)
    found = {**{p: getattr(member, p) for p in PARAMETERS}, "tp": member.tp, "bf16": int(member.dtype == "bf16")}
    result.patterns = failing_patterns(verdicts, found, family, patterns)
    result.seconds = time.perf_counter() - start
    return result


def confirmed_failure(query: Query, family: Family, policy: Policy, *extra: Any) -> tuple[Member, str] | None:
    """Any failing member satisfying `extra` that the pointwise prover confirms, with its failing
    properties; None when no member fails. Refines `search` as `sweep` does."""
    while True:
        found = query.check(*extra)
        if found is None:
            return None
        member = _member(found)
        point, _ = confirm(family, policy, member)
        if point is None or not point.accepted:
            failing = ["boots"] if point is None else [p for p, hits in point.violations.items() if hits]
            return member, ", ".join(failing)
        k_mla = next(g["packing"] for g in point.plan["groups"] if g["id"] == FULL)
        if not policy.smallest_accepted:
            raise ConfigError(f"internal: the sweep's encoding says {member.text()} fails under {policy.name}, "
                              f"the pointwise prover accepts K_mla={k_mla}; please report")
        query.add_candidate(k_mla)


class FailsAt(Protocol):
    def fails_at(self, member: dict[str, int], name: str) -> Callable[[int], bool]: ...


def failing_patterns(query: FailsAt, found: dict[str, int], family: Family, names: tuple[str, ...]) -> dict[str, str]:
    """Which values of each named parameter fail with every other parameter at the
    counterexample (any tp for kda_heads, since tp must divide them)."""
    out = {}
    for name in names:
        rng = family.ranges[name]
        if len(rng) > PATTERN_VALUES:
            out[name] = f"not computed: more than {PATTERN_VALUES} values"
            continue
        fails = query.fails_at(found, name)
        out[name] = describe_set([v for v in rng.all() if fails(v)], rng.all())
    return out


def describe_set(bad: list[int], domain: tuple[int, ...]) -> str:
    """A failing set as 'all', 'none', a residue class pattern mod M, or intervals."""
    if not bad:
        return "none"
    if len(bad) == len(domain):
        return "all"
    chosen = set(bad)
    for modulus in range(2, min(13, len(domain) // 3 + 1)):
        residues = sorted({v % modulus for v in bad})
        if all((v % modulus in residues) == (v in chosen) for v in domain):
            return f"{len(bad)} of {len(domain)}: ≡ {', '.join(map(str, residues))} (mod {modulus})"
    runs: list[str] = []
    begin: int | None = bad[0]
    for prev, cur in zip(bad, [*bad[1:], None], strict=True):
        if cur is None or cur != prev + 1:
            runs.append(str(begin) if begin == prev else f"{begin}..{prev}")
            begin = cur
    shown = ", ".join(runs[:12]) + (", ..." if len(runs) > 12 else "")
    return f"{len(bad)} of {len(domain)}: {shown}"
