"""`verify engine tokenspeed --recipe deepseek_v41` over its stated family (engines/tokenspeed/deepseek_v41.py):
the default run verifies every point; a key the family stops citing is an adapter gap naming it; the
recipe's own refusals at the geometry it pins and at DSpark stage counts other than 3; the platform
assumption decides the row format; the cited non-owner compress ratios do not decide the layout."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kvproof.engines.families import Family
from kvproof.engines.tokenspeed import deepseek_v41, engine, loader, pipeline
from kvproof.engines.tokenspeed.configs import member_dicts
from kvproof.engines.verdict import RecipeResult

RECIPE = "deepseek_v41"
MEMBER = "deepseek-v4.1-flash-family-0"


def _run(only: dict[str, Any] | None = None) -> RecipeResult:
    (result,) = engine.run(loader.installed_source(), [RECIPE], only or {}).recipes
    return result


def _with_family(monkeypatch: pytest.MonkeyPatch, family: Family) -> None:
    monkeypatch.setitem(engine.PROFILES, RECIPE, dataclasses.replace(engine.PROFILES[RECIPE], family=family))


def _plan(point: dict[str, Any], text: dict[str, Any] | None = None) -> pipeline.Planned | pipeline.Refused:
    """One point of the member, its text config changed by `text`, through the engine's recipe."""
    config = member_dicts(deepseek_v41.FAMILY.members()[0].config())
    config["text_config"].update(text or {})
    profile = engine.PROFILES[RECIPE]
    modules = loader.load(loader.installed_source(), profile.modules)
    full = {"model": MEMBER, "tp": 8, "dtype": "fp8", "drafts": 0, "assume": "platform=sm_100", **point}
    return engine._plan(profile, modules, {f"{MEMBER}.json": config}, full, loader.installed_source().package_dir,
                        deepseek_v41.FAMILY.name)


def test_the_default_run_verifies_every_point_over_the_family() -> None:
    result = _run()
    assert result.not_verified is None and not result.adapter
    assert len(result.points) == 56 and all(p.verdict == "ok" for p in result.points)
    doc = result.as_dict()
    assert (doc["coverage"], doc["members"], doc["enumerated"]) == ("family", 1, 1)
    assert {p.point["drafts"] for p in result.points} == {0, 3}
    assert {p.point["tp"] for p in result.points} == {1, 2, 4, 8, 16, 32, 64}


def test_a_key_the_family_stops_citing_is_an_adapter_gap_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    cited = tuple(c for c in deepseek_v41.FAMILY.cited if c.key != "text_config.candidate_topk_blocks")
    _with_family(monkeypatch, dataclasses.replace(deepseek_v41.FAMILY, cited=cited))
    result = _run({"tp": [8], "dtype": ["fp8"]})
    assert result.adapter
    assert ("'candidate_topk_blocks', which the deepseek-v4.1-flash family neither cites nor varies"
            in (result.not_verified or ""))


@pytest.mark.parametrize(("key", "value"), [
    ("head_dim", 576), ("index_head_dim", 64), ("sliding_window", 256),
    ("kv_source_layer_ids", [2, 8, 14, 22]),
])
def test_the_recipe_refuses_any_other_flash_geometry(key: str, value: Any) -> None:
    # recipes/deepseek_v41.py:120-132: the cited geometry is the only one the recipe packs.
    refused = _plan({}, {key: value})
    assert isinstance(refused, pipeline.Refused)
    assert "V4.1" in refused.message


def test_the_cited_geometry_plans_and_the_non_owner_ratios_do_not_decide_the_layout() -> None:
    cited = _plan({})
    # Only the owners (2, 8, 14, 20) and the index sources keep their ratios; every other layer
    # keeps no compressed history (v41_layer_mapping accepts ratio 0 there).
    keep = {2, 8, 14, 20, 24, 28, 32, 36}
    sparse = [r if layer in keep else 0 for layer, r in enumerate(deepseek_v41.FAMILY.members()[0].values[
        "text_config.compress_ratios"])]
    variant = _plan({}, {"compress_ratios": sparse})
    assert isinstance(cited, pipeline.Planned) and isinstance(variant, pipeline.Planned)
    assert cited.documents == variant.documents


def test_dspark_refuses_no_stage() -> None:
    # recipes/deepseek_v41.py:100-102, for a DSpark checkpoint whose weights hold no mtp.<stage>.
    profile = engine.PROFILES[RECIPE]
    modules = loader.load(loader.installed_source(), profile.modules)
    config = member_dicts(deepseek_v41.FAMILY.members()[0].config())
    loader.ASSUMED.point({"platform": "sm_100"})
    point = {"model": MEMBER, "tp": 8, "dtype": "fp8", "drafts": 3, "assume": "platform=sm_100"}
    recipe = deepseek_v41.build(modules, {f"{MEMBER}.json": config}, point)
    assert recipe.dspark_stages() == 3
    text = deepseek_v41.text_config(config["text_config"], dspark_num_stages=0)
    recipe.draft_model_config = deepseek_v41.model_config(config, text, recipe.model_config.attention_arch)
    with pytest.raises(ValueError, match="positive stage count"):
        recipe.groups()


def test_dspark_packs_three_stages_only() -> None:
    planned = {(platform, stages): isinstance(_plan({"drafts": stages, "assume": f"platform={platform}"}),
                                              pipeline.Planned)
               for platform in ("sm_90", "sm_100") for stages in (1, 2, 3, 4)}
    # The recipe's DSpark packing tables (deepseek_v41_geometry.py:117-124, 139-146) fit three
    # stages: one and four exceed its 5% padding bound on both platforms, two on sm_100.
    assert planned == {("sm_90", 1): False, ("sm_90", 2): True, ("sm_90", 3): True, ("sm_90", 4): False,
                       ("sm_100", 1): False, ("sm_100", 2): False, ("sm_100", 3): True, ("sm_100", 4): False}


def test_the_platform_picks_the_row_format() -> None:
    result = _run({"tp": [8], "dtype": ["fp8"], "drafts": [0]})
    parents = {p.point["assume"]: p.parent_bytes for p in result.points}
    # geometry.py V41_CACHE_FORMATS: Hopper stores the wider V4 rows, Blackwell the V4.1 rows.
    assert parents == {"platform=sm_90": 1_520_640, "platform=sm_100": 1_382_400}
    _plan({"assume": "platform=sm_90"})
    assert "platform" in loader.ASSUMED.consulted


def test_tp_and_the_cache_dtype_do_not_reach_the_layout() -> None:
    result = _run()
    layouts: dict[tuple[Any, Any], set[tuple[Any, ...]]] = {}
    for p in result.points:
        layouts.setdefault((p.point["assume"], p.point["drafts"]), set()).add(
            (p.parent_bytes, tuple(sorted(p.packing.items()))))
    assert len(layouts) == 4 and all(len(shapes) == 1 for shapes in layouts.values())


def test_a_refusal_after_the_platform_only_chose_the_rows_is_the_engines_not_the_gpus() -> None:
    """The recipe asks the platform for its row format (configs/deepseek_v41.py); a check that
    fails later, elsewhere, is the engine refusing the point (boots), not the assumed GPU declining."""
    from kvproof.impl import faults

    with faults.inject("ts_v41_dspark_stages_share_a_field"):
        result = engine.run(loader.installed_source(), ["deepseek_v41"], {"tp": [8], "dtype": ["fp8"]})
    refused = [p for p in result.recipes[0].points if p.verdict != "ok"]
    assert refused and {f.property for p in refused for f in p.findings} == {"boots"}
    assert "platform" in loader.ASSUMED.consulted
