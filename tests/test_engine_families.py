"""`verify engine tokenspeed` over a stated family and at a user's --config: what the verdict
says it covers, and a family member that lacks a key the recipe reads is NOT VERIFIED (adapter),
never planned with the engine's default.

The family here is a test's own: DeepSeek-V3's published keys, cited from the file kvproof ships,
with its layer count an axis, through tokenspeed's real mla recipe."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline, user_config
from kvproof.engines.families import Axis, Cited, Family
from kvproof.engines.tokenspeed import engine, loader
from kvproof.engines.tokenspeed.profile import configs

V3 = Path(engine.__file__).with_name("models") / "deepseek-v3.json"


def _v3_family(drop: str | None = None) -> Family:
    published = json.loads(V3.read_text())
    return Family(
        name="v3-layers", not_a_verdict_on="deepseek-ai/DeepSeek-V3",
        cited=tuple(Cited(key, value, "engines/tokenspeed/models/deepseek-v3.json")
                    for key, value in published.items()
                    if key not in ("num_hidden_layers", "first_k_dense_replace", drop)),
        axes=(Axis("num_hidden_layers", (58, 59, 60, 61, 62), "a test's range around the published 61"),
              Axis("first_k_dense_replace", (1, 2, 3), "a test's range up to the published 3")),
        cap=7, absent={"text_config": "DeepSeek-V3's config.json is flat",
                       "cache_layer_types": "DeepSeek-V3 publishes none: every layer keeps one MLA cache",
                       "layer_types": "the same",
                       "mtp_num_hidden_layers": "DeepSeek-V3 counts its MTP head in num_nextn_predict_layers "
                       "(configs/model_config.py asks mtp_num_hidden_layers first, by getattr)"})


@pytest.fixture
def family_mla(monkeypatch: pytest.MonkeyPatch) -> Family:
    family = _v3_family()
    mla = engine.PROFILES["mla"]
    # its members and no draft file: a family's members are planned with no checkpoint's draft anyway
    monkeypatch.setitem(engine.PROFILES, "mla", dataclasses.replace(mla, models=(), drafts=(), family=family))
    return family


def test_a_family_recipe_plans_its_default_members_and_says_it_is_no_checkpoint(family_mla: Family) -> None:
    run = engine.run(loader.installed_source(), ["mla", "mha"], {"tp": [8], "dtype": ["fp8"]})
    mla, mha = run.recipes
    assert mla.over_family and not mha.over_family and mla.not_verified is None
    members = {p.point["model"] for p in mla.points}
    assert members == {m.name for m in family_mla.members()} and len(members) == 7
    doc = mla.as_dict()
    assert (doc["coverage"], doc["members"], doc["enumerated"]) == ("family", 15, 7)
    assert doc["family"]["varied"] == {"num_hidden_layers": [58, 59, 60, 61, 62], "first_k_dense_replace": [1, 2, 3]}
    assert {c["key"] for c in doc["citations"]} == set(json.loads(V3.read_text())) - {"num_hidden_layers",
                                                                                     "first_k_dense_replace"}
    assert mha.as_dict()["coverage"] == "checkpoint"
    text = render(run, baseline.compare([], set(), "tokenspeed", run.version, set()), False, set())
    assert ("mla: VERIFIED OVER FAMILY — no published checkpoint; 7 of 15 members enumerated; fixed from citations: "
            in text)
    assert ("varied: num_hidden_layers in 58..62, first_k_dense_replace in 1..3; not a verdict on "
            "deepseek-ai/DeepSeek-V3; --config FILE gives one") in text
    assert "2 of 2 recipes verified (1 at a checkpoint, 1 over a family)" in text


def test_a_member_past_the_default_list_replays_by_its_name(family_mla: Family) -> None:
    beyond = next(m.name for m in family_mla.members(everything=True)
                  if m.name not in {d.name for d in family_mla.members()})
    run = engine.run(loader.installed_source(), ["mla"],
                     {"tp": [8], "dtype": ["fp8"], "drafts": [0], "model": [beyond]})
    (point,) = run.recipes[0].points
    assert point.point["model"] == beyond and f"--model {beyond}" in point.replay


def test_a_member_lacking_a_key_the_recipe_reads_is_an_adapter_gap_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    mla = engine.PROFILES["mla"]
    monkeypatch.setitem(engine.PROFILES, "mla",
                        dataclasses.replace(mla, models=(), drafts=(), family=_v3_family(drop="kv_lora_rank")))
    (result,) = engine.run(loader.installed_source(), ["mla"], {"tp": [8], "dtype": ["fp8"]}).recipes
    assert result.adapter
    assert "'kv_lora_rank', which the v3-layers family neither cites nor varies" in (result.not_verified or "")


def test_the_whole_family_is_every_member(family_mla: Family) -> None:
    profile = engine.PROFILES["mla"]
    assert len(configs(profile, everything=True)) == family_mla.size() == 15
    run = engine.run(loader.installed_source(), ["mla"], {"tp": [8], "dtype": ["fp8"]}, everything=True)
    assert run.recipes[0].as_dict()["enumerated"] == 15


def _verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "tokenspeed", *args],
                          capture_output=True, text=True, check=False, timeout=300)


def test_config_plans_a_users_file_as_the_recipes_checkpoint(tmp_path: Path) -> None:
    mine = tmp_path / "my-v3.json"
    mine.write_text(V3.read_text())
    done = _verify("--recipe", "mla", "--config", str(mine), "--tp", "8", "--json")
    assert done.returncode == 0, done.stderr
    (recipe,) = json.loads(done.stdout)["recipes"]
    assert (recipe["coverage"], recipe["config"]) == ("checkpoint", str(mine))
    assert {p["model"] for p in recipe["points"]} == {"my-v3"}
    assert all(f"--config {mine}" in p["replay"] for p in recipe["points"])
    text = _verify("--recipe", "mla", "--config", str(mine), "--tp", "8").stdout
    assert f"mla: VERIFIED AT --config {mine} (a user's config.json, planned as a checkpoint)" in text


def test_a_config_in_a_familys_place_states_the_file_not_the_family(family_mla: Family, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The family's own line (how its members are planned) is the family's: at a --config FILE the
    limits name the file instead."""
    mla = engine.PROFILES["mla"]
    monkeypatch.setitem(engine.PROFILES, "mla", dataclasses.replace(mla, family_limits="members of a test's family"))
    mine = tmp_path / "my-v3.json"
    mine.write_text(V3.read_text())
    source = loader.installed_source()
    only: dict[str, Sequence[Any] | None] = {"tp": [8], "dtype": ["fp8"], "drafts": [0]}
    (family,) = engine.run(source, ["mla"], only).recipes
    (config,) = engine.run(source, ["mla"], only, config=user_config.load(str(mine), ["mla"])).recipes
    assert family.limits == f"members of a test's family; {mla.limits}"
    assert config.limits == f"planned at --config {mine}; {mla.limits}"


