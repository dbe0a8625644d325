"""A stated family (kvproof.engines.families): its default list is fixed and covers every axis
value, its members are exactly the cited and varied keys, and a strict member config refuses
any other read."""

from __future__ import annotations

import pytest

from kvproof.engines.families import Axis, Cited, Family
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed.configs import STRICT, HFConfig, member_dicts


def _family(cap: int = 5) -> Family:
    return Family(
        name="toy", not_a_verdict_on="org/Toy",
        cited=(Cited("text_config.num_hidden_layers", 66, "a test's assertion"),),
        axes=(Axis("text_config.head_dim", (64, 128, 256), "the recipe refuses 512"),
              Axis("text_config.num_key_value_heads", (1, 2, 4, 8), "a sibling has 8"),
              Axis("text_config.sliding_window", (128, 512, 1024, 4096), "a sibling")),
        cap=cap,
        derived={"text_config.layer_types": lambda v: ["full"] * v["text_config.num_hidden_layers"]},
        valid=lambda v: v["text_config.head_dim"] * v["text_config.num_key_value_heads"] <= 1024)


def test_the_default_list_is_the_same_every_time_and_covers_every_value_of_every_axis() -> None:
    family = _family()
    first, again = family.members(), family.members()
    assert [m.values for m in first] == [m.values for m in again]
    for axis in family.axes:
        assert {m.values[axis.key] for m in first} == set(axis.values)
    assert len(first) < family.size() == len(family.members(everything=True))


def test_member_names_are_their_place_in_the_whole_family() -> None:
    family = _family()
    whole = {m.name: m.values for m in family.members(everything=True)}
    assert all(whole[m.name] == m.values for m in family.members())


def test_invalid_members_are_not_members() -> None:
    family = _family()
    every = family.members(everything=True)
    assert family.size() == len(every) == 3 * 4 * 4 - 4  # head_dim 256 with 8 KV heads: 2048 > 1024
    assert all(m.values["text_config.head_dim"] * m.values["text_config.num_key_value_heads"] <= 1024 for m in every)


def test_a_small_family_is_planned_whole() -> None:
    family = _family(cap=1000)
    assert len(family.members()) == family.size()


def test_a_members_config_has_exactly_the_cited_varied_and_derived_keys() -> None:
    member = _family().members()[0]
    text = member.config()["text_config"]
    assert sorted(text) == ["head_dim", "layer_types", "num_hidden_layers", "num_key_value_heads", "sliding_window"]
    assert text["num_hidden_layers"] == 66 and len(text["layer_types"]) == 66
    assert member.varied() == {a.key: member.values[a.key] for a in _family().axes}


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="given twice"):
        Family("bad", "org/Bad", (Cited("a", 1, "x"),), (Axis("a", (1, 2), "y"),), cap=2)


def test_a_strict_member_refuses_every_read_of_a_key_it_lacks() -> None:
    config = member_dicts(_family().members()[0].config())
    hf = HFConfig(config["text_config"])
    with pytest.raises(AttributeError):  # outside planning: a key the file lacks, as for a checkpoint
        _ = hf.vocab_size
    assert config["text_config"].get("vocab_size", 7) == 7
    STRICT.family = "toy"
    try:
        for read in (lambda: hf.vocab_size, lambda: config["text_config"].get("vocab_size", 7),
                     lambda: config["text_config"]["vocab_size"]):
            with pytest.raises(StubUsed, match="'vocab_size', which the toy family neither cites nor varies"):
                read()
        assert hf.head_dim == config["text_config"]["head_dim"]
    finally:
        STRICT.family = None
