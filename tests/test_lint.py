"""ruff over the whole checkout, with the settings of pyproject's [tool.ruff], in the default suite:
so `make test`, CI and the gate (which runs the suite) fail on a lint finding, as they do on a
type error (tests/test_types.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"ruff exit {proc.returncode}:\n{proc.stdout}{proc.stderr}"


def test_ruff_reports_a_finding_it_is_shown(tmp_path: Path) -> None:
    """The check bites: an unused import in a file it is handed is a finding (exit 1)."""
    bad = tmp_path / "lint_probe.py"
    bad.write_text("import os\n")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", str(bad)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "F401" in proc.stdout, proc.stdout + proc.stderr
