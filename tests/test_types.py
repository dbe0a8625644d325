"""mypy over every kvproof package and tests/, with the settings of pyproject's [tool.mypy].

Part of the default suite, so `make test`, CI and the gate (which runs the suite) type-check the
code and its tests. The test runs `mypy` with no arguments, as `make lint` does, so the targets are
[tool.mypy]'s own; it runs in a copy of the checkout's layout under tmp_path (every top-level entry
a link to the checkout's, tests/ a folder of links to its files) that has one more test module,
a probe whose two annotations are wrong. Each must be reported, and nothing else:

- the first misuses a kvproof type: if mypy ever stopped resolving the `kvproof.*` imports (the
  layout regressing to an import hook), every kvproof name would turn into a "cannot find module"
  or an Any and that error would vanish;
- the second misuses a type of a tests/ helper module: if [tool.mypy] stopped checking tests/, or
  stopped resolving the helpers as the top-level modules pytest imports them as, it would vanish.

The probe is not written into tests/ itself: anyone's `mypy` running meanwhile would fail on it.
mypy's cache is the checkout's (.mypy_cache): the copy has the same relative paths and the same
files, so a run rechecks only what changed since the last `mypy` there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE_NAME = "test_type_probe.py"

PROBE = """\
from kvproof.spec.catalog import load_model
from strategies_cache import Layout

wrong: int = load_model("kimi-k3")


def wrong_too(layout: Layout) -> int:
    return layout
"""


def checkout_with_probe(tmp_path: Path) -> Path:
    for entry in ROOT.iterdir():
        if entry.name not in ("tests", ".mypy_cache"):
            (tmp_path / entry.name).symlink_to(entry)
    tests = tmp_path / "tests"
    tests.mkdir()
    for entry in (ROOT / "tests").iterdir():
        if entry.name != "__pycache__":
            (tests / entry.name).symlink_to(entry)
    (tests / PROBE_NAME).write_text(PROBE)
    return tmp_path


def test_mypy_sees_and_accepts_kvproof_and_tests(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", str(ROOT / ".mypy_cache")],
        cwd=checkout_with_probe(tmp_path), capture_output=True, text=True, timeout=300, check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if ": error:" in line]
    in_code = [line for line in lines if Path(line.split(":")[0]).name != PROBE_NAME]
    assert not in_code, "mypy findings in kvproof or tests:\n" + "\n".join(in_code)
    assert proc.returncode == 1, f"mypy exit {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    assert len(lines) == 2 and 'has type "ModelGeometry"' in lines[0], (
        "mypy did not resolve kvproof.spec.catalog from the probe:\n" + proc.stdout
    )
    assert 'got "Layout", expected "int"' in lines[1], (
        "mypy did not check the probe in tests/ or did not resolve its strategies_cache:\n" + proc.stdout
    )
