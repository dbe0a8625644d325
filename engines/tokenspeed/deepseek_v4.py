"""tokenspeed's deepseek_v4 recipe (DeepseekV4Recipe) for DeepSeek-V4-Flash and -Pro, at a point:
checkpoint x attention tp x cache dtype x the indexer cache format assumption.

The attention config is the registry's `_create_attn_config` (MLAConfig.generate: a composite
AttnConfig in 0.1.1, a flat MLAConfig in the revisions from #1117 on) over the geometry
configs/model_config.py `configure_deepseek_v4_attention` derives, with the sliding window that
create_attn_components stamps on its softmax part (startup.stamp_window). The recipe's groups (SWA
window, compressed chains per compress ratio, compressor state, indexer) come from the
checkpoint's compress_ratios, head_dim, qk_rope_head_dim, index_head_dim and sliding_window; the
indexer row size comes from the GPU kernel package's answer to `dsv4_indexer_cache_format`, an
assumption axis run at both values. Drafts: V4-Flash and V4-Pro carry their own one-layer MTP head
(num_nextn_predict_layers 1; compress_ratios lists num_hidden_layers + 1 ratios), run with
--speculative-algorithm MTP as DeepseekV4ForCausalLMNextN on the target checkpoint; the recipe
plans it as a continuation layer over the one layout of target and draft layers together.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed import startup
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

MODELS = ("deepseek-v4-flash.json", "deepseek-v4-pro.json")
MODULES = startup.MODULES
CACHE_DTYPES = ("fp8", "bfloat16")  # as mla: mxfp8 is the fp8 cache for MLA configs
FORMAT = "dsv4_indexer_cache_format"
# configs/model_config.py _ATTENTION_FAMILY_SPECS: the DeepSeek V4 family's prefix_granularity
# default is DEEPSEEK_V4_PAGE_SIZE (layers/attention/kernel_page_sizes.py), 256.
BLOCK = 256
LIMITS = ("not modelled: MTP draft depths other than the checkpoint's num_nextn_predict_layers; the DSPARK "
          "draft (configs/model_config.py refuses DSPARK on a checkpoint without dspark_block_size, which neither "
          "publishes); --prefix-granularity "
          "other than the family default 256; decode context parallelism")


# The GPU question the recipe's _use_fp4_indexer asks, by revision: the kernel package's
# dsv4_indexer_cache_format(requested) in 0.1.1; `current_platform().arch_version.major >= 10` (the
# assumed GPU) in the revisions from #1117 on.
ALSO_ASSUMES = ("platform",)


def indexer_question(modules: dict[str, types.ModuleType] | None) -> str:
    """Which assumption answers the indexer row's format at this revision, read from the recipe's
    own `_use_fp4_indexer` (FORMAT when it asks the kernel package, else the platform)."""
    if modules is None:
        return FORMAT
    recipe = startup.registered_class(modules, "deepseek_v4")
    source = inspect.getsource(recipe._use_fp4_indexer) if hasattr(recipe, "_use_fp4_indexer") else ""
    return FORMAT if FORMAT in source or "current_platform" not in source else "platform"


def points(configs: dict[str, dict], modules: dict[str, types.ModuleType] | None = None) -> list[dict[str, Any]]:
    """tp divides the attention heads; the cache layout reads neither tp nor the cache dtype
    (every row is uint8 or fp32), so each point of a checkpoint must plan the same. The
    assumption is the GPU question the revision's recipe asks (`indexer_question`). Drafts: none,
    and the checkpoint's own MTP head (inputs.draft_counts)."""
    asked = indexer_question(modules)
    return [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype, "drafts": drafts,
             "assume": f"{asked}={value}"}
            for name in configs for drafts in draft_counts(configs[name]) for value in ASSUMPTIONS[asked][0]
            for dtype in CACHE_DTYPES for tp in divisors(int(configs[name]["num_attention_heads"]))]


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    config = configs[point["model"] + ".json"]

    def model_config(hf: HFConfig, layers: int) -> Strict:
        return Strict("model_config", {
            "hf_config": hf, "hf_text_config": hf,
            "attention_arch": startup.arch(modules, "MLA"),  # configure_deepseek_v4_attention sets MLA
            "num_attention_layers": layers,
            "num_attention_heads": int(hf.num_attention_heads),
            # configure_deepseek_v4_attention: the latent is head_dim wide, rope from the config.
            "kv_lora_rank": int(hf.head_dim),
            "qk_rope_head_dim": int(hf.qk_rope_head_dim),
            "model_profile": None,
            **{name: Unavailable(f"model_config.{name}", MATH)
               for name in ("num_key_value_heads", "head_dim", "qk_nope_head_dim", "v_head_dim", "scaling", "dtype")},
            "context_len": Unavailable("model_config.context_len", CAPACITY),
        })

    # tokenspeed's DeepseekV4Config (runtime/configs/deepseek_v4_config.py) keeps config.json's
    # keys as they are; it has no text_config, so hf_text_config is the config itself.
    hf = HFConfig(config)
    # _derive_num_attention_layers: num_hidden_layers for DeepseekV4ForCausalLM.
    mc = model_config(hf, int(hf.num_hidden_layers))
    drafting = bool(point.get("drafts"))
    sa = server_args(point["tp"], point["dtype"], block=BLOCK, speculative=MTP if drafting else None, extra={
        "attention_backend": "deepseek_v4",  # attention/registry.py forces it for a V4 target
        # ... and for a V4 draft (_apply_backend_overrides); without one the flag's default
        "drafter_attention_backend": "deepseek_v4" if drafting else None,
        "attention_use_fp4_indexer_cache": None,  # the flag's default: the kernel package decides
    })
    attn = startup.attn_config(modules, sa, mc)
    startup.stamp_window(modules, attn, int(hf.sliding_window))
    startup.check_family(modules, "deepseek_v4", sa, mc, attn)
    draft = draft_attn = None
    if drafting:
        # The draft worker on the target checkpoint: DeepseekV4ForCausalLMNextN, whose layers
        # are num_nextn_predict_layers (_derive_num_attention_layers and the draft-worker count
        # agree); create_attn_components stamps its window on its config as on the target's.
        dhf = HFConfig(config, {"architectures": nextn_architectures(config)})
        draft = model_config(dhf, mtp_layers(config))
        draft_attn = startup.attn_config(modules, sa, draft, is_draft=True)
        startup.stamp_window(modules, draft_attn, int(dhf.sliding_window))
        startup.check_draft_family(modules, "deepseek_v4", sa, draft, draft_attn)
    return startup.recipe(modules, "deepseek_v4", server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=draft, draft_attn_config=draft_attn)
