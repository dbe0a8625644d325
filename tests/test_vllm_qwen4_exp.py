"""Qwen4-Exp (Qwen4ExpForConditionalGeneration, Qwen/Qwen3.8-Flash-Next) planned over its stated family
(engines/vllm/qwen4_exp.py): tokenspeed's cited values in transformers' spelling, four members (with and
without PLE, n-gram order 2 or 3), planned at the installed vLLM with the QSA layers' side caches and the PLE
layers' short-conv states, saying it stands for a family; no value transformers fills in for a key the member
lacks moves a plan."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline
from kvproof.engines.families import Member
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import qwen4_exp as tokenspeed_family
from kvproof.engines.vllm import catalog, engine, planner, qwen4_exp
from kvproof.impl import faults

NAMES = [f"qwen3.8-flash-next-family-{i}" for i in range(4)]
PLAIN, PLAIN3, PLE2, PLE3 = (catalog.MODELS[name] for name in NAMES)
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1],
                          "backend": ["QWEN4_EXP_QSA_TRITON@sm_90"], "draft_dtype": ["target"]}


def point(model: catalog.Model, tp: int = 1, spec: int = 0, prefix: bool = False, pp: int = 1,
          rank: int = 0) -> planner.Point:
    return planner.Point(model, tp, "auto", "auto", prefix, qwen4_exp.QSA_SM90, spec, pp, rank)


def test_the_family_carries_tokenspeeds_citations_and_varies_ple() -> None:
    """Every value tokenspeed's family cites, under the same key; PLE none or on every linear-attention layer
    (transformers refuses it on another), n-gram order 2 or 3 with it or without: four members."""
    assert [m.name for m in qwen4_exp.MEMBERS] == NAMES and qwen4_exp.FAMILY.size() == 4
    carried = {c.key: c.value for c in tokenspeed_family.CITED}
    mine = {c.key: c.value for c in qwen4_exp.FAMILY.cited}
    assert {k: v for k, v in mine.items() if k != "model_type"} == carried and mine["model_type"] == "qwen4_exp"
    varied = [(m.varied()["text_config.ple_layer_ids"], m.varied()["text_config.ngram_size"])
              for m in qwen4_exp.MEMBERS]
    linear = tuple(i for i in range(1, 49) if i % 4)
    assert varied == [((), 2), ((), 3), (linear, 2), (linear, 3)]
    text = json.loads(PLE2.config_text())["text_config"]
    assert text["linear_value_head_dim"] == 128 and text["indexer_kv_heads"] == 1


def test_it_plans_at_the_installed_vllm_and_stands_for_its_family_not_a_checkpoint() -> None:
    run = engine.run(NAMES[:1], {**AT_TP1, "spec": [0, 1]})
    text = render(run, baseline.compare([], set(), "vllm", run.version, set()), False, set())
    assert "not a verdict on Qwen/Qwen3.8-Flash-Next; --config FILE gives one" in text
    (recipe,) = run.recipes
    assert recipe.not_verified is None and [p.point["spec"] for p in recipe.points] == [0, 1]
    out = recipe.as_dict()
    assert (out["coverage"], out["members"], out["enumerated"]) == ("family", 4, 1)  # the one member the run planned


def test_the_block_is_worked_by_hand() -> None:
    """At tp 1, bf16, one member without PLE: a GDN state of (2 x 16 x 128 + 48 x 128) x 3 conv values in bf16
    and 48 x 128 x 128 temporal ones in float32 (the SSM dtype), 61,440 + 3,145,728 = 3,207,168 B, against
    2 KV heads x 256 x 2 x 2 B = 2,048 B a token of QSA page: the block is 16 x ceil(3,207,168 / 32,768) = 1,568
    tokens, a 3,211,264 B state page. The compressed keys keep one 128-wide row per 4 tokens (392 a block), the
    raw key ring 4 rows of 128 + 12 values (three int64 M-RoPE positions). With PLE at n-gram order 2 each PLE
    layer keeps (4 - 1) x 2 = 6 rows of 2,560 x 4 values, replicated: the GDN state still sets the block. Three
    MTP tokens add 3 GDN and PLE conv rows and round the ring up to 8: 3,268,608 B, 1,600 tokens. At tp 8,
    order 3, one token, prefix caching: a rank keeps 2 of the 16 key heads and 6 of the 48 value heads, and its
    one KV head (the 2 replicated); 10,240 + 393,216 B of state, in blocks of whole 64-token checkpoints: 448."""
    def shapes(planned: planner.Planned) -> set[tuple[tuple[int, ...], str]]:
        return {(tuple(f["shape"]), f["dtype"]) for f in planned.documents[1]["fields"]}

    plain = planner.plan(point(PLAIN))
    assert (plain.block_size, plain.mamba_padded) == (1568, 3_211_264)
    common = {((1568, 1024), "bfloat16"), ((392, 128), "bfloat16"), ((4, 140), "bfloat16"),
              ((3, 10240), "bfloat16"), ((48, 128, 128), "float32")}
    assert shapes(plain) == common
    ple = planner.plan(point(PLE2))
    assert (ple.block_size, shapes(ple)) == (1568, common | {((6, 10240), "bfloat16")})
    drafted = planner.plan(point(PLE2, spec=3))
    assert (drafted.block_size, drafted.mamba_padded) == (1600, 3_276_800)
    assert {((6, 10240), "bfloat16"), ((9, 10240), "bfloat16"), ((8, 140), "bfloat16")} <= shapes(drafted)
    wide = planner.plan(point(PLE3, tp=8, spec=1, prefix=True))
    assert wide.block_size == 448 and shapes(wide) == {
        ((448, 512), "bfloat16"), ((112, 128), "bfloat16"), ((8, 140), "bfloat16"), ((4, 1280), "bfloat16"),
        ((6, 128, 128), "float32"), ((10, 10240), "bfloat16")}


def test_the_layers_their_names_and_the_domain() -> None:
    """Every 4th layer QSA (its page and two side caches), the rest GDN, the PLE states on the GDN layers;
    the MTP layer's QSA caches after layer 47. tp 1, 2, 4, 8 (24 heads, 16 and 48 GDN heads; 2 KV heads divide
    or are replicated); pipeline stages only without PLE, which vLLM refuses to split."""
    hf = planner.plan(point(PLE2)).configs[1]
    names = [n for g in hf.kv_cache_groups for n in g.layer_names]
    at = "language_model.model.layers"
    assert {f"{at}.0.ple", f"{at}.0.linear_attn", f"{at}.3.self_attn.attn", f"{at}.3.self_attn.indexer.raw_key_cache",
            f"{at}.3.self_attn.indexer.compressed_key_cache"} <= set(names)
    assert sum(n.endswith(".ple") for n in names) == 36 and sum(n.endswith(".attn") for n in names) == 12
    drafted = planner.plan(point(PLAIN, spec=1)).configs[1]
    drafted_names = {n for g in drafted.kv_cache_groups for n in g.layer_names}
    assert "mtp.layers.48.self_attn.indexer.raw_key_cache" in drafted_names
    assert {p["tp"] for p in engine.points(PLAIN)} == {1, 2, 4, 8}
    assert {p["pp"] for p in engine.points(PLAIN)} == {1, 2, 4, 8} and {p["pp"] for p in engine.points(PLE2)} == {1}
    with pytest.raises(NotImplementedError, match="requires pipeline_parallel_size=1"):
        planner.plan(point(replace(PLE2, pipeline=lambda _config: True), pp=2))


def test_the_side_caches_pages_are_read_by_no_recorded_kernel_and_the_qsa_pages_by_qsas() -> None:
    """The indexer's side caches name a backend of their own (QWEN4_EXP_EXP_QSA_STATE), whose kernels kvproof has
    not recorded: their pages carry none, not the QSA layer's sparse GQA kernel, which reads the QSA pages."""
    fields = planner.plan(point(PLAIN)).documents[1]["fields"]
    side = [f for f in fields if ".indexer." in f["id"]]
    qsa = [f for f in fields if f["id"].endswith("self_attn.attn.kv")]
    assert side and all(f["kernels"] == [] for f in side)
    assert qsa and all([k["name"] for k in f["kernels"]] == ["qsa_sparse_paged_gqa"] for f in qsa)


