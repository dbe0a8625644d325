"""GLM-5.3-Flash (Glm5NextForConditionalGeneration) planned over its stated family (engines/vllm/glm53_flash.py):
the family carries tokenspeed's cited values into the config.json vLLM reads, transformers' config class reads
them under the names vLLM asks, both members plan at the installed vLLM (KDA states, sparse MLA pages, each
indexer's K cache and tail ring, laid out block-outermost) and say they stand for a family, and no value
transformers fills in for a key a member lacks moves a plan."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline
from kvproof.engines.families import Member
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import glm53_flash as tokenspeed
from kvproof.engines.vllm import catalog, engine, glm53_flash, planner
from kvproof.engines.vllm.platform import cuda_assumed, load_backend, modules, point_answers
from kvproof.impl import faults

FAMILY = glm53_flash.FAMILY
MEMBER = glm53_flash.MEMBERS[0]
NAMES = ["glm53-flash-family-0", "glm53-flash-family-1"]
GLM = catalog.MODELS[NAMES[0]]
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1],
                           "draft_dtype": ["target"]}


def point(model: catalog.Model = GLM, tp: int = 1, dtype: str = "auto", mamba: str = "auto", prefix: bool = False,
          spec: int = 0, rank: int = 0, pp: int = 1) -> planner.Point:
    return planner.Point(model, tp, dtype, mamba, prefix, model.backends[0], spec, rank=rank, pp=pp)


SPARSE_SM90 = "vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90:FlashInferMLASparseSM90Backend"


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_family_is_the_cited_keys_the_three_axes_and_the_derived_kv_heads() -> None:
    """Two members (the two 16-bit model dtypes); each config.json is exactly the cited, varied and derived
    keys, and every cited value is tokenspeed's (its split in transformers' labels)."""
    assert [m.name for m in glm53_flash.MEMBERS] == NAMES
    assert [m.recipe for m in catalog.MODELS.values() if m.member and m.member.family is FAMILY] == NAMES
    assert [m.values["dtype"] for m in glm53_flash.MEMBERS] == ["bfloat16", "float16"] and FAMILY.size() == 2
    for member in glm53_flash.MEMBERS:
        flat = _flat(member.config())
        assert set(flat) == {c.key for c in FAMILY.cited} | {a.key for a in FAMILY.axes} | set(FAMILY.derived)
        assert flat["text_config.num_key_value_heads"] == 64
    theirs = {c.key: c.value for c in tokenspeed.FAMILY.cited}
    for c in FAMILY.cited:
        if c.key == "text_config.layer_types":
            assert [v == "linear_attention" for v in c.value] == [v == "linear_attention" for v in theirs[c.key]]
            assert set(c.value) == {"linear_attention", "indexed_attention"}
        elif c.key != "model_type":
            assert theirs[c.key] == c.value, c.key


def test_transformers_reads_the_member_under_the_names_vllm_asks() -> None:
    """Glm5NextConfig's text config turns linear_attn_config into the linear_* keys vLLM's model reads, keeps the
    cited index_kpool 4 (its default is 16), and refuses any KV-head count but the heads (the derived key)."""
    from huggingface_hub.errors import StrictDataclassClassValidationError
    from transformers import Glm5NextConfig

    config = MEMBER.config()
    text: Any = Glm5NextConfig(**config).text_config
    assert (text.linear_num_heads, text.linear_head_dim, text.linear_conv_kernel_dim) == (64, 128, 4)
    assert (text.linear_lower_bound, text.index_kpool, text.index_topk, text.index_head_dim) == (-5.0, 4, 2048, 128)
    assert (text.kv_lora_rank, text.qk_rope_head_dim, text.num_key_value_heads) == (512, 0, 64)
    assert text.layer_types == glm53_flash.LAYER_TYPES and text.max_position_embeddings == 1048576
    with pytest.raises(StrictDataclassClassValidationError, match="must be the same as"):
        Glm5NextConfig(**{**config, "text_config": {**config["text_config"], "num_key_value_heads": 32}})


def test_the_layers_are_34_kda_states_and_11_mla_layers_each_with_its_indexer_caches() -> None:
    from types import SimpleNamespace

    names = glm53_flash.layers(SimpleNamespace(layer_types=glm53_flash.LAYER_TYPES, index_topk=2048))
    kinds = [kind for _, kind in names]
    assert (kinds.count("state"), kinds.count("attention"), kinds.count("indexer"), kinds.count("tail")) == (
        34, 11, 11, 11)
    assert names[3:6] == [("language_model.model.layers.3.self_attn.attn", "attention"),
                          ("language_model.model.layers.3.self_attn.indexer.k_cache", "indexer"),
                          ("language_model.model.layers.3.self_attn.indexer.tail_cache", "tail")]
    assert names[-1] == ("language_model.model.layers.44.self_attn", "state")


def test_vllm_builds_the_members_model_config_as_a_sparse_mla_hybrid() -> None:
    """Under kvproof's platform (sm_90, the first sparse MLA backend at a 512-wide head): vLLM resolves the
    hybrid class, an MLA head of 512, the member's dtype, and the KDA state of 64 heads of 128 from its own
    get_mamba_state_shape_from_config."""
    v = modules()
    backend = load_backend(SPARSE_SM90, (9, 0))
    folder = planner._checkpoint(json.dumps(MEMBER.config()))
    with point_answers(cuda_assumed(v), (9, 0), [backend]):
        model_config = v.config.ModelConfig(model=folder, skip_tokenizer_init=True, dtype="auto")
        vllm_config = v.config.VllmConfig(model_config=model_config, cache_config=v.config.CacheConfig(),
                                          parallel_config=v.config.ParallelConfig(tensor_parallel_size=2),
                                          device_config=v.config.DeviceConfig(device="cuda"))
        cls, _ = v.models.ModelRegistry.resolve_model_cls(model_config.architecture, model_config=model_config)
        shapes = cls.get_mamba_state_shape_from_config(vllm_config)
    assert (model_config.architecture, model_config.use_mla, model_config.get_head_size()) == (
        "Glm5NextForConditionalGeneration", True, 512)
    assert str(model_config.dtype) == "torch.bfloat16" and model_config.max_model_len == 1048576
    assert shapes[-1] == (32, 128, 128)  # the recurrent state: 64 heads over tp 2, 128 x 128


def test_the_tail_rings_backend_lays_the_cache_out_block_outermost() -> None:
    """KpoolTailBackend admits BLHNC alone, so vLLM resolves the block-outermost layout for the whole cache; the
    planner translates it as one plane of a block, every group's layers from byte 0 of it."""
    modules()
    from vllm.v1.attention.backends.mla.indexer import KpoolTailBackend
    from vllm.v1.kv_cache_layout import KVCacheLayout

    assert KpoolTailBackend.supported_kv_cache_layouts() == (KVCacheLayout.BLHNC,)
    planned = planner.plan(point())
    assert planned.layout is KVCacheLayout.BLHNC and planned.layout.is_block_outermost
    doc = planned.documents[1]
    assert doc["planes"] == [{"id": "slot0", "bytes": doc["parent_bytes"], "arena_offset": 0}]
    assert doc["arena_bytes"] == 2 * doc["parent_bytes"]  # N + 1 blocks, the null block first
    assert {f["stride"] for f in doc["fields"]} == {doc["parent_bytes"]}


