"""ci/gpu_check.py must survive the GPU image: no z3-solver, no fla-core, no jsonschema, kvproof
not installed.

A sitecustomize on PYTHONPATH hides z3, fla and jsonschema the way the image lacks them (importing
one raises ImportError; fla's find_spec names no package folder, as the cross-check expects of an
absent fla), and the check's own test set must then collect every kernel test the full suite
has. About 10 s: two pytest collections and one short run of the fla cross-check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_CHECK = ROOT / "ci" / "gpu_check.py"

HIDE = '''\
import importlib.abc
import importlib.machinery
import sys

HIDDEN = ("z3", "fla", "jsonschema")


class _Absent(importlib.abc.Loader):
    def create_module(self, spec):
        raise ImportError(f"No module named {spec.name!r} (hidden: the GPU image lacks it)", name=spec.name)

    def exec_module(self, module):
        raise ImportError(module.__name__)


class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            return importlib.machinery.ModuleSpec(name, _Absent())
        return None


sys.meta_path.insert(0, _Hide())
'''


@pytest.fixture(scope="module")
def image_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    shim = tmp_path_factory.mktemp("image")
    (shim / "sitecustomize.py").write_text(HIDE)
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, TRITON_INTERPRET="1")


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def _collected(output: str) -> int:
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", output)
    assert found, f"no collection count in:\n{output[-2000:]}"
    return int(found.group(1))


PROBE = """\
import importlib, importlib.util, sys
for name in ("z3", "jsonschema"):
    try:
        importlib.import_module(name)
    except ImportError:
        continue
    sys.exit(f"{name} imported")
spec = importlib.util.find_spec("fla")
sys.exit(0 if spec is None or not spec.submodule_search_locations else "fla found")
"""


def test_shim_hides_what_the_image_lacks(image_env: dict[str, str]) -> None:
    proc = _run(["-c", PROBE], image_env)
    assert proc.returncode == 0, proc.stderr


def test_collects_every_kernel_test_without_z3(image_env: dict[str, str]) -> None:
    proc = _run([str(GPU_CHECK), "--collect-only"], image_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    full = _run(["-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only", "-m", "kernels or gpu", "tests"])
    assert full.returncode == 0, (full.stdout + full.stderr)[-3000:]
    assert _collected(out) == _collected(full.stdout) > 0


def test_fla_cross_check_skips_with_reason(image_env: dict[str, str]) -> None:
    proc = _run([str(GPU_CHECK), "--cpu", "--", "-k", "fla", "-rs"], image_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "fla-core (test extra) is not installed" in out
    assert not re.search(r"\d+ passed", out), "an fla test ran although fla is hidden"


def test_a_row_states_its_physical_limit() -> None:
    """4 GB in 2 ms against a 4,000 GB/s copy: 2,000 GB/s, half the copy's, where the bytes alone take 1 ms."""
    from kvproof.ci.gpu_check import HEADER, Row

    line = Row("kernel", 2.0, 4 * 10**9).line(4000.0)
    assert line.split()[1:] == ["2.000", "2000", "50%", "1.000", "2.00x"]
    assert HEADER.split()[-2:] == ["x", "limit"] and len(HEADER) == len(line)


def test_a_reference_that_cannot_run_says_why() -> None:
    """A reference kernel runs in a child process; where the image lacks it, its row says so and nothing fails."""
    from kvproof.ci.gpu_check import reference

    line = reference("FlashMLA", 4000.0)
    assert line.startswith("FlashMLA") and "not run: " in line and "flash_mla" in line, line
