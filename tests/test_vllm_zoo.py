"""`verify engine vllm` over the hybrid zoo: the models vLLM 0.33.0 serves that have a published
config (engines/vllm/models/SOURCES.md), planned as the first four are, and the ones it holds a
config for but cannot plan on a CPU, each with its reason still true."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from importlib import resources
from types import SimpleNamespace
from typing import Any

import pytest
from transformers import AutoConfig

from kvproof.engines.vllm import catalog, engine, planner
from kvproof.impl import faults

Only = dict[str, Sequence[Any] | None]
ZOO = ("jamba-v0.1", "nemotron-3-nano-30b-a3b-bf16", "nemotron-3-super-120b-a12b-fp8",
       "nemotron-3-ultra-550b-a55b-bf16", "nemotron-3.5-lightning-30b-a3b-nvfp4")
MTP = ("nemotron-3-super-120b-a12b-fp8", "nemotron-3-ultra-550b-a55b-bf16", "nemotron-3.5-lightning-30b-a3b-nvfp4")
JAMBA = catalog.MODELS["jamba-v0.1"]
TP1: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "backend": ["FLASH_ATTN"], "pp": [1],
             "prefix": ["off"]}


def _hf(model: catalog.Model, tmp_path: Any) -> Any:
    """The model's config as transformers reads it from the folder vLLM reads."""
    (tmp_path / "config.json").write_text(model.config_text(), encoding="utf-8")
    return AutoConfig.from_pretrained(tmp_path)


def _states(planned: planner.Planned) -> dict[str, list[tuple[int, ...]]]:
    """Each state layer's state shapes, as kvproof's plan document records them."""
    out: dict[str, list[tuple[int, ...]]] = {}
    for f in planned.documents[1]["fields"]:
        if not f["id"].endswith(".kv"):
            out.setdefault(f["id"].rsplit(".state", 1)[0], []).append(tuple(f["shape"]))
    return out


@pytest.mark.parametrize("recipe", ZOO)
def test_each_zoo_model_plans_at_tp_1_and_every_plan_holds(recipe: str) -> None:
    spec: Only = {"spec": [0, 1]} if recipe in MTP else {}
    (result,) = engine.run([recipe], {**TP1, **spec}, workers=1).recipes
    assert result.not_verified is None, result.not_verified
    assert len(result.points) == (2 if recipe in MTP else 1)
    assert all(p.verdict == "ok" for p in result.points), [f.message for p in result.points for f in p.findings]
    assert all(p.parents and p.parents[1] > 1000 for p in result.points)


def test_every_zoo_model_is_in_the_default_run_and_every_held_config_is_accounted_for() -> None:
    assert set(ZOO) <= set(catalog.MODELS)
    assert not set(catalog.BLOCKED) & set(catalog.MODELS)
    held = {m.config for m in catalog.MODELS.values()} | {m.config for m, _ in catalog.BLOCKED.values()}
    sources = (resources.files("kvproof.engines") / "vllm/models/SOURCES.md").read_text()
    for name in resources.files("kvproof.engines").joinpath("vllm/models").iterdir():
        if name.name.endswith(".json"):
            assert f"vllm/models/{name.name}" in held, name.name
            assert name.name in sources, name.name


def test_the_qwen3_5_family_is_blocked_by_the_reason_it_states() -> None:
    """Held, not planned: vLLM's Qwen3.5 module imports torchvision through the Qwen2-VL image
    processor. When this fails, the environment can import it: move catalog.BLOCKED into MODELS."""
    assert set(catalog.BLOCKED) == {"qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b",
                                    "qwen3.6-27b-nvfp4", "qwen3.6-35b-a3b-nvfp4"}
    with pytest.raises((ImportError, RuntimeError)) as raised:
        importlib.import_module("vllm.model_executor.models.qwen3_5")
    assert "torchvision" in str(raised.value) or "torchvision" in repr(raised.traceback[-1])
    for model, reason in catalog.BLOCKED.values():
        assert json.loads(model.config_text())["architectures"][0].startswith("Qwen3_5")
        assert "torchvision" in reason


