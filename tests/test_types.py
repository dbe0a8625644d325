"""mypy over every kvproof package, with the settings of pyproject's [tool.mypy].

Part of the default suite, so `make test`, CI and ci/gate (which runs the suite) type-check the
code. One run of about 10 s (uncached; mypy's cache in .mypy_cache makes re-runs faster) also
checks a probe file that misuses a kvproof type: if mypy ever stopped resolving the `kvproof.*`
imports (the layout regressing to an import hook), every kvproof name would turn into a
"cannot find module" or an Any and the probe's error would vanish, so the test would fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """\
from kvproof.spec.catalog import load_model

wrong: int = load_model("kimi-k3")
"""


def test_mypy_sees_and_accepts_every_package(tmp_path: Path) -> None:
    probe = tmp_path / "kvproof_type_probe.py"
    probe.write_text(PROBE)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "kvproof", str(probe)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if ": error:" in line]
    # by file name: mypy's cache may replay the probe's error under an earlier tmp_path
    in_code = [line for line in lines if not line.split(":")[0].endswith(probe.name)]
    assert not in_code, "mypy findings in kvproof:\n" + "\n".join(in_code)
    assert proc.returncode == 1, f"mypy exit {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    assert len(lines) == 1 and 'has type "ModelGeometry"' in lines[0], (
        "mypy did not resolve kvproof.spec.catalog from the probe:\n" + proc.stdout
    )