def test_the_block_and_pages_worked_by_hand_at_tp_1() -> None:
    """A KDA layer keeps 3 x (3 x 64 x 128) bf16 conv values and 64 x 128 x 128 float32 ones: 147,456 + 4,194,304 =
    4,341,760 B, against 512 x 2 B = 1,024 B a token of MLA latent. vLLM aligns to lcm(64, 128, 128, 64) and
    MLA's 128 (the sparse backend's, the indexer's 4 x 32-state and the tail's kernel blocks): 128 x
    ceil(4,341,760 / (128 x 1,024)) = 4,352 tokens, a 4,456,448 B page the KDA state is padded to. An indexer
    keeps 4,352 / 4 = 1,088 states of 128 + 4 B; a tail ring 4 tokens of (K, gate) x 128 bf16, 2,048 B. The 34
    KDA layers make four groups (9, 9, 8, 8), the 11 MLA layers and their indexers one, the tails one; a block is
    the largest, 11 x (4,456,448 + 143,616) = 50,600,704 B, rounded to 33,792 B (the indexer's 64-state pages
    and the MLA's 1,024 B rows): 50,620,416 B. fp8 halves the latent (8,576 tokens); a float32 conv state
    makes 4,480; two MTP tokens widen the ring to 8 tokens and add the draft's layer."""
    planned = planner.plan(point())
    doc = planned.documents[1]
    assert (planned.block_size, planned.mamba_padded, planned.kernel_tokens) == (4352, 4_456_448, 4352)
    assert doc["parent_bytes"] == 50_620_416 and doc["alignment"] == 33_792
    shapes = {(f["id"].rsplit(".", 1)[1], tuple(f["shape"]), f["dtype"]) for f in doc["fields"]}
    assert shapes == {("state0", (3, 24_576), "bfloat16"), ("state1", (64, 128, 128), "float32"),
                      ("kv", (4352, 512), "bfloat16"), ("kv", (1088, 132), "uint8"), ("kv", (4, 256), "bfloat16")}
    sizes = [sum(1 for f in doc["fields"] if f["group"] == g["id"]) for g in doc["groups"]]
    assert sizes == [18, 18, 16, 16, 22, 11]  # two fields a KDA layer
    assert {(dtype, mamba, spec): planner.plan(point(dtype=dtype, mamba=mamba, spec=spec)).block_size
            for dtype, mamba, spec in (("fp8", "auto", 0), ("auto", "float32", 0), ("auto", "auto", 2))} == {
        ("fp8", "auto", 0): 8576, ("auto", "float32", 0): 4480, ("auto", "auto", 2): 4352}
    drafted = planner.plan(point(spec=2)).documents[1]
    rings = [f for f in drafted["fields"] if f["id"].endswith("tail_cache.kv")]
    assert len(rings) == 12 and {tuple(f["shape"]) for f in rings} == {(8, 256)}
    assert rings[-1]["id"] == "g4.model.layers.45.self_attn.indexer.tail_cache.kv"


