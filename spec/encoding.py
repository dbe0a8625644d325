"""A plan's numbers as facts, and each named property as a search for a violating witness.

One encoding serves two callers. `verify check` binds a concrete plan: N is pinned to the plan's
num_parents and the plane slabs sit where the plan says. The prover binds a plan it derived from
the contract: N ranges over 1..max_parents and every slab starts at (N + 1) x (the plane bytes
before it). Page ids are always symbolic, so `no_overlap` and `in_bounds` are proved for every
page and every N at once. Once the plan's strides are known every term is linear over z3 Int,
which is why a whole model proves in well under a second.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from math import lcm, prod
from typing import Any

from kvproof.spec import properties as P
from kvproof.spec.catalog import ConfigError
from kvproof.spec.contract import DTYPE_BYTES
from kvproof.spec.schema import validate
from kvproof.spec.smt import Env, Solver, Term, all_of, any_of, lift, negate

N, PAGE, OTHER = Term.var("N"), Term.var("p"), Term.var("q")
# no_overlap checks every pair of fields one group keeps on one plane (a pair costs about 25 kB
# and 1 ms of z3), so a plan may keep at most this many there; the recipes keep at most 2.
MAX_STACK = 64
_SOLVER = Solver(("N", "p", "q"))


@dataclass(frozen=True)
class Violation:
    property: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"property": self.property, "message": self.message}


@dataclass(frozen=True)
class Affine:
    """per_parent x N + fixed: how every N-dependent number of a bound plan grows with N.
    Kept as two ints so equal terms are found before any z3 term is built."""

    per_parent: int
    fixed: int

    def term(self) -> Any:
        return self.per_parent * N + self.fixed if self.per_parent else self.fixed

    def __add__(self, other: Affine) -> Affine:
        return Affine(self.per_parent + other.per_parent, self.fixed + other.fixed)


@dataclass(frozen=True)
class PlaneFact:
    id: str
    bytes: int
    arena_offset: Affine
    alignment: int | None = None  # the plane alignment the engine declares, if it declares one

    @property
    def slab(self) -> Affine:
        """(N + 1) x plane bytes: the plane's slab, null parent included."""
        return Affine(self.bytes, self.bytes)


@dataclass(frozen=True)
class GroupFact:
    id: str
    packing: int
    page_count: Affine


@dataclass(frozen=True)
class KernelFact:
    """A kernel that reads a field's pages: the page it is handed and the limits its source sets."""

    name: str
    tokens: int
    block: int
    max_tokens: int | None
    power_of_two: bool = False


@dataclass(frozen=True)
class FieldFact:
    id: str
    group: str
    plane: str
    dtype: str
    payload: int
    offset: int
    stride: int
    exact_stride: bool
    tokens: int | None = None  # tokens per page, where the plan says
    kernels: tuple[KernelFact, ...] = ()
    readers: tuple[tuple[str, str], ...] = ()  # (name, walks: page | payload)

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Facts:
    parent_bytes: int
    alignment: int
    max_padding: Fraction | None  # None: the engine sets no bound, so padding_bound has nothing to check
    planes: tuple[PlaneFact, ...]  # in arena order
    groups: tuple[GroupFact, ...]
    fields: tuple[FieldFact, ...]
    parents: tuple[int, int]  # the range of the parent count N, both ends included
    arena_bytes: Affine | None = None  # the engine's allocation; None: the planes' slabs end to end

    @property
    def arena(self) -> Affine:
        """The bytes every slab must lie in: the engine's allocation, or (N + 1) x the plane bytes."""
        if self.arena_bytes is not None:
            return self.arena_bytes
        total = sum(p.bytes for p in self.planes)
        return Affine(total, total)

    def plane(self, plane_id: str) -> PlaneFact:
        return self._planes[plane_id]

    def group(self, group_id: str) -> GroupFact:
        return self._groups[group_id]

    def witness(self, *formulas: Term) -> Env | None:
        """Values of N (within `parents`), p and q that satisfy `formulas`, or None."""
        low, high = self.parents
        return _SOLVER.witness(low <= N, high >= N, *formulas)

    @cached_property
    def _planes(self) -> dict[str, PlaneFact]:
        return {p.id: p for p in self.planes}

    @cached_property
    def _groups(self) -> dict[str, GroupFact]:
        return {g.id: g for g in self.groups}

    def raw(self, group_id: str) -> int:
        return self._raw[group_id]

    @cached_property
    def _raw(self) -> dict[str, int]:
        out = dict.fromkeys(self._groups, 0)
        for f in self.fields:
            out[f.group] += f.payload
        return out

    @cached_property
    def on_plane(self) -> dict[str, list[FieldFact]]:
        """plane -> the fields of every group on it (each list scanned once per plan, not per plane)."""
        out: dict[str, list[FieldFact]] = {p.id: [] for p in self.planes}
        for f in self.fields:
            out[f.plane].append(f)
        return out

    @cached_property
    def stacks(self) -> dict[tuple[str, str], list[FieldFact]]:
        """(group, plane) -> the fields one page of the group keeps on that plane."""
        out: dict[tuple[str, str], list[FieldFact]] = {}
        for f in self.fields:
            out.setdefault((f.group, f.plane), []).append(f)
        return out


