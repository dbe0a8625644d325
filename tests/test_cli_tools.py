"""`verify check`, `verify report` and the seeded-bug catalog behind `verify mutants`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvproof.ci.mutants import MUTANTS, describe, every_fault
from kvproof.cli.main import main
from kvproof.engines import registry
from kvproof.impl import faults
from kvproof.spec.launch_fix import UNCHECKED

ROOT = Path(__file__).resolve().parent.parent


def _emit(tmp_path: Path, *argv: str) -> Path:
    path = tmp_path / "plan.json"
    main(["plan", *argv, "--emit-plan", str(path), "--parents", "2", "--json"])
    return path


def test_check_accepts_our_own_search_plan(tmp_path, capsys):
    path = _emit(tmp_path, "--tp", "32", "--dtype", "bf16")
    capsys.readouterr()
    assert main(["check", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["violations"] == []


def test_check_names_property_field_and_numbers(tmp_path, capsys):
    path = _emit(tmp_path, "--tp", "4", "--policy", "pinned12")
    capsys.readouterr()
    assert main(["check", str(path), "--json"]) == 1
    violations = json.loads(capsys.readouterr().out)["violations"]
    exact = [v for v in violations if v["property"] == "exact_stride"]
    assert exact and "layer.4.latent_kv" in exact[0]["message"] and "73,728" in exact[0]["message"]


def test_check_catches_a_hand_edited_overlap(tmp_path, capsys):
    path = _emit(tmp_path, "--tp", "8")
    plan = json.loads(path.read_text())
    conv = next(f for f in plan["fields"] if f["id"].endswith("conv_state"))
    conv["offset"] += 64  # now runs into recurrent_state
    path.write_text(json.dumps(plan))
    capsys.readouterr()
    assert main(["check", str(path), "--json"]) == 1
    assert "no_overlap" in {v["property"] for v in json.loads(capsys.readouterr().out)["violations"]}


@pytest.mark.parametrize("content", ["{broken", "[1, 2]"])
def test_check_bad_input_exits_two(tmp_path, content, capsys):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["check", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_report_writes_pictures_and_table(tmp_path, capsys):
    assert main(["report", "--model", "kimi-k3", "--out", str(tmp_path)]) == 0
    for name in ("report.png", "report.svg", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
    table = (tmp_path / "report.md").read_text()
    # The ceil row at tp 32 names why bf16 is rejected; the search column never rejects.
    row32 = next(line for line in table.splitlines() if line.startswith("| 32 |"))
    assert "padding_bound" in row32
    assert table.count("ok") >= 24


def test_every_fault_has_a_mutant_with_runnable_checks():
    by_fault = {m.fault for m in MUTANTS if m.fault}
    declared = set(every_fault())
    assert by_fault == declared, f"faults without a mutant: {declared - by_fault}; not declared: {by_fault - declared}"
    assert all(describe(m) for m in MUTANTS)
    assert len(MUTANTS) >= 15
    for m in MUTANTS:
        for check in m.checks:
            if not check.startswith("verify "):
                assert (ROOT / check.split("::")[0]).exists(), f"{m.name}: no such test file {check}"


def test_every_mutants_verify_command_parses(monkeypatch):
    """Each seeded bug's `verify` checks are command lines `verify mutants` runs: each must parse as verify's
    own (a check that argparse refuses exits 2 with and without its fault, so it could kill nothing)."""
    from kvproof.cli import main as cli

    ran: list[object] = []

    def parsed(args: object) -> int:
        ran.append(args)
        return 0

    for name in cli.COMMANDS:
        monkeypatch.setattr(cli.command(name), "run", parsed)
    engines = [m for adapter in registry.adapters() for m in adapter.mutants]
    commands = sorted({check for m in [*MUTANTS, *engines] for check in m.checks if check.startswith("verify ")})
    for check in commands:
        assert main(check.split()[1:]) == 0, check
    assert len(ran) == len(commands)



def test_a_list_option_given_twice_keeps_both_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--recipe a --recipe b` plans both (argparse's default keeps the last list only, silently): every option
    that takes a list extends it, and none has a default list (extending one would keep the default's values too);
    `--draft-dtype bf16 --draft-dtype fp8` proves both."""
    import argparse

    from kvproof.cli import main as cli

    ran: list[argparse.Namespace] = []

    def parsed(args: argparse.Namespace) -> int:
        ran.append(args)
        return 0

    monkeypatch.setattr(cli.command("engine"), "run", parsed)
    assert main(["engine", "vllm", "--recipe", "a", "--recipe", "b", "c", "--tp", "1", "--tp", "2"]) == 0
    assert (ran[0].recipe, ran[0].tp) == (["a", "b", "c"], [1, 2])
    for name in cli.COMMANDS:
        parser = argparse.ArgumentParser()
        cli.command(name).add_arguments(parser)
        lists = [a for a in parser._actions if a.nargs == "+"]
        assert all(isinstance(a, argparse._ExtendAction) and not a.default for a in lists), (
            name, [a.dest for a in lists])
    monkeypatch.setattr(cli.command("prove"), "run", parsed)
    assert main(["prove", "--model", "kimi-k3", "--drafts", "5", "--draft-dtype", "bf16", "--draft-dtype", "fp8"]) == 0
    assert ran[-1].draft_dtype == ["bf16", "fp8"]

def test_every_hook_names_a_declared_fault_and_impl_knows_no_engines():
    """What the code switches on (a literal faults.active name, a launch rule's UNCHECKED fault, an
    engine's seeded bug, which its adapter may key by a table) is exactly what the hook modules
    declare, and the switch itself (impl/faults.py) names no fault: kvproof's own are declared
    beside their hooks, an engine's in its adapter's mutants module."""
    engine_faults = {m.name for adapter in registry.adapters() for m in adapter.mutants}
    hooked = set(UNCHECKED.values()) | engine_faults
    for folder in ("impl", "kernels", "cli", "spec", "engines"):
        for path in (ROOT / folder).rglob("*.py"):
            hooked |= set(re.findall(r'faults\.active\("(\w+)"\)', path.read_text(encoding="utf-8")))
    assert hooked == set(every_fault())
    switch = (ROOT / "impl" / "faults.py").read_text(encoding="utf-8")
    assert not [name for name in every_fault() if name in switch]
    impl = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "impl").glob("*.py"))
    assert engine_faults and not [name for name in engine_faults if name in impl]


def test_inject_refuses_a_fault_no_module_declares():
    with pytest.raises(KeyError, match="unknown fault 'no_such_fault'"), faults.inject("no_such_fault"):
        pass
    assert "capacity_largest_packing" in every_fault()  # its hook's module (impl.capacity) imported
    with pytest.raises(ValueError, match="declared twice"):
        faults.declare({"capacity_largest_packing": "another description"})



def test_an_unknown_mutant_names_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    from kvproof.cli.main import main

    assert main(["mutants", "--only", "no_such_mutant"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown mutant 'no_such_mutant'; the catalog has: " in err
    assert all(m.name in err for m in MUTANTS)
