"""`verify engine tokenspeed --recipe qwen4_exp`: tokenspeed's Qwen4-Exp recipe over the stated
Qwen3.8-Flash-Next family (engines/tokenspeed/qwen4_exp.py), through the released recipe."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kvproof.engines.families import Family
from kvproof.engines.tokenspeed import engine, loader, pipeline, qwen4_exp
from kvproof.engines.verdict import AdapterGap, EngineRun

SSM = "TOKENSPEED_MAMBA_SSM_DTYPE"
NO_PLE, PLE = "qwen3.8-flash-next-family-0", "qwen3.8-flash-next-family-1"


@pytest.fixture(scope="module")
def default_run() -> EngineRun:
    return engine.run(loader.installed_source(), ["qwen4_exp"])


def _plan(model: str, tp: int = 8, dtype: str = "fp8", drafts: int = 0,
          ssm: str = "float32") -> pipeline.Planned | pipeline.Refused:
    return engine.plan(loader.installed_source(), "qwen4_exp",
                       {"model": model, "tp": tp, "dtype": dtype, "drafts": drafts, "assume": f"{SSM}={ssm}"})


def _fields(planned: pipeline.Planned | pipeline.Refused) -> dict[str, dict[str, Any]]:
    assert isinstance(planned, pipeline.Planned)
    return {f["id"]: f for f in planned.documents[1]["fields"]}


def test_the_default_run_verifies_every_member_tp_dtype_ssm_dtype_and_draft(default_run: EngineRun) -> None:
    (result,) = default_run.recipes
    assert result.not_verified is None and not result.adapter and result.over_family
    assert all(p.verdict == "ok" for p in result.points)
    seen = {(p.point["model"], p.point["tp"], p.point["dtype"], p.point["drafts"], p.point["assume"])
            for p in result.points}
    members = {m.name for m in qwen4_exp.QWEN4.members()}
    assert seen == {(m, tp, dtype, drafts, f"{SSM}={ssm}") for m in members for tp in (1, 2, 4, 8)
                    for dtype in ("fp8", "bfloat16") for drafts in (0, 1) for ssm in ("float32", "bfloat16")}
    assert len(seen) == 96 and len(members) == qwen4_exp.QWEN4.size() == 3


def test_a_member_lacking_a_cited_key_is_an_adapter_gap_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    family = dataclasses.replace(qwen4_exp.QWEN4, cited=tuple(c for c in qwen4_exp.QWEN4.cited
                                                              if c.key != "text_config.indexer_head_dim"))
    profile = engine.PROFILES["qwen4_exp"]
    monkeypatch.setitem(engine.PROFILES, "qwen4_exp", dataclasses.replace(profile, family=family))
    (result,) = engine.run(loader.installed_source(), ["qwen4_exp"],
                           {"tp": [8], "dtype": ["fp8"], "drafts": [0], "model": [NO_PLE]}).recipes
    assert result.adapter
    assert "'indexer_head_dim', which the qwen3.8-flash-next family neither cites nor varies" in (
        result.not_verified or "")


def test_a_key_the_family_lacks_by_its_shape_must_be_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    family: Family = dataclasses.replace(qwen4_exp.QWEN4, absent={
        k: v for k, v in qwen4_exp.QWEN4.absent.items() if k != "sliding_window"})
    profile = engine.PROFILES["qwen4_exp"]
    monkeypatch.setitem(engine.PROFILES, "qwen4_exp", dataclasses.replace(profile, family=family))
    (result,) = engine.run(loader.installed_source(), ["qwen4_exp"],
                           {"tp": [8], "dtype": ["fp8"], "drafts": [0], "model": [NO_PLE]}).recipes
    assert result.adapter and "'sliding_window'" in (result.not_verified or "")


@pytest.mark.parametrize("tp", [3, 32])
def test_tp_not_dividing_the_gdn_heads_is_refused_by_the_linear_attention_config(tp: int) -> None:
    refused = _plan(NO_PLE, tp=tp)
    assert isinstance(refused, pipeline.Refused)
    assert f"(k=16, v=48) must be divisible by tp_size={tp}" in refused.message


def test_tp_16_divides_the_gdn_heads_and_plans_though_not_the_attention_heads() -> None:
    # The domain stops at 8 (24 attention heads); the recipe itself plans 16, as LIMITS says.
    assert isinstance(_plan(NO_PLE, tp=16), pipeline.Planned)
    assert "tp 16" in qwen4_exp.LIMITS


def test_mxfp8_is_refused_by_the_recipes_constructor() -> None:
    with pytest.raises(AdapterGap, match="does not yet support the MXFP8 interleaved scale layout"):
        _plan(NO_PLE, dtype="mxfp8")


def test_the_ssm_dtype_switch_decides_the_gdn_state_dtype() -> None:
    assert _fields(_plan(NO_PLE, ssm="float32"))["layer.0.ssm"]["dtype"] == "float32"
    assert _fields(_plan(NO_PLE, ssm="bfloat16"))["layer.0.ssm"]["dtype"] == "bfloat16"


def test_qsa_widens_the_block_to_lcm_128_and_64_times_the_ratio() -> None:
    fields = _fields(_plan(NO_PLE))
    assert fields["layer.3.k"]["shape"] == [256, 1, 256]  # lcm(128, 64 x 4), kv heads max(2 // 8, 1)
    assert fields["layer.3.qsa.compressed_key"]["shape"] == [64, 1, 128]
    assert "layer.2.qsa.compressed_key" not in fields  # QSA on full-attention layers only


def test_the_mtp_draft_adds_one_full_attention_layer_with_its_qsa_rows() -> None:
    without, drafted = _fields(_plan(NO_PLE, drafts=0)), _fields(_plan(NO_PLE, drafts=1))
    assert set(drafted) - set(without) == {"layer.48.k", "layer.48.v", "layer.48.qsa.compressed_key",
                                           "layer.48.qsa.raw_key", "layer.48.qsa.rope_position"}
    assert drafted["layer.48.k"]["group"] == "full_attention"


@pytest.mark.parametrize(("model", "context", "conv_rows"), [(PLE, [1], [10240, 6]),
                                                            ("qwen3.8-flash-next-family-2", [2], [10240, 9])])
def test_ple_layers_get_the_context_row_and_one_conv_state_each(model: str, context: list[int],
                                                                conv_rows: list[int]) -> None:
    fields = _fields(_plan(model))
    ple = {k: f for k, f in fields.items() if f["group"] == "qwen4_exp_ple"}
    assert len(ple) == 1 + 48
    assert ple["layer.0.qwen4_exp.ple.context"]["shape"] == context  # ngram_size - 1
    assert ple["layer.47.qwen4_exp.ple.conv"]["shape"] == conv_rows  # (2560 x 4, (4 - 1) x ngram_size)
    assert not any(f["group"] == "qwen4_exp_ple" for f in _fields(_plan(NO_PLE)).values())


def test_the_seeded_edit_still_applies_to_the_released_recipe() -> None:
    path, text, _ = qwen4_exp.EDITS["ts_qwen4_qsa_shared_plane"]
    assert text in (loader.installed_source().package_dir / path).read_text(encoding="utf-8")
