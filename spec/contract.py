"""The packer contract and the Kimi-K3 recipe, re-derived from their text (docs/contract.md,
items a-g and §4), never from impl: a proof built on impl's own arithmetic would prove impl equals itself.

`recipe_layout` says which groups, fields and planes a (model, tp, dtype) point needs;
`plan_for` places them for one packing and returns the plan in the `verify check` schema
(spec/check.py), which is what every property reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import lcm, prod
from typing import Any

from kvproof.spec import properties as P
from kvproof.spec.catalog import CACHE_DTYPES, ConfigError, ModelGeometry

# Element sizes of the dtype names a plan may use (the engine's storage dtypes).
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
CACHE_STORAGE = {"fp8": "uint8", "bf16": "bfloat16"}  # fp8 latents are stored as raw bytes
GRANULARITY = 128  # tokens per MLA page
ALIGNMENT = 256
MAX_PADDING = Fraction(1, 4)
STRIDE_ALIGNMENT = 16  # TMA descriptors need 16-byte page strides
PACKING_LIMIT = 256  # the largest packing `search` and the synthesizer consider
FULL = "full_attention"
# Draft layers (docs/contract.md#draft-layers): tokenspeed forces a K3 DSpark draft's cache to bf16.
DRAFT_DTYPE = "bf16"
DRAFT_LIMIT = 64  # more draft layers than any drafter runs; keeps a point's plan small


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


@dataclass(frozen=True)
class Field:
    id: str
    group: str
    plane: str
    shape: tuple[int, ...]
    dtype: str
    exact_stride: bool
    stride_alignment: int = STRIDE_ALIGNMENT

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def payload_bytes(self) -> int:
        return prod(self.shape) * self.itemsize


@dataclass(frozen=True)
class Layout:
    """The fields of one point with their in-page offsets; everything but the packing."""

    groups: tuple[str, ...]
    planes: tuple[str, ...]  # in arena order
    fields: tuple[Field, ...]
    offset_bytes: dict[str, int]  # field id -> bytes from the start of its page (item a)
    extent: dict[tuple[str, str], int]  # (plane, group) -> bytes of the group's page there
    state: int  # one KDA layer's state bytes per request, offsets rounded (0 for MLA-only)
    page: int  # one target MLA page: granularity x latent dim x element size
    drafts: int = 0  # draft MLA layers, each on a plane of its own in full_attention

    @property
    def engine_bound(self) -> Fraction | None:
        """The padding bound the engine itself checks: none (None) once a draft layer is in."""
        return None if self.drafts else MAX_PADDING

    def checked_bound(self, accepted: Fraction | None) -> Fraction | None:
        """The bound padding_bound checks: the user's `accepted` one (None: none) where the
        engine checks none, else the tighter of the two (a plan the engine refuses to boot
        fails whatever the user accepts)."""
        return checked_bound(self.engine_bound, accepted)

    def raw(self, group: str) -> int:
        return sum(f.payload_bytes for f in self.fields if f.group == group)


def _state_fields(model: ModelGeometry, tp: int, layer: int, group: str, plane: str) -> tuple[Field, ...]:
    heads = model.kda_heads // tp
    return (
        Field(f"layer.{layer}.conv_state", group, plane,
              (3 * heads * model.kda_head_dim, model.conv_kernel - 1), "bfloat16", False),
        Field(f"layer.{layer}.recurrent_state", group, plane,
              (heads, model.kda_head_dim, model.kda_head_dim), "float32", False),
    )


def state_group_sizes(n_kda: int, n_mla: int) -> list[int]:
    """The fewest groups with at most n_mla layers each, sizes as even as possible, larger first."""
    count = -(-n_kda // n_mla)
    base, extra = divmod(n_kda, count)
    return [base + 1] * extra + [base] * (count - extra)


@dataclass(frozen=True)
class Placed:
    """Where the fields of one (plane, group) sit in a page (item a)."""

    offset_bytes: dict[str, int]  # field id -> bytes from the start of the page
    end_bytes: int  # bytes from the start of the page to the end of its last field


def _place(fields: list[Field]) -> Placed:
    """Item a: fields of one (plane, group) in id order, each offset rounded up to its element size."""
    offsets, end = {}, 0
    for f in sorted(fields, key=lambda f: f.id):
        offsets[f.id] = align_up(end, f.itemsize)
        end = offsets[f.id] + f.payload_bytes
    return Placed(offsets, end)


def recipe_layout(model: ModelGeometry, tp: int, dtype: str, drafts: int = 0,
                  draft_dtype: str = DRAFT_DTYPE) -> Layout:
    model.check_tp(tp)
    for name, value in (("cache dtype", dtype), ("draft cache dtype", draft_dtype)):
        if value not in CACHE_DTYPES:
            raise ConfigError(f"unknown {name} {value!r}; choose one of {', '.join(CACHE_DTYPES)}")
    if not 0 <= drafts <= DRAFT_LIMIT:
        raise ConfigError(f"draft layer count {drafts} outside 0..{DRAFT_LIMIT}")
    # Draft j continues the layer numbering and takes the next full_attention plane.
    mla = [(layer, dtype) for layer in model.mla_layers]
    mla += [(model.num_layers + 1 + j, draft_dtype) for j in range(drafts)]
    fields = [
        Field(f"layer.{layer}.latent_kv", FULL, f"slot.{n}", (GRANULARITY, 1, model.latent_dim),
              CACHE_STORAGE[cache], True)
        for n, (layer, cache) in enumerate(mla)
    ]
    groups = [FULL]
    kda = list(model.kda_layers)
    for i, size in enumerate(state_group_sizes(len(kda), len(model.mla_layers)) if kda else []):
        group, chunk, kda = f"linear_attention_{i}", kda[:size], kda[size:]
        groups.append(group)
        for n, layer in enumerate(chunk):
            fields += _state_fields(model, tp, layer, group, f"slot.{n}")
    planes = tuple(dict.fromkeys(f.plane for f in fields))
    stacks: dict[tuple[str, str], list[Field]] = {}
    for f in fields:
        stacks.setdefault((f.plane, f.group), []).append(f)
    offsets: dict[str, int] = {}
    extent: dict[tuple[str, str], int] = {}
    for key, stack in stacks.items():
        placed = _place(stack)
        offsets |= placed.offset_bytes
        extent[key] = placed.end_bytes
    state = _place(list(_state_fields(model, tp, 0, "", ""))).end_bytes if model.hybrid else 0
    page = fields[0].payload_bytes
    return Layout(tuple(groups), planes, tuple(fields), offsets, extent, state, page, drafts)


def checked_bound(engine: Fraction | None, accepted: Fraction | None) -> Fraction | None:
    """The tighter of the engine's padding bound and the one the user accepts; None for none."""
    bounds = [b for b in (engine, accepted) if b is not None]
    return min(bounds) if bounds else None


