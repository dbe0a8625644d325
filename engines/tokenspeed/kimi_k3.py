"""tokenspeed's kimi_k3 recipe (KimiK3Recipe) at a point: attention tp x cache dtype.

The recipe is built as tokenspeed's model runner builds it: MLAConfig.generate and
LinearAttnConfig.generate make the attention config from server_args and model_config, composed
as attention/registry.py `_create_attn_config` composes them (the linear component appended).
Every value handed over is listed here with where it comes from.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from math import gcd, isqrt
from typing import Any

from kvproof.engines.tokenspeed.configs import HFConfig, Strict, unavailable

# --kv-cache-dtype values the recipe's dtype resolution accepts (configs/base.py resolve_dtype),
# one per distinct cache: "auto" is "bfloat16" and "fp8_e4m3" is "fp8".
CACHE_DTYPES = ("fp8", "bfloat16", "mxfp8")
_CAPACITY = "capacity and scheduling only; the arena layout never reads it"


def text_config(config: dict) -> dict:
    return config.get("text_config", config)


def tp_domain(config: dict) -> tuple[int, ...]:
    """Attention tp values: divisors of the MLA and KDA head counts, which LinearAttnConfig
    requires to divide (configs/linear_attn.py __post_init__) as MLA sharding does."""
    text = text_config(config)
    heads = gcd(int(text["num_attention_heads"]), int(text["linear_attn_config"]["num_heads"]))
    small = [d for d in range(1, isqrt(heads) + 1) if heads % d == 0]
    return tuple(sorted({*small, *(heads // d for d in small)}))


def hf_text_config(config: dict) -> HFConfig:
    """The text config with the properties tokenspeed's KimiK3Config derives from it
    (runtime/configs/kimi_k3_config.py: `linear_layer_ids` are the 0-based KDA layers and
    `layer_types` labels every layer full_attention or linear_attention)."""
    text = text_config(config)
    kda = {layer - 1 for layer in text["linear_attn_config"]["kda_layers"]}
    layers = range(int(text["num_hidden_layers"]))
    return HFConfig(text, {
        "linear_layer_ids": [i for i in layers if i in kda],
        "layer_types": ["linear_attention" if i in kda else "full_attention" for i in layers],
    })


def model_config(config: dict) -> Strict:
    text = hf_text_config(config)
    return Strict("model_config", {
        # transformers nests the text config as a config object, not a dict.
        "hf_config": HFConfig(config, {"text_config": text}) if "text_config" in config else text,
        "hf_text_config": text,
        # configs/model_config.py _derive_num_attention_layers: num_hidden_layers for K3.
        "num_attention_layers": int(text.num_hidden_layers),
        "num_attention_heads": int(text.num_attention_heads),
        "kv_lora_rank": int(text.kv_lora_rank),
        "qk_rope_head_dim": int(text.qk_rope_head_dim),
        "model_profile": None,  # no plugin profile: the in-tree K3 model
        **{name: unavailable(f"model_config.{name}", "attention math, not cache bytes")
           for name in ("num_key_value_heads", "head_dim", "qk_nope_head_dim", "v_head_dim", "scaling", "dtype")},
        "context_len": unavailable("model_config.context_len", _CAPACITY),
    })


def server_args(tp: int, cache_dtype: str) -> Strict:
    attn = Strict("server_args.mapping.attn", {
        "tp_size": tp,
        # Decode and query context parallelism off: tokenspeed's defaults (utils/server_args.py).
        "dcp_size": 1, "dcp_rank": 0, "dcp_group": (0,), "qcp_size": 1, "qcp_rank": 0, "qcp_group": (0,),
        "dp_size": unavailable("server_args.mapping.attn.dp_size", _CAPACITY),
    })
    # Linear-attention tp equals attention tp: tokenspeed's default mapping shards KDA heads
    # with the attention group.
    linear = Strict("server_args.mapping.linear_attn", {"tp_size": tp})
    return Strict("server_args", {
        "attn_tp_size": tp,
        "kv_cache_dtype": cache_dtype,
        "kv_cache_quant_method": "none",  # the flag's default; K3 refuses per_token_head
        "speculative_algorithm": None,  # no draft: draft layers are the drafts axis
        "attention_backend": None,  # the default: the registry picks the backend
        "disaggregation_mode": "null",  # the default: no prefill/decode split
        "data_parallel_size": None,  # the default: dp comes from the mapping
        "mapping": Strict("server_args.mapping", {"attn": attn, "linear_attn": linear}),
        **{name: unavailable(f"server_args.{name}", _CAPACITY)
           for name in ("max_num_seqs", "spec_context_pad", "prefix_granularity", "device",
                        "max_cudagraph_capture_size", "chunked_prefill_size")},
    })


MODULES = ("kimi_k3", "plan", "configs.mla", "configs.linear_attn?")


def build(modules: dict[str, types.ModuleType], config: dict, tp: int, cache_dtype: str) -> Any:
    """A KimiK3Recipe for one point, with the engine's own attention config classes. Releases
    before the linear-attention component (tokenspeed 0.1.0) read the KDA geometry in the recipe
    and take no probe_batch_rows."""
    mc, sa = model_config(config), server_args(tp, cache_dtype)
    attn = modules["configs.mla"].MLAConfig.generate(sa, mc, False)
    if "configs.linear_attn" in modules:
        linear = modules["configs.linear_attn"].LinearAttnConfig.generate(sa, mc, False)
        if linear is not None:
            attn = dataclasses.replace(attn, components=(*attn.components, linear))
    recipe = modules["kimi_k3"].KimiK3Recipe
    kwargs: dict[str, Any] = {
        "server_args": sa, "model_config": mc, "attn_config": attn,
        "draft_model_config": None, "draft_attn_config": None,
        "cache_budget_bytes": unavailable("cache_budget_bytes", _CAPACITY),
        "decode_input_tokens": unavailable("decode_input_tokens", _CAPACITY),
        "overlap_schedule_depth": unavailable("overlap_schedule_depth", _CAPACITY),
    }
    if "probe_batch_rows" in inspect.signature(recipe).parameters:
        kwargs["probe_batch_rows"] = None  # size by budget, not by a probe: no probe run
    return recipe(**kwargs)
