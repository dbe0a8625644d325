"""Granite-4.0-H (GraniteMoeHybridForCausalLM) planned over its stated family (engines/vllm/granite.py):
the members plan at the installed vLLM, say they stand for a family, and no value transformers fills in
for a key a member lacks moves a plan."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults

from kvproof.engines.families import Member
from kvproof.engines.vllm import catalog, engine, granite, planner
from kvproof.impl import faults

NAMES = [m.name for m in granite.MEMBERS]
FIRST = catalog.MODELS[NAMES[0]]
Only = dict[str, Any]
AT_TP1: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1]}


def test_the_family_is_a_fixed_list_of_members_made_of_cited_and_varied_keys_only() -> None:
    """The same members on every run (every value of every axis at least once), each config.json exactly
    the cited and varied keys, and the cited values fixed in every member."""
    assert [m.index for m in granite.FAMILY.members()] == [m.index for m in granite.MEMBERS] == \
        [0, 1, 2, 4, 8, 12, 16, 20]
    assert granite.FAMILY.size() == 24
    keys = {c.key for c in granite.FAMILY.cited} | {a.key for a in granite.FAMILY.axes}
    for member in granite.MEMBERS:
        config = json.loads(catalog.MODELS[member.name].config_text())
        assert set(config) == keys
        assert all(config[c.key] == c.value for c in granite.FAMILY.cited)
    seen = {a.key: {json.dumps(m.values[a.key]) for m in granite.MEMBERS} for a in granite.FAMILY.axes}
    assert all(len(seen[a.key]) == len(a.values) for a in granite.FAMILY.axes)


def test_every_member_plans_at_the_installed_vllm_and_stands_for_the_family_not_a_checkpoint() -> None:
    """At 0.33.0 every member boots at 0 and 2 ngram tokens (GraniteMoeHybrid passes num_spec there), and
    each result says family, its members and citations, and which checkpoint it is no verdict on."""
    run = engine.run(NAMES, {**AT_TP1, "spec": [0, 2]})
    assert [r.recipe for r in run.recipes] == NAMES
    for r in run.recipes:
        assert r.not_verified is None and [p.verdict for p in r.points] == ["ok", "ok"]
        out = r.as_dict()
        assert (out["coverage"], out["members"], out["enumerated"]) == ("family", 24, 8)
        assert out["family"]["not_a_verdict_on"] == "ibm-granite/granite-4.0-h-tiny"
        assert out["family"]["member"] == r.recipe
        assert {c["key"] for c in out["citations"]} == {c.key for c in granite.FAMILY.cited}
    assert catalog.MODELS["jamba-v0.1"].coverage is None  # a published checkpoint stays one


def test_the_layers_state_is_their_own_not_the_model_classes() -> None:
    """Each MambaMixer2 layer keeps 3 + num_spec conv rows of 3,072 + 2 x 128 channels (its own
    get_state_shape); at 0.33.0 the model class agrees, so the block grows with the tokens: 1,584 tokens
    at 0 (a 1 KV-head attention page of 512 B per token; state 3,328 x 3 x 2 + 48 x 64 x 128 x 2 =
    806,400 B), 1,616 at 2 (819,712 B)."""
    planned = {spec: planner.plan(planner.Point(FIRST, 1, "auto", "auto", False, FIRST.backends[0], spec))
               for spec in (0, 2)}
    assert (planned[0].block_size, planned[2].block_size) == (1584, 1616)
    conv = {spec: {tuple(f["shape"]) for f in p.documents[1]["fields"] if f["id"].endswith("state0")}
            for spec, p in planned.items()}
    assert conv == {0: {(3, 3328)}, 2: {(5, 3328)}}


def test_the_seeded_unwidened_padding_is_killed_on_the_family() -> None:
    """vllm#57721 seeded at 0.33.0: the alignment pads to the state without the speculative rows (811,008 B
    at 1 KV head) while the layers keep them (819,712 B at 2 tokens): vLLM's own assertion fails."""
    only = {**AT_TP1, "spec": [2]}
    with faults.inject("vllm_spec_padding_unwidened"):
        (found,) = engine.run(NAMES[:1], only).recipes[0].points
    assert [f.property for f in found.findings] == ["boots"]
    assert "vllm/v1/kv_cache_interface.py:" in found.findings[0].message


STRINGS = {"hidden_act": "gelu", "position_embedding_type": "rope"}  # another value for each string key


def test_no_default_of_transformers_config_class_moves_a_plan() -> None:
    """vLLM reads config.json through transformers' GraniteMoeHybridConfig, which answers every key a member
    lacks with a class default, so no read can raise: instead every such key is set to another value at
    once, and a drafted, tensor-parallel, prefix-caching point plans exactly as before. A key whose default
    did move a page would be a number nobody published."""
    from transformers import GraniteMoeHybridConfig

    member = granite.MEMBERS[0]
    defaults = GraniteMoeHybridConfig().to_dict()
    lacking, changed = config_defaults.changed(defaults, member.config(), config_defaults.BOOKKEEPING, STRINGS)
    kept = sorted(key for key in lacking if changed[key] == defaults[key])
    assert kept == ["pad_token_id", "rope_parameters", "time_step_limit"]  # None / structured: left as they are
    values = {**member.values, **{k: v for k, v in changed.items() if k not in kept}}
    other = replace(FIRST, member=Member(granite.FAMILY, member.index, values))
    assert set(json.loads(other.config_text())) == set(member.config()) | set(lacking) - set(kept)
    point = planner.Point(FIRST, 2, "auto", "auto", True, FIRST.backends[0], 2)
    base = planner.plan(point)
    again = planner.plan(planner.Point(other, 2, "auto", "auto", True, FIRST.backends[0], 2))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


def test_a_member_past_the_default_list_plans_by_name_and_the_sweep_plans_them_all(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`verify engine vllm --recipe` takes any member (the sweep's replay lines name them); `verify sweep
    --engine vllm --recipe granite-4.0-h-tiny` plans all 24, each a recipe standing for the family."""
    from kvproof.cli.main import main

    (r,) = engine.run(["granite-4.0-h-tiny-family-3"], {**AT_TP1, "spec": [0]}).recipes
    out = r.as_dict()
    assert (out["coverage"], out["members"], out["enumerated"]) == ("family", 24, 1)
    assert out["family"]["member_values"]["dtype"] == "float16" and r.points[0].verdict == "ok"
    assert main(["sweep", "--engine", "vllm", "--recipe", "granite-4.0-h-tiny", "--dtype", "fp8", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert [r["recipe"] for r in doc["recipes"]] == [f"granite-4.0-h-tiny-family-{i}" for i in range(24)]
    assert {(r["members"], r["enumerated"]) for r in doc["recipes"]} == {(24, 24)}
    assert {p["dtype"] for r in doc["recipes"] for p in r["points"]} == {"fp8"}
    assert {f["property"] for r in doc["recipes"] for p in r["points"] for f in p["findings"]} == {
        "tp_block_size", "pp_block_size"}


def test_a_shard_counts_a_familys_members_as_the_unsharded_run() -> None:
    """Each of two shards plans one of two members; each says 2 members enumerated, as the run they split does."""
    names = ["granite-4.0-h-tiny-family-0", "granite-4.0-h-tiny-family-1"]
    for k in (1, 2):
        (r,) = engine.run(names, shard=(k, 2)).recipes
        assert r.coverage is not None and r.coverage.enumerated == 2
