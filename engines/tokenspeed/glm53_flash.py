"""tokenspeed's glm53_flash recipe (Glm53FlashRecipe) over a stated GLM-5.3-Flash family: attention
tp x cache dtype x the assumed GPU (an fp8 DSA cache asks it) x the NextN/MTP draft.

zai-org/GLM-5.3-Flash publishes no config.json kvproof could read verbatim, so the targets are the
members of a family (engines/families.py): every key the recipe reads is a value a public page
states (cited below, with where two sources agree) or an axis whose bounds say why. The recipe is
built as tokenspeed's start-up builds it (startup.py): configs/model_config.py
`configure_dsa_attention` gives the MLA latent and DSA indexer facts, registry.py
`_create_attn_config` makes the DSAConfig with the KDA LinearAttnConfig component (target only),
and `_RECIPES["glm53_flash"]` the recipe. The draft is the same checkpoint's NextN layers under
--speculative-algorithm MTP (Glm53FlashForConditionalGenerationNextN: DSA only, no linear
component), planned by the target's recipe as continuation DSA layers.
"""

from __future__ import annotations

import types
from math import gcd
from pathlib import Path
from typing import Any

from kvproof.engines.families import Cited, Family
from kvproof.engines.interface import Mutant
from kvproof.engines.tokenspeed import startup
from kvproof.engines.tokenspeed.configs import HFConfig
from kvproof.engines.tokenspeed.inputs import divisors, mla_model_config, server_args
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS
from kvproof.engines.tokenspeed.profile import Profile
from kvproof.impl import faults

MODULES = startup.MODULES
NEMO = ("NeMo AutoModel model coverage, GLM-5.3-Flash: https://docs.nvidia.com/nemo/automodel/nightly/"
        "model-coverage/vision-language-models/thudm/glm-5-3-flash")
UNSLOTH = "unslothai/llama.cpp pull request #116 (description): https://github.com/unslothai/llama.cpp/pull/116"
GGML = "ggml-org/llama.cpp pull request #27752 (description): https://github.com/ggml-org/llama.cpp/pull/27752"
CARD_4L = ("HF model card JaredforReal/GLM-5.3-Flash-4L (a layer slice of zai-org/GLM-5.3-Flash snapshot "
           "03eb5366286afd40d2221b1d9c63a6dd1ba4832e, widths 'unchanged'): "
           "https://huggingface.co/JaredforReal/GLM-5.3-Flash-4L")
WARP = "sqliteai/warp docs/GLM.md, 'The shape': https://raw.githubusercontent.com/sqliteai/warp/master/docs/GLM.md"
INFERENCEX = "SemiAnalysisAI/InferenceX issue #2794: https://github.com/SemiAnalysisAI/InferenceX/issues/2794"

LAYERS = 45
# --kv-cache-dtype values the recipe's dtype resolution accepts (configs/base.py resolve_dtype),
# one per distinct cache: "auto" is "bfloat16"; "fp8_e4m3" and "mxfp8" are "fp8" (an MLA latent
# has no scale planes, so mxfp8 plans the same float8_e4m3fn cache).
CACHE_DTYPES = ("bfloat16", "fp8")
# recipes/glm53_flash.py:63-72 `_PACKING`: full-attention pages per parent, for tp 1, 2, 4, 8
# only (any other tp is NotImplementedError at :114-121).
PACKED_TPS = (1, 2, 4, 8)


# The cited split (DSA at 3, 7, ..., 43; the last layer KDA) in the labels tokenspeed's
# Glm53FlashTextConfig keeps as the checkpoint's own (configs/glm53_flash_config.py:85-88, 204-209:
# "linear_attention" for KDA, "deepseek_sparse_attention" for DSA).
LAYER_TYPES = ["deepseek_sparse_attention" if i % 4 == 3 and i < LAYERS - 1 else "linear_attention"
               for i in range(LAYERS)]


