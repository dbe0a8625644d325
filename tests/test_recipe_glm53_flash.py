"""tokenspeed's glm53_flash recipe over kvproof's GLM-5.3-Flash family: the default run verifies,
a member lacking a cited key is an adapter gap naming it, the recipe refuses tp 16 (its packing
table stops at 8), the fp8 DSA cache asks the assumed GPU, and the MTP draft adds its DSA layer."""

from __future__ import annotations

import dataclasses

import pytest

from kvproof.engines.families import Family
from kvproof.engines.tokenspeed import engine, glm53_flash, loader, pipeline
from kvproof.engines.verdict import RecipeResult

RECIPE = "glm53_flash"
MEMBER = glm53_flash.FAMILY.members()[0].name


def _run(only: dict | None = None) -> RecipeResult:
    (result,) = engine.run(loader.installed_source(), [RECIPE], only or {}).recipes
    return result


def _plan(**point: object) -> pipeline.Planned | pipeline.Refused:
    return engine.plan(loader.installed_source(), RECIPE, {"model": MEMBER, **point})


def test_the_default_run_plans_every_point_and_refuses_only_fp8_on_hopper() -> None:
    result = _run()
    assert result.not_verified is None and result.over_family
    assert len(result.points) == 24  # tp 1, 2, 4, 8 x (bf16, fp8 on sm_90 and sm_100) x drafts 0, 1
    refused = [p.point for p in result.points if p.verdict == "refused"]
    assert len(refused) == 8 and all(p["dtype"] == "fp8" and p["assume"] == "platform=sm_90" for p in refused)
    assert all(p.verdict == "ok" for p in result.points if p.point not in refused)


def test_a_member_lacking_a_cited_key_is_an_adapter_gap_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    family = glm53_flash.FAMILY
    dropped = Family(**{**{f.name: getattr(family, f.name) for f in dataclasses.fields(family)},
                        "cited": tuple(c for c in family.cited if c.key != "text_config.index_kpool")})
    profile = engine.PROFILES[RECIPE]
    monkeypatch.setitem(engine.PROFILES, RECIPE, dataclasses.replace(profile, family=dropped))
    result = _run({"tp": [8], "dtype": ["bfloat16"]})
    assert result.adapter
    assert "'index_kpool', which the glm53-flash family neither cites nor varies" in (result.not_verified or "")


def test_tp_16_is_past_the_recipes_packing_table() -> None:
    # 16 divides both 64-head counts, so only recipes/glm53_flash.py _PACKING stops it.
    assert 16 not in {p.point["tp"] for p in _run().points}
    refused = _plan(tp=16, dtype="bfloat16", drafts=0)
    assert isinstance(refused, pipeline.Refused)
    assert refused.unsupported and "no verified LCM packing for tp_size=16" in refused.message
    assert isinstance(_plan(tp=8, dtype="bfloat16", drafts=0), pipeline.Planned)


def test_the_fp8_cache_asks_the_assumed_platform_and_bfloat16_asks_nothing() -> None:
    assert isinstance(_plan(tp=8, dtype="fp8", drafts=0, assume="platform=sm_90"), pipeline.Refused)
    assert "platform" in loader.ASSUMED.consulted
    assert isinstance(_plan(tp=8, dtype="fp8", drafts=0, assume="platform=sm_100"), pipeline.Planned)
    assert "platform" in loader.ASSUMED.consulted
    assert isinstance(_plan(tp=8, dtype="bfloat16", drafts=0), pipeline.Planned)
    assert not loader.ASSUMED.consulted


def test_the_mtp_draft_adds_one_dsa_layer_to_the_full_attention_group() -> None:
    target = {p.point["drafts"]: p for p in _run({"tp": [8], "dtype": ["bfloat16"]}).points}
    assert set(target) == {0, 1} and all(p.verdict == "ok" for p in target.values())
    without, with_draft = _plan(tp=8, dtype="bfloat16", drafts=0), _plan(tp=8, dtype="bfloat16", drafts=1)
    assert isinstance(without, pipeline.Planned) and isinstance(with_draft, pipeline.Planned)
    assert without.documents != with_draft.documents
