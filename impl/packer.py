"""The production packer: pure integer geometry, no torch.

An arena is a row of equal-size *parents*. A parent is cut into *planes*; each *group* of layers
puts K_g pages (its *packing*) into every plane it uses, so one parent serves K_g pages of
whichever group owns it. A group's *fields* (one per layer and tensor) sit at fixed offsets
inside a page; a field's page *stride* is plane bytes / K_g.

Different groups share a plane's bytes on purpose: a parent belongs to one group at a time, so
the plane only has to be as large as the largest K_g x (group bytes on that plane).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from math import lcm, prod

from kvproof.impl import faults
from kvproof.spec import properties as P

faults.declare({
    "offset_skips_null_slot": "page offsets forget that page 0 is the null parent's last slot",
    "field_end_in_elements": "a page's next field starts after the previous one's elements, not bytes",
    "field_offset_unrounded": "a page's fields are laid end to end: offsets not rounded up to the element size",
    "stride_in_elements": "a field's page stride is computed in elements, not bytes",
})

DTYPE_BYTES: dict[str, int] = {
    "uint8": 1,
    "float8_e4m3fn": 1,
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "int32": 4,
    "int64": 8,
    "int8": 1,
    "float8_e5m2": 1,
    "float8_e8m0fnu": 1,
    "float64": 8,
}


class PlanError(ValueError):
    """Input the packer cannot plan at all (as opposed to a plan it rejects)."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def align_up(value: int, alignment: int) -> int:
    return cdiv(value, alignment) * alignment


@dataclass(frozen=True)
class FieldSpec:
    """One tensor per page: a layer's latent rows, conv state or recurrent state."""

    id: str
    plane: str
    shape: tuple[int, ...]
    dtype: str
    exact_stride: bool = False
    stride_alignment: int = 1

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def payload_bytes(self) -> int:
        return prod(self.shape) * self.itemsize


@dataclass(frozen=True)
class GroupSpec:
    id: str
    fields: tuple[FieldSpec, ...]


@dataclass(frozen=True)
class PlacedField:
    id: str
    group: str
    plane: str
    shape: tuple[int, ...]
    dtype: str
    exact_stride: bool
    offset_bytes: int  # from the start of the page
    page_stride_bytes: int  # from one page to the next
    payload_bytes: int

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Plane:
    id: str
    plane_bytes: int
    alignment: int
    offset_bytes: int  # from the start of a parent (sum of the planes before it)


@dataclass(frozen=True)
class GroupPlan:
    id: str
    packing: int
    raw_bytes: int  # payload of every field of the group: what one page really needs
    padding: Fraction


@dataclass(frozen=True)
class Violation:
    property: str
    message: str


@dataclass(frozen=True)
class Plan:
    planes: tuple[Plane, ...]
    groups: tuple[GroupPlan, ...]
    fields: tuple[PlacedField, ...]
    parent_bytes: int
    alignment: int
    granularity: int
    max_padding: Fraction | None  # None: the engine checks no padding (a plan with draft layers)
    violations: tuple[Violation, ...] = ()
    _by_id: dict = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], Plane | GroupPlan | PlacedField] = {("plane", p.id): p for p in self.planes}
        index |= {("group", g.id): g for g in self.groups}
        index |= {("field", f.id): f for f in self.fields}
        object.__setattr__(self, "_by_id", index)

    @property
    def accepted(self) -> bool:
        return not self.violations

    @property
    def packing(self) -> dict[str, int]:
        return {g.id: g.packing for g in self.groups}

    @property
    def max_parents(self) -> int:
        return P.max_parents(self.parent_bytes, [g.packing for g in self.groups])

    def plane(self, plane_id: str) -> Plane:
        return self._by_id[("plane", plane_id)]

    def group(self, group_id: str) -> GroupPlan:
        return self._by_id[("group", group_id)]

    def field(self, field_id: str) -> PlacedField:
        return self._by_id[("field", field_id)]

    def fields_of(self, group_id: str) -> tuple[PlacedField, ...]:
        return tuple(f for f in self.fields if f.group == group_id)

    def bind(self, num_parents: int) -> Binding:
        if not self.accepted:
            raise PlanError("cannot bind a rejected plan: " + self.violations[0].message)
        if not 1 <= num_parents <= self.max_parents:
            raise PlanError(f"num_parents={num_parents} outside 1..{self.max_parents} for this plan")
        return Binding(self, num_parents)