FAMILY = Family(
    name="glm53-flash",
    not_a_verdict_on="zai-org/GLM-5.3-Flash",
    cited=(
        Cited("architectures", ["Glm5NextForConditionalGeneration"], f"{NEMO} ('Architecture'); agrees: {GGML}"),
        Cited("text_config.num_hidden_layers", LAYERS,
              f"{NEMO} ('45 layers: 34 KDA and 11 KPool-DSA'); agree: {UNSLOTH} ('a 45 layer trunk'), {GGML}"),
        Cited("text_config.layer_types", LAYER_TYPES,
              f"{UNSLOTH} ('11 DSA layers at indices 3, 7, ... 43. Layer 44 is KDA'); agrees: {NEMO} "
              "('repeats three KDA layers followed by one KPool-DSA layer, with a final KDA layer')"),
        Cited("text_config.num_attention_heads", 64, f"{CARD_4L} ('MLA ... 64 heads'); agrees: {WARP}"),
        Cited("text_config.kv_lora_rank", 512,
              f"{UNSLOTH}; agree: {CARD_4L} ('kv_lora 512'), {NEMO} ('a shared 512-wide K/V representation')"),
        Cited("text_config.qk_rope_head_dim", 0, f"{UNSLOTH} ('qk_rope_head_dim 0', mla_use_nope); agrees: {WARP}"),
        Cited("text_config.index_topk", 2048, f"{UNSLOTH}; agree: {NEMO} ('up to 2,048 token positions'), {CARD_4L}"),
        Cited("text_config.index_n_heads", 32, f"{UNSLOTH} ('Lightning indexer: 32 heads'); agrees: {CARD_4L}"),
        Cited("text_config.index_head_dim", 128, f"{UNSLOTH} ('head dim 128')"),
        Cited("text_config.index_kpool", 4,
              f"{UNSLOTH} ('index_kpool 4'); agree: {NEMO} ('four-token pools'), {CARD_4L} ('kpool 4')"),
        Cited("text_config.linear_attn_config.num_heads", 64,
              f"{CARD_4L} ('KDA heads / head_dim 64 / 128'); agrees: {WARP} ('64 heads x 128')"),
        Cited("text_config.linear_attn_config.head_dim", 128, f"{CARD_4L}; agrees: {WARP}"),
        Cited("text_config.linear_attn_config.short_conv_kernel_size", 4,
              f"{WARP} ('conv 4'), the one source that states it; Kimi-K3's published config has the same "
              "(engines/tokenspeed/models/kimi-k3.json), whose KDA layers GLM-5.3-Flash's reuse (ggml-org/llama.cpp "
              "pull request #27773)"),
        Cited("text_config.num_nextn_predict_layers", 1,
              f"{CARD_4L} ('num_nextn_predict_layers=1'); agree: {UNSLOTH} ('an MTP block at index 45'), "
              f"{INFERENCEX} ('native MTP draft layer')"),
    ),
    # Every key the recipe reads is stated somewhere public: no axis is left; the whole family
    # is this one member, a reconstruction, never the checkpoint.
    axes=(),
    cap=1,
    # configs/mla.py resolve_cache_layer_types reads these on the top config, which Glm53FlashConfig
    # gives neither (configs/glm53_flash_config.py:334-386): the split is text_config.layer_types.
    absent={
        "cache_layer_types": "neither config of GLM-5.3-Flash has one (configs/glm53_flash_config.py)",
        "layer_types": "the top config has none (configs/glm53_flash_config.py:334-386); text_config's is cited",
    },
)


def _member(configs: dict[str, dict], point: dict[str, Any]) -> dict:
    return configs[point["model"] + ".json"]


def hf_configs(config: dict, draft: bool = False) -> tuple[HFConfig, HFConfig]:
    """The top and text configs as tokenspeed's Glm53FlashConfig exposes them: the text config's
    `linear_layer_ids` are the layers labelled linear_attention (configs/glm53_flash_config.py:
    297-323), and its linear_attn_config keeps the checkpoint's num_heads, head_dim and
    short_conv_kernel_size (:189-194, rebuilt with those at :258-265); the top config's
    architecture is aliased to Glm53FlashForConditionalGeneration (utils/hf_transformers_utils.py:
    122-127, 260-270), + "NextN" on the draft worker (:459-473), and its model_type is
    "glm53_flash" (:267), its text config's "glm53_flash_text" (:271-274)."""
    text_keys = config["text_config"]
    text = HFConfig(text_keys, {
        "model_type": "glm53_flash_text",
        "linear_layer_ids": [i for i, label in enumerate(text_keys["layer_types"]) if label == "linear_attention"],
    })
    arch = "Glm53FlashForConditionalGeneration" + ("NextN" if draft else "")
    top = HFConfig(config, {"text_config": text, "architectures": [arch], "model_type": "glm53_flash"})
    return top, text


