"""A draft's own attention backend in vLLM (`--speculative-config`'s attention_backend): Model Runner V2 builds an
MTP or EAGLE3 draft under the target's attention config but for it (config/speculative.py:396-403,
v1/worker/gpu/spec_decode/eagle/utils.py:86), and unpinned the draft's layers select theirs at the draft's own KV
dtype; it builds a DFLASH draft under the pin too, asking it for non-causal attention (dflash/utils.py:31-32). A
drafted point carries the axis `draft_backend` wherever another backend of the model's (or, for an EAGLE3 or DFLASH
recipe, its target's) runs on its GPU."""

from __future__ import annotations

import json
from pathlib import Path
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
    # a DSpark draft's backend is selected apart, so its points plan that selection, at each of three sm_90 backends
    dspark = engine.points(catalog.MODELS["kimi-k3-dspark"], {"tp": [1], "spec": [1]})
    assert len({p["backend"] for p in dspark}) == 4 and not any("draft_backend" in p for p in dspark)


def test_a_drafted_recipe_names_its_targets_other_backends_on_the_gpu_for_the_drafts_layers() -> None:
    """An EAGLE3 or DFLASH recipe plans its target at FLASH_ATTN alone; --speculative-config's attention_backend may
    still give the draft's layers each of the target's other sm_90 backends (both take non-causal attention)."""
    fa, fi, triton = "FLASH_ATTN@sm_90", "FLASHINFER@sm_90", "TRITON_ATTN@sm_90"
    for recipe in ("qwen3.5-35b-a3b-eagle3", "qwen3.5-35b-a3b-dflash"):
        points = engine.points(catalog.MODELS[recipe], {"tp": [1], "spec": [1], "dtype": ["auto"],
                                                        "draft_dtype": ["target"], "mamba_dtype": ["auto"],
                                                        "prefix": ["off"]})
        assert {(p["backend"], p.get("draft_backend"), p.get("trtllm")) for p in points} == {
            (fa, None, None), (fa, triton, None), (fa, fi, "on"), (fa, fi, "off")}


