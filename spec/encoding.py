"""Each named property of a plan as a search for a violating witness.

The checks read a plan's facts (spec/facts.py), concrete or symbolic alike. Page ids are always
symbolic, so `no_overlap` and `in_bounds` are proved for every page and every N at once; every
term is linear over z3 Int, which is why a whole model proves in well under a second.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from math import lcm
from typing import Any

from kvproof.spec import properties as P
from kvproof.spec.facts import OTHER, PAGE, Affine, EndFact, Facts, FieldFact, GroupFact, N, PlaneFact
from kvproof.spec.smt import Env, Term, all_of, any_of, lift, negate


@dataclass(frozen=True)
class Violation:
    property: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"property": self.property, "message": self.message}


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
        if f.exact_stride and not P.exact_stride(f.page_stride_bytes, f.payload_bytes):
            plane, k = facts.plane(f.plane), facts.group(f.group).packing
            out.append(Violation("exact_stride",
                f"field {f.id} needs stride {f.payload_bytes:,} B (its payload) but gets {f.page_stride_bytes:,} B "
                f"(plane {f.plane} {plane.plane_bytes:,} B / packing {k})"))
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
    total = sum(p.plane_bytes for p in facts.planes)
    if total > facts.parent_bytes:
        out.append(Violation("partition", f"planes take {total:,} B, more than the parent's {facts.parent_bytes:,} B"))
    for p in facts.planes:
        here = facts.on_plane[p.id]
        unit = lcm(facts.alignment, *(facts.group(f.group).packing * f.itemsize for f in here))
        if not P.divides(unit, p.plane_bytes):
            out.append(Violation("partition", f"plane {p.id} of {p.plane_bytes:,} B is not a multiple of {unit} "
                                              "(alignment and every packing x element size on it)"))
        if p.alignment is not None and not P.divides(p.alignment, p.plane_bytes):
            out.append(Violation("partition", f"plane {p.id} of {p.plane_bytes:,} B is not a multiple of its "
                                              f"declared alignment {p.alignment}"))
    for f in facts.fields:
        k, plane = facts.group(f.group).packing, facts.plane(f.plane)
        if f.page_stride_bytes * k != plane.plane_bytes:
            out.append(Violation("partition", f"field {f.id}: stride {f.page_stride_bytes:,} B x packing {k} != plane "
                                              f"{f.plane} {plane.plane_bytes:,} B"))
    return out + _witnesses(facts, "partition", _slab_alignment(facts))


def _slab_alignment(facts: Facts) -> Iterable[Check]:
    """Every plane slab starts on the plan's alignment, for every N (the arena base is aligned)."""
    for p in facts.planes:
        start, a = p.arena_offset_bytes, facts.alignment
        if P.divides(a, start.per_parent) and P.divides(a, start.fixed):
            continue
        yield (negate(P.divides(a, lift(start.term()))),
               lambda m, p=p, start=start: f"plane {p.id}'s slab starts at arena byte "
               f"{_val(m, start.term()):,}, not a multiple of alignment {facts.alignment} (N={_val(m, N):,})")


def field_alignment(facts: Facts) -> list[Violation]:
    return [Violation("field_alignment", f"field {f.id} ({f.dtype}) starts at page byte {f.offset_bytes:,}, not a "
                                         f"multiple of its element size {f.itemsize}")
            for f in facts.fields if not P.field_aligned(f.offset_bytes, f.itemsize)]


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


def _page_base(plane: PlaneFact, page_stride_bytes: int, page: Any) -> Any:
    """Bytes from the start of the plane slab to a page (item f, properties.page_offset)."""
    return P.page_offset(0, plane.plane_bytes, page_stride_bytes, page, 0)


def _footprint(stack: list[FieldFact]) -> tuple[int, int]:
    """The bytes of a page that its fields on one plane cover, from the first to the last."""
    return min(f.offset_bytes for f in stack), max(f.offset_bytes + f.payload_bytes for f in stack)


