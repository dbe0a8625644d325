"""ci/mutation.py without mutmut: its sample glob and its scoring agree, and bad input is one line."""

from __future__ import annotations

import json
from fnmatch import fnmatch
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvproof.ci import mutation, mutmut_order


def test_the_glob_mutmut_gets_picks_the_mutants_the_score_counts():
    names = [f"kvproof.impl.packer.xǁPlanǁbind__mutmut_{i}" for i in range(1, 41)]
    for sample in range(1, 11):
        (glob,) = mutation.patterns(["impl/packer.py"], sample)
        picked = [n for n in names if fnmatch(n, glob)]
        assert picked == [n for n in names if mutation.in_sample(n, sample)]
        # Numbers ending 1..N: 4 of 1..40 per digit, none ending 0 unless the whole set is taken.
        assert len(picked) == (40 if sample == 10 else 4 * sample)
    assert mutation.patterns(["spec/policy.py"], 10) == ["kvproof.spec.policy.*"]


def test_a_file_is_scored_on_its_sample_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    codes = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 0, "m.x_f__mutmut_3": 36, "m.x_f__mutmut_4": 33,
             "m.x_f__mutmut_5": None, "m.x_f__mutmut_11": 1, "m.x_f__mutmut_12": 0}
    meta = tmp_path / "kvproof" / "impl" / "capacity.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    every = mutation.score("impl/capacity.py", 10, tmp_path)
    assert (every.mutants, every.killed, every.timeout, every.unchecked) == (7, 2, 1, 1)
    assert every.survived == ["m.x_f__mutmut_12", "m.x_f__mutmut_2"] and every.no_tests == ["m.x_f__mutmut_4"]
    assert every.score == 3 / 6  # killed 2 + timeout 1 of 6 checked; the unchecked one counts for nothing
    monkeypatch.setitem(mutation.EQUIVALENT, "m.x_f__mutmut_12", "no input tells it apart")
    known = mutation.score("impl/capacity.py", 10, tmp_path)
    assert known.survived == ["m.x_f__mutmut_2"] and known.equivalent == ["m.x_f__mutmut_12"]
    assert known.score == 3 / 5  # an equivalent mutant is out of the score, not a kill
    ones = mutation.score("impl/capacity.py", 1, tmp_path)  # mutants 1 and 11, both killed
    assert (ones.mutants, ones.killed, ones.score) == (2, 2, 1.0)


@pytest.mark.parametrize("argv, says", [
    (["impl/nope.py", "--report-only"], "unknown module impl/nope.py"),
    (["impl/faults.py", "--report-only"], "unknown module impl/faults.py"),
    (["--sample", "0"], "argument --sample: invalid choice"),
    (["--budget-min", "0"], "--budget-min and --max-children must be positive"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]):
    assert mutation.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_files_mutmut_does_not_mutate_are_refreshed_in_its_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for rel, text in {"spec/plan.schema.json": "new", "spec/contract.py": "new", "impl/faults.py": "new",
                      "spec/__init__.py": ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    copy = tmp_path / "mutants" / "kvproof"
    for rel in ("spec/plan.schema.json", "spec/contract.py", "impl/faults.py"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_text("old")
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    mutation.sync_unmutated()
    assert (copy / "spec/plan.schema.json").read_text() == "new"  # data: refreshed
    assert (copy / "impl/faults.py").read_text() == "new"  # not mutated: refreshed
    assert (copy / "spec/__init__.py").read_text() == ""  # missing: copied
    assert (copy / "spec/contract.py").read_text() == "old"  # mutmut's own: left to mutmut


def test_resume_names_only_the_sampled_mutants_left_unscored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    codes = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_11": 0, "m.x_f__mutmut_21": None, "m.x_f__mutmut_31": 33,
             "m.x_f__mutmut_41": 36, "m.x_f__mutmut_51": 0, "m.x_f__mutmut_2": None, "m.x_f__mutmut_12": 0}
    meta = tmp_path / "mutants" / "kvproof" / "spec" / "smt.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    monkeypatch.setitem(mutation.EQUIVALENT, "m.x_f__mutmut_51", "no input tells it apart")
    # Survived 11, unchecked 21, no tests 31; killed 1, timed out 41 and equivalent 51 stay as they are.
    assert mutation.unscored(["spec/smt.py"], 1) == ["m.x_f__mutmut_11", "m.x_f__mutmut_21", "m.x_f__mutmut_31"]
    assert mutation.unscored(["spec/smt.py"], 2) == ["m.x_f__mutmut_11", "m.x_f__mutmut_12", "m.x_f__mutmut_2",
                                                      "m.x_f__mutmut_21", "m.x_f__mutmut_31"]


def test_a_listed_abort_is_a_kill_and_any_other_abort_stays_suspicious(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    codes = {"m.x_f__mutmut_1": -6, "m.x_f__mutmut_11": -6}
    meta = tmp_path / "kvproof" / "spec" / "smt.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    monkeypatch.setitem(mutation.ABORTS, "m.x_f__mutmut_1", "z3 aborts on it")
    scored = mutation.score("spec/smt.py", 1, tmp_path)
    assert scored.killed == 1 and scored.survived == ["m.x_f__mutmut_11"]


def test_mutmut_order_runs_modules_whole_fastest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def items(*ids: str) -> list[Any]:
        return [SimpleNamespace(nodeid=i) for i in ids]

    collected = items("a.py::slow", "b.py::mid", "a.py::new", "a.py::fast", "b.py::quick")
    monkeypatch.chdir(tmp_path)
    mutmut_order.pytest_collection_modifyitems(collected)  # no stats yet: pytest's order stays
    assert [i.nodeid for i in collected] == ["a.py::slow", "b.py::mid", "a.py::new", "a.py::fast", "b.py::quick"]
    (tmp_path / "mutmut-stats.json").write_text("{cut off")
    mutmut_order.pytest_collection_modifyitems(collected)  # a file being rewritten: left alone
    assert collected[0].nodeid == "a.py::slow"
    durations = {"a.py::slow": 9.0, "a.py::fast": 0.5, "b.py::mid": 2.0, "b.py::quick": 0.1}
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": durations}))
    mutmut_order.pytest_collection_modifyitems(collected)
    # b's fastest (0.1 s) before a's (0.5 s); within a module by duration, a test never timed last.
    assert [i.nodeid for i in collected] == ["b.py::quick", "b.py::mid", "a.py::fast", "a.py::slow", "a.py::new"]