def test_a_member_without_ple_sizes_its_block_by_a_ple_state_no_layer_keeps() -> None:
    """The class hands the alignment a PLE spec with or without PLE layers (model.py:880-899), so a member with
    none still reads the n-gram order: at tp 8, float32 states and 3 MTP tokens, order 3's phantom PLE state,
    2,560 x 4 x ((4 - 1) x 3 + 3) float32 values = 491,520 B, outgrows the GDN state (1,280 x 6 + 6 x 128 x 128
    float32 values, 423,936 B) and sets a 480-token block (480 x 1,024 B), where order 2's (368,640 B) leaves
    the GDN state's 416; no layer of the member keeps a PLE state."""
    def planned(model: catalog.Model) -> planner.Planned:
        return planner.plan(planner.Point(model, 8, "auto", "float32", False, qwen4_exp.QSA_SM90, 3, 1, 0))

    two, three = planned(PLAIN), planned(PLAIN3)
    assert (two.block_size, three.block_size) == (416, 480)
    assert not any(n.endswith(".ple") for g in three.configs[1].kv_cache_groups for n in g.layer_names)


def test_the_indexer_budget_moves_no_page() -> None:
    """indexer_budget is a member key only because transformers refuses a QSA config without it: another
    legal budget (2048 x the compress ratio, the other that vLLM 0.30.0 and 0.31.0 take) plans the same."""
    member = qwen4_exp.MEMBERS[2]
    other = replace(PLE2, member=Member(qwen4_exp.FAMILY, member.index,
                                        {**member.values, "text_config.indexer_budget": 8192}))
    base, again = planner.plan(point(PLE2, spec=1)), planner.plan(point(other, spec=1))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype"}