def in_bounds(facts: Facts) -> list[Violation]:
    if 2 * facts.parent_bytes > P.BYTES_MAX:
        return [Violation("in_bounds", f"parent {facts.parent_bytes:,} B leaves no room for two parents below 2^63 B")]
    arena = facts.arena.term()
    checks: dict[tuple, Check] = {
        ("arena",): (lift(arena) > P.BYTES_MAX,
                     lambda m: f"arena of {_val(m, arena):,} B at N={_val(m, N):,} exceeds 2^63 - 1"),
    }
    for p in facts.planes:
        start, end = p.arena_offset_bytes, p.arena_offset_bytes + p.slab
        if ("slab", start, end) not in checks:
            checks["slab", start, end] = (
                any_of(lift(start.term()) < 0, lift(end.term()) > arena),
                lambda m, p=p, start=start, end=end: f"plane {p.id}'s slab (arena bytes "
                f"{_val(m, start.term()):,}..{_val(m, end.term()):,}) leaves the arena of {_val(m, arena):,} B "
                f"at N={_val(m, N):,}",
            )
    for (group, plane_id), stack in facts.stacks.items():
        g, plane = facts.group(group), facts.plane(plane_id)
        page_stride_bytes, (low, high) = stack[0].page_stride_bytes, _footprint(stack)
        key = (g.packing, g.page_count, plane.plane_bytes, page_stride_bytes, low, high)
        if key in checks:
            continue
        base = _page_base(plane, page_stride_bytes, PAGE)
        parent = P.parent_of(PAGE, g.packing)
        valid = all_of(PAGE >= 0, g.page_count.term() > PAGE)
        where = f"group {group} on plane {plane_id} (stride {page_stride_bytes:,} B, page bytes {low:,}..{high:,})"
        checks[key] = (
            all_of(valid, any_of(base + low < 0, base + high > plane.slab.term())),
            lambda m, where=where, base=base: f"{where}: page {_val(m, PAGE):,} at slab bytes "
            f"{_val(m, base):,} leaves the slab of N={_val(m, N):,}+1 parents",
        )
        checks[(*key, "parent")] = (
            all_of(valid, PAGE >= 1,
                   any_of(base + low < parent * plane.plane_bytes, base + high > (parent + 1) * plane.plane_bytes)),
            lambda m, where=where, parent=parent: f"{where}: page {_val(m, PAGE):,} is not inside parent "
            f"{_val(m, parent):,} = (p + K - 1) // K",
        )
    return _witnesses(facts, "in_bounds", checks.values())


# Fields a stack holds past which no_overlap first asks whether two pages' footprints can meet at all: one
# query in place of a query per pair of fields (a block-outermost plane holds every layer's fields, hundreds
# of pairs); with fewer, the pairs are about as few queries as that one.
HULL_FROM = 2


def _hulls_apart(facts: Facts, plane: PlaneFact, g: GroupFact, stack: list[FieldFact]) -> bool:
    """Whether the footprints of two distinct pages of a stack whose fields share one stride never meet,
    for any N: then no field of one page shares a byte with a field of another. False where the strides
    differ, or the footprints can meet (the pairs then say which fields do)."""
    strides = {f.page_stride_bytes for f in stack}
    if len(strides) != 1:
        return False
    (page_stride_bytes,), (low, high) = strides, _footprint(stack)
    start_p, start_q = _page_base(plane, page_stride_bytes, PAGE), _page_base(plane, page_stride_bytes, OTHER)
    return facts.witness(all_of(PAGE >= 0, PAGE < OTHER, g.page_count.term() > OTHER,
                                start_p + low < start_q + high, start_q + low < start_p + high)) is None