# ---------------------------------------------------------------- reading a plan dict


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise ConfigError(f"plan key {where.rstrip('.')!r} must be an object" if where else "plan must be an object")
    if key not in obj:
        raise ConfigError(f"plan is missing key {where + key!r}")
    value = obj[key]
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise ConfigError(f"plan key {where + key!r} has the wrong type {type(value).__name__}")
    return value


def _positive(obj: Any, key: str, where: str) -> int:
    value = _get(obj, key, int, where)
    if value <= 0:
        raise ConfigError(f"plan key {where + key!r} must be positive, got {value}")
    return value


def _ids(items: list, key: str) -> list[str]:
    """The ids of a plan list, which name planes, groups and fields everywhere else, so unique."""
    ids: dict[str, int] = {}
    for i, item in enumerate(items):
        name = _get(item, "id", str, f"{key}[{i}].")
        if name in ids:
            raise ConfigError(f"plan key '{key}[{i}].id' repeats id {name!r} of {key}[{ids[name]}]")
        ids[name] = i
    return list(ids)


def padding_bound_of(value: Any, key: str = "plan key 'max_padding'") -> Fraction | None:
    """A padding bound as an exact fraction, None for no bound; json.loads reads NaN and
    Infinity, which have none."""
    if value is None:
        return None
    if (isinstance(value, float) and not math.isfinite(value)) or value < 0:
        raise ConfigError(f"{key} must be a finite number >= 0, got {value}")
    return Fraction(str(value))


def _bound(plan: dict) -> Fraction | None:
    if isinstance(plan, dict) and plan.get("max_padding", 0) is None:
        return None
    return padding_bound_of(_get(plan, "max_padding", (int, float), ""))