@dataclass(frozen=True)
class Binding:
    """A plan bound to N usable parents plus the null parent at index 0.

    Each plane is one slab of (N + 1) x plane bytes; the slabs follow each other in plane order.
    """

    plan: Plan
    num_parents: int

    @property
    def arena_bytes(self) -> int:
        return (self.num_parents + 1) * sum(p.plane_bytes for p in self.plan.planes)

    def plane_offset_bytes(self, plane_id: str) -> int:
        return (self.num_parents + 1) * self.plan.plane(plane_id).offset_bytes

    def page_count(self, group_id: str) -> int:
        return 1 + self.num_parents * self.plan.group(group_id).packing

    def offset_bytes(self, field_id: str, page: int) -> int:
        f = self.plan.field(field_id)
        if not 0 <= page < self.page_count(f.group):
            raise IndexError(f"page {page} outside 0..{self.page_count(f.group) - 1} of {f.group}")
        plane = self.plan.plane(f.plane)
        if faults.active("offset_skips_null_slot"):
            return self.plane_offset_bytes(f.plane) + page * f.page_stride_bytes + f.offset_bytes
        return P.page_offset(self.plane_offset_bytes(f.plane), plane.plane_bytes, f.page_stride_bytes, page,
                             f.offset_bytes)

    def parent_of(self, group_id: str, page: int) -> int:
        return P.parent_of(page, self.plan.group(group_id).packing)


@dataclass(frozen=True)
class FieldOffsets:
    """Where the fields of one (plane, group) sit in a page."""

    offset_bytes: dict[str, int]  # field id -> bytes from the start of the page
    end_bytes: int  # bytes from the start of the page to the end of its last field


def field_offsets(fields: Sequence[FieldSpec]) -> FieldOffsets:
    """Offsets of one (plane, group)'s fields in id order, each rounded up to its element size."""
    offsets, end = {}, 0
    for f in sorted(fields, key=lambda f: f.id):
        offsets[f.id] = end if faults.active("field_offset_unrounded") else align_up(end, f.itemsize)
        end = offsets[f.id] + (prod(f.shape) if faults.active("field_end_in_elements") else f.payload_bytes)
    return FieldOffsets(offsets, end)


