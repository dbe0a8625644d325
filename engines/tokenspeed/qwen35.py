"""tokenspeed's qwen_gdn recipe (QwenGDNRecipe) for Qwen3.5: full attention interleaved with
Gated DeltaNet state, at a point: attention tp x cache dtype x the SSM state dtype assumption.

The attention config is the registry's `_create_attn_config` (startup.py): MHAConfig.generate,
plus the GDN LinearAttnConfig component in revisions that have configs/linear_attn.py (0.1.1).
Earlier revisions (#1117 on) have no linear-attention component: their recipe reads the GDN state
shapes from the text config's `mamba2_cache_params`, which kvproof then derives as tokenspeed's
config class does. The SSM state dtype comes from the environment switch
TOKENSPEED_MAMBA_SSM_DTYPE either way, so it is an assumption axis: the default domain runs both
values. mxfp8 is left out: the recipe's constructor refuses it ("does not yet support the MXFP8
interleaved scale layout", recipes/qwen35.py). Drafts: Qwen3.5-27B carries its own MTP head
(mtp_num_hidden_layers 1), run with --speculative-algorithm MTP as
Qwen3_5ForConditionalGenerationNextN on the target checkpoint; the recipe plans its layer as a
full-attention continuation layer in the target's full-attention group. Draft points launch with
--disable-replay-ssm: with ReplaySSM on (the default) the recipe's constructor asks the GPU kernel
package whether the replay kernel runs (tokenspeed_kernel gdn_replay_commit_supported), an answer
that only sizes the verify workspace and picks the backend's path, never the arena layout, and
that kvproof has no assumption for.
"""

from __future__ import annotations

import types
from math import gcd
from typing import Any

from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed import loader, startup
from kvproof.engines.tokenspeed.configs import HFConfig, Strict
from kvproof.engines.tokenspeed.inputs import (
    CAPACITY,
    MATH,
    MTP,
    divisors,
    draft_counts,
    mtp_layers,
    nextn_architectures,
    server_args,
)
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS

MODELS = ("qwen3.5-27b.json",)
MODULES = startup.MODULES
# tokenspeed's Qwen3.5 text config class, whose mamba2_cache_params the recipes before
# configs/linear_attn.py read.
TEXT_CONFIG = "runtime.configs.qwen3_5_text_base_config"
CACHE_DTYPES = ("fp8", "bfloat16")
SSM = "TOKENSPEED_MAMBA_SSM_DTYPE"
LIMITS = ("not modelled: MTP draft depths other than the checkpoint's mtp_num_hidden_layers; draft points with "
          "ReplaySSM on (they plan with --disable-replay-ssm: the replay kernel's support is a GPU question of the "
          "verify workspace, not of the layout); --speculative-eagle-topk above 1")


def text_config(config: dict, tp: int | None = None) -> HFConfig:
    """tokenspeed's Qwen3_5 text config class derives `layer_types` from full_attention_interval
    (layer i is full attention iff (i + 1) % interval == 0; configs/qwen3_5_text_base_config.py),
    not from the checkpoint's own list, and `linear_layer_ids` from those labels. With `tp`, and
    where the revision's class defines it, also `mamba2_cache_params` (cache_params)."""
    text = config.get("text_config", config)
    interval = int(text["full_attention_interval"])
    labels = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
              for i in range(int(text["num_hidden_layers"]))]
    linear = [i for i, label in enumerate(labels) if label == "linear_attention"]
    derived: dict[str, Any] = {"layer_types": labels, "linear_layer_ids": linear}
    if tp is not None and loader.class_defines(TEXT_CONFIG, "mamba2_cache_params"):
        derived["mamba2_cache_params"] = cache_params(text, tp, linear)
    return HFConfig(text, derived)


