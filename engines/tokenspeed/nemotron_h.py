"""tokenspeed's mamba2 recipe (Mamba2Recipe) for Nemotron-H: Mamba2 (SSD) state layers
interleaved with MHA, at a point: checkpoint x attention tp x cache dtype x the SSM state dtype
assumption.

The attention config is the registry's `_create_attn_config`: MHAConfig.generate plus the
Mamba2Config component it adds for NemotronHForCausalLM (startup.py). Mamba2Recipe inherits
QwenGDNRecipe's constructor, block (128) and SSM dtype switch, so the domain is qwen_gdn's:
TOKENSPEED_MAMBA_SSM_DTYPE is an assumption axis run at both values, and mxfp8 is left out (the
inherited constructor refuses it before Mamba2Recipe's own "do not store MXFP8 KV scales").
Drafts: Nemotron-3 Super carries its own MTP head (num_nextn_predict_layers 1, one attention and
one MoE block: mtp_hybrid_override_pattern "*E"), run with --speculative-algorithm MTP as
NemotronHForCausalLMNextN on the target checkpoint; its one attention layer continues the
recipe's KV round-robin. Nemotron-H-56B has none (no num_nextn_predict_layers: transformers'
default 0). Draft points launch with --disable-replay-ssm, as qwen_gdn's (qwen35.py says why).
"""

from __future__ import annotations

import types
from math import gcd
from typing import Any

from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed import startup
from kvproof.engines.tokenspeed.configs import HFConfig, Strict
from kvproof.engines.tokenspeed.inputs import CAPACITY, MATH, divisors, draft_counts, mtp_layers, nextn_architectures
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS
from kvproof.engines.tokenspeed.qwen35 import hybrid_recipe

MODELS = ("nemotron-h-56b-base-8k.json", "nemotron-3-super-120b-a12b-fp8.json")
MODULES = startup.MODULES
CACHE_DTYPES = ("fp8", "bfloat16")
SSM = "TOKENSPEED_MAMBA_SSM_DTYPE"
LIMITS = ("not modelled: MTP draft depths other than the checkpoint's num_nextn_predict_layers; draft points with "
          "ReplaySSM on (they plan with --disable-replay-ssm: the replay kernel's support is a GPU question of the "
          "verify workspace, not of the layout)")
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
    n_groups and mamba_num_heads to divide by it). Drafts: none, and the checkpoint's own MTP
    head where it has one (inputs.draft_counts)."""
    out = []
    for name in configs:
        config = configs[name]
        heads = gcd(int(config["num_attention_heads"]), int(config["n_groups"]), int(config["mamba_num_heads"]))
        out += [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype, "drafts": drafts,
                 "assume": f"{SSM}={ssm}"}
                for drafts in draft_counts(config) for ssm in ASSUMPTIONS[SSM][0] for dtype in CACHE_DTYPES
                for tp in divisors(heads)]
    return out


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    config = configs[point["model"] + ".json"]

    def model_config(hf: HFConfig, layers: int) -> Strict:
        # Nemotron-H has no text_config, so hf_text_config is the config itself
        # (configs/model_config.py get_hf_text_config).
        return Strict("model_config", {
            "hf_config": hf, "hf_text_config": hf,
            "attention_arch": startup.arch(modules, "MHA"),
            "num_attention_layers": layers,
            "num_attention_heads": int(hf.num_attention_heads),
            "num_key_value_heads": int(hf.num_key_value_heads),
            "head_dim": hf.head_dim,
            "model_profile": None,
            "dtype": Unavailable("model_config.dtype", MATH),
            "context_len": Unavailable("model_config.context_len", CAPACITY),
        })

    hf = hf_config(config)
    # configs/model_config.py _derive_num_attention_layers: NemotronHForCausalLM is a
    # cache-layer-view architecture, so its layer count is len(cache_layer_types).
    mc = model_config(hf, len(hf.cache_layer_types))
    draft = None
    if point.get("drafts"):
        # The draft worker on the target checkpoint: NemotronHForCausalLMNextN (no cache-layer
        # view), its layers num_nextn_predict_layers (ModelConfig's draft-worker count).
        draft = model_config(hf_config({**config, "architectures": nextn_architectures(config)}), mtp_layers(config))
    return hybrid_recipe(modules, "mamba2", mc, point, draft_mc=draft)
