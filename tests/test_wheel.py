"""The wheel as an engine team gets it: built from the tracked sources, installed into a fresh
venv, run from outside the checkout.

Costs about 30-60 s (a venv, one offline install of numpy and z3-solver from the pip cache or
index, a proof), so it runs in the default suite under the marker `wheel`; leave it out while
iterating with `-m "not wheel"`. It guards what the editable install hides: package data (the
model catalog, and any JSON shipped beside the code), the symlinked layout copied as real files,
and the console script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("spec", "impl", "kernels", "oracles", "ci", "cli", "engines")
CORE_DEPS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

def _run(argv: list[str | Path], cwd: Path, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the sources (no build/ or egg-info left over from earlier builds)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "kvproof", src / "kvproof", symlinks=True, ignore=skip)
    for folder in FOLDERS:
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, src / folder, ignore=skip)
    out = tmp_path_factory.mktemp("dist")
    _ok(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, src], src))
    (built,) = out.glob("kvproof-*.whl")
    return built


@pytest.mark.wheel
def test_wheel_holds_every_module_as_a_real_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        infos = {i.filename: i for i in zf.infolist()}
    links = [name for name, i in infos.items() if (i.external_attr >> 16) & 0o170000 == 0o120000]
    assert not links, f"symlinks in the wheel: {links}"
    expected = {f"kvproof/{p.relative_to(ROOT).as_posix()}" for folder in FOLDERS if (ROOT / folder).is_dir()
                for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".json") and "__pycache__" not in p.parts}
    assert expected, "no sources found"
    assert not expected - infos.keys(), f"missing from the wheel: {sorted(expected - infos.keys())}"
    assert f"kvproof-{VERSION}.dist-info/licenses/LICENSE" in infos


@pytest.mark.wheel
def test_installed_wheel_proves_and_checks_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _ok(_run([sys.executable, "-m", "venv", venv], tmp_path))
    py, verify = venv / "bin" / "python", venv / "bin" / "verify"
    _ok(_run([py, "-m", "pip", "install", "-q", "--no-deps", wheel], tmp_path))
    _ok(_run([py, "-m", "pip", "install", "-q", *CORE_DEPS], tmp_path, timeout=300))

    where = _ok(_run([py, "-c", "import kvproof; print(kvproof.__file__)"], tmp_path)).strip()
    assert Path(where).is_relative_to(venv), f"kvproof imported from {where}, not from the installed wheel"
    assert _ok(_run([verify, "--version"], tmp_path)).strip() == f"kvproof {VERSION}"

    proof = json.loads(_ok(_run([verify, "prove", "--model", "kimi-k3", "--json"], tmp_path)))
    assert proof["proved"] is True and proof["counterexamples"] == []

    _ok(_run([verify, "plan", "--model", "kimi-k3", "--tp", "8", "--dtype", "fp8", "--emit-plan", "plan.json"],
             tmp_path))
    _ok(_run([verify, "check", "plan.json"], tmp_path))
    # and the installed checker still finds the fault in a rejected plan (pinned12 at fp8 tp 4)
    emit = _run([verify, "plan", "--model", "kimi-k3", "--tp", "4", "--dtype", "fp8", "--policy", "pinned12",
                 "--emit-plan", "bad.json"], tmp_path)
    assert emit.returncode == 1, emit.stderr
    bad = _run([verify, "check", "bad.json"], tmp_path)
    assert bad.returncode == 1 and "exact_stride" in bad.stdout, bad.stdout + bad.stderr


def test_engine_workflow_pins_this_version() -> None:
    """The engine workflow's default kvproof pin follows pyproject's version (bumped together)."""
    text = (ROOT / ".github" / "workflows" / "engine-template.yml").read_text()
    pins = re.findall(r"(?:kvproof==|engine-template\.yml@v)([\w.]+)", text)
    assert pins and set(pins) == {VERSION}, f"engine-template.yml pins {pins}, pyproject says {VERSION}"
    assert "verify engine" in text and "--baseline" in text