STRINGS = {"hidden_act": "sigmoid"}


@pytest.mark.parametrize("where", ["top", "text_config"])
def test_no_default_of_transformers_config_classes_moves_a_plan(where: str) -> None:
    """vLLM reads config.json through Qwen4ExpConfig and its Qwen4ExpTextConfig, which answer every key a member
    lacks with a class default: every such key is set to another value at once (those None or structured left as
    they are), and a drafted, tensor-parallel, prefix-caching PLE point plans exactly as before."""
    from transformers import Qwen4ExpConfig

    member = qwen4_exp.MEMBERS[3]
    moved = config_defaults.moved(Qwen4ExpConfig().to_dict(), member.config(), where, BOOKKEEPING, STRINGS)
    if where == "text_config":  # a width the n-gram heads divide, as transformers requires (16 at order 3)
        moved["text_config.ple_embed_dim"] = 2 * 2560
    assert ({"text_config.vocab_size", "text_config.hc_lowrank"} <= set(moved) if where == "text_config"
            else "image_token_id" in moved)
    other = replace(PLE3, member=Member(qwen4_exp.FAMILY, member.index, {**member.values, **moved}))
    base = planner.plan(point(PLE3, tp=2, spec=2, prefix=True))
    again = planner.plan(point(other, tp=2, spec=2, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


def test_its_seeded_bug_is_killed_at_one_token() -> None:
    """The class sizing the GDN state without the speculative conv rows its layers keep: the
    1,568-token page holds the undrafted state with 4,096 B to spare, and one token's conv row is 20,480 B, so
    vLLM's own assertion stops the boot at one token."""
    with faults.inject("vllm_qwen4_exp_state_unwidened"):
        none, one = engine.run(NAMES[:1], {**AT_TP1, "spec": [0, 1]}).recipes[0].points
    assert "boots" not in {f.property for f in none.findings}
    assert [f.property for f in one.findings] == ["boots"]
    assert "vllm/v1/kv_cache_interface.py:" in one.findings[0].message


class _Before032:
    """A QSA layer constructor as 0.30.0 and 0.31.0 read the KV dtype (qsa.py:284, :377 there)."""

    def __init__(self, cache_config: Any) -> None:
        self.kv_cache_dtype = cache_config.cache_dtype


class _Elsewhere:
    """A constructor that reads its KV dtype some third way."""

    def __init__(self, cache_config: Any) -> None:
        self.kv_cache_dtype = getattr(cache_config, "qsa_dtype", "auto")


def test_the_qsa_layers_kv_dtype_is_read_as_the_releases_constructor_reads_it() -> None:
    """qsa_kv_cache_dtype where the constructor calls it (0.32.0 on), the cache config's dtype where it reads that
    (0.30.0, 0.31.0), and StubUsed for any other reading, never a guess."""
    planner.plan(point(PLAIN))  # imports vllm.models.qwen4_exp as planning does (its vision imports under stand-ins)
    from vllm.models.qwen4_exp.nvidia import qsa

    assert qwen4_exp._qsa_kv_dtype(qsa) is qsa.qsa_kv_cache_dtype
    older = qwen4_exp._qsa_kv_dtype(SimpleNamespace(Qwen4ExpQSAAttention=_Before032))
    assert older(SimpleNamespace(cache_dtype="fp8"), "model.layers.3.self_attn") == "fp8"
    with pytest.raises(StubUsed, match="neither by qsa_kv_cache_dtype nor"):
        qwen4_exp._qsa_kv_dtype(SimpleNamespace(Qwen4ExpQSAAttention=_Elsewhere))