def _static(plan: dict) -> tuple[int, int, Fraction | None, list[dict], list[dict], tuple[FieldFact, ...]]:
    parent, alignment = _positive(plan, "parent_bytes", ""), _positive(plan, "alignment", "")
    bound = _bound(plan)
    planes, groups = _get(plan, "planes", list, ""), _get(plan, "groups", list, "")
    for key, items in (("planes", planes), ("groups", groups)):
        if not items:
            raise ConfigError(f"plan key {key!r} is empty: a plan needs at least one")
    plane_ids, group_ids = set(_ids(planes, "planes")), _ids(groups, "groups")
    known_groups = set(group_ids)
    for i, p in enumerate(planes):
        _positive(p, "bytes", f"planes[{i}].")
        if "alignment" in p:
            _positive(p, "alignment", f"planes[{i}].")
    for i, g in enumerate(groups):
        _positive(g, "packing", f"groups[{i}].")
    listed = _get(plan, "fields", list, "")
    field_ids = _ids(listed, "fields")
    fields = []
    for i, f in enumerate(listed):
        at = f"fields[{i}]."
        shape, dtype = _get(f, "shape", list, at), _get(f, "dtype", str, at)
        group, plane = _get(f, "group", str, at), _get(f, "plane", str, at)
        if dtype not in DTYPE_BYTES:
            raise ConfigError(f"plan key {at + 'dtype'!r}: unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        if group not in known_groups:
            raise ConfigError(f"plan key '{at}group' names no group of the plan: {group!r}")
        if plane not in plane_ids:
            raise ConfigError(f"plan key '{at}plane' names no plane of the plan: {plane!r}")
        if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
            raise ConfigError(f"plan key '{at}shape' must be a non-empty list of positive integers")
        fields.append(FieldFact(
            field_ids[i], group, plane, dtype, prod(shape) * DTYPE_BYTES[dtype],
            _get(f, "offset", int, at), _get(f, "stride", int, at), _get(f, "exact_stride", bool, at),
            *_kernels(f, at), tuple((r["name"], r["walks"]) for r in f.get("readers", [])),
        ))
    stacks: dict[tuple[str, str], int] = {}
    for i, f in enumerate(fields):
        stacks[f.group, f.plane] = stacks.get((f.group, f.plane), 0) + 1
        if stacks[f.group, f.plane] > MAX_STACK:
            raise ConfigError(f"plan key 'fields[{i}].plane': group {f.group!r} keeps more than {MAX_STACK} fields "
                              f"on plane {f.plane!r} (every pair is checked; at most {MAX_STACK} per group and plane)")
    used = {f.group for f in fields}
    for i, group in enumerate(group_ids):
        if group not in used:
            raise ConfigError(f"plan key 'groups[{i}]': group {group!r} has no fields, so its padding is undefined")
    return parent, alignment, bound, planes, groups, tuple(fields)


def _kernels(field: dict, at: str) -> tuple[int | None, tuple[KernelFact, ...]]:
    kernels = field.get("kernels", [])
    if kernels and "tokens" not in field:
        raise ConfigError(f"plan key '{at}kernels' needs '{at}tokens', the tokens per page the kernels split")
    return field.get("tokens"), tuple(KernelFact(k["name"], k["tokens"], k["block"], k["max_tokens"],
                                                        k.get("power_of_two", False)) for k in kernels)


def concrete_facts(plan: dict, validated: bool = False) -> Facts:
    """A bound plan as `verify check` reads it: N is the plan's num_parents. Its structure is
    the published schema's (`validated`: the caller already checked that); what relates keys to
    each other is checked here."""
    if not validated:
        validate(plan)
    parent, alignment, bound, planes, groups, fields = _static(plan)
    n = _positive(plan, "num_parents", "")
    arena = [PlaneFact(p["id"], p["bytes"], Affine(0, _get(p, "arena_offset", int, f"planes[{i}].")),
                       p.get("alignment"))
             for i, p in enumerate(planes)]
    arena.sort(key=lambda p: p.arena_offset.fixed)
    bound_groups = tuple(_bound_group(g, i, n) for i, g in enumerate(groups))
    allocated = Affine(0, _positive(plan, "arena_bytes", "")) if "arena_bytes" in plan else None
    return Facts(parent, alignment, bound, tuple(arena), bound_groups, fields, (n, n), allocated)


def _bound_group(group: dict, i: int, num_parents: int) -> GroupFact:
    """Pages 0..N x K: parent 0 (the null parent) holds only page 0, so the count is fixed by N."""
    given = _get(group, "page_count", int, f"groups[{i}].")
    expected = 1 + num_parents * group["packing"]
    if given != expected:
        raise ConfigError(f"plan key 'groups[{i}].page_count' of group {group['id']!r} is {given}; "
                          f"expected 1 + num_parents x packing = {expected}")
    return GroupFact(group["id"], group["packing"], Affine(0, given))


def symbolic_facts(plan: dict) -> Facts:
    """A plan derived from the contract, bound to a symbolic N in 1..max_parents (item f)."""
    parent, alignment, bound, planes, groups, fields = _static(plan)
    top = P.max_parents(parent, [g["packing"] for g in groups]) if 2 * parent <= P.BYTES_MAX else 0
    return Facts(
        parent, alignment, bound,
        tuple(PlaneFact(p["id"], p["bytes"], Affine(p["offset"], p["offset"])) for p in planes),
        tuple(GroupFact(g["id"], g["packing"], Affine(g["packing"], 1)) for g in groups),
        fields, (1, top),
    )


# ---------------------------------------------------------------- the properties

Check = tuple[Term, Callable[..., str]]  # (a violation formula, its message from a witness)


def _witnesses(facts: Facts, prop: str, checks: Iterable[Check]) -> list[Violation]:
    """One solver call for the common case (no violation at all); per-check calls only to name
    what failed."""
    checks = list(checks)
    if not checks:
        return []
    if facts.witness(any_of(*(c for c, _ in checks))) is None:
        return []
    return [Violation(prop, say(env)) for formula, say in checks if (env := facts.witness(formula)) is not None]


def _val(env: Env, term: Any) -> int:
    return term.value(env) if isinstance(term, Term) else term


def exact_stride(facts: Facts) -> list[Violation]:
    out = []
    for f in facts.fields:
        if f.exact_stride and not P.exact_stride(f.stride, f.payload):
            plane, k = facts.plane(f.plane), facts.group(f.group).packing
            out.append(Violation("exact_stride",
                f"field {f.id} needs stride {f.payload:,} B (its payload) but gets {f.stride:,} B "
                f"(plane {f.plane} {plane.bytes:,} B / packing {k})"))
    return out


def padding_bound(facts: Facts) -> list[Violation]:
    if facts.max_padding is None:
        return []
    out = []
    for g in facts.groups:
        raw = facts.raw(g.id)
        if not P.padding_within(facts.parent_bytes, g.packing, raw, facts.max_padding):
            out.append(Violation("padding_bound",
                f"group {g.id} pads {float(P.padding(facts.parent_bytes, g.packing, raw)):.3f} > bound "
                f"{float(facts.max_padding):.3f} (parent {facts.parent_bytes:,} B / packing {g.packing} "
                f"per page for {raw:,} B of payload)"))
    return out


def partition(facts: Facts) -> list[Violation]:
    out = []
    if not P.divides(facts.alignment, facts.parent_bytes):
        out.append(Violation("partition",
                             f"parent {facts.parent_bytes:,} B is not a multiple of alignment {facts.alignment}"))
    for g in facts.groups:
        if not P.divides(g.packing, facts.parent_bytes):
            out.append(Violation("partition",
                                 f"packing {g.packing} of {g.id} does not divide parent {facts.parent_bytes:,} B"))
    total = sum(p.bytes for p in facts.planes)
    if total > facts.parent_bytes:
        out.append(Violation("partition", f"planes take {total:,} B, more than the parent's {facts.parent_bytes:,} B"))
    for p in facts.planes:
        here = facts.on_plane[p.id]
        unit = lcm(facts.alignment, *(facts.group(f.group).packing * f.itemsize for f in here))
        if not P.divides(unit, p.bytes):
            out.append(Violation("partition", f"plane {p.id} of {p.bytes:,} B is not a multiple of {unit} "
                                              "(alignment and every packing x element size on it)"))
        if p.alignment is not None and not P.divides(p.alignment, p.bytes):
            out.append(Violation("partition", f"plane {p.id} of {p.bytes:,} B is not a multiple of its "
                                              f"declared alignment {p.alignment}"))
    for f in facts.fields:
        k, plane = facts.group(f.group).packing, facts.plane(f.plane)
        if f.stride * k != plane.bytes:
            out.append(Violation("partition", f"field {f.id}: stride {f.stride:,} B x packing {k} != plane "
                                              f"{f.plane} {plane.bytes:,} B"))
    return out + _witnesses(facts, "partition", _slab_alignment(facts))


def _slab_alignment(facts: Facts) -> Iterable[Check]:
    """Every plane slab starts on the plan's alignment, for every N (the arena base is aligned)."""
    for p in facts.planes:
        start, a = p.arena_offset, facts.alignment
        if P.divides(a, start.per_parent) and P.divides(a, start.fixed):
            continue
        yield (negate(P.divides(a, lift(start.term()))),
               lambda m, p=p, start=start: f"plane {p.id}'s slab starts at arena byte "
               f"{_val(m, start.term()):,}, not a multiple of alignment {facts.alignment} (N={_val(m, N):,})")


def field_alignment(facts: Facts) -> list[Violation]:
    return [Violation("field_alignment", f"field {f.id} ({f.dtype}) starts at page byte {f.offset:,}, not a "
                                         f"multiple of its element size {f.itemsize}")
            for f in facts.fields if not P.field_aligned(f.offset, f.itemsize)]


def page_id_limit(facts: Facts) -> list[Violation]:
    if facts.parents[0] > facts.parents[1] and 2 * facts.parent_bytes <= P.BYTES_MAX:
        top = max(g.packing for g in facts.groups)
        return [Violation("page_id_limit", f"packing {top} leaves no parent count N >= 1 whose page ids fit int32")]
    checks: dict[tuple, Check] = {}
    for g in facts.groups:
        if (g.packing, g.page_count) in checks:
            continue
        count = g.page_count.term()
        checks[g.packing, g.page_count] = (
            any_of(negate(P.page_ids_fit(N, g.packing)), count - 1 > P.PAGE_ID_MAX),
            lambda m, g=g, count=count: f"group {g.id}: N={_val(m, N):,} parents x packing {g.packing} "
            f"gives page id {_val(m, count) - 1:,} > 2^31 - 1",
        )
    return _witnesses(facts, "page_id_limit", checks.values())


def _page_base(plane: PlaneFact, stride: int, page: Any) -> Any:
    """Bytes from the start of the plane slab to a page (item f, properties.page_offset)."""
    return P.page_offset(0, plane.bytes, stride, page, 0)


def _footprint(stack: list[FieldFact]) -> tuple[int, int]:
    """The bytes of a page that its fields on one plane cover, from the first to the last."""
    return min(f.offset for f in stack), max(f.offset + f.payload for f in stack)


def in_bounds(facts: Facts) -> list[Violation]:
    if 2 * facts.parent_bytes > P.BYTES_MAX:
        return [Violation("in_bounds", f"parent {facts.parent_bytes:,} B leaves no room for two parents below 2^63 B")]
    arena = facts.arena.term()
    checks: dict[tuple, Check] = {
        ("arena",): (lift(arena) > P.BYTES_MAX,
                     lambda m: f"arena of {_val(m, arena):,} B at N={_val(m, N):,} exceeds 2^63 - 1"),
    }
    for p in facts.planes:
        start, end = p.arena_offset, p.arena_offset + p.slab
        if ("slab", start, end) not in checks:
            checks["slab", start, end] = (
                any_of(lift(start.term()) < 0, lift(end.term()) > arena),
                lambda m, p=p, start=start, end=end: f"plane {p.id}'s slab (arena bytes "
                f"{_val(m, start.term()):,}..{_val(m, end.term()):,}) leaves the arena of {_val(m, arena):,} B "
                f"at N={_val(m, N):,}",
            )
    for (group, plane_id), stack in facts.stacks.items():
        g, plane = facts.group(group), facts.plane(plane_id)
        stride, (low, high) = stack[0].stride, _footprint(stack)
        key = (g.packing, g.page_count, plane.bytes, stride, low, high)
        if key in checks:
            continue
        base = _page_base(plane, stride, PAGE)
        parent = P.parent_of(PAGE, g.packing)
        valid = all_of(PAGE >= 0, g.page_count.term() > PAGE)
        where = f"group {group} on plane {plane_id} (stride {stride:,} B, page bytes {low:,}..{high:,})"
        checks[key] = (
            all_of(valid, any_of(base + low < 0, base + high > plane.slab.term())),
            lambda m, where=where, base=base: f"{where}: page {_val(m, PAGE):,} at slab bytes "
            f"{_val(m, base):,} leaves the slab of N={_val(m, N):,}+1 parents",
        )
        checks[(*key, "parent")] = (
            all_of(valid, PAGE >= 1,
                   any_of(base + low < parent * plane.bytes, base + high > (parent + 1) * plane.bytes)),
            lambda m, where=where, parent=parent: f"{where}: page {_val(m, PAGE):,} is not inside parent "
            f"{_val(m, parent):,} = (p + K - 1) // K",
        )
    return _witnesses(facts, "in_bounds", checks.values())


def no_overlap(facts: Facts) -> list[Violation]:
    out = []
    for (group, _), stack in facts.stacks.items():
        ordered = sorted(stack, key=lambda f: f.offset)
        for a, b in itertools.pairwise(ordered):
            if a.offset + a.payload > b.offset:
                out.append(Violation("no_overlap", f"fields {a.id} ({a.offset:,}+{a.payload:,} B) and {b.id} "
                                                   f"(from {b.offset:,}) of one page of {group} overlap"))
    checks: dict[tuple, Check] = {}
    for p, q in itertools.pairwise(facts.planes):
        gap = q.arena_offset + Affine(-p.arena_offset.per_parent, -p.arena_offset.fixed) + Affine(-p.bytes, -p.bytes)
        if ("slab", gap) not in checks:
            checks["slab", gap] = (
                lift(gap.term()) < 0,
                lambda m, p=p, q=q: f"slab of plane {p.id} runs into plane {q.id}'s slab at N={_val(m, N):,}",
            )
    for (group, plane_id), stack in facts.stacks.items():
        g, plane = facts.group(group), facts.plane(plane_id)
        for a in stack:
            for b in stack:
                # the plane's bytes and base cancel out of every pair: only relative offsets matter
                key = (g.page_count, a.stride, b.stride, b.offset - a.offset, a.payload, b.payload)
                if key in checks:
                    continue
                count = g.page_count.term()
                start_a = _page_base(plane, a.stride, PAGE) + a.offset
                start_b = _page_base(plane, b.stride, OTHER) + b.offset
                checks[key] = (
                    # p < q covers every pair of distinct pages: (a, b) and (b, a) are both checked
                    all_of(PAGE >= 0, PAGE < OTHER, count > OTHER,
                           start_a < start_b + b.payload, start_b < start_a + a.payload),
                    lambda m, a=a, b=b, group=group, plane_id=plane_id:
                        f"plane {plane_id}: {a.id} of page {_val(m, PAGE):,} and {b.id} of page "
                        f"{_val(m, OTHER):,} of {group} share bytes (strides {a.stride:,}/{b.stride:,} B, "
                        f"N={_val(m, N):,})",
                )
    return out + _witnesses(facts, "no_overlap", checks.values())


def null_page(facts: Facts) -> list[Violation]:
    out = []
    for (group, plane_id), stack in facts.stacks.items():
        plane = facts.plane(plane_id)
        base, (low, high) = _page_base(plane, stack[0].stride, 0), _footprint(stack)
        if not P.null_page(base + low, base + high, plane.bytes):
            out.append(Violation("null_page", f"page 0 of {group} on plane {plane_id} (bytes {base + low:,}.."
                                              f"{base + high:,} of the slab) is not inside null parent 0 "
                                              f"(bytes 0..{plane.bytes:,})"))
    return out


def kernel_page(facts: Facts) -> list[Violation]:
    out = []
    for f in facts.fields:
        for k in f.kernels:
            where = f"field {f.id}: kernel {k.name} is handed pages of {k.tokens:,} tokens"
            if not P.kernel_block_multiple(k.tokens, k.block):
                out.append(Violation("kernel_page", f"{where}, not a multiple of its token block {k.block}"))
            if k.max_tokens is not None and not P.within_page_limit(k.tokens, k.max_tokens):
                out.append(Violation("kernel_page", f"{where}, past its limit of {k.max_tokens:,} tokens per page"))
            if k.power_of_two and not P.power_of_two_page(k.tokens):
                out.append(Violation("kernel_page", f"{where}, not a power of two as its source requires"))
            if f.tokens is not None and not P.tiles_page(k.tokens, f.tokens):
                out.append(Violation("kernel_page", f"{where}, which do not tile the field's {f.tokens:,}-token page"))
    return out


def consumer_stride(facts: Facts) -> list[Violation]:
    out = []
    for (group, plane), stack in facts.stacks.items():
        payload = sum(f.payload for f in stack)  # what a reader walking by payload steps by
        walkers = sorted({name for f in stack for name, walks in f.readers if walks == "payload"})
        for name in walkers:
            if not P.exact_stride(stack[0].stride, payload):
                out.append(Violation("consumer_stride", f"{name} walks the pages of {group} on plane {plane} by their "
                                     f"payload {payload:,} B, but the plan's stride is {stack[0].stride:,} B: page p "
                                     "is read at the wrong bytes for every p >= 1"))
    return out


CHECKS: dict[str, Callable[[Facts], list[Violation]]] = {
    "exact_stride": exact_stride,
    "padding_bound": padding_bound,
    "partition": partition,
    "no_overlap": no_overlap,
    "field_alignment": field_alignment,
    "in_bounds": in_bounds,
    "page_id_limit": page_id_limit,
    "null_page": null_page,
    "kernel_page": kernel_page,
    "consumer_stride": consumer_stride,
}


def violations(facts: Facts, properties: Iterable[str] = tuple(P.PROPERTIES)) -> list[Violation]:
    return [v for prop in properties for v in CHECKS[prop](facts)]


def affine_facts(documents: dict[int, dict]) -> Facts:
    """A plan an engine bound at several parent counts, as one plan for every N it allows.

    An engine's bind lays out (N + 1) x plane bytes per slab and 1 + N x K pages per group, so
    every N-dependent number is affine in N. That is checked at the bindings given, not assumed:
    two bindings fix each line and every other binding must lie on it, and every number that does
    not depend on N must be equal in all of them (the tokenspeed adapter binds at N = 1, 2, 3 and
    at N spread up to the largest the plan allows, so a cap or threshold in bind shows). Then N
    ranges over 1..max_parents symbolically."""
    if len(documents) < 3:
        raise ConfigError("an engine plan needs bindings at three or more parent counts to show it is affine in N")
    # The bindings differ only in N-dependent integers, which the line fit below checks, so the
    # schema is checked on the first one.
    ordered = sorted(documents.items())
    facts = {n: concrete_facts(doc, validated=i > 0) for i, (n, doc) in enumerate(ordered)}
    (n1, first), (n2, second) = list(facts.items())[:2]

    def line(where: str, at: Callable[..., int]) -> Affine:
        slope, rest = divmod(at(second) - at(first), n2 - n1)
        fit = Affine(slope, at(first) - slope * n1)
        for n, f in facts.items():
            if rest or fit.per_parent * n + fit.fixed != at(f):
                raise ConfigError(f"engine plan: {where} is {at(f):,} at N={n}, not affine in N "
                                  f"({at(first):,} at N={n1}, {at(second):,} at N={n2})")
        return fit

    for n, f in facts.items():
        if (f.parent_bytes, f.alignment, f.max_padding, f.fields) != (
                first.parent_bytes, first.alignment, first.max_padding, first.fields):
            raise ConfigError(f"engine plan: parent, alignment, bound or fields differ between N={n1} and N={n}")
        if [(p.id, p.bytes, p.alignment) for p in f.planes] != [(p.id, p.bytes, p.alignment) for p in first.planes]:
            raise ConfigError(f"engine plan: plane order, bytes or alignment differ between N={n1} and N={n}")
    planes = tuple(
        PlaneFact(p.id, p.bytes, line(f"planes[{p.id}].arena_offset", lambda f, i=i: f.planes[i].arena_offset.fixed),
                  p.alignment)
        for i, p in enumerate(first.planes))
    groups = tuple(
        GroupFact(g.id, g.packing, line(f"groups[{g.id}].page_count", lambda f, i=i: f.groups[i].page_count.fixed))
        for i, g in enumerate(first.groups))
    if len({f.arena_bytes is None for f in facts.values()}) > 1:
        raise ConfigError("engine plan: arena_bytes is given at some parent counts and not at others")
    arena = None if first.arena_bytes is None else line(
        "arena_bytes", lambda f: f.arena_bytes.fixed if f.arena_bytes is not None else 0)
    if 2 * first.parent_bytes > P.BYTES_MAX:
        raise ConfigError(f"engine plan: parent {first.parent_bytes:,} B leaves no room for two parents below 2^63 B")
    top = P.max_parents(first.parent_bytes, [g.packing for g in groups])
    return Facts(first.parent_bytes, first.alignment, first.max_padding, planes, groups, first.fields, (1, top),
                 arena)
