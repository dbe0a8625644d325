"""tokenspeed's own kimi_k3 recipe over families of geometries (engines/tokenspeed/sweep.py):
enumerated when small, searched and shrunk by hypothesis when large, failures grouped by cause
with the structure of each failing set."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvproof.engines.tokenspeed import loader, sweep
from kvproof.impl import faults
from kvproof.spec.catalog import load_model
from kvproof.spec.sweep_family import Family, parse_range

RECIPE = "runtime/layers/attention/kv_cache/recipes/kimi_k3.py"


@pytest.fixture(scope="module")
def installed() -> loader.Source:
    return loader.installed_source()


def _family(**vary: str) -> Family:
    return Family.around(load_model("kimi-k3"), {k: parse_range(k, v) for k, v in vary.items()}, ("fp8", "bf16"))


def test_the_published_geometry_passes_where_verify_engine_says(installed) -> None:
    """The family of one member, K3 itself, at fp8: every tp boots and checks clean."""
    family = Family.around(load_model("kimi-k3"), {}, ("fp8",))
    result = sweep.sweep(installed, family)
    assert result.enumerated and result.tried == 12 and not result.causes
    assert result.verdict() == "no counterexample in 12 members (enumerated)"


def test_layer_counts_the_recipe_refuses_form_a_residue_class(installed) -> None:
    """With every 4th layer MLA (plus the last), the recipe's three state groups need the KDA
    count divisible by 3: it refuses num_layers = 2, 3 (mod 4) at every tp and dtype."""
    result = sweep.sweep(installed, _family(num_layers="80..95"))
    assert result.enumerated and result.tried == 16 * 12 * 2
    by_message = {c.message.split(",")[0]: c for c in result.causes}
    split = by_message["Kimi-K3 cache requires the KDA layer count to divide into 3 state groups"]
    assert split.property == "boots" and split.count == 8 * 12 * 2
    assert split.member.num_layers == 82 and split.patterns["num_layers"] == "8 of 16: ≡ 2, 3 (mod 4)"
    padding = next(c for c in result.causes if "padding fraction" in c.message)
    assert (padding.member.tp, padding.member.dtype) == (32, "bf16")
    assert padding.patterns["num_layers"] == "8 of 16: ≡ 0, 1 (mod 4)"


def test_a_large_family_is_searched_and_the_failure_shrunk(installed) -> None:
    """Too many members to enumerate: hypothesis finds a failing member and shrinks it, and the
    answer never claims more than the search covered."""
    family = _family(num_layers="24..128", kda_heads="16..128")
    assert family.size() > sweep.ENUMERATE_UP_TO
    result = sweep.sweep(installed, family, examples=60)
    assert not result.enumerated and result.causes
    (cause,) = result.causes
    assert cause.property == "boots"
    # Shrunk towards the smallest geometry: the fewest layers that still fail.
    assert cause.member.num_layers <= 30, cause.member


def verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvproof.cli.main", *args], capture_output=True, text=True,
                          check=False, timeout=300)


def test_cli_reports_each_cause_with_its_pattern_and_replay() -> None:
    """`verify sweep --engine tokenspeed`: exit 1 with both causes of the 80..95 family at bf16,
    each with the replay that reruns its smallest member; the replay of the K3-like member fails
    again for the same cause, and K3 itself (93 layers) at fp8 exits 0 without claiming PROVED."""
    proc = verify("sweep", "--engine", "tokenspeed", "--vary", "num_layers=80..95", "--dtype", "bf16", "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["enumerated"] and doc["tried"] == doc["domain_size"] == 16 * 12
    padding = next(c for c in doc["causes"] if "padding fraction" in c["message"])
    assert padding["member"]["num_layers"] == 80 and padding["member"]["tp"] == 32
    again = verify(*padding["replay"].split()[1:], "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["causes"][0]["message"] == padding["message"]
    clean = verify("sweep", "--engine", "tokenspeed", "--dtype", "fp8")
    assert clean.returncode == 0 and "no counterexample in 12 members (enumerated)" in clean.stdout
    assert "PROVED" not in clean.stdout


@pytest.mark.parametrize("args, names", [
    (["--policy", "ceil"], "--policy is for our contract's sweep"),
    (["--model", "deepseek-v3"], "drop --model/--config"),
    (["--examples", "0"], "--examples must be between 1 and"),
    (["--engine-path", "/nonexistent"], "no tokenspeed package"),
    (["--engine-path", "/nonexistent", "--workers", "2"], "no tokenspeed package"),
    (["--workers", "0"], "--workers must be between 1 and"),
    (["--workers", "2", "--tx", "popen"], "pick one"),
    (["--vary", "num_layers=2..1024", "kda_heads=1..4096", "--workers", "2"], "enumerates at most 2,000,000"),
    (["--workers", "99999"], "--workers must be between 1 and"),
    (["--examples", "10", "--workers", "2"], "--workers and --tx enumerate every member"),
    (["--examples", str(10**20)], "--examples must be between 1 and 100,000"),
    (["--budget", "5"], "--budget bounds z3 in our contract's sweep"),
    (["--tx", ""], "not an execnet spec"),
    (["--tx", "bogus"], "not an execnet spec"),
])
def test_cli_bad_input_is_one_line_exit_2(args, names) -> None:
    proc = verify("sweep", "--engine", "tokenspeed", *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and names in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag", [["--engine-path", "/tmp"], ["--workers", "2"], ["--examples", "5"]])
def test_engine_flags_need_engine(flag) -> None:
    proc = verify("sweep", *flag)
    assert proc.returncode == 2 and "need --engine" in proc.stderr, proc.stderr


def test_a_dtype_named_twice_counts_once() -> None:
    proc = verify("sweep", "--engine", "tokenspeed", "--dtype", "fp8", "fp8", "--json")
    assert json.loads(proc.stdout)["domain_size"] == 12, proc.stderr


def _broken_copy(installed: loader.Source, folder: Path, line: str) -> Path:
    """The installed package with `line` put before the recipe splits its KDA layers."""
    shutil.copytree(installed.package_dir, folder / "tokenspeed", ignore=shutil.ignore_patterns("__pycache__"))
    recipe = folder / "tokenspeed" / RECIPE
    anchor = "        per_group = len(kda_layer_ids) // _KIMI_K3_STATE_GROUPS"
    recipe.write_text(recipe.read_text().replace(anchor, f"        {line}\n{anchor}"))
    return folder


@pytest.mark.parametrize("spread", [[], ["--workers", "2"]])
def test_an_undeclared_engine_exception_is_exit_2_naming_it(installed, tmp_path, spread) -> None:
    """A recipe raising what it does not declare gives no verdict, in one process or spread."""
    path = _broken_copy(installed, tmp_path, "raise TypeError('boom')")
    proc = verify("sweep", "--engine", "tokenspeed", "--engine-path", str(path), "--vary", "num_layers=80..81",
                  "--dtype", "fp8", *spread)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "TypeError: boom" in proc.stderr and "<job>" not in proc.stdout, proc.stderr


def test_a_recipe_refusing_every_member_is_not_verified(installed, tmp_path) -> None:
    """Every member declared unsupported is no evidence: NOT VERIFIED, exit 1, as verify engine;
    the replay keeps --engine-path."""
    path = _broken_copy(installed, tmp_path, "raise NotImplementedError('no verified split')")
    proc = verify("sweep", "--engine", "tokenspeed", "--engine-path", str(path), "--vary", "num_layers=80..81",
                  "--dtype", "fp8", "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["refused"] == doc["tried"] == 24 and doc["verdict"].startswith("NOT VERIFIED")


def test_a_recipe_right_only_at_k3_is_caught_by_the_family_alone() -> None:
    """ts_k3_group_size_literal (23 KDA layers per group: K3's 69 / 3) plans K3 exactly as the
    release does, so `verify engine` at every fp8 point sees nothing; the family at 80 layers
    (60 KDA layers) refuses to boot at every tp."""
    env = dict(os.environ, **{faults.ENV: "ts_k3_group_size_literal"})
    point = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "tokenspeed", "--recipe", "kimi_k3",
                            "--dtype", "fp8"], capture_output=True, text=True, check=False, env=env, timeout=300)
    assert point.returncode == 0, point.stdout[-2000:]
    family = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "sweep", "--engine", "tokenspeed", "--vary",
                             "num_layers=80", "--dtype", "fp8", "--json"],
                            capture_output=True, text=True, check=False, env=env, timeout=300)
    assert family.returncode == 1, family.stderr
    (cause,) = json.loads(family.stdout)["causes"]
    assert cause["property"] == "boots" and cause["count"] == 12 and "linear_attention_2" in cause["message"]


@pytest.mark.parametrize("spread", [["--workers", "2"], ["--tx", "popen", "popen"]])
def test_distributed_enumeration_equals_one_process(spread) -> None:
    """The same family over pytest-xdist workers (local, or execnet specs that carry the job in
    their env) enumerates every member and finds the same causes, counts, members and patterns."""
    family = ["sweep", "--engine", "tokenspeed", "--vary", "num_layers=80..83", "--dtype", "bf16", "--json"]
    alone, spread_out = verify(*family), verify(*family, *spread)
    assert alone.returncode == spread_out.returncode == 1, spread_out.stderr
    one, many = json.loads(alone.stdout), json.loads(spread_out.stdout)
    assert many["enumerated"] and many["tried"] == many["domain_size"] == 4 * 12
    assert many["causes"] == one["causes"] and len(one["causes"]) == 2
