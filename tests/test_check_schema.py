"""`verify check` on malformed plan JSON: one line naming the key and exit 2, never a traceback
and never a verdict. Each case breaks one key of a plan emitted by `verify plan --emit-plan`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from kvproof.ci.cli import main
from kvproof.spec.catalog import ConfigError
from kvproof.spec.check import check_plan


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
    ("shape_zero", _set("fields", 0, "shape", value=[128, 0, 576]), "'fields[0].shape'"),
    ("no_planes", _set("planes", value=[]), "'planes'"),
    ("field_not_object", _set("fields", 0, value=[1, 2]), "'fields[0]'"),
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
    group["page_count"] = -5
    expected = 1 + plan["num_parents"] * group["packing"]  # the schema: pages 0..N x K
    with pytest.raises(ConfigError, match=f"{group['id']}.* -5; expected .* = {expected}$"):
        check_plan(plan)
