"""`verify engine vllm --recipe R --config FILE`: a user's config.json planned at R's points, as a
checkpoint (the file's numbers, R's backends, layer reading and drafts), never as R's family or R's
published checkpoint; a file of another class, or none that can be read, is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline
from kvproof.engines.user_config import UserConfig
from kvproof.engines.verdict import Coverage, EngineError, EngineRun
from kvproof.engines.vllm import catalog, engine

OLMO = catalog.MODELS["olmo-hybrid-7b-family-1"]
ZAMBA = catalog.MODELS["zamba2-7b-family-0"]
AT = ["mamba_dtype=auto", "prefix=off", "spec=0", "spec=2"]


def _write(tmp_path: Path, name: str, config: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


def _own(model: catalog.Model) -> dict[str, Any]:
    return json.loads(model.config_text())


def _facts(run: EngineRun) -> list[tuple]:
    return [({k: v for k, v in p.point.items() if k != "model"}, p.verdict, p.findings, p.packing, p.parent_bytes,
             p.worst_padding) for r in run.recipes for p in r.points]


def test_a_members_own_config_plans_as_the_member_but_stands_for_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "my-olmo", _own(OLMO))
    mine = engine.verify([OLMO.recipe], [1, 2], ["auto"], None, assume=AT, config=str(path))
    member = engine.verify([OLMO.recipe], [1, 2], ["auto"], None, assume=AT)
    assert _facts(mine) == _facts(member) and len(_facts(mine)) == 5  # and pp 2 at tp 1
    (r,) = mine.recipes
    assert r.coverage == Coverage(config=str(path)) and not r.over_family
    assert {p.point["model"] for p in r.points} == {"my-olmo"}
    assert all(p.replay.endswith(f" --config {path}") for p in r.points)
    assert r.limits.startswith(f"planned at --config {path} over {OLMO.recipe}'s points; at FLASH_ATTN on sm_90")
    assert "stated family" not in r.limits and "stated family" in member.recipes[0].limits
    text = render(mine, baseline.compare([], set(), "vllm", mine.version, set()), False, set())
    assert f"{OLMO.recipe}: VERIFIED AT --config {path} (a user's config.json, planned as a checkpoint)" in text
    assert "VERIFIED OVER FAMILY" not in text


def test_the_files_numbers_are_planned_not_the_members(tmp_path: Path) -> None:
    """32 heads in place of 30: the tp domain is the file's divisors, and one point's pages are its."""
    heads = {key: 32 for key in ("num_attention_heads", "num_key_value_heads", "linear_num_key_heads",
                                 "linear_num_value_heads")}
    user = UserConfig("wide.json", {**_own(OLMO), **heads})
    assert {p["tp"] for p in engine.points(catalog.at_config(OLMO, user))} == {1, 2, 4, 8, 16, 32}
    path = _write(tmp_path, "wide", user.config)
    wide = engine.verify([OLMO.recipe], [1], ["auto"], None, assume=AT[:3], config=str(path)).recipes[0].points
    own = engine.verify([OLMO.recipe], [1], ["auto"], None, assume=AT[:3]).recipes[0].points
    assert wide[0].verdict == own[0].verdict == "ok" and wide[0].parent_bytes != own[0].parent_bytes


def test_pipeline_stages_follow_the_files_ple_layers() -> None:
    """vLLM refuses pp > 1 for a Qwen4-Exp config with PLE layers: whether a point has stages is the file's."""
    plain, ple = catalog.MODELS["qwen3.8-flash-next-family-0"], catalog.MODELS["qwen3.8-flash-next-family-2"]

    def stages(model: catalog.Model, config: dict[str, Any]) -> set[int]:
        return {p["pp"] for p in engine.points(catalog.at_config(model, UserConfig("q.json", config)))}

    assert stages(plain, _own(ple)) == {1} and stages(ple, _own(plain)) == {1, 2, 4, 8}


def test_a_spread_run_of_a_file_equals_the_one_process_run(tmp_path: Path) -> None:
    """Workers plan the file too (32 heads: pages the member's 30 never give), and replay it."""
    wide = {**_own(OLMO), **{key: 32 for key in ("num_attention_heads", "num_key_value_heads",
                                                  "linear_num_key_heads", "linear_num_value_heads")}}
    user = UserConfig(str(_write(tmp_path, "wide", wide)), wide)
    only: dict[str, Any] = {"tp": [1, 2, 4], "prefix": ["off"]}
    alone, spread = (engine.run([OLMO.recipe], only, workers=workers, user_config=user) for workers in (1, 2))
    assert _facts(alone) == _facts(spread) and len(_facts(alone)) == 52
    own = engine.run([OLMO.recipe], only, workers=1)
    assert {p.parent_bytes for p in spread.recipes[0].points} != {p.parent_bytes for p in own.recipes[0].points}
    assert all(p.replay.endswith(f" --config {user.path}") for p in spread.recipes[0].points)


