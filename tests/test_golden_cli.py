"""Golden outputs of the command line, recorded before the layout changed: every `--help` and the
`--json` of plan, check, prove and `engine tokenspeed --recipe kimi_k3` (tests/golden/cli/), and
the `--json` of config, synth, sweep, plan with drafts, mutants and a tokenspeed recipe
(tests/golden/cli/more/, recorded by running the command line of commit 2233daf in a worktree).
Config's case is an OK launch: a violated one's fix depends on --time-limit on a loaded machine.

A restructuring keeps behaviour: each case's exit code and output must equal the recorded one,
with only what varies from run to run (timings, where the engine was installed) normalized. A
deliberate change of output updates the file in the same commit, with the reason in its message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvproof.cli.main import main

GOLDEN = Path(__file__).parent / "golden" / "cli"
FOLDERS = (GOLDEN, GOLDEN / "more")
CASES: dict[str, dict[str, Any]] = {
    str((folder / name).relative_to(GOLDEN)): case
    for folder in FOLDERS for name, case in json.loads((folder / "cases.json").read_text()).items()
}
TIMINGS = ("seconds", "solver_seconds")


def normalize(value: Any) -> Any:
    """Timings become None (their keys stay); the engine's install path becomes a placeholder."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in TIMINGS:
                out[key] = {k: None for k in item} if isinstance(item, dict) else None
            elif key == "source" and isinstance(item, str) and item.startswith("tokenspeed"):
                out[key] = "{engine_source}"
            else:
                out[key] = normalize(item)
        return out
    if isinstance(value, list):
        return [normalize(item) for item in value]
    return value


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_equals_the_recorded_one(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps --help to the terminal's width
    plan_file = tmp_path / "plan.json"
    if "{plan_file}" in CASES[name]["argv"]:
        assert main(["plan", "--model", "kimi-k3", "--tp", "8", "--dtype", "fp8", "--emit-plan", str(plan_file)]) == 0
        capsys.readouterr()
    argv = [str(plan_file) if a == "{plan_file}" else a for a in CASES[name]["argv"]]
    try:
        code = main(argv)
    except SystemExit as stop:  # --help exits through argparse
        code = int(stop.code or 0)
    out = capsys.readouterr().out
    assert code == CASES[name]["exit"]
    if name.startswith("help"):
        assert out == (GOLDEN / f"{name}.txt").read_text()
        return
    got = normalize(json.loads(out))
    if name == "check":
        got["plan"] = "{plan_file}"
    assert got == json.loads((GOLDEN / f"{name}.json").read_text())