def plan_for(layout: Layout, packing: dict[str, int], bound: Fraction | None = MAX_PADDING) -> dict:
    """Items b-e for one packing: the plan in the `verify check` schema, without num_parents
    (the prover keeps the parent count symbolic). `bound` is the padding bound checked (None:
    none, which the document states as null)."""
    planes: list[dict[str, Any]] = []
    cursor = 0
    on_plane: dict[str, list[Field]] = {}
    for f in layout.fields:
        on_plane.setdefault(f.plane, []).append(f)
    for plane in layout.planes:
        users = [g for g in layout.groups if (plane, g) in layout.extent]
        here = on_plane[plane]
        need = max(packing[g] * layout.extent[(plane, g)] for g in users)
        unit = lcm(ALIGNMENT, *(packing[f.group] * f.itemsize for f in here),
                   *(packing[f.group] * f.stride_alignment for f in here))
        size = align_up(need, unit)
        planes.append({"id": plane, "bytes": size, "offset": cursor})
        cursor += size
    parent = align_up(cursor, lcm(ALIGNMENT, *packing.values()))
    plane_bytes = {p["id"]: p["bytes"] for p in planes}
    return {
        "parent_bytes": parent,
        "alignment": ALIGNMENT,
        "max_padding": None if bound is None else float(bound),
        "planes": planes,
        "groups": [{"id": g, "packing": packing[g]} for g in layout.groups],
        "fields": [
            {"id": f.id, "group": f.group, "plane": f.plane, "shape": list(f.shape), "dtype": f.dtype,
             "offset": layout.offset_bytes[f.id], "stride": plane_bytes[f.plane] // packing[f.group],
             "exact_stride": f.exact_stride}
            for f in layout.fields
        ],
    }


def bound(plan: dict, num_parents: int) -> dict:
    """Item f: the plan bound to N parents (arena offsets of the plane slabs, page counts)."""
    return plan | {
        "num_parents": num_parents,
        "planes": [{"id": p["id"], "bytes": p["bytes"], "arena_offset": (num_parents + 1) * p["offset"]}
                   for p in plan["planes"]],
        "groups": [g | {"page_count": 1 + num_parents * g["packing"]} for g in plan["groups"]],
    }


def padding(plan: dict, layout: Layout) -> dict[str, Fraction]:
    return {g["id"]: P.padding(plan["parent_bytes"], g["packing"], layout.raw(g["id"])) for g in plan["groups"]}
