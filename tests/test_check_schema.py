"""`verify check` on malformed plan JSON: one line naming the key and exit 2, never a traceback
and never a verdict. Each case breaks one key of a plan emitted by `verify plan --emit-plan`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest
from bites import fails_under

from kvproof.cli.main import main
from kvproof.impl import faults
from kvproof.impl.export import plan_document
from kvproof.impl.packer import FieldSpec, GroupSpec, pack
from kvproof.spec.catalog import ConfigError
from kvproof.spec.check import check_plan
from kvproof.spec.schema import schema


@pytest.fixture(scope="module")
def base_plan(tmp_path_factory: pytest.TempPathFactory) -> dict:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    main(["plan", "--tp", "8", "--emit-plan", str(path), "--parents", "2"])
    return json.loads(path.read_text())


def _drop_group_fields(plan: dict) -> None:
    last = plan["groups"][-1]["id"]
    plan["fields"] = [f for f in plan["fields"] if f["group"] != last]


def _set(*path: str | int, value: object) -> Callable[[dict], None]:
    def mutate(plan: dict) -> None:
        node = plan
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value
    return mutate


def _copy_id(kind: str) -> Callable[[dict], None]:
    def mutate(plan: dict) -> None:
        plan[kind][1]["id"] = plan[kind][0]["id"]
    return mutate


# (case id, mutation, the key the one-line error must name)
CASES: list[tuple[str, Callable[[dict], None], str]] = [
    ("group_without_fields", _drop_group_fields, "'groups[3]'"),
    ("no_fields", _set("fields", value=[]), "'groups[0]'"),
    ("max_padding_nan", _set("max_padding", value=math.nan), "'max_padding'"),
    ("max_padding_infinity", _set("max_padding", value=math.inf), "'max_padding'"),
    ("max_padding_negative", _set("max_padding", value=-0.1), "'max_padding'"),
    ("max_padding_bool", _set("max_padding", value=True), "'max_padding'"),
    ("page_count_zero", _set("groups", 0, "page_count", value=0), "'groups[0].page_count'"),
    ("page_count_negative", _set("groups", 1, "page_count", value=-5), "'groups[1].page_count'"),
    ("page_count_one_more", _set("groups", 1, "page_count", value=4), "'groups[1].page_count'"),
    ("duplicate_field_id", lambda p: p["fields"][1].update(id=p["fields"][0]["id"]), "'fields[1].id'"),
    ("duplicate_plane_id", _copy_id("planes"), "'planes[1].id'"),
    ("duplicate_group_id", _copy_id("groups"), "'groups[1].id'"),
    ("undeclared_group", _set("fields", 0, "group", value="nowhere"), "'fields[0].group'"),
    ("undeclared_plane", _set("fields", 0, "plane", value="nowhere"), "'fields[0].plane'"),
    ("packing_zero", _set("groups", 0, "packing", value=0), "'groups[0].packing'"),
    ("packing_float", _set("groups", 0, "packing", value=12.0), "'groups[0].packing'"),
    ("plane_bytes_zero", _set("planes", 2, "bytes", value=0), "'planes[2].bytes'"),
    ("num_parents_zero", _set("num_parents", value=0), "'num_parents'"),
    ("num_parents_bool", _set("num_parents", value=True), "'num_parents'"),
    ("parent_bytes_negative", _set("parent_bytes", value=-1), "'parent_bytes'"),
    ("alignment_zero", _set("alignment", value=0), "'alignment'"),
    ("stride_string", _set("fields", 0, "stride", value="73728"), "'fields[0].stride'"),
    ("shape_zero", _set("fields", 0, "shape", value=[128, 0, 576]), "'fields[0].shape[1]'"),
    ("no_planes", _set("planes", value=[]), "'planes'"),
    ("field_not_object", _set("fields", 0, value=[1, 2]), "'fields[0]'"),
    ("arena_bytes_zero", _set("arena_bytes", value=0), "'arena_bytes'"),
    ("plane_alignment_zero", _set("planes", 0, "alignment", value=0), "'planes[0].alignment'"),
    ("max_padding_string", _set("max_padding", value="none"), "'max_padding'"),
    ("misspelled_key", lambda p: p.update(arena_byte=1), "'arena_byte'"),
    ("unknown_plane_key", _set("planes", 0, "offset", value=0), "'planes[0].offset'"),
    ("missing_page_count", lambda p: p["groups"][0].pop("page_count"), "'groups[0].page_count'"),
    ("unknown_dtype", _set("fields", 0, "dtype", value="float4"), "'fields[0].dtype'"),
    ("parent_bytes_past_uint64", _set("parent_bytes", value=2**64 + 1), "'parent_bytes'"),
    ("nine_dimensions", _set("fields", 0, "shape", value=[1] * 9), "'fields[0].shape'"),
    ("too_many_planes", lambda p: p.update(planes=p["planes"] * 200), "'planes'"),
    ("empty_id", _set("groups", 0, "id", value=""), "'groups[0].id'"),
]


def test_base_plan_is_accepted(base_plan: dict, tmp_path: Path) -> None:
    """The cases below fail because of their one change, not because the base plan is bad."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(base_plan))
    assert check_plan(base_plan) == []
    assert main(["check", str(path)]) == 0