def no_overlap(facts: Facts) -> list[Violation]:
    out = []
    for (group, _), stack in facts.stacks.items():
        ordered = sorted(stack, key=lambda f: f.offset_bytes)
        for a, b in itertools.pairwise(ordered):
            if a.offset_bytes + a.payload_bytes > b.offset_bytes:
                out.append(Violation("no_overlap", f"fields {a.id} ({a.offset_bytes:,}+{a.payload_bytes:,} B) and "
                                                   f"{b.id} (from {b.offset_bytes:,}) of one page of {group} overlap"))
    checks: dict[tuple, Check] = {}
    for p, q in itertools.pairwise(facts.planes):
        gap = (q.arena_offset_bytes + Affine(-p.arena_offset_bytes.per_parent, -p.arena_offset_bytes.fixed)
               + Affine(-p.plane_bytes, -p.plane_bytes))
        if ("slab", gap) not in checks:
            checks["slab", gap] = (
                lift(gap.term()) < 0,
                lambda m, p=p, q=q: f"slab of plane {p.id} runs into plane {q.id}'s slab at N={_val(m, N):,}",
            )
    for (group, plane_id), stack in facts.stacks.items():
        g, plane = facts.group(group), facts.plane(plane_id)
        if len(stack) > HULL_FROM and _hulls_apart(facts, plane, g, stack):
            continue  # no two pages' footprints meet, so no two of their fields do
        for a in stack:
            for b in stack:
                # the plane's bytes and base cancel out of every pair: only relative offsets matter
                key = (g.page_count, a.page_stride_bytes, b.page_stride_bytes, b.offset_bytes - a.offset_bytes,
                       a.payload_bytes, b.payload_bytes)
                if key in checks:
                    continue
                count = g.page_count.term()
                start_a = _page_base(plane, a.page_stride_bytes, PAGE) + a.offset_bytes
                start_b = _page_base(plane, b.page_stride_bytes, OTHER) + b.offset_bytes
                checks[key] = (
                    # p < q covers every pair of distinct pages: (a, b) and (b, a) are both checked
                    all_of(PAGE >= 0, PAGE < OTHER, count > OTHER,
                           start_a < start_b + b.payload_bytes, start_b < start_a + a.payload_bytes),
                    lambda m, a=a, b=b, group=group, plane_id=plane_id:
                        f"plane {plane_id}: {a.id} of page {_val(m, PAGE):,} and {b.id} of page "
                        f"{_val(m, OTHER):,} of {group} share bytes (strides {a.page_stride_bytes:,}/"
                        f"{b.page_stride_bytes:,} B, N={_val(m, N):,})",
                )
    return out + _witnesses(facts, "no_overlap", checks.values())


def null_page(facts: Facts) -> list[Violation]:
    out = []
    for (group, plane_id), stack in facts.stacks.items():
        plane = facts.plane(plane_id)
        base, (low, high) = _page_base(plane, stack[0].page_stride_bytes, 0), _footprint(stack)
        if not P.null_page(base + low, base + high, plane.plane_bytes):
            out.append(Violation("null_page", f"page 0 of {group} on plane {plane_id} (bytes {base + low:,}.."
                                              f"{base + high:,} of the slab) is not inside null parent 0 "
                                              f"(bytes 0..{plane.plane_bytes:,})"))
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
        stride = stack[0].page_stride_bytes
        payload_bytes = sum(f.payload_bytes for f in stack)  # what a reader walking by payload steps by
        walkers = sorted({name for f in stack for name, walks, _ in f.readers if walks == "payload"})
        for name in walkers:
            if not P.exact_stride(stride, payload_bytes):
                out.append(Violation("consumer_stride", f"{name} walks the pages of {group} on plane {plane} by their "
                                     f"payload {payload_bytes:,} B, but the plan's stride is {stride:,} B: page p is "
                                     "read at the wrong bytes for every p >= 1"))
        for f in stack:
            for name, walks, item in f.readers:
                if walks == "item" and item is not None and not P.exact_stride(stride, item):
                    out.append(Violation("consumer_stride", f"{name} walks the pages of field {f.id} by the item "
                                         f"length it is given, {item:,} B, but the plan's stride is {stride:,} B: "
                                         "page p is read at the wrong bytes for every p >= 1"))
    return out