def cache_params(text: dict, tp: int, linear: list[int]) -> tuple:
    """`Qwen3_5BaseTextConfig.mamba2_cache_params` (runtime/configs/qwen3_5_text_base_config.py,
    in the revisions before configs/linear_attn.py): the per-rank conv state (conv_dim / tp,
    kernel - 1) in bf16, the K-last SSM state (value heads / tp, value dim, key dim) in the
    TOKENSPEED_MAMBA_SSM_DTYPE switch's dtype (asked of the point's assumption, as the class asks
    envs), and the linear layers. conv_dim = key dim x key heads x 2 + value dim x value heads;
    the attention tp is the class's `mapping.attn.tp_size`."""
    import torch

    conv_dim = (int(text["linear_key_head_dim"]) * int(text["linear_num_key_heads"]) * 2
                + int(text["linear_value_head_dim"]) * int(text["linear_num_value_heads"]))
    if conv_dim % tp or int(text["linear_num_value_heads"]) % tp:
        raise ValueError(f"{conv_dim} conv channels / {text['linear_num_value_heads']} value heads do not divide by "
                         f"attention tp {tp}")  # distributed/utils.py divide()
    ssm = {"float32": torch.float32, "bfloat16": torch.bfloat16}[loader.switch(SSM)]
    return ((conv_dim // tp, int(text["linear_conv_kernel_dim"]) - 1),
            (int(text["linear_num_value_heads"]) // tp, int(text["linear_value_head_dim"]),
             int(text["linear_key_head_dim"])),
            torch.bfloat16, ssm, linear)


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp divides the attention heads and both GDN head counts (LinearAttnConfig requires it).
    Drafts: none, and the checkpoint's own MTP head (inputs.draft_counts)."""
    out = []
    for name in configs:
        text = configs[name].get("text_config", configs[name])
        heads = gcd(int(text["num_attention_heads"]), int(text["linear_num_key_heads"]),
                    int(text["linear_num_value_heads"]))
        out += [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype, "drafts": drafts,
                 "assume": f"{SSM}={ssm}"}
                for drafts in draft_counts(text) for ssm in ASSUMPTIONS[SSM][0] for dtype in CACHE_DTYPES
                for tp in divisors(heads)]
    return out


def gdn_model_config(modules: dict[str, types.ModuleType], top: HFConfig, text: HFConfig, layers: int) -> Strict:
    """The model_config of a Qwen GDN checkpoint (Qwen3.5, Qwen4-Exp, their NextN drafts): no
    MLA/DSA architecture, so MHA (configs/model_config.py:755); heads and head_dim the text
    config's; the dtype and context length only capacity sizing reads."""
    return Strict("model_config", {
        "hf_config": top, "hf_text_config": text,
        "attention_arch": startup.arch(modules, "MHA"),
        "num_attention_layers": layers,
        "num_attention_heads": int(text.num_attention_heads),
        "num_key_value_heads": int(text.num_key_value_heads),
        "head_dim": int(text.head_dim),
        "model_profile": None,
        "dtype": Unavailable("model_config.dtype", MATH),
        "context_len": Unavailable("model_config.context_len", CAPACITY),
    })


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    config = configs[point["model"] + ".json"]
    text = text_config(config, point["tp"])

    def model_config(architectures: list[str], layers: int) -> Strict:
        # Qwen3_5Config forwards attributes it lacks to its text config (configs/qwen3_5_config.py).
        top = HFConfig({k: v for k, v in config.items() if k != "text_config"},
                       {"text_config": text, "layer_types": text.layer_types,
                        "linear_layer_ids": text.linear_layer_ids, "architectures": architectures})
        return gdn_model_config(modules, top, text, layers)

    mc = model_config(config["architectures"], int(text.num_hidden_layers))
    # The draft worker on the target checkpoint: Qwen3_5ForConditionalGenerationNextN, its
    # layers the text config's mtp_num_hidden_layers.
    draft = model_config(nextn_architectures(config), mtp_layers(config.get("text_config", config))) \
        if point.get("drafts") else None
    return hybrid_recipe(modules, "qwen_gdn", mc, point, draft_mc=draft)


def hybrid_recipe(modules: dict[str, types.ModuleType], family: str, mc: Strict, point: dict[str, Any], *,
                  draft_mc: Strict | None = None) -> Any:
    """A QwenGDNRecipe family (qwen_gdn, mamba2): the registry's attention config (MHA plus the
    linear component it adds for the architecture, where the revision has one), and with
    `draft_mc` the checkpoint's own MTP draft under --speculative-algorithm MTP, launched with
    --disable-replay-ssm (the module's docstring says why)."""
    extra: dict[str, Any] = {"speculative_eagle_topk": 1}  # the default: no tree
    if draft_mc is not None:
        extra["enable_replay_ssm"] = False
    sa = server_args(point["tp"], point["dtype"], speculative=MTP if draft_mc is not None else None, extra=extra)
    attn = startup.attn_config(modules, sa, mc)
    startup.check_family(modules, family, sa, mc, attn)
    draft_attn = None
    if draft_mc is not None:
        draft_attn = startup.attn_config(modules, sa, draft_mc, is_draft=True)
        startup.check_draft_family(modules, family, sa, draft_mc, draft_attn)
    return startup.recipe(modules, family, server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=draft_mc, draft_attn_config=draft_attn)
