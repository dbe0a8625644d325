"""The doors: `python -m kvproof` is the `verify` command line, and reading the engine registry
(what `verify mutants` and the gate do for every engine) loads no engine and no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _probe(code: str) -> Any:
    """What a fresh interpreter running `code` prints, as JSON."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_reading_every_adapter_imports_no_engine_and_no_torch() -> None:
    probe = ("import sys, json\n"
             "from kvproof.engines import registry\n"
             "from kvproof.ci import mutants\n"
             "names = [a.name for a in registry.adapters()]\n"
             f"print(json.dumps([names, len(mutants.MUTANTS), sorted(m for m in {HEAVY!r} if m in sys.modules)]))\n")
    names, count, loaded = _probe(probe)
    assert names == ["tokenspeed", "vllm", "sglang"] and count > 0
    assert loaded == [], f"reading the registry imported {loaded}"


def test_verify_config_imports_no_other_command_and_no_torch() -> None:
    """`verify config` answers in well under a second: it loads its own command's module, never
    another's (the engines' adapters, the report's plotting) nor torch."""
    probe = ("import sys, json, contextlib, io\n"
             "from kvproof.cli.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    code = main(['config', '--model', 'kimi-k3', '--', '--tp', '1', '--data-parallel-size', '8'])\n"
             "cmds = sorted(m for m in sys.modules if m.startswith('kvproof.cli.cmd_'))\n"
             f"print(json.dumps([code, cmds, sorted(m for m in {HEAVY!r} if m in sys.modules)]))\n")
    code, commands, loaded = _probe(probe)
    assert code == 1 and commands == ["kvproof.cli.cmd_config"] and loaded == [], (commands, loaded)
