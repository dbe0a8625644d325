"""tokenspeed's kimi_k3 recipe (KimiK3Recipe) at a point: attention tp x cache dtype x drafts.

The recipe is built as tokenspeed's start-up builds it (startup.py): attention/registry.py
`_create_attn_config` makes the attention config (MLAConfig.generate, with the KDA
LinearAttnConfig component where the revision has one; earlier revisions read the KDA geometry in
the recipe), and `_RECIPES["kimi_k3"]` the recipe. Draft layers are the published Kimi-K3 DSpark
draft (K3DSparkModel, 5 layers), planned by the target's recipe as continuation layers under
--speculative-algorithm DSPARK.
"""

from __future__ import annotations

import types
from math import gcd
from typing import Any

from kvproof.engines.tokenspeed import startup
from kvproof.engines.tokenspeed.configs import HFConfig
from kvproof.engines.tokenspeed.inputs import divisors, mla_model_config, server_args
from kvproof.engines.tokenspeed.profile import targets

DRAFT = "kimi-k3-dspark.json"
MODELS = ("kimi-k3.json", DRAFT)  # the target, then its draft
# --kv-cache-dtype values the recipe's dtype resolution accepts (configs/base.py resolve_dtype),
# one per distinct cache: "auto" is "bfloat16" and "fp8_e4m3" is "fp8".
CACHE_DTYPES = ("fp8", "bfloat16", "mxfp8")
MODULES = startup.MODULES


def text_config(config: dict) -> dict:
    return config.get("text_config", config)


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


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp divides the MLA and KDA head counts (LinearAttnConfig requires it of KDA heads); with
    the draft, its heads too. Drafts: none, or the published DSpark draft's layers."""
    (name,) = targets(configs, (DRAFT,))
    target, draft = text_config(configs[name]), configs[DRAFT]
    heads = gcd(int(target["num_attention_heads"]), int(target["linear_attn_config"]["num_heads"]))
    out = []
    for drafts in (0, int(draft["num_hidden_layers"])):
        shared = gcd(heads, int(draft["num_attention_heads"])) if drafts else heads
        out += [{"tp": tp, "dtype": dtype, "drafts": drafts} for dtype in CACHE_DTYPES for tp in divisors(shared)]
    return out


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    """A KimiK3Recipe for one point, through the engine's own start-up entries."""
    (name,) = targets(configs, (DRAFT,))
    config = configs[name]
    text = hf_text_config(config)
    mla = startup.arch(modules, "MLA")  # KimiK3ForConditionalGeneration and K3DSparkModel are MLA architectures
    # configs/model_config.py _derive_num_attention_layers: num_hidden_layers for K3.
    mc = mla_model_config(config, text, int(text.num_hidden_layers), mla)
    sa = server_args(point["tp"], point["dtype"], speculative="DSPARK" if point["drafts"] else None)
    attn = startup.attn_config(modules, sa, mc)
    startup.check_family(modules, "kimi_k3", sa, mc, attn)
    draft_mc = draft_attn = None
    if point["drafts"]:
        draft = HFConfig(configs[DRAFT])
        # The DSpark draft has neither mtp_num_hidden_layers nor num_nextn_predict_layers, so
        # its attention layer count is num_hidden_layers (configs/model_config.py, draft worker).
        draft_mc = mla_model_config(configs[DRAFT], draft, int(draft.num_hidden_layers), mla)
        draft_attn = startup.attn_config(modules, sa, draft_mc, is_draft=True)
    return startup.recipe(modules, "kimi_k3", server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=draft_mc, draft_attn_config=draft_attn)
