"""Adding an engine is one folder and one registry line: a dummy engine, written into a folder
of its own and registered for the test, runs through `verify engine` like tokenspeed and vLLM.

Its "planner" is kvproof's own K3 recipe (so its plans are real documents the spec's encoding
checks), one recipe of which widens every page stride as a broken engine would; another reports
a finding across points, which alone exits 3. Nothing of `verify engine` knows the dummy but the
registry entry.
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvproof.cli.main import main
from kvproof.engines import registry

ADAPTER = '''
"""A dummy engine: kvproof's own K3 recipe as its planner."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

from kvproof.engines import verdict
from kvproof.engines.interface import Adapter, EngineAdapter, Mutant
from kvproof.engines.verdict import EngineError, EngineRun, Finding, PointResult, RecipeResult
from kvproof.impl.export import plan_document
from kvproof.impl.recipe import plan_model
from kvproof.spec.catalog import load_model

ENGINE = "dummy"
RECIPES = ("k3", "k3_widened", "k3_cross", "k3_unmodelled")
ACROSS = "block_size_across_tp"
CALLS: list[dict] = []  # what each verify() was handed, for the test to read


def documents(tp: int, dtype: str, widen: int) -> dict[int, dict]:
    plan = plan_model(load_model("kimi-k3"), tp, dtype).plan
    out = {}
    for n in (1, 2, 3):
        doc = plan_document(plan.bind(n))
        for field in doc["fields"]:
            field["stride"] += widen
        out[n] = doc
    return out


def verify(recipes: Sequence[str] | None, tps: Sequence[int] | None, dtypes: Sequence[str] | None,
           engine_path: str | None, drafts: Sequence[int] | None = None, models: Sequence[str] | None = None,
           assume: Sequence[str] | None = None, padding_bound: Fraction | None = None) -> EngineRun:
    CALLS.append({"recipes": recipes, "tps": tps, "dtypes": dtypes, "padding_bound": padding_bound})
    if drafts or models or assume:
        raise EngineError("the dummy engine narrows by --recipe, --tp and --dtype only")
    unknown = sorted(set(recipes or ()) - set(RECIPES))
    if unknown:
        raise EngineError(f"the dummy engine has no recipe {unknown[0]!r}")
    results = []
    for recipe in recipes or RECIPES:
        if recipe == "k3_unmodelled":
            results.append(RecipeResult(recipe, (), "no published config for this family in the dummy"))
            continue
        points = []
        for tp in tps or (8, 16):
            for dtype in dtypes or ("fp8",):
                point = {"tp": tp, "dtype": dtype}
                replay = f"verify engine dummy --recipe {recipe} --tp {tp} --dtype {dtype}"
                checked = verdict.planned(recipe, point, documents(tp, dtype, 256 if recipe == "k3_widened" else 0),
                                          replay, padding_bound)
                if recipe == "k3_cross" and tp != 8:
                    checked = PointResult(recipe, point, "counterexample",
                                          (*checked.findings, Finding(ACROSS, "another block size than at tp 8")),
                                          checked.packing, checked.parent_bytes, checked.worst_padding,
                                          checked.parents, replay)
                points.append(checked)
        results.append(RecipeResult(recipe, tuple(points)))
    return EngineRun(ENGINE, "0.0.1", "dummy 0.0.1 (kvproof's own recipe)", None, tuple(results), 0.0)


ADAPTER: EngineAdapter = Adapter(name=ENGINE, verify=verify, cross_point=frozenset({ACROSS}),
                                 mutants=(Mutant("dummy_fault", ("verify engine dummy",)),),
                                 baseline=Path(__file__).with_name("baseline.json"))
