"""SGLang's non-unified hybrid pools for Qwen3-Next, Kimi-Linear and Nemotron-H, built by SGLang's own
classes on the meta device (engines/sglang/planner.py), checked allocation by allocation with the
shared encoding; a pool that drops its dummy slot (the seeded bug of engines/sglang/mutants.py,
replacing MambaPool.__init__ for the call) is caught."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

try:  # sglang's own __init__ imports its whole frontend: the adapter never runs it, so neither does this check
    metadata.version("sglang")
except metadata.PackageNotFoundError:
    pytest.skip("make .venv/.sglang installs SGLang's pools (engines/sglang-requirements.txt)", allow_module_level=True)

from kvproof.engines import verdict
from kvproof.engines.sglang import engine, loader, mutants, planner

CONFIG = json.loads((Path(__file__).resolve().parents[1] / "engines/vllm/models/qwen3-next-80b-a3b.json").read_text())


@pytest.fixture(scope="module")
def mods() -> Iterator[dict[str, Any]]:
    with loader.session(loader.source_of(None)) as loaded:
        yield loaded


def _check(mods: dict[str, Any], point: planner.Point,
           patches: planner.Patches | None = None) -> list[verdict.PointResult]:
    return [verdict.planned("qwen3-next", {"allocation": name}, docs, "")
            for name, docs in planner.plan(mods, CONFIG, point, patches)[0].items()]


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype", ["bf16", "fp8_e4m3"])
def test_every_allocation_holds(mods: dict[str, Any], tp: int, dtype: str) -> None:
    results = _check(mods, planner.Point(tp, dtype, 64))
    assert len(results) == 2 + 12  # one conv and one temporal tensor; one K/V buffer per full-attention layer
    assert all(r.verdict == "ok" for r in results), [f.message for r in results for f in r.findings]


def test_state_shapes_are_sglangs(mods: dict[str, Any]) -> None:
    """The state pages follow Mamba2StateShape.create at each tp: Qwen3-Next's conv dim 8192 over tp, kernel 4
    (3 kept columns) in bf16; 32 value heads of 128 x 128 over tp in float32."""
    for tp in (1, 2, 4, 8):
        docs, _ = planner.plan(mods, CONFIG, planner.Point(tp, "bf16", 1))
        assert docs["mamba.conv0"][1]["planes"][0]["bytes"] == 8192 // tp * 3 * 2
        assert docs["mamba.temporal"][1]["planes"][0]["bytes"] == 32 // tp * 128 * 128 * 4
        kv_heads = max(1, 2 // tp)  # ModelConfig.get_num_kv_heads: 2 KV heads, replicated past tp 2
        assert docs["kv.layer3"][1]["planes"][0]["bytes"] == kv_heads * 256 * 2


def _no_dummy_slot(mods: dict[str, Any]) -> AbstractContextManager[None]:
    """MambaPool without its dummy slot (engines/sglang/mutants.py), the seeded bug `verify mutants` runs."""
    return mutants.applied(mods, ["sglang_mamba_no_dummy_slot"])


def test_a_pool_without_its_dummy_slot_is_caught(mods: dict[str, Any]) -> None:
    results = {r.point["allocation"]: r for r in _check(mods, planner.Point(2, "bf16", 1), _no_dummy_slot)}
    assert results["mamba.conv0"].verdict == "counterexample"
    assert "in_bounds" in {f.property for f in results["mamba.conv0"].findings}
    assert results["mamba.temporal"].verdict == "ok"



def _published(name: str) -> dict[str, Any]:
    return json.loads((Path(__file__).resolve().parents[1] / f"engines/vllm/models/{name}.json").read_text())


def test_kimi_linear_plans_an_mla_latent_and_kda_states(mods: dict[str, Any]) -> None:
    """Kimi-Linear's full-attention layers are MLA (ModelConfig._derive_model_shapes): one latent buffer per
    layer of kv_lora_rank 512 + qk_rope_head_dim 64 per token; its KDA layers' q/k/v convs in one tensor of
    3 x 4096 channels over tp, 3 kept columns (KimiLinearStateShape.create); 20 KDA and 7 MLA layers."""
    docs, _ = planner.plan(mods, _published("kimi-linear-48b-a3b"), planner.Point(2, "bf16", 1))
    assert sorted(docs) == sorted(["mamba.conv0", "mamba.temporal",
                                   *(f"kv.layer{i}" for i in (3, 7, 11, 15, 19, 23, 26))])
    (latent,) = docs["kv.layer3"][1]["fields"]
    assert latent["id"] == "kv.layer3.latent" and latent["shape"] == [1, 1, 512 + 64]
    assert docs["kv.layer3"][1]["planes"][0]["bytes"] == (512 + 64) * 2
    assert docs["mamba.conv0"][1]["planes"][0]["bytes"] == 3 * (3 * 4096 // 2) * 2
    assert len(docs["mamba.conv0"][1]["planes"]) == 20


def test_nemotron_h_plans_its_mamba2_and_attention_layers(mods: dict[str, Any]) -> None:
    """Nemotron-3 Nano at tp 2: conv dim 64 x 64 + 2 x 8 x 128 = 6144 over tp, 3 kept columns, in bf16; 64 Mamba
    heads of 64 x 128 over tp in float32 (Mamba2StateShape.create); 2 KV heads of 128 split over tp; 23 Mamba and
    6 attention layers."""
    docs, _ = planner.plan(mods, _published("nemotron-3-nano-30b-a3b-bf16"), planner.Point(2, "bf16", 1))
    assert len([n for n in docs if n.startswith("kv.")]) == 6 and len(docs["mamba.temporal"][1]["planes"]) == 23
    assert docs["mamba.conv0"][1]["planes"][0]["bytes"] == (64 * 64 + 2 * 8 * 128) // 2 * 3 * 2
    assert docs["mamba.temporal"][1]["planes"][0]["bytes"] == 64 // 2 * 64 * 128 * 4
    assert docs["kv.layer5"][1]["planes"][0]["bytes"] == 2 // 2 * 128 * 2


def test_mxfp8_builds_the_block_scaled_pool_and_its_scales_lie_in_their_own_tensors(mods: dict[str, Any]) -> None:
    """--kv-cache-dtype mxfp8 on an MHA model: SGLang's configurator picks MHATokenToKVPoolMXFP8
    (kv_cache_configurator.py:2738-2739), whose K, V, K scales and V scales are four tensors per layer. At
    page 128 the scales are interleaved with pages on the leading axis: Qwen3-Next's 1 KV head per rank at
    tp 2 and 256 / 32 UE8M0 scales per token, 1,024 B a page, beside 128 x 256 B of float8 data; SGLang
    registers no transfer for the scales of a hybrid pool (disaggregation/utils.py:1513-1518), so they have
    no reader, and every allocation holds."""
    docs, _ = planner.plan(mods, CONFIG, planner.Point(2, "mxfp8", 128))
    assert sorted(n for n in docs if n.startswith("kv.layer3.")) == [
        "kv.layer3.k", "kv.layer3.k_scale", "kv.layer3.v", "kv.layer3.v_scale"]
    (scale,) = docs["kv.layer3.k_scale"][1]["fields"]
    assert (scale["dtype"], scale["shape"], scale["stride"], scale["tokens"]) == (
        "float8_e8m0fnu", [1, 32, 128 // 32, 256 // 32], 128 * 256 // 32, 128)
    assert "readers" not in scale
    (data,) = docs["kv.layer3.k"][1]["fields"]
    assert (data["dtype"], data["stride"], data["readers"][0]["item_bytes"]) == ("float8_e4m3fn", 128 * 256,
                                                                                  128 * 256)
    results = [verdict.planned("qwen3-next", {"allocation": n}, d, "") for n, d in docs.items()]
    assert len(results) == 2 + 12 * 4 and all(r.verdict == "ok" for r in results), \
        [f.message for r in results for f in r.findings]


def test_mxfp8_scales_without_their_padding_page_are_caught(mods: dict[str, Any]) -> None:
    """The seeded bug of engines/sglang/mutants.py: the scale buffers one page short of the data's."""
    results = {r.point["allocation"]: r for r in _check(
        mods, planner.Point(2, "mxfp8", 128),
        lambda m: mutants.applied(m, ["sglang_mxfp8_scales_no_padding_page"]))}
    assert "in_bounds" in {f.property for f in results["kv.layer3.k_scale"].findings}
    assert results["kv.layer3.k"].verdict == "ok" and results["mamba.conv0"].verdict == "ok"


