"""Reading a plan document into facts, with a one-line error for each key that is wrong.

The plan's structure is the published schema's (spec/schema.py); what relates keys to each other
(ids that resolve, page counts that match num_parents, bindings that are affine in N) is checked
here, as the facts are built.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from math import prod
from typing import Any

from kvproof.spec import properties as P
from kvproof.spec.catalog import ConfigError
from kvproof.spec.contract import DTYPE_BYTES
from kvproof.spec.facts import Affine, EndFact, Facts, FieldFact, Front, GroupFact, KernelFact, PlaneFact, Reach
from kvproof.spec.schema import validate

# no_overlap checks every pair of fields one group keeps on one plane (a pair costs about 25 kB
# and 1 ms of z3), so a plan may keep at most this many there; the recipes keep at most 2.
MAX_STACK = 64


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


@dataclass(frozen=True)
class StaticKeys:
    """What a plan says whatever N is, read and cross-checked. The planes and groups stay the
    plan's objects: a bound plan's arena offsets and page counts are read from them."""

    parent_bytes: int
    alignment: int
    max_padding: Fraction | None
    planes: list[dict]
    groups: list[dict]
    fields: tuple[FieldFact, ...]


def _static(plan: dict) -> StaticKeys:
    parent_bytes, alignment = _positive(plan, "parent_bytes", ""), _positive(plan, "alignment", "")
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
            tokens=f.get("tokens"), kernels=_kernels(f, at),
            readers=_readers(f, at), aligned=_aligned(f, at),
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
    return StaticKeys(parent_bytes, alignment, bound, planes, groups, tuple(fields))


def _kernels(field: dict, at: str) -> tuple[KernelFact, ...]:
    kernels = field.get("kernels", [])
    if kernels and "tokens" not in field:
        raise ConfigError(f"plan key '{at}kernels' needs '{at}tokens', the tokens per page the kernels split")
    return tuple(KernelFact(k["name"], k["tokens"], k["block"], k["max_tokens"], k.get("power_of_two", False))
                 for k in kernels)


def _aligned(field: dict, at: str) -> tuple[int, int, int] | None:
    """(entry, row, rows): a field stating its alignments holds `rows` rows of equal size."""
    if "aligned" not in field:
        return None
    stated = field["aligned"]
    rows = stated.get("rows", 1)
    if prod(field["shape"]) % rows:
        raise ConfigError(f"plan key '{at}aligned.rows': {rows} rows do not divide the field's shape {field['shape']}")
    return stated["entry"], stated["row"], rows


def _readers(field: dict, at: str) -> tuple[tuple[str, str, int | None], ...]:
    """(name, walks, item bytes): a reader walks by item_bytes exactly when it says it walks by item."""
    out = []
    for i, r in enumerate(field.get("readers", [])):
        if (r["walks"] == "item") != ("item_bytes" in r):
            raise ConfigError(f"plan key '{at}readers[{i}].item_bytes' is given exactly when walks is 'item'")
        out.append((r["name"], r["walks"], r.get("item_bytes")))
    return tuple(out)


def concrete_facts(plan: dict, validated: bool = False, static: StaticKeys | None = None) -> Facts:
    """A bound plan as `verify check` reads it: N is the plan's num_parents. Its structure is
    the published schema's (`validated`: the caller already checked that); what relates keys to
    each other is checked here (`static`: already read from a plan equal to this one but for N,
    _same_but_n)."""
    if not validated:
        validate(plan)
    static = _static(plan) if static is None else replace(static, planes=plan["planes"], groups=plan["groups"])
    n = _positive(plan, "num_parents", "")
    arena = [PlaneFact(p["id"], p["bytes"], Affine(0, _get(p, "arena_offset", int, f"planes[{i}].")),
                       p.get("alignment"))
             for i, p in enumerate(static.planes)]
    arena.sort(key=lambda p: p.arena_offset_bytes.fixed)
    bound_groups = tuple(_bound_group(g, i, n) for i, g in enumerate(static.groups))
    allocated = Affine(0, _positive(plan, "arena_bytes", "")) if "arena_bytes" in plan else None
    return Facts(static.parent_bytes, static.alignment, static.max_padding, tuple(arena), bound_groups, static.fields,
                 (n, n), allocated)


def _bound_group(group: dict, i: int, num_parents: int) -> GroupFact:
    """Pages 0..N x K: parent 0 (the null parent) holds only page 0, so the count is fixed by N."""
    given = _get(group, "page_count", int, f"groups[{i}].")
    expected = 1 + num_parents * group["packing"]
    if given != expected:
        raise ConfigError(f"plan key 'groups[{i}].page_count' of group {group['id']!r} is {given}; "
                          f"expected 1 + num_parents x packing = {expected}")
    return GroupFact(group["id"], group["packing"], Affine(0, given), _end(group.get("end"), f"groups[{i}]."))


def _end(end: dict | None, where: str) -> EndFact | None:
    if end is None:
        return None
    peer = end["peer"]
    fact = EndFact(end["grows"], Front(end["page_bytes"], end["min_page"], end["pages"]),
                   Front(peer["page_bytes"], peer["min_page"], peer["pages"]), end["sink_bytes"],
                   tuple(Reach(r["peer_from"], r["peer_to"], r["own"]) for r in end["reach"]))
    _check_reach(fact, f"{where}end.reach")
    return fact


def _watermarks(front: Front, grows: str) -> tuple[int, int, int]:
    """(lowest, highest, empty) watermark of an end: growing up its pages are [min_page, w), down (w, pages)."""
    if grows == "up":
        return front.min_page, front.pages, front.min_page
    return front.min_page - 1, front.pages - 1, front.pages - 1


def _check_reach(end: EndFact, where: str) -> None:
    """The runs are what fronts_never_cross quantifies over: contiguous, ascending, from (or to) the other end's
    empty watermark, within both ends' index spaces; a plan whose runs leave a gap would hold it vacuously there."""
    low, high, empty = _watermarks(end.peer, "down" if end.grows == "up" else "up")
    own_low, own_high, _ = _watermarks(end.own, end.grows)
    runs = end.reach
    for i, r in enumerate(runs):
        if not low <= r.peer_from <= r.peer_to <= high:
            raise ConfigError(f"plan key '{where}[{i}]': the other end's watermarks {r.peer_from}..{r.peer_to} are "
                              f"not an ascending run within its index space {low}..{high}")
        if not own_low <= r.own <= own_high:
            raise ConfigError(f"plan key '{where}[{i}].own' is {r.own}, outside the end's index space "
                              f"{own_low}..{own_high}")
        if i and r.peer_from != runs[i - 1].peer_to + 1:
            raise ConfigError(f"plan key '{where}[{i}].peer_from' is {r.peer_from}; expected "
                              f"{runs[i - 1].peer_to + 1}, the watermark after the run before it")
    if empty not in (runs[0].peer_from, runs[-1].peer_to):
        raise ConfigError(f"plan key '{where}': the runs {runs[0].peer_from}..{runs[-1].peer_to} do not reach the "
                          f"other end's empty watermark {empty}, where its allocations start")


