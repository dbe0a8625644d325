"""tokenspeed's inkling recipe over kvproof's Inkling family: the default run plans every default
member through the engine's own start-up with no stand-in used; a member lacking a cited key is
NOT VERIFIED (adapter) naming it; the recipe refuses one MTP step past the published depth count;
INKLING_FP8_SCONV is asked of the point (never of the machine) and changes the plan."""

from __future__ import annotations

import dataclasses

import pytest

from kvproof.engines.tokenspeed import engine, inkling, loader, pipeline
from kvproof.engines.tokenspeed.profile import configs
from kvproof.engines.verdict import EngineError

SOURCE = loader.installed_source()
SCONV = inkling.SCONV


def _plan(point: dict[str, object]) -> pipeline.Planned | pipeline.Refused:
    return engine.plan(SOURCE, "inkling", {"model": "inkling-family-0", "tp": 4, "dtype": "fp8", "drafts": 0,
                                           "assume": f"{SCONV}=0"} | point)


def test_the_default_run_plans_every_default_member_and_the_bf16_hiddenconv_is_clean() -> None:
    (result,) = engine.run(SOURCE, ["inkling"]).recipes
    assert result.not_verified is None and not result.adapter and result.over_family
    assert {p.point["model"] for p in result.points} == {m.name for m in inkling.FAMILY.members()}
    assert {p.point["tp"] for p in result.points} == set(inkling.TPS) and len(result.points) == 72
    off = [p for p in result.points if p.point["assume"] == f"{SCONV}=0"]
    assert off and all(p.verdict == "ok" for p in off)
    # The released recipe's fp8 hiddenconv aliases the K/V planes and its own pack() refuses most
    # members (a finding kvproof reports, not hides): every one of them is the engine's refusal.
    on = [p for p in result.points if p.point["assume"] == f"{SCONV}=1"]
    assert {p.verdict for p in on} == {"ok", "counterexample"}
    assert all(f.property == "boots" for p in on for f in p.findings)


def test_the_whole_family_meets_every_tp_and_draft_count() -> None:
    points = inkling.points(configs(engine.PROFILES["inkling"], everything=True))
    assert len({p["model"] for p in points}) == inkling.FAMILY.size() == 24
    pairs = {(p["tp"], p["drafts"]) for p in points}
    assert pairs == {(tp, d) for tp in inkling.TPS for d in range(inkling.DEPTHS + 1)}
    assert len({(p["model"], p["tp"], p["drafts"]) for p in points}) == len(pairs)  # each pair at one member


def test_a_users_config_is_planned_at_every_tp_and_draft_count() -> None:
    """Any depth count: 4 MTP depths give 5 draft counts, which share a factor with the 5 tps."""
    member = configs(engine.PROFILES["inkling"])["inkling-family-0.json"]
    mine = {**member, "mtp_config": {**member["mtp_config"], "num_nextn_predict_layers": 4}}
    points = inkling.points({"mine.json": mine})
    assert {(p["tp"], p["drafts"]) for p in points} == {(tp, d) for tp in inkling.TPS for d in range(5)}


def test_a_config_named_as_a_member_is_refused() -> None:
    member = configs(engine.PROFILES["inkling"])["inkling-family-0.json"]
    with pytest.raises(EngineError, match="named as a family member"):
        configs(engine.PROFILES["inkling"], user=("inkling-family-3", member))


def test_a_member_lacking_a_cited_key_is_an_adapter_gap_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "text_config.swa_num_key_value_heads"
    family = dataclasses.replace(inkling.FAMILY, cited=tuple(c for c in inkling.FAMILY.cited if c.key != key))
    monkeypatch.setitem(engine.PROFILES, "inkling", dataclasses.replace(engine.PROFILES["inkling"], family=family))
    (result,) = engine.run(SOURCE, ["inkling"], {"model": ["inkling-family-0"], "dtype": ["fp8"],
                                                 "assume": [f"{SCONV}=0"]}).recipes
    assert result.adapter
    assert "'swa_num_key_value_heads', which the inkling family neither cites nor varies" in (result.not_verified or "")


def test_the_published_depths_plan_and_one_more_step_is_refused_by_the_recipe() -> None:
    planned = _plan({"drafts": inkling.DEPTHS})
    assert isinstance(planned, pipeline.Planned)
    layers = {f["id"].split(".")[1] for doc in planned.documents.values() for f in doc["fields"]}
    assert len(layers) == inkling.LAYERS + inkling.DEPTHS
    # CacheRecipe.setup() reads num_draft_layers (recipes/base.py), which refuses more steps than
    # depths (recipes/inkling.py num_draft_layers); kvproof's pipeline stops before setup().
    profile = engine.PROFILES["inkling"]
    modules = loader.load(SOURCE, profile.modules)
    loader.ASSUMED.point({SCONV: "0"})
    members = configs(profile)
    point = {"model": "inkling-family-0", "tp": 4, "dtype": "fp8"}
    assert inkling.build(modules, members, point | {"drafts": inkling.DEPTHS}).num_draft_layers == inkling.DEPTHS
    recipe = inkling.build(modules, members, point | {"drafts": inkling.DEPTHS + 1})
    with pytest.raises(ValueError, match=f"Inkling MTP has {inkling.DEPTHS} depth layers"):
        recipe.num_draft_layers  # noqa: B018


def test_the_sconv_switch_is_asked_of_the_point_and_changes_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCONV, "1")  # the machine's value must not matter
    plans = {}
    for value in loader.ASSUMPTIONS[SCONV][0]:
        planned = _plan({"tp": 1, "assume": f"{SCONV}={value}"})
        assert isinstance(planned, pipeline.Planned) and SCONV in loader.ASSUMED.consulted
        plans[value] = planned.documents
    dtypes = {value: {f["dtype"] for doc in docs.values() for f in doc["fields"]
                      if f["id"].endswith("conv")} for value, docs in plans.items()}
    assert dtypes == {"0": {"bfloat16"}, "1": {"float8_e5m2"}}