def test_the_mamba_dtypes_are_the_states_own(mods: dict[str, Any]) -> None:
    """SGLANG_MAMBA_CONV_DTYPE float32 doubles a Qwen3-Next conv slot at tp 2 (4096 x 3), --mamba-ssm-dtype
    bfloat16 halves a temporal slot (16 x 128 x 128); unset, both are each recipe's first axis value, as
    SGLang's mamba2_state_dtype resolves them (configs/mamba_utils.py:47-107)."""
    docs, _ = planner.plan(mods, CONFIG, planner.Point(2, "bf16", 1, "float32", "bfloat16"))
    assert docs["mamba.conv0"][1]["planes"][0]["bytes"] == 4096 * 3 * 4
    assert docs["mamba.temporal"][1]["planes"][0]["bytes"] == 16 * 128 * 128 * 2
    assert {docs["mamba.conv0"][1]["fields"][0]["dtype"], docs["mamba.temporal"][1]["fields"][0]["dtype"]} == {
        "float32", "bfloat16"}
    hybrid, parallel = mods["sglang.srt.configs.hybrid_arch"], mods["sglang.srt.runtime_context"].get_parallel()
    for recipe in engine.RECIPES.values():
        with parallel.override(attn_tp_size=1, attn_dcp_size=1, enable_cp_tp_group_sharing=False):
            resolved = hybrid.mambaish_config(planner.model(mods, recipe.hf())).mamba2_cache_params.dtype
        assert (str(resolved.conv), str(resolved.temporal)) == (
            f"torch.{engine.MAMBA_CONV_VALUES[0]}", f"torch.{engine.MAMBA_SSM_VALUES[0]}"), recipe.name