@pytest.mark.parametrize(("mutate", "key"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_plan_is_one_line_naming_the_key(
    base_plan: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Callable[[dict], None], key: str
) -> None:
    plan = json.loads(json.dumps(base_plan))
    mutate(plan)
    with pytest.raises(ConfigError) as err:
        check_plan(plan)
    assert key in str(err.value) and "\n" not in str(err.value)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))  # NaN and Infinity are written as the bare tokens json.loads reads back
    capsys.readouterr()
    assert main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("verify check: error: ") and key in line


def test_page_count_error_names_group_given_and_expected(base_plan: dict) -> None:
    plan = json.loads(json.dumps(base_plan))
    group = plan["groups"][1]
    group["page_count"] = 4
    expected = 1 + plan["num_parents"] * group["packing"]  # the schema: pages 0..N x K
    with pytest.raises(ConfigError, match=f"{group['id']}.* 4; expected .* = {expected}$"):
        check_plan(plan)


# ---------------------------------------------------------------- what the engine schema adds


def _check(plan: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    capsys.readouterr()
    code = main(["check", str(path), *flags])
    return code, capsys.readouterr().out


def test_dtype_tables_pinned_by_hand() -> None:
    """Element sizes as the engines' storage dtypes define them; spec, impl and the arena agree."""
    from kvproof.impl.arena import NUMPY_DTYPES
    from kvproof.impl.packer import DTYPE_BYTES as IMPL_BYTES
    from kvproof.spec.contract import DTYPE_BYTES

    sizes = {"uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e8m0fnu": 1, "bfloat16": 2,
             "float16": 2, "float32": 4, "int32": 4, "int64": 8, "float64": 8}
    assert sizes == DTYPE_BYTES == IMPL_BYTES
    assert {name: t.itemsize for name, t in NUMPY_DTYPES.items()} == sizes


def test_null_max_padding_is_no_bound_and_the_flag_imposes_one(
    base_plan: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = json.loads(json.dumps(base_plan)) | {"max_padding": None}
    code, out = _check(plan, tmp_path, capsys)
    assert code == 0 and "padding_bound      ok (no bound)" in out
    # The K3 fp8 tp 8 state groups pad 0.134 (parent 21,233,664 B for 18,723,840 B of state).
    code, out = _check(plan, tmp_path, capsys, "--max-padding", "0.1")
    assert code == 1 and "pads 0.134 > bound 0.100" in out
    code, out = _check(plan, tmp_path, capsys, "--max-padding", "0.135", "--json")
    assert code == 0 and json.loads(out)["max_padding"] == 0.135
    # the flag overrides the document's own bound as well
    code, _ = _check(base_plan, tmp_path, capsys, "--max-padding", "0.13")
    assert code == 1
    assert _check(base_plan, tmp_path, capsys, "--max-padding", "-1")[0] == 2


def test_arena_bytes_bounds_every_slab(base_plan: dict) -> None:
    # N = 2: 3 x 24 planes of 884,736 B = 63,700,992 B; slot.23's slab starts at 61,046,784.
    assert base_plan["arena_bytes"] == 63_700_992
    plan = json.loads(json.dumps(base_plan)) | {"arena_bytes": 63_700_991}
    (v,) = check_plan(plan)
    assert v["property"] == "in_bounds"
    assert "slot.23's slab (arena bytes 61,046,784..63,700,992) leaves the arena of 63,700,991 B" in v["message"]
    # A larger allocation admits a gap the packer would not leave.
    plan = json.loads(json.dumps(base_plan)) | {"arena_bytes": 63_700_992 + 256}
    plan["planes"][-1]["arena_offset"] += 256
    assert check_plan(plan) == []
    # Without arena_bytes (older plans) the arena is (N + 1) x the plane bytes: the gap leaves it.
    del plan["arena_bytes"]
    assert [v["property"] for v in check_plan(plan)] == ["in_bounds"]


def test_slab_base_alignment_is_part_of_partition(base_plan: dict) -> None:
    plan = json.loads(json.dumps(base_plan)) | {"arena_bytes": 63_700_992 + 256}
    plan["planes"][-1]["arena_offset"] += 128
    (v,) = check_plan(plan)
    assert v["property"] == "partition"
    assert "slot.23's slab starts at arena byte 61,046,912, not a multiple of alignment 256" in v["message"]


def test_declared_plane_alignment_is_checked(base_plan: dict) -> None:
    plan = json.loads(json.dumps(base_plan))
    plan["planes"][0]["alignment"] = 65_536  # 884,736 B = 13.5 x 65,536
    (v,) = check_plan(plan)
    assert v == {"property": "partition",
                 "message": "plane slot.0 of 884,736 B is not a multiple of its declared alignment 65536"}
    del plan["planes"][0]["alignment"]  # optional
    assert check_plan(plan) == []


# ---------------------------------------------------------------- field_alignment


def _misaligned_plan() -> dict:
    """By hand: one group, one plane of 256 B, packing 1, N = 1; a 3-byte uint8 field at 0 and a
    float32 field right behind it at 3, where the contract (item a) puts it at 4."""
    def field(name: str, dtype: str, shape: list[int], offset: int) -> dict:
        return {"id": name, "group": "g", "plane": "p", "shape": shape, "dtype": dtype, "offset": offset,
                "stride": 256, "exact_stride": False}

    return {"num_parents": 1, "parent_bytes": 256, "alignment": 256, "max_padding": None, "arena_bytes": 512,
            "planes": [{"id": "p", "bytes": 256, "arena_offset": 0}],
            "groups": [{"id": "g", "packing": 1, "page_count": 2}],
            "fields": [field("a", "uint8", [3], 0), field("b", "float32", [4], 3)]}


def test_misaligned_field_fails_only_field_alignment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _misaligned_plan()
    code, out = _check(plan, tmp_path, capsys)
    assert code == 1
    assert "field_alignment    FAIL" in out and out.count("FAIL") == 1
    assert "field_alignment: field b (float32) starts at page byte 3, not a multiple of its element size 4" in out
    plan["fields"][1]["offset"] = 4
    assert _check(plan, tmp_path, capsys)[0] == 0


def _mixed_dtype_plan_document() -> dict:
    """The packer's plan for one group whose fields alternate odd byte counts and wider dtypes."""
    fields = (FieldSpec("f.0", "p", (3,), "uint8"), FieldSpec("f.1", "p", (5,), "float32"),
              FieldSpec("f.2", "p", (1,), "int8"), FieldSpec("f.3", "p", (2,), "float64"),
              FieldSpec("f.4", "p", (3,), "bfloat16"), FieldSpec("f.5", "p", (1,), "int64"))
    plan = pack([GroupSpec("g", fields)], granularity=1, max_padding=Fraction(10**6))
    return plan_document(plan.bind(1))


def test_packer_plans_mixed_dtypes_aligned() -> None:
    # f.0 at 0 (3 B), f.1 at 4 (20 B), f.2 at 24 (1 B), f.3 at 32 (16 B), f.4 at 48 (6 B), f.5 at 56
    document = _mixed_dtype_plan_document()
    assert [f["offset"] for f in document["fields"]] == [0, 4, 24, 32, 48, 56]
    assert check_plan(document) == []


def test_spec_check_catches_unrounded_offsets() -> None:
    with faults.inject("field_offset_unrounded"):
        found = check_plan(_mixed_dtype_plan_document())
    assert {v["property"] for v in found} == {"field_alignment"}
    assert "field f.1 (float32) starts at page byte 3, not a multiple of its element size 4" in found[0]["message"]
    fails_under("field_offset_unrounded", test_packer_plans_mixed_dtypes_aligned)


# ---------------------------------------------------------------- the published JSON Schema


def test_emitted_plans_validate_against_the_published_schema(tmp_path: Path) -> None:
    """Any JSON Schema tool accepts what --emit-plan writes (here: jsonschema, draft 2020-12)."""
    from jsonschema import Draft202012Validator

    document = schema()
    Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for args in (["--tp", "8"], ["--tp", "32", "--dtype", "bf16", "--policy", "ceil"], ["--model", "deepseek-v3"]):
        path = tmp_path / "plan.json"
        assert main(["plan", *args, "--emit-plan", str(path), "--parents", "3"]) in (0, 1)
        Draft202012Validator(document).validate(json.loads(path.read_text()))
    Draft202012Validator(document).validate(_mixed_dtype_plan_document())


def test_schema_dtypes_are_the_dtype_table() -> None:
    from kvproof.spec.contract import DTYPE_BYTES

    assert sorted(schema()["$defs"]["field"]["properties"]["dtype"]["enum"]) == sorted(DTYPE_BYTES)


def test_schema_errors_are_one_line_even_for_huge_values(base_plan: dict) -> None:
    plan = json.loads(json.dumps(base_plan)) | {"num_parents": 10**4000}
    with pytest.raises(ConfigError) as err:
        check_plan(plan)
    assert str(err.value) == ("plan key 'num_parents' must be at most 18,446,744,073,709,551,616, "
                              "got an integer of 13,288 bits")
