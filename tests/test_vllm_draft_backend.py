"""A draft's own attention backend in vLLM (`--speculative-config`'s attention_backend): Model Runner V2 builds an
MTP or EAGLE3 draft under the target's attention config but for it (config/speculative.py:396-403,
v1/worker/gpu/spec_decode/eagle/utils.py:86), and unpinned the draft's layers select theirs at the draft's own KV
dtype. A drafted point carries the axis `draft_backend` wherever another backend of the model's runs on its GPU."""

from __future__ import annotations

from typing import Any

import pytest

from kvproof.engines.vllm import backends, catalog, engine, planner, platform

QWEN = "qwen3.5-35b-a3b"
MTP = "mtp.layers.0.self_attn.attn"
TARGET = "language_model.model.layers.3.self_attn.attn"  # Qwen3.5-35B-A3B's first full-attention layer
LING = "ling-2.6-flash-family-0"
LING_MTP, LING_TARGET = "model.layers.32.self_attn.attn", "model.layers.7.self_attn.attn"


@pytest.fixture(scope="module", autouse=True)
def _assumed() -> None:
    platform.cuda_assumed(platform.modules())


def _spec(planned: planner.Planned, layer: str) -> Any:
    group = next(g for g in planned.configs[1].kv_cache_groups if layer in g.layer_names)
    return planner.layer_spec(group, layer)


def test_an_mtp_drafted_point_names_each_other_backend_on_its_gpu_and_no_other_draft_does() -> None:
    points = engine.points(catalog.MODELS[QWEN], {"tp": [1], "pp": [1], "spec": [0, 1], "dtype": ["auto"],
                                                  "draft_dtype": ["target"], "mamba_dtype": ["auto"],
                                                  "prefix": ["off"]})
    pairs = {(p["backend"], p.get("draft_backend"), p.get("trtllm")) for p in points if p["spec"] == 1}
    fa, fi, triton = "FLASH_ATTN@sm_90", "FLASHINFER@sm_90", "TRITON_ATTN@sm_90"
    assert pairs == {(fa, None, None), (fa, triton, None), (triton, None, None), (triton, fa, None),
                     *((b, d, t) for t in ("on", "off") for b, d in ((fa, fi), (triton, fi), (fi, None), (fi, fa),
                                                                     (fi, triton), ("FLASHINFER@sm_100", None)))}
    assert not any("draft_backend" in p for p in points if p["spec"] == 0)
    # a DSpark or DFLASH draft selects its backend apart; the EAGLE3, GLM-5.3-Flash and Qwen4-Exp recipes plan one
    # backend a GPU
    for recipe in ("kimi-k3-dspark", "qwen3.5-35b-a3b-dflash", "qwen3.5-35b-a3b-eagle3", "glm53-flash-family-0",
                   "qwen3.8-flash-next-family-0"):
        assert not any("draft_backend" in p for p in engine.points(catalog.MODELS[recipe], {"tp": [1]})), recipe


def test_vllms_own_pick_for_a_bf16_target_and_an_fp8_draft_on_sm_90_is_planned() -> None:
    """Unpinned, a bf16 MLA target selects FLASH_ATTN_MLA and an fp8 draft FlashMLA (cuda.py:150-153; FLASH_ATTN_MLA
    declares no fp8): that point has the draft at FLASHMLA, and no FLASH_ATTN_MLA draft is ever at fp8."""
    points = engine.points(catalog.MODELS[LING], {"tp": [1], "spec": [1]})
    fp8_drafts = {(p["backend"], p.get("draft_backend")) for p in points
                  if p.get("draft_dtype", p["dtype"]) == "fp8"}
    assert ("FLASH_ATTN_MLA@sm_90", "FLASHMLA@sm_90") in fp8_drafts
    assert not any("FLASH_ATTN_MLA" in (draft or backend) for backend, draft in fp8_drafts)