def entry_alignment(facts: Facts) -> list[Violation]:
    out = []
    for f in facts.fields:
        if f.aligned is None:
            continue
        entry, row, rows = f.aligned
        for what, value, unit, name in (("stride", f.page_stride_bytes, entry, "entry"),
                                        ("offset", f.offset_bytes, row, "row"),
                                        ("row", f.payload_bytes // rows, row, "row")):
            if not P.divides(unit, value):
                out.append(Violation("entry_alignment", f"field {f.id}: its {what} of {value:,} B is not a multiple of "
                                     f"the {name} alignment {unit} B its layout states"))
    return out


def _fronts(end: EndFact, own: Any, other: Any) -> tuple[Any, Any]:
    """(the up front, the down front) with this end at watermark `own` and the other at `other`."""
    return P.fronts(end.grows, own, end.own.page_bytes, other, end.peer.page_bytes)


def front_crossing(g: GroupFact) -> Term:
    """A violation of fronts_never_cross by the end `g`: the other end at a watermark q of one of the end's
    runs, and this end where its allocations then reach, p, past the other's front."""
    assert g.end is not None
    return any_of(*(all_of(r.peer_from <= OTHER, r.peer_to >= OTHER, r.own == PAGE,
                           negate(P.fronts_apart(*_fronts(g.end, PAGE, OTHER)))) for r in g.end.reach))


def front_message(g: GroupFact, m: Env) -> str:
    """What a witness of front_crossing(g) says: the two watermarks, the two fronts and their overlap."""
    assert g.end is not None
    end, w, v = g.end, _val(m, PAGE), _val(m, OTHER)
    up, down = _fronts(end, w, v)
    peer = "down" if end.grows == "up" else "up"
    return (f"group {g.id} grows {end.grows} ({end.own.page_bytes:,} B pages): with the end growing {peer} at "
            f"watermark {v:,}, its allocations reach watermark {w:,}, and the up front {up:,} passes the down "
            f"front {down:,}: {up - down:,} B of both ends' pages overlap")


def fronts_never_cross(facts: Facts) -> list[Violation]:
    checks = [(front_crossing(g), lambda m, g=g: front_message(g, m)) for g in facts.groups if g.end is not None]
    return _witnesses(facts, "fronts_never_cross", checks)


def sink_page(facts: Facts) -> list[Violation]:
    out = []
    buffer = _val({}, facts.arena.term()) if facts.arena.per_parent == 0 else None
    for g in facts.groups:
        if g.end is None:
            continue
        own, sink = g.end.own, g.end.sink_bytes
        first = own.min_page * own.page_bytes
        problems = [
            (P.never_handed_out(0, own.min_page), f"its allocator hands out from page {own.min_page}, page 0 included"),
            (P.within(own.page_bytes, sink), f"its page 0 (bytes 0..{own.page_bytes:,}) leaves the {sink:,} B sink"),
            (buffer is None or P.within(sink, buffer), f"the {sink:,} B sink leaves the {buffer or 0:,} B buffer"),
            (P.within(sink, first), f"its first page handed out, {own.min_page:,}, starts at byte {first:,}, "
                                    f"inside the {sink:,} B sink"),
        ]
        out += [Violation("sink_page", f"group {g.id}: {message}") for holds, message in problems if not holds]
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
    "entry_alignment": entry_alignment,
    "fronts_never_cross": fronts_never_cross,
    "sink_page": sink_page,
}


def violations(facts: Facts, properties: Iterable[str] = tuple(P.PROPERTIES)) -> list[Violation]:
    return [v for prop in properties for v in CHECKS[prop](facts)]