def derive_packings(group_bytes: Mapping[str, int], shared_exact: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Packings when nothing pins them: each group fills the largest group's bytes, then
    exact-stride groups that share a plane agree by their byte ratio (K_a x bytes_a == K_b x bytes_b).
    """
    largest = max(group_bytes.values())
    k = {g: max(1, largest // b) for g, b in group_bytes.items()}
    for _ in range(len(k)):
        for a, b in shared_exact:
            unit = lcm(group_bytes[a], group_bytes[b])
            target = align_up(max(k[a] * group_bytes[a], k[b] * group_bytes[b]), unit)
            k[a], k[b] = target // group_bytes[a], target // group_bytes[b]
    return k


def _validate(groups: Sequence[GroupSpec], alignment: int, granularity: int, max_padding: Fraction | None) -> None:
    if not groups:
        raise PlanError("no groups to plan")
    if alignment <= 0 or granularity <= 0:
        raise PlanError("alignment and granularity must be positive")
    if max_padding is not None and max_padding < 0:
        raise PlanError("max_padding must be >= 0")
    seen: set[str] = set()
    for g in groups:
        if not g.fields:
            raise PlanError(f"group {g.id} has no fields")
        if g.id in seen:
            raise PlanError(f"group id {g.id} appears twice")
        seen.add(g.id)
    field_ids = [f.id for g in groups for f in g.fields]
    if len(set(field_ids)) != len(field_ids):
        raise PlanError("field ids must be unique across groups")
    for f in (f for g in groups for f in g.fields):
        if f.dtype not in DTYPE_BYTES:
            raise PlanError(f"field {f.id}: unknown dtype {f.dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        if not f.shape or any(d <= 0 for d in f.shape) or f.stride_alignment <= 0:
            raise PlanError(f"field {f.id}: shape and stride_alignment must be positive")


def pack(
    groups: Sequence[GroupSpec],
    *,
    granularity: int,
    packings: Mapping[str, int] | None = None,
    alignment: int = 256,
    max_padding: Fraction | None = Fraction(1, 4),
) -> Plan:
    """Plan an arena for `groups`. Returns the plan with its violations; a plan with any
    violation is rejected (the engine would refuse to boot), but keeps every number that led
    there so the report can show why.
    """
    max_padding = None if max_padding is None else Fraction(max_padding)
    _validate(groups, alignment, granularity, max_padding)
    pinned = dict(packings or {})
    unknown = set(pinned) - {g.id for g in groups}
    if unknown:
        raise PlanError(f"pinned packing for unknown group {sorted(unknown)[0]}")
    if any(k <= 0 for k in pinned.values()):
        raise PlanError("pinned packings must be positive")

    plane_ids: list[str] = list(dict.fromkeys(f.plane for g in groups for f in g.fields))
    offsets: dict[str, int] = {}
    extent: dict[tuple[str, str], int] = {}  # (plane, group) -> bytes of the group's page there
    for g in groups:
        for plane_id in plane_ids:
            on_plane = [f for f in g.fields if f.plane == plane_id]
            if on_plane:
                page = field_offsets(on_plane)
                offsets |= page.offset_bytes
                extent[(plane_id, g.id)] = page.end_bytes

    group_bytes = {g.id: max(b for (_, gid), b in extent.items() if gid == g.id) for g in groups}
    exact_groups = {g.id for g in groups if any(f.exact_stride for f in g.fields)}
    shared_exact = [
        (a, b)
        for a in sorted(exact_groups)
        for b in sorted(exact_groups)
        if a < b and any((p, a) in extent and (p, b) in extent for p in plane_ids)
    ]
    k = derive_packings(group_bytes, shared_exact) | pinned

    planes: list[Plane] = []
    offset_bytes = 0
    for plane_id in plane_ids:
        users = [g for g in groups if (plane_id, g.id) in extent]
        need = max(k[g.id] * extent[(plane_id, g.id)] for g in users)
        align = lcm(
            alignment,
            *(k[g.id] * f.itemsize for g in users for f in g.fields if f.plane == plane_id),
            *(k[g.id] * f.stride_alignment for g in users for f in g.fields if f.plane == plane_id),
        )
        plane_bytes = align_up(need, align)
        planes.append(Plane(plane_id, plane_bytes, align, offset_bytes))
        offset_bytes += plane_bytes
    parent_bytes = align_up(offset_bytes, lcm(alignment, *k.values()))

    placed: list[PlacedField] = []
    plane_by_id = {p.id: p for p in planes}
    for g in groups:
        for f in g.fields:
            page_stride_bytes = plane_by_id[f.plane].plane_bytes // k[g.id]
            if faults.active("stride_in_elements"):
                page_stride_bytes //= f.itemsize
            placed.append(
                PlacedField(
                    f.id, g.id, f.plane, f.shape, f.dtype, f.exact_stride, offsets[f.id], page_stride_bytes,
                    f.payload_bytes,
                )
            )
    group_plans = tuple(
        GroupPlan(g.id, k[g.id], raw, P.padding(parent_bytes, k[g.id], raw))
        for g in groups
        for raw in [sum(f.payload_bytes for f in g.fields)]
    )
    plan = Plan(tuple(planes), group_plans, tuple(placed), parent_bytes, alignment, granularity, max_padding)
    return replace(plan, violations=tuple(boot_check(plan)))


def boot_check(plan: Plan) -> list[Violation]:
    """The checks an engine runs before it boots a plan, with the numbers and the fix."""
    out: list[Violation] = []
    for f in plan.fields:
        if f.exact_stride and not P.exact_stride(f.page_stride_bytes, f.payload_bytes):
            k, plane = plan.group(f.group).packing, plan.plane(f.plane)
            out.append(Violation(
                "exact_stride",
                f"field {f.id} needs stride {f.payload_bytes:,} B (its payload) but gets {f.page_stride_bytes:,} B "
                f"(plane {f.plane} {plane.plane_bytes:,} B / packing {k}); fix: pick a packing for {f.group} "
                f"with K x {f.payload_bytes:,} B >= every group's bytes on the plane (policy search)",
            ))
    for g in plan.groups:
        if plan.max_padding is not None and not P.padding_within(
            plan.parent_bytes, g.packing, g.raw_bytes, plan.max_padding
        ):
            out.append(Violation(
                "padding_bound",
                f"group {g.id} pads {float(g.padding):.3f} > bound {float(plan.max_padding):.3f} "
                f"(parent {plan.parent_bytes:,} B / packing {g.packing} per page for {g.raw_bytes:,} B "
                f"of payload); fix: choose packings in the groups' byte ratio (policy search)",
            ))
        if not P.divides(g.packing, plan.parent_bytes):
            out.append(Violation(
                "partition", f"packing {g.packing} of {g.id} does not divide parent {plan.parent_bytes:,} B"
            ))
    for p in plan.planes:
        if not P.divides(p.alignment, p.plane_bytes):
            out.append(Violation(
                "partition", f"plane {p.id} of {p.plane_bytes:,} B is not a multiple of its alignment {p.alignment}"
            ))
    if plan.parent_bytes > P.BYTES_MAX // 2:
        out.append(Violation(
            "in_bounds", f"parent {plan.parent_bytes:,} B leaves no room for two parents below 2^63 B"
        ))
    elif plan.max_parents < 1:
        out.append(Violation(
            "page_id_limit",
            f"packing {max(g.packing for g in plan.groups)} leaves no parent whose page ids fit int32",
        ))
    return out