def test_the_drafts_layers_take_their_own_backends_spec_kernels_and_block() -> None:
    """The MTP layer at FlashInfer under a FLASH_ATTN target: FlashInfer's spec (its fixed kernel blocks ask a block
    stride of a multiple of 64, customize_attention_spec) makes it another kind, so vLLM puts every layer in a group
    of its own (41 where 4), FlashInfer's kernels read its pages, and the speculative config names the backend."""
    qwen = catalog.MODELS[QWEN]
    mixed = planner.plan(planner.Point(qwen, 1, "auto", "auto", False, backends.FLASH_ATTN, 1, trtllm=False,
                                       draft_backend=backends.FLASHINFER_SM90))
    same = planner.plan(planner.Point(qwen, 1, "auto", "auto", False, backends.FLASH_ATTN, 1))
    assert _spec(mixed, MTP).block_stride_alignment.base == 64
    assert _spec(mixed, TARGET).block_stride_alignment is None is _spec(same, MTP).block_stride_alignment
    assert (len(mixed.configs[1].kv_cache_groups), len(same.configs[1].kv_cache_groups)) == (41, 4)
    assert (mixed.kernels[MTP][0], mixed.kernels[TARGET][0], same.kernels[MTP][0]) == (
        backends.FLASHINFER_SM90, backends.FLASH_ATTN, backends.FLASH_ATTN)
    # FlashMLA's decode takes 64-token pages where FLASH_ATTN_MLA's take the whole 256-token block
    ling = planner.plan(planner.Point(catalog.MODELS[LING], 1, "auto", "auto", False, backends.FLASH_ATTN_MLA, 1,
                                      draft_backend=backends.FLASHMLA))
    assert {name: (record.name, tokens) for name, (record, tokens) in ling.kernels.items()
            if name in (LING_MTP, LING_TARGET) and record is not None} == {
        LING_MTP: ("FLASHMLA", 64), LING_TARGET: ("FLASH_ATTN_MLA", 256)}


def test_a_drafted_points_replay_names_its_draft_backend_and_plans_that_point_alone() -> None:
    only: engine.Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "spec": [1],
                         "pp": [1], "draft_dtype": ["target"]}
    points = engine.run([LING], only, workers=1).recipes[0].points
    assert {p.point.get("draft_backend", engine.TARGET_BACKEND) for p in points} == {
        engine.TARGET_BACKEND, "FLASHMLA@sm_90", "FLASH_ATTN_MLA@sm_90"}
    for p in points:
        flags = p.replay.split("--assume ")[1].split()
        replayed = engine.run([LING], {"tp": [p.point["tp"]], "dtype": [p.point["dtype"]],
                                       **engine._assumed(flags)}, workers=1).recipes[0].points
        assert [r.point for r in replayed] == [p.point]


def test_assume_draft_backend_takes_target_or_a_backend_and_refuses_anything_else_in_one_line() -> None:
    assert engine._assumed(["draft_backend=target", "draft_backend=FLASHMLA"]) == {
        "draft_backend": ["target", "FLASHMLA"]}
    with pytest.raises(engine.EngineError, match=r"--assume draft_backend=FA3: vllm takes .*draft_backend=FLASH"):
        engine._assumed(["draft_backend=FA3"])


def test_each_drafted_models_limits_say_which_draft_backends_it_plans() -> None:
    assert "draft_backend= plans the draft's layers at each other backend" in catalog.MODELS[QWEN].stated_limits
    assert "another draft backend" in catalog.MODELS["qwen3.5-35b-a3b-eagle3"].stated_limits
    for recipe in ("kimi-k3-dspark", "qwen3.5-35b-a3b-dflash"):
        assert "pinned by --speculative-config's attention_backend is not planned" in (
            catalog.MODELS[recipe].stated_limits)
    assert "draft_backend=" not in catalog.MODELS["kimi-linear-48b-a3b"].stated_limits
