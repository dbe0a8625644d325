"""The doors: `python -m kvproof` is the `verify` command line, and reading the engine registry
(what `verify mutants` and the gate do for every engine) loads no engine and no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "triton", "tokenspeed", "vllm", "sglang")


def test_python_m_kvproof_is_verify() -> None:
    proc = subprocess.run([sys.executable, "-m", "kvproof", "prove", "--model", "kimi-k3", "--tp", "8",
                           "--dtype", "fp8", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["proved"] is True
    bad = subprocess.run([sys.executable, "-m", "kvproof", "prove", "--tp", "seven"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "invalid int value" in bad.stderr


def test_reading_every_adapter_imports_no_engine_and_no_torch() -> None:
    probe = ("import sys, json\n"
             "from kvproof.engines import registry\n"
             "from kvproof.ci import mutants\n"
             "names = [a.name for a in registry.adapters()]\n"
             f"print(json.dumps([names, len(mutants.MUTANTS), sorted(m for m in {HEAVY!r} if m in sys.modules)]))\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    names, count, loaded = json.loads(proc.stdout)
    assert names == ["tokenspeed", "vllm", "sglang"] and count > 0
    assert loaded == [], f"reading the registry imported {loaded}"