def test_both_members_plan_and_stand_for_their_family_not_a_checkpoint() -> None:
    """At 0.33.0 both boot at 0 and 2 MTP tokens; undrafted, each tail ring (22,528 B of 11 layers) holds a whole
    50,620,416 B block: padding_bound, 2,246 over the contract's 0.25 (as the KDA groups, 0.295 and 0.457); a
    drafted point states no bound. Each result says family, two members, and which checkpoint it is no verdict
    on."""
    run = engine.run(NAMES, {**AT_TP1, "spec": [0, 2]})
    text = render(run, baseline.compare([], set(), "vllm", run.version, set()), False, set())
    assert text.count("not a verdict on zai-org/GLM-5.3-Flash; --config FILE gives one") == 2
    for r in run.recipes:
        assert r.not_verified is None and [p.point["spec"] for p in r.points] == [0, 2]
        undrafted, drafted = r.points
        assert {f.property for f in undrafted.findings} == {"padding_bound"} and not drafted.findings
        assert any("group g5 pads 2246.000 > bound 0.250 (parent 50,620,416 B" in f.message
                   for f in undrafted.findings)
        out = r.as_dict()
        assert (out["coverage"], out["members"], out["enumerated"]) == ("family", 2, 2)
        assert out["family"]["not_a_verdict_on"] == "zai-org/GLM-5.3-Flash"


def test_the_domain_and_the_pipeline_stage() -> None:
    """tp every divisor of the 64 MLA and 64 KDA heads, MTP up to 2 tokens, pp 2 at tp 1 undrafted: (7 x 3 + 1) x
    2 kv dtypes x 2 state dtypes x prefix off / on = 176 points, and each drafted one again with either KV dtype
    named for the draft (its layers keep the cache config vLLM copies for any named dtype): 7 x 2 x 8 x 2 more;
    pp 2's second stage builds layers 23-44."""
    assert len(engine.points(GLM)) == (7 * 3 + 1) * 2 * 2 * 2 + 7 * 2 * 8 * 2 == 400
    assert {(p["tp"], p["pp"]) for p in engine.points(GLM)} == {(tp, 1) for tp in (1, 2, 4, 8, 16, 32, 64)} | {(1, 2)}
    stage = planner.plan(point(rank=1, pp=2))
    assert stage.layers == (23, 45) and stage.attention and stage.block_size == 4352
    assert planner.plan(point(tp=64)).block_size == 128