def test_qwen3_5_and_kimi_k3_are_read_from_their_text_configs(mods: dict[str, Any]) -> None:
    """Qwen3.5-397B-A17B (Qwen3_5MoeConfig): 60 layers, 15 of them full attention, 2 KV heads of 256, 64 value
    heads of 128 over tp; at tp 32 each rank keeps one KV head and 2 value heads. Kimi-K3 (KimiK3Config, its
    KimiLinearConfig text config): 24 MLA layers of one 512 + 64 latent, 69 KDA layers whose q, k, v convs of
    96 x 128 channels each are split over tp (KimiLinearStateShape.create), 3 kept columns."""
    docs, _ = planner.plan(mods, _published("qwen3.5-397b-a17b"), planner.Point(32, "bf16", 1))
    assert len([n for n in docs if n.startswith("kv.")]) == 15 and len(docs["mamba.temporal"][1]["planes"]) == 45
    assert docs["kv.layer3"][1]["planes"][0]["bytes"] == 1 * 256 * 2
    assert docs["mamba.temporal"][1]["planes"][0]["bytes"] == 64 // 32 * 128 * 128 * 4
    k3 = json.loads((Path(__file__).resolve().parents[1] / "engines/tokenspeed/models/kimi-k3.json").read_text())
    docs, _ = planner.plan(mods, k3, planner.Point(2, "bf16", 64))
    assert len([n for n in docs if n.startswith("kv.")]) == 24 and len(docs["mamba.conv0"][1]["planes"]) == 69
    assert docs["kv.layer3"][1]["planes"][0]["bytes"] == 64 * (512 + 64) * 2
    assert docs["mamba.conv0"][1]["planes"][0]["bytes"] == 3 * (3 * 96 * 128 // 2) * 2