# What a binding of a plan may change with N: the parent count, the arena, each plane's offset in it and each
# group's page count (the line fit of affine_facts checks how they change).
BOUND_BY_N = {"": ("num_parents", "arena_bytes"), "planes": ("arena_offset",), "groups": ("page_count",)}


def _same_but_n(plan: dict, other: dict) -> bool:
    """Whether two bindings are equal in every key but those BOUND_BY_N, so that what _static reads of one
    it reads of the other."""
    def rest(d: Any, keys: tuple[str, ...]) -> Any:
        return {k: v for k, v in d.items() if k not in keys} if isinstance(d, dict) else d

    def items(d: dict, key: str) -> Any:
        listed = d.get(key)
        return [rest(item, BOUND_BY_N[key]) for item in listed] if isinstance(listed, list) else listed

    return (rest(plan, (*BOUND_BY_N[""], "planes", "groups")) == rest(other, (*BOUND_BY_N[""], "planes", "groups"))
            and all(items(plan, key) == items(other, key) for key in ("planes", "groups")))


def symbolic_facts(plan: dict) -> Facts:
    """A plan derived from the contract, bound to a symbolic N in 1..max_parents (item f)."""
    static = _static(plan)
    parent_bytes = static.parent_bytes
    top = P.max_parents(parent_bytes, [g["packing"] for g in static.groups]) if 2 * parent_bytes <= P.BYTES_MAX else 0
    return Facts(
        parent_bytes, static.alignment, static.max_padding,
        tuple(PlaneFact(p["id"], p["bytes"], Affine(p["offset"], p["offset"])) for p in static.planes),
        tuple(GroupFact(g["id"], g["packing"], Affine(g["packing"], 1)) for g in static.groups),
        static.fields, (1, top),
    )


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
    validate(ordered[0][1])
    static = _static(ordered[0][1])
    facts = {n: concrete_facts(doc, validated=True, static=static if _same_but_n(doc, ordered[0][1]) else None)
             for n, doc in ordered}
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
        if [(p.id, p.plane_bytes, p.alignment) for p in f.planes] != [
                (p.id, p.plane_bytes, p.alignment) for p in first.planes]:
            raise ConfigError(f"engine plan: plane order, bytes or alignment differ between N={n1} and N={n}")
    planes = tuple(
        PlaneFact(p.id, p.plane_bytes,
                  line(f"planes[{p.id}].arena_offset", lambda f, i=i: f.planes[i].arena_offset_bytes.fixed),
                  p.alignment)
        for i, p in enumerate(first.planes))
    if any(g.end is not None for f in facts.values() for g in f.groups):
        # an end's pages are a floor of the buffer's bytes, not a line in N: such a plan is checked at each binding
        raise ConfigError("engine plan: a group's end is checked at each binding (verify check), not for every N")
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