def model_config(modules: dict[str, types.ModuleType], config: dict, draft: bool = False) -> Any:
    """configs/model_config.py `configure_dsa_attention` (MC:202-255): the MLA latent from the
    text config, the indexer's index_topk / index_head_dim / index_n_heads / index_kpool, and
    index_k_format "fp8_scaled" (fixed there); attention_arch DSA (Glm53Flash and its NextN are
    DSA architectures, MC:97-98). Layers: num_hidden_layers for the target
    (`_derive_num_attention_layers`), num_nextn_predict_layers on the draft worker (MC:779-790)."""
    top, text = hf_configs(config, draft)
    layers = int(text.num_nextn_predict_layers) if draft else int(text.num_hidden_layers)
    return mla_model_config(config, text, layers, startup.arch(modules, "DSA"), {
        "hf_config": top,
        "index_topk": int(text.index_topk),
        "index_head_dim": int(text.index_head_dim),
        "index_n_heads": int(text.index_n_heads),
        "index_k_format": "fp8_scaled",
        "index_kpool": text.index_kpool,
    })


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp is a packed one (recipes/glm53_flash.py:63-72) that divides the KDA heads
    (LinearAttnConfig) and the MLA heads. A bfloat16 cache asks no GPU; an fp8 (or mxfp8) DSA
    cache asks whether it is Blackwell or CDNA4 (configs/dsa.py DSAConfig.generate), so runs on
    each assumed platform (mxfp8 plans that same cache). Drafts: none, or the checkpoint's
    num_nextn_predict_layers MTP layers."""
    out: list[dict[str, Any]] = []
    for name, config in configs.items():
        text = config["text_config"]
        heads = gcd(int(text["num_attention_heads"]), int(text["linear_attn_config"]["num_heads"]))
        tps = [tp for tp in divisors(heads) if tp in PACKED_TPS]
        model = name.removesuffix(".json")
        for drafts in (0, int(text["num_nextn_predict_layers"])):
            for dtype in CACHE_DTYPES:
                assumed = [None] if dtype == "bfloat16" else [f"platform={gpu}" for gpu in ASSUMPTIONS["platform"][0]]
                out += [{"model": model, "tp": tp, "dtype": dtype, "drafts": drafts,
                         **({"assume": assume} if assume else {})}
                        for assume in assumed for tp in tps]
    return out


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    """A Glm53FlashRecipe for one point, through the engine's own start-up entries; the block is
    the recipe's own 64 (recipes/glm53_flash.py:56, 308-311), never the launch flag's."""
    config = _member(configs, point)
    mc = model_config(modules, config)
    sa = server_args(point["tp"], point["dtype"], speculative="MTP" if point["drafts"] else None)
    attn = startup.attn_config(modules, sa, mc)
    startup.check_family(modules, "glm53_flash", sa, mc, attn)
    draft_mc = draft_attn = None
    if point["drafts"]:
        draft_mc = model_config(modules, config, draft=True)
        draft_attn = startup.attn_config(modules, sa, draft_mc, is_draft=True)
    return startup.recipe(modules, "glm53_flash", server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=draft_mc, draft_attn_config=draft_attn)


FAMILY_LIMITS = ("a family, not the checkpoint: no verbatim config.json of zai-org/GLM-5.3-Flash is published, so "
                 "its one member is the cited values (partial sources; the short-conv kernel from a single "
                 "third-party engine's doc) and spells the layer split as text_config.layer_types in tokenspeed's "
                 "labels (the checkpoint's own list is not published)")
LIMITS = ("not modelled: tp 16 and above (the recipe's packing table "
          "stops at 8: NotImplementedError), --kv-cache-dtype mxfp8 (the same float8_e4m3fn cache as fp8), "
          "--prefix-granularity (the recipe fixes 64), prefill/decode disaggregation (the recipe refuses it), "
          "EAGLE-3 and draft trees (speculative_eagle_topk > 1), a linear-attention tp other than the attention tp")

PROFILE: Profile = Profile((), MODULES, points, build, LIMITS, family=FAMILY, family_limits=FAMILY_LIMITS)

faults.declare({
    "ts_glm53_packing_tp8": "tokenspeed's glm53_flash recipe packs 10 bf16 full-attention pages per parent at "
    "tp 8 instead of 9 (its _PACKING table)",
})

_RECIPE = Path("runtime/layers/attention/kv_cache/recipes/glm53_flash.py")
# Seeded bugs of this recipe (engines/tokenspeed/mutants.py applies them): fault -> (file, text, broken).
EDITS: dict[str, tuple[Path, str, str]] = {
    "ts_glm53_packing_tp8": (
        _RECIPE,
        "(8, 2): 9,",
        "(8, 2): 10,",
    ),
}
MUTANTS: tuple[Mutant, ...] = (
    # The KDA state slabs no longer fill their parent: the recipe's own padding check (0.25 without a
    # draft, recipes/glm53_flash.py:313-316) refuses the plan at tp 8.
    Mutant("ts_glm53_packing_tp8", ("verify engine tokenspeed --recipe glm53_flash --dtype bfloat16",),
           expect="boots"),
)
