"""GLM-5.3-Flash (Glm5NextForConditionalGeneration) as vLLM reads it (engines/vllm/glm53_flash.py): its stated
family carries tokenspeed's cited values into the config.json vLLM reads, transformers' config class reads them
under the names vLLM asks, and the pages vLLM would plan are of the kinds the module says the adapter does not
translate yet (so no member is in the catalog)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import glm53_flash as tokenspeed
from kvproof.engines.vllm import catalog, glm53_flash, planner
from kvproof.engines.vllm.platform import cuda_assumed, load_backend, modules, point_answers

FAMILY = glm53_flash.FAMILY
MEMBER = glm53_flash.MEMBERS[0]
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
    assert [m.name for m in glm53_flash.MEMBERS] == ["glm53-flash-family-0", "glm53-flash-family-1"]
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


def test_what_keeps_it_out_of_the_catalog_is_as_the_module_says() -> None:
    """The tail ring's backend admits BLHNC alone, so vLLM lays the whole cache out block-outermost, which the
    planner refuses; no member is a catalog model."""
    v = modules()
    from vllm.v1.attention.backends.mla.indexer import Glm5NextIndexerBackend, KpoolTailBackend
    from vllm.v1.kv_cache_layout import KVCacheLayout

    assert [lay.name for lay in v.backend_utils.get_supported_kv_cache_layouts([KpoolTailBackend])] == ["BLHNC"]
    assert "BLHNC" in [lay.name for lay in v.backend_utils.get_supported_kv_cache_layouts([Glm5NextIndexerBackend])]
    layout = KVCacheLayout.BLHNC
    assert layout.is_block_outermost
    with pytest.raises(StubUsed, match="block-outermost layout BLHNC"):
        planner.document(None, layout, 1)
    assert not any(name.startswith("glm53-flash") for name in catalog.MODELS)
