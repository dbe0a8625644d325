"""Kimi-K3's DSpark draft in vLLM: a checkpoint of its own (SpeculativeConfig(method="dspark", model=its folder)),
whose five MLA layers vLLM numbers on from the target's 93 and builds under a config that asks non-causal attention,
so their backend is the one vLLM selects for that apart from the target's (engines/vllm/kimi_k3_dspark.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest
import torch

from kvproof.engines.stubs import StubUsed
from kvproof.engines.vllm import backends, catalog, engine, planner, platform
from kvproof.engines.vllm.parts import Backend

DSPARK = "kimi-k3-dspark"
DRAFT = [f"model.layers.{i}.self_attn" for i in range(93, 98)]
TARGET_MLA = "language_model.model.layers.3.self_attn"  # the target's first MLA layer (is_kda_layer)


@pytest.fixture(scope="module", autouse=True)
def _assumed() -> None:
    platform.cuda_assumed(platform.modules())


def _planned(backend: Backend, dtype: str = "auto", tp: int = 8, spec: int = 7) -> planner.Planned:
    return planner.plan(planner.Point(catalog.MODELS[DSPARK], tp, dtype, "auto", False, backend, spec))


def _fields(planned: planner.Planned) -> dict[str, dict]:
    return {f["id"].split(".", 1)[1]: f for f in planned.documents[1]["fields"]}


@contextmanager
def _current() -> Iterator[None]:
    """A default vLLM config current, as a layer's constructor has one (some backends' validation reads it)."""
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cuda"))):
        yield


def _group(planned: planner.Planned, layer: str) -> Any:
    return next(g for g in planned.configs[1].kv_cache_groups if layer in g.layer_names)


def test_on_sm_90_the_drafts_pages_are_read_by_triton_mla_whole_beside_flashmlas_kernel_pages() -> None:
    """At FLASHMLA (tp 8, 7 tokens: a 768-token block) the draft's five layers keep 576-wide latent pages (512 +
    64) in a group of their own: FlashMLA's spec asks block strides of 64-token multiples and Triton MLA's none, so
    vLLM does not merge them with the target's. Triton MLA's decode reads a draft page whole; the target's pages
    are FlashMLA's 64-token kernel pages, whose stride must be exact."""
    planned = _planned(backends.FLASHMLA)
    draft = _group(planned, DRAFT[0])
    assert draft.layer_names == DRAFT and draft.kv_cache_spec.non_causal_multi_token_decode
    assert TARGET_MLA not in draft.layer_names
    fields = _fields(planned)
    mine, target = fields[f"{DRAFT[0]}.kv"], fields[f"{TARGET_MLA}.kv"]
    assert mine["shape"] == [768, 576] and not mine["exact_stride"]
    assert [(k["name"], k["tokens"]) for k in mine["kernels"]] == [("triton_decode_attention", 768)]
    assert [(k["name"], k["tokens"]) for k in target["kernels"]] == [("flashmla_dense_decode", 64)]
    assert target["exact_stride"] and planned.kernels[DRAFT[0]] == (backends.TRITON_MLA, 768)


def test_at_flash_attn_mla_the_draft_joins_the_targets_group_and_its_kernel_block_is_both_backends() -> None:
    """FLASH_ATTN_MLA's spec asks no block stride either, so vLLM merges the draft's layers into the target's MLA
    group (its specs differ in non-causal decode alone, which merge() unions), and the group's kernel block is the
    one both backends take: the whole block, since each takes any multiple of 16."""
    planned = _planned(backends.FLASH_ATTN_MLA, tp=32, spec=3)
    group = _group(planned, DRAFT[0])
    assert TARGET_MLA in group.layer_names and set(DRAFT) <= set(group.layer_names)
    fields = _fields(planned)
    assert [(k["name"], k["tokens"]) for k in fields[f"{DRAFT[0]}.kv"]["kernels"]] == [
        ("triton_decode_attention", planned.block_size)]
    assert [(k["name"], k["tokens"]) for k in fields[f"{TARGET_MLA}.kv"]["kernels"]] == [
        ("flash_attn_3", planned.block_size)]


def test_a_groups_kernel_block_is_picked_over_every_backend_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_kernel_block_sizes asks select_common_block_size once per cache group, over the backends of its
    attention groups: where the draft joins the target's MLA group at FLASH_ATTN_MLA, over both backends."""
    from vllm.v1.worker import utils

    asked: list[set[str]] = []
    original = utils.select_common_block_size

    def recording(block: int, backends_in: list[Any], *rest: Any) -> int:
        asked.append({b.get_name() for b in backends_in})
        return int(original(block, backends_in, *rest))

    monkeypatch.setattr(utils, "select_common_block_size", recording)
    _planned(backends.FLASH_ATTN_MLA, tp=32, spec=3)
    assert {"FLASH_ATTN_MLA", "TRITON_MLA"} in asked


