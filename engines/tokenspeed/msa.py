"""tokenspeed's msa recipe (OrdinaryRecipe(family="msa") with MSAConfig) for MiniMax-M3 sparse
attention, at the published checkpoint nvidia/MiniMax-M3-NVFP4: attention tp x cache dtype.

MiniMaxM3SparseForConditionalGeneration is the MiniMax MSA attention family
(configs/model_config.py `_ATTENTION_FAMILY_SPECS`: attention_arch MSA, default
--prefix-granularity 128), so the registry's `_create_attn_config` builds MSAConfig.generate
(layers/attention/configs/msa.py) and `_resolve_cache_family` picks "msa". Every layer keeps
full-history K/V in one group; the sparse layers add an index_k field in the model dtype
(recipes/ordinary.py `_index_k_field`), so model_config.dtype is layout-relevant here and is the
checkpoint's own, derived as tokenspeed derives it. The HF views are those of tokenspeed's config
class (configs/minimax_m3_config.py MiniMaxM3Config), whose text config is transformers'
MiniMaxM3VLTextConfig (transformers/models/minimax_m3_vl/configuration_minimax_m3_vl.py).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from kvproof.engines.interface import Mutant
from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed import startup
from kvproof.engines.tokenspeed.configs import HFConfig, Strict
from kvproof.engines.tokenspeed.inputs import CAPACITY, SPEC_DRAFT_TOKENS, divisors, server_args
from kvproof.engines.tokenspeed.profile import Profile
from kvproof.impl import faults

MODELS = ("minimax-m3-nvfp4.json",)
MODULES = startup.MODULES
# MSAConfig.generate refuses mxfp8 and any --kv-cache-quant-method but "none"
# (layers/attention/configs/msa.py:88-95); resolve_dtype reads fp8 as fp8_e4m3 (configs/base.py).
CACHE_DTYPES = ("fp8", "bfloat16")
# configs/model_config.py:322-327: the MiniMax MSA family's default --prefix-granularity, which
# _apply_attention_defaults (configs/model_config.py:409-423) sets while the flag is unchanged.
BLOCK = 128
# configuration_minimax_m3_vl.py:128-136: sparse_attention_config's legacy keys -> the flat
# attributes MSAConfig.generate reads (index_init_blocks is not mapped, so it has none).
INDEX_KEYS = {"index_n_heads": "sparse_num_index_heads", "index_head_dim": "sparse_index_dim",
              "index_block_size": "sparse_block_size", "index_topk_blocks": "sparse_topk_blocks",
              "index_local_blocks": "sparse_local_block"}
# configs/minimax_m3_config.py:154 (a class attribute, stamped onto the text config at :199-201).
SPARSE_LABEL = "minimax_m3_sparse"
# MiniMaxM3Config drops the text dict's model_type (configs/minimax_m3_config.py:188) and the text
# class names its own (configuration_minimax_m3_vl.py:55); configs/deepseek_v41.py:41 asks it.
TEXT_MODEL_TYPE = "minimax_m3_vl_text"
LIMITS = ("not modelled: --prefix-granularity other than the family's default 128; --kv-cache-dtype auto "
          "(launch resolves it from the checkpoint's quantization_config.kv_cache_quant_algo, "
          "execution/model_runner.py:166-175; null here, so it stays auto, which resolve_dtype reads as "
          "bfloat16: the bfloat16 points' plan); the MTP module (text_config.num_mtp_modules 1): tokenspeed 0.1.1 "
          "has no draft model for it (models/minimax_m3.py skips the model.mtp.* weights) and only an \"mha\" draft "
          "family may pair with this target (layers/attention/registry.py), so no draft is planned; "
          "attention tp above the 4 index heads (the cache recipe would plan them, but the model's indexer refuses "
          "them at load, models/minimax_m3.py:505-509)")


def _torch_dtype(name: str | None) -> Any:
    """transformers' PreTrainedConfig turns a string `dtype` (or the older `torch_dtype`) into the
    torch dtype (transformers/configuration_utils.py:437-445); None stays None."""
    import torch

    return getattr(torch, name) if isinstance(name, str) else name


def model_dtype(text: dict) -> Any:
    """`ModelConfig.dtype` = _get_and_verify_dtype(hf_text_config, "auto") (configs/model_config.py:683,
    --dtype's default "auto", utils/server_args.py:281): the text config's dtype, bfloat16 where it
    has none, float16 for a float32 checkpoint (configs/model_config.py:989-1010)."""
    import torch

    dtype = _torch_dtype(text.get("dtype") or text.get("torch_dtype"))
    if dtype is None:
        return torch.bfloat16
    return torch.float16 if dtype == torch.float32 else dtype


def text_config(config: dict) -> HFConfig:
    """The text config as MiniMaxM3Config builds it (configs/minimax_m3_config.py:186-201): transformers'
    MiniMaxM3VLTextConfig pops sparse_attention_config and moe_layer_freq
    (configuration_minimax_m3_vl.py:121-122), maps the sparse keys to index_* (:128-136), and labels
    each layer "minimax_m3_sparse" or "full_attention" by sparse_attention_freq unless the config
    gives layer_types (:141-146), and has its class's model_type; tokenspeed stamps
    runtime_attention_layer_type on it (:199-201), and get_hf_text_config hands it the top config's
    quantization_config
    (utils/hf_transformers_utils.py:209-225; none of the keys it rewrites is in this checkpoint's)."""
    text = {k: v for k, v in config["text_config"].items() if k not in ("sparse_attention_config", "moe_layer_freq")}
    sparse = config["text_config"].get("sparse_attention_config") or {}
    derived: dict[str, Any] = {flat: sparse[legacy] for flat, legacy in INDEX_KEYS.items() if legacy in sparse}
    if text.get("layer_types") is None:
        freq = sparse.get("sparse_attention_freq")
        derived["layer_types"] = ([SPARSE_LABEL if f else "full_attention" for f in freq] if freq is not None
                                  else ["full_attention"] * int(text["num_hidden_layers"]))
    derived["runtime_attention_layer_type"] = SPARSE_LABEL
    derived["model_type"] = TEXT_MODEL_TYPE
    if "dtype" in text or "torch_dtype" in text:
        derived["dtype"] = _torch_dtype(text.get("dtype") or text.get("torch_dtype"))
    if "quantization_config" in config and "quantization_config" not in text:
        derived["quantization_config"] = config["quantization_config"]
    return HFConfig(text, derived)


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp divides the 64 attention heads (models/utils.py validate_attention_partition, called by
    models/minimax_m3.py:559-563) and is at most the index heads: the model's indexer refuses more
    at load (models/minimax_m3.py:505-509), so the engine never plans past them, although the cache
    recipe would. The cache recipe asks nothing of the platform or environment."""
    out = []
    for name in configs:
        text = configs[name]["text_config"]
        index_heads = int(text["sparse_attention_config"][INDEX_KEYS["index_n_heads"]])
        out += [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype}
                for dtype in CACHE_DTYPES for tp in divisors(int(text["num_attention_heads"])) if tp <= index_heads]
    return out


def model_config(modules: dict[str, types.ModuleType], config: dict) -> Strict:
    """ModelConfig for the checkpoint: configure_minimax_m3_attention sets only attention_arch MSA
    (configs/model_config.py:289-291); head_dim is the text config's (:710), num_key_value_heads
    likewise (:757-767), num_attention_layers num_hidden_layers (:446-458)."""
    text = text_config(config)
    top = HFConfig({k: v for k, v in config.items() if k != "text_config"},
                   {"text_config": text, "runtime_attention_arch": "MSA",  # minimax_m3_config.py:153-154
                    "runtime_attention_layer_type": SPARSE_LABEL})
    heads = int(text.num_attention_heads)
    return Strict("model_config", {
        "attention_arch": startup.arch(modules, "MSA"),
        "hf_config": top, "hf_text_config": text,
        "num_attention_layers": int(text.num_hidden_layers),
        "num_attention_heads": heads,
        "num_key_value_heads": int(getattr(text, "num_key_value_heads", None) or heads),
        "head_dim": int(text.head_dim),
        "model_profile": None,  # an in-tree model: no plugin profile
        "dtype": model_dtype(config["text_config"]),
        "context_len": Unavailable("model_config.context_len", CAPACITY),
    })


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    mc = model_config(modules, configs[point["model"] + ".json"])
    # MSAConfig.generate reads speculative_num_draft_tokens even without speculation
    # (layers/attention/configs/msa.py:127); the launch resolves it to steps + 1 whatever the
    # algorithm (utils/server_args.py:749-750).
    sa = server_args(point["tp"], point["dtype"], block=BLOCK,
                     extra={"speculative_num_draft_tokens": SPEC_DRAFT_TOKENS})
    attn = startup.attn_config(modules, sa, mc)
    startup.check_family(modules, "msa", sa, mc, attn)
    return startup.recipe(modules, "msa", server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=None, draft_attn_config=None)


PROFILE: Profile = Profile(MODELS, MODULES, points, build, LIMITS)

faults.declare({
    "ts_msa_index_k_on_k_plane": "tokenspeed's msa recipe writes a sparse layer's index_k field on that layer's K "
    "plane instead of a plane of its own",
})

_RECIPE = Path("runtime/layers/attention/kv_cache/recipes/ordinary.py")
# Seeded bugs of this recipe (engines/tokenspeed/mutants.py applies them): fault -> (file, text, broken).
# The text is `_index_k_field`'s MSA return (the DSA returns differ in their shape or dtype line).
EDITS: dict[str, tuple[Path, str, str]] = {
    "ts_msa_index_k_on_k_plane": (
        _RECIPE,
        'f"layer.{layer_id}.index_k",\n        (config.prefix_granularity, spec.index_head_dim),',
        'f"unit.{layer_id}.k",\n        (config.prefix_granularity, spec.index_head_dim),',
    ),
}
MUTANTS: tuple[Mutant, ...] = (
    Mutant("ts_msa_index_k_on_k_plane", ("verify engine tokenspeed --recipe msa --dtype fp8",), expect="boots"),
)