def test_jambas_state_is_vllms_own_mamba1_shape_at_every_tp(tmp_path: Any) -> None:
    """JambaForCausalLM's get_mamba_state_shape_from_config (what vLLM's alignment and its
    MambaMixer layers size the state by) is what kvproof records, at each tp: the conv state of
    8,192 / tp channels by 3 taps and the SSM state of 8,192 / tp channels by 16."""
    from vllm.model_executor.models.jamba import JambaForCausalLM

    hf = _hf(JAMBA, tmp_path)
    for tp in (1, 2, 32):
        planned = planner.plan(planner.Point(JAMBA, tp, "auto", "auto", False, JAMBA.backends[0]))
        # what the classmethod reads of a VllmConfig (jamba.py:470-483), and nothing else
        config: Any = SimpleNamespace(parallel_config=SimpleNamespace(tensor_parallel_size=tp),
                                      model_config=SimpleNamespace(hf_config=hf))
        vllm = tuple(JambaForCausalLM.get_mamba_state_shape_from_config(config))
        states = _states(planned)
        assert len(states) == 28  # 32 layers, attention at 4, 12, 20, 28
        assert {tuple(s) for s in states.values()} == {vllm}
        assert sorted(vllm[0]) == [3, 8192 // tp] and vllm[1] == (8192 // tp, 16)


def test_jambas_block_worked_by_hand_from_its_config() -> None:
    """tp 1, bf16: the attention page is 2 x 8 KV heads x 128 x 2 B = 4,096 B a token; the Mamba-1
    state is conv 8,192 x 3 x 2 B + ssm 8,192 x 16 x 2 B = 311,296 B, so B = 16 x ceil(311,296 /
    (16 x 4,096)) = 80 tokens and P = 327,680 B. At tp 16 the 8 KV heads are replicated, one a rank
    (512 B a token), while the state shrinks 16-fold to 19,456 B: B = 16 x ceil(2.375) = 48."""
    at = {tp: planner.plan(planner.Point(JAMBA, tp, "auto", "auto", False, JAMBA.backends[0])) for tp in (1, 16)}
    assert (at[1].block_size, at[1].mamba_padded) == (80, 327_680)
    assert (at[16].block_size, at[16].mamba_padded) == (48, 48 * 512)


@pytest.mark.parametrize("recipe", ("nemotron-3-nano-30b-a3b-bf16", "nemotron-3-super-120b-a12b-fp8"))
def test_nemotron_3s_state_is_vllms_own_mamba2_shape_widened_by_its_draft(recipe: str, tmp_path: Any) -> None:
    """NemotronHForCausalLM's get_mamba_state_shape_from_config, with the speculated tokens' conv
    rows where the checkpoint has an MTP draft; and the draft's one attention layer joins the cache."""
    from vllm.model_executor.models.nemotron_h import NemotronHForCausalLM

    model = catalog.MODELS[recipe]
    hf = _hf(model, tmp_path)
    spec = 2 if model.speculative else 0
    planned = planner.plan(planner.Point(model, 1, "auto", "auto", False, model.backends[0], spec))
    # what the classmethod reads of a VllmConfig (nemotron_h.py:796-811)
    config: Any = SimpleNamespace(
        parallel_config=SimpleNamespace(tensor_parallel_size=1), cache_config=SimpleNamespace(use_replayssm=False),
        model_config=SimpleNamespace(hf_config=hf), num_speculative_tokens=spec)
    vllm = tuple(tuple(s) for s in NemotronHForCausalLM.get_mamba_state_shape_from_config(config))
    states = _states(planned)
    assert len(states) == hf.hybrid_override_pattern.count("M")
    assert {tuple(s) for s in states.values()} == {vllm}
    conv = hf.mamba_num_heads * hf.mamba_head_dim + 2 * hf.n_groups * hf.ssm_state_size
    assert sorted(vllm[0]) == sorted((conv, hf.conv_kernel - 1 + spec))
    draft = [f["id"] for f in planned.documents[1]["fields"] if ".mtp." in f["id"]]
    assert len(draft) == (1 if spec else 0) and all(d.endswith(".mtp.layers.0.mixer.kv") for d in draft)


def test_a_mamba1_state_dtype_dropped_by_the_alignment_is_flagged_only_at_jamba() -> None:
    """The seeded bug vllm_mamba1_dtype_unaligned: vLLM's alignment sizes Jamba's state page as bf16
    (the model dtype) while its layers keep float32 states (--mamba-cache-dtype float32): the
    160-token block the layers need is aligned to 80, and vLLM's own check refuses the point. The
    Mamba-2, GDN and KDA models never ask mamba1_state_dtype: their float32 points stay clean."""
    only: Only = {**TP1, "mamba_dtype": ["float32"]}
    (clean,) = engine.run(["jamba-v0.1"], only, workers=1).recipes[0].points
    assert clean.verdict == "ok"
    with faults.inject("vllm_mamba1_dtype_unaligned"):
        run = engine.run(["jamba-v0.1", "nemotron-3-nano-30b-a3b-bf16", "nemotron-h-56b-base-8k",
                          "qwen3-next-80b-a3b"], only, workers=1)
    jamba, *others = run.recipes
    (broken,) = jamba.points
    assert [f.property for f in broken.findings] == ["boots"]
    assert all(p.verdict == "ok" for r in others for p in r.points)
    assert "vllm_mamba1_dtype_unaligned" in run.source
