"""Property tests of the packer contract over random small geometries.

Each property is shown to bite: the same test run under a seeded fault fails.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from bites import fails_under
from hypothesis import given
from hypothesis import strategies as st

from kvproof.impl.packer import DTYPE_BYTES, FieldSpec, GroupSpec, pack

PLANES = ("a", "b", "c")


@st.composite
def geometries(draw):
    """1-3 groups of 1-4 fields over up to 3 planes, random dtypes and shapes, some pinned packings."""
    groups = []
    for g in range(draw(st.integers(1, 3))):
        fields = tuple(
            FieldSpec(
                id=f"g{g}.f{i}",
                plane=draw(st.sampled_from(PLANES)),
                shape=tuple(draw(st.lists(st.integers(1, 40), min_size=1, max_size=3))),
                dtype=draw(st.sampled_from(sorted(DTYPE_BYTES))),
                stride_alignment=draw(st.sampled_from([1, 2, 16])),
            )
            for i in range(draw(st.integers(1, 4)))
        )
        groups.append(GroupSpec(f"group{g}", fields))
    pins = draw(st.dictionaries(st.sampled_from([g.id for g in groups]), st.integers(1, 7)))
    alignment = draw(st.sampled_from([1, 64, 256]))
    plan = pack(groups, granularity=16, packings=pins, alignment=alignment, max_padding=Fraction(10**6))
    return plan, draw(st.integers(1, 4))


@given(geometries())
def test_field_ranges_inside_a_page_never_overlap(case):
    plan, _ = case
    for g in plan.groups:
        for plane in {f.plane for f in plan.fields_of(g.id)}:
            on_plane = sorted((f for f in plan.fields_of(g.id) if f.plane == plane), key=lambda f: f.offset_bytes)
            for f in on_plane:
                assert f.offset_bytes % f.itemsize == 0, f"{f.id} offset {f.offset_bytes} not aligned to {f.itemsize}"
            for a, b in itertools.pairwise(on_plane):
                assert a.offset_bytes + a.payload_bytes <= b.offset_bytes, f"{a.id} overlaps {b.id}"
            last = on_plane[-1]
            assert last.offset_bytes + last.payload_bytes <= last.page_stride_bytes, (
                f"{last.id} spills into the next page")


@given(geometries())
def test_stride_times_packing_is_the_plane(case):
    plan, _ = case
    for f in plan.fields:
        k = plan.group(f.group).packing
        assert f.page_stride_bytes * k == plan.plane(f.plane).plane_bytes, (
            f"{f.id}: {f.page_stride_bytes} x {k} != plane")
        assert plan.parent_bytes % k == 0
    for p in plan.planes:
        assert p.plane_bytes % p.alignment == 0 and p.alignment % plan.alignment == 0
    assert plan.parent_bytes >= sum(p.plane_bytes for p in plan.planes)


@given(geometries(), st.data())
def test_every_page_inside_its_slab_and_parent(case, data):
    plan, n = case
    binding = plan.bind(n)
    for f in plan.fields:
        plane = plan.plane(f.plane)
        slab = binding.plane_offset_bytes(f.plane)
        assert slab + (n + 1) * plane.plane_bytes <= binding.arena_bytes
        last = binding.page_count(f.group) - 1
        for page in {0, 1, last, data.draw(st.integers(0, last), label="page")}:
            start = binding.offset_bytes(f.id, page)
            parent = binding.parent_of(f.group, page)
            assert 0 <= parent <= n
            # The page lies inside its parent's slice of the plane slab.
            assert slab + parent * plane.plane_bytes <= start, f"{f.id} page {page} before parent {parent}"
            end = slab + (parent + 1) * plane.plane_bytes
            assert start + f.payload_bytes <= end, f"{f.id} page {page} past parent {parent}"


@given(geometries())
def test_page_zero_lives_in_the_null_parent(case):
    plan, n = case
    binding = plan.bind(n)
    for f in plan.fields:
        assert binding.parent_of(f.group, 0) == 0
        start = binding.offset_bytes(f.id, 0)
        assert start + f.payload_bytes <= binding.plane_offset_bytes(f.plane) + plan.plane(f.plane).plane_bytes
        if binding.page_count(f.group) > 1:
            assert binding.offset_bytes(f.id, 1) >= (
                binding.plane_offset_bytes(f.plane) + plan.plane(f.plane).plane_bytes)


@pytest.mark.parametrize(
    ("test", "fault"),
    [
        (test_field_ranges_inside_a_page_never_overlap, "field_end_in_elements"),
        (test_stride_times_packing_is_the_plane, "stride_in_elements"),
        (test_every_page_inside_its_slab_and_parent, "offset_skips_null_slot"),
        (test_page_zero_lives_in_the_null_parent, "offset_skips_null_slot"),
    ],
)
def test_each_property_bites(test, fault):
    fails_under(fault, test)