# transformers names the members' dtype its own: bookkeeping too.
BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype"}
STRINGS = {"hidden_act": "relu", "topk_method": "greedy", "scoring_func": "softmax"}  # another value a string key


def test_no_default_of_transformers_text_config_class_moves_a_plan() -> None:
    """vLLM reads text_config through Glm5NextTextConfig, which answers every key a member lacks with a class
    default, so no read can raise: instead every such key is set to another value at once (those None or
    structured left as they are), and a drafted, tensor-parallel, prefix-caching point plans exactly as before."""
    from transformers import Glm5NextTextConfig

    defaults = Glm5NextTextConfig().to_dict()
    lacking, changed = config_defaults.changed(defaults, MEMBER.config()["text_config"], BOOKKEEPING, STRINGS)
    kept = sorted(key for key in lacking if changed[key] == defaults[key])
    assert {"q_lora_rank", "qk_nope_head_dim", "v_head_dim", "hidden_size", "n_routed_experts",
            "index_kpool_always_select_tail", "linear_num_heads", "linear_lower_bound"} <= set(lacking) - set(kept)
    assert "index_n_heads" not in lacking  # cited: 0.31.0's own config class has no default for it
    values = {**MEMBER.values, **{f"text_config.{k}": v for k, v in changed.items() if k not in kept}}
    other = replace(GLM, member=Member(FAMILY, MEMBER.index, values))
    base = planner.plan(point(tp=2, spec=2, prefix=True))
    again = planner.plan(point(other, tp=2, spec=2, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


def test_its_seeded_bug_runs_a_groups_second_layer_into_the_next_block() -> None:
    """A block-outermost block sized by the largest layer page (4,456,448 B, the padded KDA state) rounded up to the
    33,792 B alignment: 4,460,544 B, not 50,620,416. Each group's layers still step by their page within the
    block, so a group's second layer reaches into the next block (no_overlap; the null block's into block 1's,
    null_page) and the last block's past the arena (in_bounds), at the one model laid out block-outermost; the
    tail ring's 22,528 B pad 197 times over."""
    with faults.inject("vllm_block_outermost_by_largest_page"):
        (broken,) = engine.run([NAMES[0]], {**AT_TP1, "spec": [0]}).recipes[0].points
    assert broken.parent_bytes == 4_460_544 == -(-4_456_448 // 33_792) * 33_792
    assert {f.property for f in broken.findings} == {"no_overlap", "null_page", "in_bounds", "padding_bound"}
    assert any("of page 0 and" in f.message and "of page 1 of g0 share bytes (strides 4,460,544/4,460,544 B"
               in f.message for f in broken.findings if f.property == "no_overlap")


def test_a_layer_offset_that_moves_with_n_leaves_the_member_not_verified_by_the_adapter() -> None:
    """Padded state slabs laid out by payload (the seeded bug vllm_state_slab_by_payload) give a block-outermost
    layer an offset in the block that moves with the block count: no one plan for every N, which kvproof's plan
    reader refuses. The member is NOT VERIFIED (adapter), naming the refusal and the point, never verified and
    never a vLLM error the adapter blames on a moved function."""
    with faults.inject("vllm_state_slab_by_payload"):
        (member,) = engine.run([NAMES[0]], {**AT_TP1, "spec": [0]}).recipes
    assert member.adapter and not member.points
    assert member.not_verified is not None and member.not_verified.startswith(
        "planner.document: vLLM's plan read into a plan kvproof refuses: engine plan: parent, alignment, bound or "
        "fields differ between N=1 and N=2 (at tp=1 ")


def test_a_mla_spec_that_reads_a_top_k_width_the_release_gives_no_function_for_is_not_planned_with_a_guess(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter hands the MLA layer its top-k buffer width where the release's model module has
    get_sparse_topk_buffer_width (0.33.0) and none where it has not (0.31.0 and 0.32.0, whose MLA spec reads none).
    Installed 0.33.0 without the function: its spec's read of the missing width raises StubUsed, no width guessed."""
    planner.plan(point())  # imports vllm.models.glm5next as planning does (its vision imports under stand-ins)
    from vllm.models.glm5next.common import model as glm_model

    monkeypatch.delattr(glm_model, "get_sparse_topk_buffer_width")
    with pytest.raises(StubUsed, match="topk_buffer_width"):
        planner.plan(point())