def test_a_dflash_drafts_backend_is_one_whose_class_takes_non_causal_attention(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    """vLLM builds a DFLASH draft asking for non-causal attention where any of its layers is non-causal (dflash/
    utils.py:31), as every layer of Qwen3.5-35B-A3B's draft is, and refuses a pinned backend that cannot take it:
    the domain keeps a candidate by its class's own supports_non_causal."""
    from transformers import Qwen3Config
    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal

    model = catalog.MODELS["qwen3.5-35b-a3b-dflash"]
    assert model.draft_config is not None
    draft = json.loads((Path(catalog.__file__).parent.parent / model.draft_config).read_text())
    assert dflash_has_any_non_causal(Qwen3Config(**draft))  # the draft's model_type, qwen3
    only: engine.Only = {"tp": [1], "spec": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"]}
    assert "TRITON_ATTN@sm_90" in {p.get("draft_backend") for p in engine.points(model, only)}
    monkeypatch.setattr(backends.TRITON_ATTN.load(), "supports_non_causal", classmethod(lambda cls: False))
    assert {p.get("draft_backend") for p in engine.points(model, only)} == {None, "FLASHINFER@sm_90"}
    # the EAGLE3 draft asks for no non-causal attention: its candidates stay
    assert "TRITON_ATTN@sm_90" in {p.get("draft_backend") for p in engine.points(
        catalog.MODELS["qwen3.5-35b-a3b-eagle3"], only)}


def test_vllms_own_pick_at_each_pair_of_target_and_draft_dtypes_on_sm_90_is_a_planned_point() -> None:
    """Unpinned, the target and the draft each take the first MLA backend of CudaPlatform's sm_90 priorities whose class
    declares their KV dtype (cuda.py:150-153): for each pair of dtypes that point is planned, with a draft_backend
    where the two picks differ (a bf16 target at FLASH_ATTN_MLA drafts at fp8 with FLASHMLA)."""
    model = catalog.MODELS[LING]
    declared = {b.name: (b.label, b.load().supported_kv_cache_dtypes) for b in model.backends}

    def pick(dtype: str) -> str:
        return next(declared[name][0] for name in platform.MLA_PRIORITIES[9]
                    if name in declared and dtype in declared[name][1])

    points = engine.points(model, {"tp": [1], "spec": [1], "mamba_dtype": ["auto"], "prefix": ["off"]})
    planned = {(p["backend"], p["dtype"], p.get("draft_dtype", p["dtype"]), p.get("draft_backend", p["backend"]))
               for p in points}
    picks = {(pick(target), target, draft, pick(draft)) for target in engine.DTYPES for draft in engine.DTYPES}
    assert picks <= planned
    assert ("FLASH_ATTN_MLA@sm_90", "auto", "fp8", "FLASHMLA@sm_90") in picks
    assert not any(draft == "fp8" and "FLASH_ATTN_MLA" in own for _, _, draft, own in planned)


def test_the_drafts_layers_take_their_own_backends_spec_kernels_and_block() -> None:
    """The MTP layer at FlashInfer under a FLASH_ATTN target: FlashInfer's spec (its fixed kernel blocks ask a block
    stride of a multiple of 64, customize_attention_spec) makes it another kind, so vLLM puts every layer in a group
    of its own (41 where 4), and FlashInfer's kernels read its pages."""
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


def test_the_engine_hands_the_planner_each_points_draft_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft backend of the target's other backends reaches the planning of its point (not the target's, which a
    lookup among the recipe's own backends alone would give it)."""
    asked: list[planner.Point] = []
    real = planner.plan

    def recording(point: planner.Point, *args: Any, **kwargs: Any) -> planner.Planned:
        asked.append(point)
        return real(point, *args, **kwargs)

    monkeypatch.setattr(planner, "plan", recording)
    only: engine.Only = {"tp": [1], "spec": [1], "dtype": ["auto"], "draft_dtype": ["target"], "mamba_dtype": ["auto"],
                         "prefix": ["off"]}
    engine.run(["qwen3.5-35b-a3b-dflash"], only, workers=1)
    # the trtllm=off point reuses the trtllm=on planning where planning never asked it (planner.Plans)
    assert {p.draft_backend and p.draft_backend.label for p in asked} == {None, "TRITON_ATTN@sm_90", "FLASHINFER@sm_90"}


def test_a_dflash_drafts_layers_take_the_pinned_backends_kernels_and_the_target_keeps_its_own() -> None:
    """The DFLASH draft's eight layers at a pinned FlashInfer under a FLASH_ATTN target: FlashInfer's kernels read
    their pages at a kernel block FlashInfer takes, the target's layers keep FLASH_ATTN's."""
    model = catalog.MODELS["qwen3.5-35b-a3b-dflash"]
    pinned = planner.plan(planner.Point(model, 1, "auto", "auto", False, backends.FLASH_ATTN, 3, trtllm=True,
                                        draft_backend=backends.FLASHINFER_SM90))
    draft = [f"model.layers.{40 + i}.self_attn.attn" for i in range(8)]
    assert {pinned.kernels[name][0] for name in draft} == {backends.FLASHINFER_SM90}
    assert pinned.kernels[TARGET][0] == backends.FLASH_ATTN
    assert {pinned.kernels[name][1] for name in draft} <= {16, 32, 64}
    assert _spec(pinned, draft[0]).block_stride_alignment.base == 64


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
    assert "draft_backend= plans the draft's layers at each other backend" in (
        catalog.MODELS["qwen3.5-35b-a3b-eagle3"].stated_limits)
    assert "whose class takes non-causal attention" in catalog.MODELS["qwen3.5-35b-a3b-dflash"].stated_limits
    assert "another draft backend" in catalog.MODELS["glm53-flash-family-0"].stated_limits
    assert "only the one selected takes the draft's non-causal attention" in (
        catalog.MODELS["kimi-k3-dspark"].stated_limits)
    assert "draft_backend=" not in catalog.MODELS["kimi-linear-48b-a3b"].stated_limits