def test_a_backend_imported_within_a_point_leaves_the_points_answers_and_triton_as_a_gpu_has_it() -> None:
    """A draft's selection imports a backend while a point plans, under answers of its own (load_backend): the
    point's answers are back after it. Triton counts as usable while a point plans, as on a GPU (vLLM then runs
    Model Runner V2 at 0.30.0 to 0.32.0 too), and this machine's answer is back after it."""
    from vllm.config import vllm as configs

    cuda = platform.cuda_assumed(platform.modules())
    before = configs.HAS_TRITON
    with platform.point_answers(cuda, (10, 0), []) as outer:
        with platform.point_answers(cuda, (9, 0), []):
            assert cuda.get_device_capability().major == 9
        assert type(cuda)._answers() is outer and cuda.get_device_capability().major == 10
        assert configs.HAS_TRITON is True
    assert configs.HAS_TRITON is before


def test_on_sm_100_the_draft_runs_the_targets_flashinfer_mla_in_its_group() -> None:
    """FLASHINFER_MLA, first on sm_100, takes non-causal attention: the draft's layers share the target's backend
    and group, both read in FlashInfer MLA's 64-token pages."""
    planned = _planned(backends.FLASHINFER_MLA, "fp8", tp=1, spec=1)
    assert TARGET_MLA in _group(planned, DRAFT[0]).layer_names
    fields = _fields(planned)
    for layer in (DRAFT[0], TARGET_MLA):
        assert [(k["name"], k["tokens"]) for k in fields[f"{layer}.kv"]["kernels"]] == [("flashinfer_mla_decode", 64)]


@pytest.mark.parametrize(("capability", "dtype", "chosen"), [
    ((9, 0), "auto", "TRITON_MLA"), ((9, 0), "fp8", "TRITON_MLA"),
    ((10, 0), "auto", "FLASHINFER_MLA"), ((10, 0), "fp8", "FLASHINFER_MLA"),
])
def test_a_non_causal_layers_backend_is_the_first_vllm_priority_whose_own_validation_takes_it(
        capability: tuple[int, int], dtype: str, chosen: str) -> None:
    """On sm_90 FLASH_ATTN_MLA and FLASHMLA decline non-causal attention and FLASHINFER_MLA the GPU: TRITON_MLA;
    on sm_100 FLASHINFER_MLA, first, takes it."""
    path = _select(capability, dtype, non_causal=True)
    assert path.rpartition(".")[2] == getattr(backends, chosen).path.rpartition(":")[2]


def test_a_backend_declined_only_by_its_check_of_the_machine_is_not_taken_as_declined() -> None:
    """A causal MLA layer on sm_90 reaches FLASH_ATTN_MLA first, which this CPU's missing FlashAttention MLA
    kernels decline and an sm_90 GPU's would not: kvproof cannot select there, so the target's backend stays an
    assumption of each point."""
    with pytest.raises(StubUsed, match="FLASH_ATTN_MLA, which declines the layer for a reason of its own"):
        _select((9, 0), "auto", non_causal=False)


def _select(capability: tuple[int, int], dtype: str, non_causal: bool) -> str:
    from vllm.v1.attention.selector import AttentionSelectorConfig

    config = AttentionSelectorConfig(576, torch.bfloat16, cast(Any, dtype), None, use_mla=True,
                                     use_non_causal=non_causal)
    cuda = platform.cuda_assumed(platform.modules())
    with platform.point_answers(cuda, capability, []), _current():
        return str(cuda.get_attn_backend_cls(None, attn_selector_config=config, num_heads=8))


def test_a_pinned_backend_that_declines_the_layer_is_refused_as_vllm_refuses_it() -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

    config = AttentionSelectorConfig(576, torch.bfloat16, "auto", None, use_mla=True, use_non_causal=True)
    cuda = platform.cuda_assumed(platform.modules())
    with platform.point_answers(cuda, (9, 0), []), _current(), pytest.raises(ValueError, match="non-causal attention"):
        cuda.get_attn_backend_cls(AttentionBackendEnum.FLASHMLA, attn_selector_config=config)


def test_every_dspark_point_plans_one_to_seven_tokens_at_every_mla_backend_without_stages() -> None:
    run = engine.run([DSPARK], {"tp": [8]}, workers=1)
    (result,) = run.recipes
    assert not result.adapter and not result.not_verified
    assert {p.point["spec"] for p in result.points} == set(range(1, 8))
    assert {p.point["pp"] for p in result.points} == {1}
    assert {p.point["backend"] for p in result.points} == {b.label for b in catalog.MLA_BACKENDS}
    # as kimi-k3's own points: only tp 8's block against tp 1's (tp_block_size, baselined)
    assert {f.property for p in result.points for f in p.findings} == {"tp_block_size"}
    # each with the draft at the target's kv dtype and at the other one (the draft's backend is selected at it)
    assert len(result.points) == 2 * 196
    assert {p.point.get("draft_dtype") for p in result.points} == {None, *engine.DTYPES}
