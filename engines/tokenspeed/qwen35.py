"""tokenspeed's qwen_gdn recipe (QwenGDNRecipe) for Qwen3.5: full attention interleaved with
Gated DeltaNet state, at a point: attention tp x cache dtype x the SSM state dtype assumption.

The attention config is MHAConfig.generate plus LinearAttnConfig.generate (GDN branch),
composed as attention/registry.py composes them. The SSM state dtype comes from the environment
switch TOKENSPEED_MAMBA_SSM_DTYPE, so it is an assumption axis: the default domain runs both
values. mxfp8 is left out: the recipe's constructor refuses it ("does not yet support the MXFP8
interleaved scale layout", recipes/qwen35.py). No MTP draft yet.
"""

from __future__ import annotations

import dataclasses
import types
from math import gcd
from typing import Any

from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed.configs import HFConfig, Strict
from kvproof.engines.tokenspeed.inputs import CAPACITY, MATH, divisors, recipe, server_args
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS

MODELS = ("qwen3.5-27b.json",)
MODULES = ("qwen35", "plan", "configs.mha", "configs.linear_attn")
CACHE_DTYPES = ("fp8", "bfloat16")
SSM = "TOKENSPEED_MAMBA_SSM_DTYPE"
LIMITS = "not modelled: MTP draft layers (mtp_num_hidden_layers)"


def text_config(config: dict) -> HFConfig:
    """tokenspeed's Qwen3_5 text config class derives `layer_types` from full_attention_interval
    (layer i is full attention iff (i + 1) % interval == 0; configs/qwen3_5_text_base_config.py),
    not from the checkpoint's own list, and `linear_layer_ids` from those labels."""
    text = config.get("text_config", config)
    interval = int(text["full_attention_interval"])
    labels = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
              for i in range(int(text["num_hidden_layers"]))]
    return HFConfig(text, {"layer_types": labels,
                           "linear_layer_ids": [i for i, label in enumerate(labels) if label == "linear_attention"]})


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp divides the attention heads and both GDN head counts (LinearAttnConfig requires it)."""
    out = []
    for name in MODELS:
        text = configs[name].get("text_config", configs[name])
        heads = gcd(int(text["num_attention_heads"]), int(text["linear_num_key_heads"]),
                    int(text["linear_num_value_heads"]))
        out += [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype, "assume": f"{SSM}={ssm}"}
                for ssm in ASSUMPTIONS[SSM][0] for dtype in CACHE_DTYPES for tp in divisors(heads)]
    return out


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    config = configs[point["model"] + ".json"]
    text = text_config(config)
    heads = int(text.num_attention_heads)
    # Qwen3_5Config forwards attributes it lacks to its text config (configs/qwen3_5_config.py).
    top = HFConfig({k: v for k, v in config.items() if k != "text_config"},
                   {"text_config": text, "layer_types": text.layer_types, "linear_layer_ids": text.linear_layer_ids})
    mc = Strict("model_config", {
        "hf_config": top, "hf_text_config": text,
        "num_attention_layers": int(text.num_hidden_layers),
        "num_attention_heads": heads,
        "num_key_value_heads": int(text.num_key_value_heads),
        "head_dim": int(text.head_dim),
        "model_profile": None,
        "dtype": Unavailable("model_config.dtype", MATH),
        "context_len": Unavailable("model_config.context_len", CAPACITY),
    })
    module = modules["qwen35"]
    return hybrid_recipe(modules, module.QwenGDNRecipe, "LinearAttnConfig", mc, point)


def hybrid_recipe(modules: dict[str, types.ModuleType], cls: type, linear: str, mc: Strict,
                  point: dict[str, Any]) -> Any:
    """A QwenGDNRecipe family (qwen_gdn, mamba2): MHA attention plus the linear component the
    registry adds (`linear`, a class of configs/linear_attn.py), no draft."""
    sa = server_args(point["tp"], point["dtype"], extra={"speculative_eagle_topk": 1})  # the default: no tree
    attn = modules["configs.mha"].MHAConfig.generate(sa, mc, False)
    component = getattr(modules["configs.linear_attn"], linear).generate(sa, mc, False)
    attn = dataclasses.replace(attn, components=(*attn.components, component))
    return recipe(cls, modules["qwen35"].CacheRecipe, server_args=sa, model_config=mc, attn_config=attn,
                  draft_model_config=None, draft_attn_config=None)
