"""tokenspeed's mamba2 recipe (Mamba2Recipe) for Nemotron-H: Mamba2 (SSD) state layers
interleaved with MHA, at a point: checkpoint x attention tp x cache dtype x the SSM state dtype
assumption.

The attention config is the registry's `_create_attn_config`: MHAConfig.generate plus the
Mamba2Config component it adds for NemotronHForCausalLM (startup.py). Mamba2Recipe inherits
QwenGDNRecipe's constructor, block (128) and SSM dtype switch, so the domain is qwen_gdn's:
TOKENSPEED_MAMBA_SSM_DTYPE is an assumption axis run at both values, and mxfp8 is left out (the
inherited constructor refuses it before Mamba2Recipe's own "do not store MXFP8 KV scales"). No
MTP draft yet.
"""

from __future__ import annotations

import types
from math import gcd
from typing import Any

from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed import startup
from kvproof.engines.tokenspeed.configs import HFConfig, Strict
from kvproof.engines.tokenspeed.inputs import CAPACITY, MATH, divisors
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS
from kvproof.engines.tokenspeed.qwen35 import hybrid_recipe

MODELS = ("nemotron-h-56b-base-8k.json", "nemotron-3-super-120b-a12b-fp8.json")
MODULES = startup.MODULES
CACHE_DTYPES = ("fp8", "bfloat16")
SSM = "TOKENSPEED_MAMBA_SSM_DTYPE"
LIMITS = "not modelled: MTP draft layers (num_nextn_predict_layers, Nemotron-3 Super's mtp pattern)"
# transformers' NemotronHConfig (the 5.12.0 that tokenspeed 0.1.1 pins): each
# hybrid_override_pattern character is one block (configuration_nemotron_h.py `_pattern_to_list`).
BLOCKS = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
# tokenspeed's NemotronHConfig (runtime/configs/nemotron_h_config.py `_CACHE_LABELS`): only Mamba2
# and attention blocks own cache state.
CACHE_LABELS = {"mamba": "linear_attention", "attention": "full_attention"}
# transformers' NemotronHConfig field default (configuration_nemotron_h.py:98), taken when
# config.json has no head_dim (Nemotron-H-56B names it attention_head_dim, also 128).
DEFAULT_HEAD_DIM = 128


def hf_config(config: dict) -> HFConfig:
    """config.json as tokenspeed's NemotronHConfig exposes it: transformers turns
    hybrid_override_pattern into `layers_block_type` (aliased `layer_types`) and counts
    num_hidden_layers from it; tokenspeed numbers the cache-owning blocks densely
    (`cache_layer_types`, `linear_layer_ids` are cache-layer ids)."""
    blocks = [BLOCKS[c] for c in config["hybrid_override_pattern"]]
    labels = [CACHE_LABELS[b] for b in blocks if b in CACHE_LABELS]
    return HFConfig(config, {
        "layers_block_type": blocks, "layer_types": blocks, "num_hidden_layers": len(blocks),
        "head_dim": int(config.get("head_dim", DEFAULT_HEAD_DIM)),
        "cache_layer_types": labels,
        "linear_layer_ids": [i for i, label in enumerate(labels) if label == "linear_attention"],
    })


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp divides the attention heads and both Mamba2 head counts (LinearAttnConfig requires
    n_groups and mamba_num_heads to divide by it)."""
    out = []
    for name in configs:
        config = configs[name]
        heads = gcd(int(config["num_attention_heads"]), int(config["n_groups"]), int(config["mamba_num_heads"]))
        out += [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype, "assume": f"{SSM}={ssm}"}
                for ssm in ASSUMPTIONS[SSM][0] for dtype in CACHE_DTYPES for tp in divisors(heads)]
    return out


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    hf = hf_config(configs[point["model"] + ".json"])
    # Nemotron-H has no text_config, so hf_text_config is the config itself
    # (configs/model_config.py get_hf_text_config).
    mc = Strict("model_config", {
        "hf_config": hf, "hf_text_config": hf,
        "attention_arch": startup.arch(modules, "MHA"),
        # configs/model_config.py _derive_num_attention_layers: NemotronHForCausalLM is a
        # cache-layer-view architecture, so its layer count is len(cache_layer_types).
        "num_attention_layers": len(hf.cache_layer_types),
        "num_attention_heads": int(hf.num_attention_heads),
        "num_key_value_heads": int(hf.num_key_value_heads),
        "head_dim": hf.head_dim,
        "model_profile": None,
        "dtype": Unavailable("model_config.dtype", MATH),
        "context_len": Unavailable("model_config.context_len", CAPACITY),
    })
    return hybrid_recipe(modules, "mamba2", mc, point)
