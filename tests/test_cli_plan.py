"""`verify plan`: exit codes, JSON shape, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvproof.cli.main import main
from kvproof.impl import faults

ROOT = Path(__file__).resolve().parent.parent


def _json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["plan", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_accepted_plan_exits_zero(capsys):
    code, out = _json(capsys, "--tp", "32", "--dtype", "bf16")
    assert code == 0 and out["accepted"] is True
    assert out["parent_bytes"] == 10_616_832
    assert out["packing"]["full_attention"] == 3 and out["packing"]["linear_attention_0"] == 2
    assert out["violations"] == []


def test_rejected_plan_exits_one_and_keeps_its_numbers(capsys):
    code, out = _json(capsys, "--tp", "4", "--policy", "pinned12")
    assert code == 1 and out["accepted"] is False
    assert out["parent_bytes"] > 0 and out["packing"]["full_attention"] == 12
    assert {v["property"] for v in out["violations"]} >= {"exact_stride"}
    assert all(set(v) == {"property", "message"} for v in out["violations"])


def test_table_names_the_verdict(capsys):
    assert main(["plan", "--tp", "32", "--dtype", "bf16", "--policy", "ceil"]) == 1
    text = capsys.readouterr().out
    assert "REJECTED" in text and "padding_bound" in text and "0.512" in text


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--tp", "5"], "tp=5 does not divide"),
        (["--model", "nope"], "unknown model 'nope'"),
        (["--config", "/does/not/exist.json"], "cannot read config"),
        (["--dtype", "fp4"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_exit_two(argv, needle):
    proc = subprocess.run(
        [sys.executable, "-m", "kvproof.cli.main", "plan", *argv], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_spec_check_reports_what_the_packer_missed(capsys):
    code, out = _json(capsys, "--tp", "8")
    assert code == 0 and out["missed_by_packer"] == []
    # The packer's boot check looks at strides and padding, not at overlapping fields: under this
    # fault it still accepts, and only the spec's own check of the bound plan catches it.
    with faults.inject("field_end_in_elements"):
        code, out = _json(capsys, "--tp", "8")
    assert out["accepted"] is True and code == 1
    assert "no_overlap" in {v["property"] for v in out["missed_by_packer"]}


def test_search_past_its_limit_is_refused_by_impl_and_spec_alike(tmp_path):
    """A tiny latent makes ceil(state / page) exceed the search limit (256): the packer and the
    prover both refuse the point as outside what `search` covers, rather than disagree."""
    config = json.loads((ROOT / "spec" / "models" / "kimi-linear-48b-a3b.json").read_text())
    config.update(kv_lora_rank=32, qk_rope_head_dim=16)
    path = tmp_path / "small-latent.json"
    path.write_text(json.dumps(config))
    for command in ("plan", "prove"):
        proc = subprocess.run(
            [sys.executable, "-m", "kvproof.cli.main", command, "--config", str(path), "--tp", "1"],
            capture_output=True, text=True, check=False,
        )
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