def test_a_files_findings_are_its_own_in_a_baseline(tmp_path: Path) -> None:
    """Zamba2's member's findings (padding_bound) are baselined at its points; the same findings at a user's
    file are new, and none of the member's reads as stale."""
    path = _write(tmp_path, "my-zamba", _own(ZAMBA))
    run = engine.verify([ZAMBA.recipe], [1], ["auto"], None, assume=["mamba_dtype=auto", "prefix=off", "spec=0"],
                        config=str(path))
    found = baseline.findings("vllm", run.version, run.recipes)
    assert found and all("model=my-zamba" in key[3] for key in found)
    cmp = baseline.compare(found, baseline.load(engine.BASELINE), "vllm", run.version, baseline.ran(run.recipes))
    assert cmp.new == found and not cmp.known and not cmp.stale


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", *args],
                          capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.parametrize(("args", "says"), [
    (["--recipe", "jamba-v0.1", "--config", "{olmo}"], "architectures ['OlmoHybridForCausalLM'] is not jamba-v0.1's"),
    (["--config", "{olmo}"], "name that recipe with --recipe R"),
    (["--recipe", OLMO.recipe, ZAMBA.recipe, "--config", "{olmo}"], "name that recipe with --recipe R"),
    (["--recipe", OLMO.recipe, "--config", "{missing}"], "No such file"),
    (["--recipe", OLMO.recipe, "--config", "{notjson}"], "not valid JSON"),
    (["--recipe", OLMO.recipe, "--config", "{array}"], "a config.json is one JSON object"),
    (["--recipe", OLMO.recipe, "--config", "{deep}"], "nested too deeply"),
    (["--recipe", OLMO.recipe, "--config", "{olmo}", "--shard", "1/2"], "vllm has 1 recipes to deal here"),
    (["--recipe", OLMO.recipe, "--config", "{headless}"], "are read from keys the file lacks or holds otherwise "
                                                         "(KeyError: 'num_attention_heads')"),
    (["--recipe", OLMO.recipe, "--config", "{halves}"], "no tp divides its head counts"),
])
def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    paths = {"olmo": _write(tmp_path, "olmo", _own(OLMO)), "missing": tmp_path / "none.json",
             "notjson": tmp_path / "notjson", "array": tmp_path / "array", "deep": tmp_path / "deep"}
    paths["notjson"].write_text("not json")
    paths["array"].write_text("[1]")
    paths["deep"].write_text("[" * 100_000)
    headless = {k: v for k, v in _own(OLMO).items() if k != "num_attention_heads"}
    paths["headless"] = _write(tmp_path, "headless", headless)
    paths["halves"] = _write(tmp_path, "halves", {**_own(OLMO), "num_attention_heads": 30.5})
    done = _cli(*(a.format(**paths) for a in args))
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_run_plans_a_file_for_one_recipe_only() -> None:
    """What the command line's loader refuses, a caller of run() is refused too: the file is one checkpoint."""
    user = UserConfig("mine.json", _own(OLMO))
    for recipes in (None, [OLMO.recipe, ZAMBA.recipe]):
        with pytest.raises(EngineError, match="one checkpoint of one recipe"):
            engine.run(recipes, user_config=user)


def test_a_familys_name_names_its_members_or_with_a_file_its_first(tmp_path: Path) -> None:
    only: dict[str, Any] = {"tp": [1], "prefix": ["off"], "mamba_dtype": ["auto"], "spec": [0], "pp": [1]}
    family = engine.run(["olmo-hybrid-7b"], only)
    assert [r.recipe for r in family.recipes] == ["olmo-hybrid-7b-family-0", "olmo-hybrid-7b-family-1"]
    user = UserConfig(str(_write(tmp_path, "my-olmo", _own(OLMO))), _own(OLMO))
    (mine,) = engine.run(["olmo-hybrid-7b"], only, user_config=user).recipes
    assert mine.recipe == "olmo-hybrid-7b-family-0" and mine.coverage == Coverage(config=user.path)
