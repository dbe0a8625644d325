"""A draft's own KV dtype in vLLM (`--speculative-config`'s kv_cache_dtype): vLLM builds the draft's layers under it
(config/speculative.py:396-403, v1/worker/gpu/spec_decode/eagle/utils.py:86; dspark/utils.py:104-112), so a drafted
point carries the axis `draft_dtype` wherever the model's draft is planned at a dtype of its own."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kvproof.engines.vllm import backends, catalog, engine, planner, platform
from kvproof.engines.vllm.parts import Backend

QWEN = "qwen3.5-35b-a3b"
MTP = "mtp.layers.0.self_attn.attn"
TARGET = "language_model.model.layers.3.self_attn.attn"  # Qwen3.5-35B-A3B's first full-attention layer
DSPARK_LAYER = "model.layers.93.self_attn"  # Kimi-K3's DSpark draft's first layer


@pytest.fixture(scope="module", autouse=True)
def _assumed() -> None:
    platform.cuda_assumed(platform.modules())


def _planned(recipe: str, backend: Backend, dtype: str, draft_dtype: str | None) -> planner.Planned:
    return planner.plan(planner.Point(catalog.MODELS[recipe], 1, dtype, "auto", False, backend, 1,
                                      draft_dtype=draft_dtype))


def _spec(planned: planner.Planned, layer: str) -> Any:
    group = next(g for g in planned.configs[1].kv_cache_groups if layer in g.layer_names)
    return planner.layer_spec(group, layer)


def test_a_drafted_point_carries_the_other_dtype_and_an_undrafted_or_ngram_one_none() -> None:
    points = engine.points(catalog.MODELS[QWEN], {"tp": [1], "pp": [1], "backend": ["FLASH_ATTN@sm_90"],
                                                  "mamba_dtype": ["auto"], "prefix": ["off"]})
    drafted = {(p["dtype"], p["spec"], p.get("draft_dtype")) for p in points}
    assert drafted == {(d, s, None) for d in engine.DTYPES for s in (0, 1, 2, 3)} | {
        (d, s, other) for d in engine.DTYPES for other in engine.DTYPES if other != d for s in (1, 2, 3)}
    assert not any("draft_dtype" in p for p in engine.points(catalog.MODELS["kimi-linear-48b-a3b"],
                                                             {"tp": [1], "pp": [1]}))


def test_a_backend_takes_the_drafts_dtype_only_where_it_declares_it_but_a_dspark_draft_selects_its_own() -> None:
    """FLASH_ATTN_MLA declares no fp8: its Ling-3.0-flash points carry an fp8 draft only at a draft backend of its own
    (without one the point assumes the backend pinned by --attention-backend, which the draft's layers take, and vLLM
    refuses the pinned backend at the draft's fp8); a DSpark draft's backend is selected at its own dtype, so
    Kimi-K3's FLASH_ATTN_MLA points carry one."""
    only: engine.Only = {"tp": [1], "pp": [1], "backend": ["FLASH_ATTN_MLA"]}
    ling, dspark = catalog.MODELS["ling-3.0-flash-family-1"], catalog.MODELS["kimi-k3-dspark"]
    assert {p.get("draft_backend") for p in engine.points(ling, only) if p.get("draft_dtype") == "fp8"} == {
        "FLASHMLA@sm_90"}
    assert any(p.get("draft_dtype") == "fp8" for p in engine.points(dspark, only))
    # GLM-5.3-Flash's draft layers keep the cache config vLLM copies for a named dtype: the target's own is named too
    glm = engine.points(catalog.MODELS["glm53-flash-family-0"], {"tp": [1], "dtype": ["auto"], "spec": [1]})
    assert sorted(p.get("draft_dtype", "") for p in glm) == sorted(["", "auto", "fp8"] * 4)


def test_an_mtp_layer_at_fp8_under_a_bf16_target_keeps_half_the_page_so_vllm_doubles_its_block() -> None:
    """The MTP layer's page at fp8 is half the target's: vLLM raises its block to fill the largest page
    (unify_kv_cache_spec_page_size, v1/core/kv_cache_planning.py:392-395) and, the layers' specs no longer being
    of one kind, puts every layer in a group of its own."""
    planned = _planned(QWEN, backends.FLASH_ATTN, "auto", "fp8")
    mtp, target = _spec(planned, MTP), _spec(planned, TARGET)
    assert (mtp.dtype, target.dtype) == (torch.uint8, torch.bfloat16)
    assert mtp.block_size == 2 * target.block_size and mtp.page_size_bytes == target.page_size_bytes
    assert len(planned.configs[1].kv_cache_groups) == 41
    same = _planned(QWEN, backends.FLASH_ATTN, "auto", None)
    assert _spec(same, MTP).dtype == torch.bfloat16 and len(same.configs[1].kv_cache_groups) == 4


def test_a_bf16_draft_over_an_fp8_target_doubles_every_page_and_pads_each_state_to_twice_itself() -> None:
    planned = _planned(QWEN, backends.FLASH_ATTN, "fp8", "auto")
    fp8 = _planned(QWEN, backends.FLASH_ATTN, "fp8", None)
    assert _spec(planned, MTP).dtype == torch.bfloat16
    assert _spec(planned, TARGET).page_size_bytes == 2 * _spec(fp8, TARGET).page_size_bytes


def test_an_eagle3_drafts_layer_is_planned_at_the_drafts_dtype() -> None:
    planned = _planned("qwen3-next-80b-a3b-eagle3", backends.FLASH_ATTN, "fp8", "auto")
    assert _spec(planned, "model.layers.48.self_attn.attn").dtype == torch.bfloat16
    assert _spec(planned, "model.layers.3.self_attn.attn").dtype == torch.uint8


def test_a_dspark_drafts_layers_and_backend_take_the_drafts_dtype() -> None:
    """At FLASHMLA over an fp8 target the bf16 draft's layers keep bf16 latent pages, read by the backend vLLM
    selects for non-causal MLA at bf16 on sm_90: Triton MLA."""
    planned = _planned("kimi-k3-dspark", backends.FLASHMLA, "fp8", "auto")
    assert _spec(planned, DSPARK_LAYER).dtype == torch.bfloat16
    assert planned.kernels[DSPARK_LAYER][0] == backends.TRITON_MLA
    assert _spec(_planned("kimi-k3-dspark", backends.FLASHMLA, "fp8", None), DSPARK_LAYER).dtype == torch.uint8


def test_each_models_limits_say_what_a_point_with_a_draft_dtype_assumes_of_the_drafts_backend() -> None:
    assert "pinned by --attention-backend" in catalog.MODELS[QWEN].stated_limits
    assert "selected at it, as vLLM selects it" in catalog.MODELS["kimi-k3-dspark"].stated_limits
    assert "non-causal attention" in catalog.MODELS["qwen3.5-35b-a3b-dflash"].stated_limits
    assert "names itself" in catalog.MODELS["qwen3.8-flash-next-family-0"].stated_limits
    assert "draft_dtype=" not in catalog.MODELS["kimi-linear-48b-a3b"].stated_limits


def test_a_named_draft_dtype_leaves_glms_mtp_indexer_cache_at_a_block_no_indexer_kernel_takes() -> None:
    """vLLM copies the cache config for any dtype the speculative config names (the target's own too) and builds the
    MTP layer under the copy, before the worker aligns the block; the layer's indexer K cache reads its block from
    the copy (deepseek_v2.py:660), 16 tokens, and at tp 4 (where the memory check passes) the worker's pick of a
    kernel block for its attention group finds none: DeepGEMM's indexer takes 128 or 256 tokens."""
    glm = catalog.MODELS["glm53-flash-family-0"]
    indexer = "model.layers.45.self_attn.indexer.k_cache"
    target = "language_model.model.layers.3.self_attn.indexer.k_cache"

    def at(draft_dtype: str | None) -> planner.Planned:
        return planner.plan(planner.Point(glm, 4, "auto", "auto", False, glm.backends[0], 1, draft_dtype=draft_dtype))

    with pytest.raises(ValueError, match=r"No common block size for 16 \(DEEPSEEK_V32_INDEXER: \[128, 256\]\)"):
        at("fp8")
    unnamed = at(None)
    assert _spec(unnamed, indexer).block_size == _spec(unnamed, target).block_size == unnamed.block_size


def test_a_named_draft_dtype_leaves_qwen4_exps_mtp_compressed_keys_at_16_token_blocks() -> None:
    qwen4 = catalog.MODELS["qwen3.8-flash-next-family-0"]
    keys = "mtp.layers.48.self_attn.indexer.compressed_key_cache"
    named = planner.plan(planner.Point(qwen4, 1, "auto", "auto", False, qwen4.backends[0], 1, draft_dtype="fp8"))
    assert _spec(named, keys).block_size == 16 and named.block_size == 1584
