"""verdict.planned_once: one check per distinct plan, each point's own recipe, point and replay."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest

from kvproof.engines import verdict
from kvproof.impl.export import plan_document
from kvproof.impl.recipe import plan_model
from kvproof.spec.catalog import load_model


def documents(stride_extra: int = 0) -> dict[int, dict]:
    plan = plan_model(load_model("kimi-k3"), 8, "fp8").plan
    out = {}
    for n in (1, 2, 3):
        doc = plan_document(plan.bind(n))
        for field in doc["fields"]:
            field["stride"] += stride_extra
        out[n] = doc
    return out


def test_an_equal_plan_takes_the_verdict_with_its_own_point(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []
    planned = verdict.planned

    def counted(recipe: str, point: dict, docs: dict[int, dict], replay: str,
                bound: Fraction | None = None) -> verdict.PointResult:
        calls.append(point)
        return planned(recipe, point, docs, replay, bound)

    monkeypatch.setattr(verdict, "planned", counted)
    checked: verdict.Checked = {}
    first = verdict.planned_once(checked, "a", {"tp": 8}, documents(), "replay a")
    again = verdict.planned_once(checked, "b", {"tp": 16}, copy.deepcopy(documents()), "replay b")
    assert len(calls) == 1
    assert (again.recipe, again.point, again.replay) == ("b", {"tp": 16}, "replay b")
    assert (again.verdict, again.findings, again.packing) == (first.verdict, first.findings, first.packing)

    broken = verdict.planned_once(checked, "c", {"tp": 8}, documents(256), "replay c")
    assert len(calls) == 2 and broken.verdict == "counterexample" and first.verdict == "ok"
    verdict.planned_once(checked, "a", {"tp": 8}, documents(), "replay a", Fraction(1, 100))
    assert len(calls) == 3  # another bound is another check

    verdict.planned_once(None, "a", {"tp": 8}, documents(), "replay a")
    verdict.planned_once(None, "a", {"tp": 8}, documents(), "replay a")
    assert len(calls) == 5  # None: checked every time (a seeded bug's run)