@pytest.mark.parametrize(("args", "says"), [
    (["--config", "{file}"], "name that recipe with --recipe R"),
    (["--recipe", "mla", "mha", "--config", "{file}"], "name that recipe with --recipe R"),
    (["--recipe", "mla", "--config", "{missing}"], "No such file"),
    (["--recipe", "mla", "--config", "{notjson}"], "Expecting value"),
    (["--recipe", "mla", "--config", "{array}"], "a config.json is one JSON object"),
    (["--recipe", "mla", "--config", "{deep}"], "nested too deeply"),
    (["--recipe", "mla", "--config", "{llama}"], "architectures ['LlamaForCausalLM'] is not a class recipe mla plans"),
    (["--recipe", "mha", "--config", "{headless}"], "recipe mha reads its points from keys the file lacks"),
    (["--recipe", "mha", "--config", "{classless}"], "architectures is 5; a config.json names its model classes"),
    (["--recipe", "mla", "--config", "{huge}"], "larger than 16 MiB"),
])
def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "notjson").write_text("not json")
    (tmp_path / "array").write_text("[1]")
    (tmp_path / "deep").write_text("[" * 100_000)
    with (tmp_path / "huge").open("wb") as huge:  # sparse: read whole, it would be 16 MiB and a byte
        huge.truncate(16 * 2**20 + 1)
    llama = json.loads((V3.parent / "llama-3.1-8b.json").read_text())
    (tmp_path / "llama.json").write_text(json.dumps(llama))
    (tmp_path / "headless.json").write_text(json.dumps({k: v for k, v in llama.items() if k != "num_attention_heads"}))
    (tmp_path / "classless.json").write_text(json.dumps({**llama, "architectures": 5}))
    paths = {"file": str(V3), "missing": str(tmp_path / "none.json"), "notjson": str(tmp_path / "notjson"),
             "array": str(tmp_path / "array"), "deep": str(tmp_path / "deep"), "huge": str(tmp_path / "huge"),
             "llama": str(tmp_path / "llama.json"), "headless": str(tmp_path / "headless.json"),
             "classless": str(tmp_path / "classless.json")}
    done = _verify(*(a.format(**paths) for a in args))
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_sweep_runs_a_recipes_whole_family(family_mla: Family, capsys: pytest.CaptureFixture[str]) -> None:
    from kvproof.cli.main import main

    assert main(["sweep", "--engine", "tokenspeed", "--recipe", "mla", "--dtype", "fp8", "--json"]) == 0
    (recipe,) = json.loads(capsys.readouterr().out)["recipes"]
    assert (recipe["coverage"], recipe["enumerated"], recipe["members"]) == ("family", 15, 15)
    assert {p["dtype"] for p in recipe["points"]} == {"fp8"}
    # the engine's own spelling of a dtype (--kv-cache-dtype), as verify engine takes it
    assert main(["sweep", "--engine", "tokenspeed", "--recipe", "mla", "--dtype", "bfloat16", "--json"]) == 0
    (recipe,) = json.loads(capsys.readouterr().out)["recipes"]
    assert {p["dtype"] for p in recipe["points"]} == {"bfloat16"} and recipe["enumerated"] == 15


@pytest.mark.parametrize(("args", "says"), [
    (["--recipe", "mla"], "--recipe needs --engine tokenspeed"),
    (["--engine", "tokenspeed", "--recipe", "mha"], "no stated family (it is planned at its published checkpoints)"),
    (["--engine", "tokenspeed", "--recipe", "mla", "--vary", "num_layers=3"], "--vary does not apply"),
    (["--engine", "tokenspeed", "--recipe", "kimi_k3", "--vary", "num_layers=80", "--all"],
     "--all applies to a stated family's --recipe R run"),
    (["--engine", "vllm"], "--engine vllm needs --recipe FAMILY"),
    (["--engine", "vllm", "--recipe", "granite-4.0-h-tiny-family-3"],
     "--recipe granite-4.0-h-tiny-family-3 is a member of family granite-4.0-h-tiny"),
    (["--engine", "vllm", "--recipe", "jamba-v0.1"], "--recipe jamba-v0.1: no stated family of vllm's"),
    (["--engine", "vllm", "--recipe", "granite-4.0-h-tiny", "--dtype", "bf16"],
     "no point of the 24 models chosen has dtype bf16; dtype takes auto, fp8"),
])
def test_sweep_refuses_what_a_recipes_family_does_not_take(family_mla: Family, capsys: pytest.CaptureFixture[str],
                                                          args: list[str], says: str) -> None:
    from kvproof.cli.main import main

    assert main(["sweep", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
