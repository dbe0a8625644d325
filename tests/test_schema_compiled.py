"""The plan schema's compiled check (spec/schema.py) decides every plan as jsonschema does: plans
emitted by `verify plan`, each broken at one random place (a key dropped or added, a value swapped
for another JSON value), are valid for one exactly when they are valid for the other."""

from __future__ import annotations

import copy
import json
import math
from functools import cache
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvproof.cli.main import main
from kvproof.spec import schema as S


@cache
def _base_plan() -> dict:
    with TemporaryDirectory() as folder:
        path = Path(folder) / "plan.json"
        main(["plan", "--tp", "8", "--emit-plan", str(path), "--parents", "2"])
        return json.loads(path.read_text())


def _places(node: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a value inside `node` (the root excluded)."""
    out: list[tuple] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((*path, key))
        out += _places(value, (*path, key))
    return out


VALUES = st.one_of(
    st.sampled_from([0, 1, -1, 2, 1.0, 0.5, -0.0, math.nan, math.inf, True, False, None, "", "bfloat16", "x" * 300,
                     [], {}, [1], {"id": "g0"}, 1 << 70, 2.0 ** 70]),
    st.integers(), st.floats(), st.text(max_size=5), st.lists(st.integers(), max_size=3))


@st.composite
def broken(draw: st.DrawFn) -> dict:
    plan = copy.deepcopy(_base_plan())
    places = _places(plan)
    path = draw(st.sampled_from(places))
    parent = plan
    for step in path[:-1]:
        parent = parent[step]
    how = draw(st.sampled_from(["swap", "drop", "add"]))
    if how == "drop" and isinstance(parent, dict):
        del parent[path[-1]]
    elif how == "add" and isinstance(parent, dict):
        parent[draw(st.sampled_from(["extra", "id", "bytes", "packing", "max_tokens"]))] = draw(VALUES)
    else:
        parent[path[-1]] = draw(VALUES)
    return plan


def _jsonschema_accepts(plan: Any) -> bool:
    return next(iter(S._validator().iter_errors(plan)), None) is None


def test_an_emitted_plan_passes_both() -> None:
    assert S._compiled()(_base_plan()) and _jsonschema_accepts(_base_plan())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken())
def test_compiled_check_agrees_with_jsonschema(plan: dict) -> None:
    assert S._compiled()(plan) == _jsonschema_accepts(plan)


@pytest.mark.parametrize("value", [None, "plan", [], 1.5])
def test_a_document_that_is_not_an_object_fails_both(value: Any) -> None:
    assert not S._compiled()(value) and not _jsonschema_accepts(value)


def test_a_keyword_the_check_does_not_implement_is_refused() -> None:
    with pytest.raises(ValueError, match="does not implement"):
        S._compile({"type": "string", "pattern": "^g"})


# Schemas of one keyword each, beyond what the plan schema combines (two oneOf branches that overlap)
SMALL = [{"oneOf": [{"type": "integer"}, {"type": "number"}]}, {"type": ["integer", "null"]}, {"minimum": 1},
         {"maximum": 3}, {"minItems": 1, "maxItems": 2}, {"minLength": 1, "maxLength": 2}, {"enum": ["a", "b"]},
         {"additionalProperties": False}, {"required": ["a"]}, {"items": {"type": "string"}},
         {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}]
SMALL_VALUES = [0, 1, 1.0, 1.5, 4, True, None, "", "a", "abc", [], ["a"], [1, 2, 3], {}, {"a": 1}, {"a": "x"},
                {"b": "x"}, {"b": 2}]


@pytest.mark.parametrize("rule", SMALL, ids=lambda rule: json.dumps(rule))
def test_each_keyword_means_what_it_means_to_jsonschema(rule: dict) -> None:
    from jsonschema import Draft202012Validator

    for value in SMALL_VALUES:
        assert S._compile(rule)(value) == Draft202012Validator(rule).is_valid(value), value
