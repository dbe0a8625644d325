"""LFM2-VL (Lfm2VlForConditionalGeneration) planned over its stated family (engines/vllm/lfm2_vl.py): one member of
the copy's cited keys, its text model LFM2-350M's, planned at the installed vLLM under the multimodal class as
LFM2-350M plans, saying it stands for a family; no value transformers fills in for a key the member lacks moves a
plan; the class's conv page, sized without the speculative rows, does not hold three tokens' state at fp8."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline
from kvproof.engines.families import Member
from kvproof.engines.vllm import catalog, engine, lfm2_vl, planner

NAME = "lfm2-vl-450m-family-0"
VL = catalog.MODELS[NAME]
LFM2 = catalog.MODELS["lfm2-350m"]
MEMBER = lfm2_vl.MEMBERS[0]
AT_TP1: dict[str, Any] = {"tp": [1], "mamba_dtype": ["float32"], "prefix": ["off"], "pp": [1],
                          "backend": ["FLASH_ATTN@sm_90"]}


def point(model: catalog.Model = VL, tp: int = 1, dtype: str = "auto", mamba: str = "auto", prefix: bool = False,
          spec: int = 0, rank: int = 0, pp: int = 1) -> planner.Point:
    return planner.Point(model, tp, dtype, mamba, prefix, model.backends[0], spec, rank=rank, pp=pp)


def test_the_member_is_the_copys_keys_and_its_text_model_is_lfm2_350ms() -> None:
    """Exactly the cited keys; each text value vLLM reads is the one LFM2-350M's published config gives (its
    layer_types as transformers derives them from full_attn_idxs)."""
    config = json.loads(VL.config_text())
    text = config.pop("text_config")
    assert config == {"architectures": ["Lfm2VlForConditionalGeneration"], "model_type": "lfm2_vl",
                      "torch_dtype": "bfloat16"}
    sibling = json.loads(resources.files("kvproof.engines").joinpath(LFM2.config).read_text(encoding="utf-8"))
    assert text.pop("layer_types") == ["full_attention" if i in sibling["full_attn_idxs"] else "conv"
                                       for i in range(sibling["num_hidden_layers"])]
    assert text == {key: sibling[key] for key in text}
    assert [m.name for m in lfm2_vl.MEMBERS] == [NAME] and MEMBER.varied() == {}


def test_it_plans_as_lfm2_350m_does_under_the_multimodal_class() -> None:
    """The same blocks, pages and parents as LFM2-350M at drafted, tensor-parallel, prefix-caching, fp8 and
    float32-state points: the class's own shape and dtype functions (lfm2_vl.py:644-675) agree with LFM2's."""
    for kwargs in ({}, {"spec": 2}, {"tp": 8, "prefix": True}, {"dtype": "fp8", "mamba": "float32", "spec": 1},
                   {"rank": 1, "pp": 2}):
        ours, theirs = planner.plan(point(**kwargs)), planner.plan(point(LFM2, **kwargs))
        assert (ours.block_size, ours.mamba_padded, ours.layers) == (theirs.block_size, theirs.mamba_padded,
                                                                      theirs.layers)
        for n, document in ours.documents.items():
            assert document["parent_bytes"] == theirs.documents[n]["parent_bytes"]
            # a field's id names its layer, here under `language.`
            fields = [{**f, "id": f["id"].replace(".language.", ".", 1)} for f in document["fields"]]
            assert fields == theirs.documents[n]["fields"]


def test_the_layers_their_names_and_the_domain() -> None:
    """LFM2's decoder layers under the class's `language` prefix; the domain is LFM2-350M's."""
    names = catalog._lfm2_vl_layers(SimpleNamespace(layer_types=lfm2_vl.LAYER_TYPES))
    assert names[2] == ("language.model.layers.2.self_attn.attn", "attention")
    assert names[0] == ("language.model.layers.0.short_conv", "state") and len(names) == 16
    assert engine.points(VL) == engine.points(LFM2)


def test_three_ngram_tokens_and_float32_states_do_not_boot_at_fp8_and_it_stands_for_its_family() -> None:
    """At fp8 a 16-token block is 16 x 8 KV heads x 64 x 2 x 1 B = 16,384 B, and the class pads the float32 conv
    state to it without the speculative rows (2 x 1,024 x 4 B = 8,192 B); three ngram tokens' layers keep 5 rows,
    20,480 B, past the page, and vLLM's own assertion stops the boot, as at LFM2-350M. bf16 pages hold it."""
    run = engine.run([NAME], {**AT_TP1, "dtype": ["auto", "fp8"], "spec": [3]})
    text = render(run, baseline.compare([], set(), "vllm", run.version, set()), False, set())
    assert "not a verdict on LiquidAI/LFM2-VL-450M; --config FILE gives one" in text
    (recipe,) = run.recipes
    verdicts = {p.point["dtype"]: [f.property for f in p.findings] for p in recipe.points}
    assert verdicts == {"auto": [], "fp8": ["boots"]}
    out = recipe.as_dict()
    assert (out["coverage"], out["members"], out["enumerated"]) == ("family", 1, 1)


BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype", "torch_dtype"}
STRINGS = {"hidden_act": "relu", "projector_hidden_act": "relu"}


@pytest.mark.parametrize("where", ["top", "text_config"])
def test_no_default_of_transformers_config_classes_moves_a_plan(where: str) -> None:
    """vLLM reads config.json through Lfm2VlConfig and its Lfm2Config, which answer every key a member lacks with a
    class default: every such key is set to another value at once (those None or structured left as they are),
    and a drafted, tensor-parallel, prefix-caching point plans exactly as before."""
    from transformers import Lfm2VlConfig

    moved = config_defaults.moved(Lfm2VlConfig().to_dict(), MEMBER.config(), where, BOOKKEEPING, STRINGS)
    assert "text_config.vocab_size" in moved if where == "text_config" else "projector_hidden_size" in moved
    other = replace(VL, member=Member(lfm2_vl.FAMILY, MEMBER.index, {**MEMBER.values, **moved}))
    base = planner.plan(point(tp=2, spec=2, prefix=True))
    again = planner.plan(point(other, tp=2, spec=2, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)