'''


@pytest.fixture
def dummy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The dummy's folder (an adapter module and its empty baseline) on sys.path, and its one
    registry line."""
    folder = tmp_path / "dummy_engine"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "engine.py").write_text(textwrap.dedent(ADAPTER))
    (folder / "baseline.json").write_text('{"findings": []}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.ENGINES, "dummy", "dummy_engine.engine")
    yield folder
    for name in [m for m in sys.modules if m.split(".")[0] == "dummy_engine"]:
        del sys.modules[name]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["engine", "dummy", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_registered_engine_is_verified_through_the_one_interface(dummy: Path, capsys) -> None:
    adapter = registry.adapter("dummy")
    assert adapter.name == "dummy" and adapter.baseline == dummy / "baseline.json"
    assert [m.name for m in adapter.mutants] == ["dummy_fault"]

    code, doc = run(capsys, "--recipe", "k3")  # kvproof's own recipe: every plan holds
    assert code == 0 and doc["engine"] == "dummy" and doc["version"] == "0.0.1"
    assert [p["verdict"] for r in doc["recipes"] for p in r["points"]] == ["ok", "ok"]
    assert doc["new_findings"] == [] and doc["cross_point"] == ["block_size_across_tp"]

    code, doc = run(capsys, "--recipe", "k3_widened", "--tp", "8")  # a broken planner: a counterexample
    (point,) = doc["recipes"][0]["points"]
    assert code == 1 and point["verdict"] == "counterexample" and point["tp"] == 8
    assert "exact_stride" in {f["property"] for f in point["findings"]}
    assert point["replay"] == "verify engine dummy --recipe k3_widened --tp 8 --dtype fp8"

    code, doc = run(capsys, "--recipe", "k3_cross")  # a finding across points alone: exit 3
    assert code == 3 and [k[4] for k in doc["new_findings"]] == ["block_size_across_tp"]
    assert main(["engine", "dummy", "--recipe", "k3_cross"]) == 3
    assert "verdict: CROSS-POINT FINDINGS: 1 new finding(s)" in capsys.readouterr().out


def test_the_dummys_findings_go_into_a_baseline_and_an_unmodelled_recipe_counts(dummy: Path, tmp_path: Path,
                                                                               capsys) -> None:
    code, doc = run(capsys)  # every recipe: the unmodelled one is NOT VERIFIED, a finding of its own
    assert code == 1
    assert ["dummy", "0.0.1", "k3_unmodelled", "", "not_verified"] in doc["new_findings"]
    known = tmp_path / "known.json"
    assert main(["engine", "dummy", "--write-baseline", str(tmp_path / "no" / "known.json")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"cannot write --write-baseline {tmp_path / 'no' / 'known.json'}: "
                                                   "No such file or directory")
    assert main(["engine", "dummy", "--write-baseline", str(known)]) == 0
    capsys.readouterr()
    code, doc = run(capsys, "--baseline", str(known))
    assert code == 0 and doc["new_findings"] == [] and len(doc["baselined"]) == len(json.loads(known.read_text())
                                                                                   ["findings"])
    code, doc = run(capsys, "--baseline", str(dummy / "baseline.json"), "--recipe", "k3")
    assert code == 0 and doc["stale"] == []


def test_the_narrowing_reaches_the_adapter_typed_and_its_refusals_are_exit_2(dummy: Path, capsys) -> None:
    module = importlib.import_module("dummy_engine.engine")
    code, _ = run(capsys, "--recipe", "k3", "--tp", "16", "--dtype", "bf16", "--max-padding", "0.5")
    assert code == 0
    assert module.CALLS[-1] == {"recipes": ["k3"], "tps": [16], "dtypes": ["bf16"], "padding_bound": 0.5}
    run(capsys, "--recipe", "k3", "--tp", "8", "--max-padding", "inf")
    assert module.CALLS[-1]["padding_bound"] is None
    assert main(["engine", "dummy", "--drafts", "1"]) == 2
    assert "verify engine: error: the dummy engine narrows by --recipe" in capsys.readouterr().err
    assert main(["engine", "dummy", "--recipe", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_an_engine_not_registered_is_not_a_choice(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["engine", "dummy"])
    assert stop.value.code == 2 and "invalid choice: 'dummy'" in capsys.readouterr().err
