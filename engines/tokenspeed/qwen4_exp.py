"""tokenspeed's qwen4_exp recipe (Qwen4ExpRecipe, a QwenGDNRecipe) for Qwen4-Exp, released as
Qwen/Qwen3.8-Flash-Next, over a stated family: no config.json of the release is published
verbatim, so the members are made of the values two derivatives publish (an MLX conversion's
config and a third-party GGUF's metadata, each cited) and axes over the GDN, PLE and n-gram
keys neither gives.

At a point: member x attention tp x cache dtype x the TOKENSPEED_MAMBA_SSM_DTYPE assumption x
drafts (none, or the checkpoint's one MTP layer). The recipe fixes its block at 128
(recipes/qwen35.py:33) and widens it to lcm(128, 64 x indexer_compress_ratio) for QSA
(recipes/qwen4_exp.py:74-83), so --prefix-granularity is no axis. mxfp8 is left out: the
recipe's constructor refuses it (recipes/qwen35.py:48-52).
"""

from __future__ import annotations

import types
from math import gcd
from pathlib import Path
from typing import Any

from kvproof.engines.families import Axis, Cited, Family
from kvproof.engines.interface import Mutant
from kvproof.engines.tokenspeed import qwen35, startup
from kvproof.engines.tokenspeed.configs import HFConfig
from kvproof.engines.tokenspeed.inputs import divisors, server_args
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS
from kvproof.engines.tokenspeed.profile import Profile
from kvproof.impl import faults

FAMILY = "qwen4_exp"
CACHE_DTYPES = ("fp8", "bfloat16")
SSM = "TOKENSPEED_MAMBA_SSM_DTYPE"
LAYERS = 48

MLX = ("https://ollama.com/library/qwen3.8-flash-next:125b-mlx/blobs/889658f2508e "
       "(an MLX conversion's config.json of Qwen/Qwen3.8-Flash-Next: a derivative, read in part)")
GGUF = ("https://ollama.com/aiconjured/qwen3.8-flash-next-gsq-rco-gguf-mtp:latest/blobs/8087dbb39fc7 "
        "(a third-party GGUF's metadata of Qwen/Qwen3.8-Flash-Next: a derivative, not config.json)")
# llama.cpp's convert_hf_to_gguf.py (Qwen3NextModel.set_gguf_parameters) writes a Qwen GDN checkpoint's
# linear_conv_kernel_dim as ssm.conv_kernel, linear_num_key_heads as ssm.group_count and
# linear_value_head_dim x linear_num_value_heads as ssm.inner_size.
INNER = 6144

CITED = (
    Cited("architectures", ["Qwen4ExpForConditionalGeneration"], MLX),
    Cited("text_config.hidden_size", 2560, MLX),
    Cited("text_config.head_dim", 256, f"{MLX}; the GGUF's attention.key_length 256 agrees ({GGUF})"),
    Cited("text_config.hc_count", 4, MLX),
    Cited("text_config.heads_per_ngram", 8, MLX),  # planning reads it not; the ngram_size axis's bound does
    Cited("text_config.full_attention_interval", 4, MLX),
    Cited("text_config.indexer_n_heads", 4, MLX),
    Cited("text_config.indexer_head_dim", 128, MLX),
    Cited("text_config.indexer_compress_ratio", 4, MLX),
    Cited("text_config.num_attention_heads", 24, f"attention.head_count 24, {GGUF}"),
    Cited("text_config.num_key_value_heads", 2, f"attention.head_count_kv 2, {GGUF}"),
    Cited("text_config.num_hidden_layers", LAYERS, f"block_count 49 = 48 decoder layers + 1 MTP block, {GGUF}"),
    Cited("text_config.mtp_num_hidden_layers", 1,
          f"the one MTP block of block_count 49 = 48 + 1, {GGUF} (the key is Qwen3.5's name for it)"),
    Cited("text_config.linear_conv_kernel_dim", 4, f"ssm.conv_kernel 4, {GGUF}"),
    Cited("text_config.linear_num_key_heads", 16, f"ssm.group_count 16, {GGUF}"),
)

AXES = (
    Axis("text_config.linear_num_value_heads", (48,),
         f"the GGUF gives only ssm.inner_size {INNER} = value heads x value head dim ({GGUF}), so the value head "
         "dim is derived from this; 48 (x 128 = 6144) is Qwen3.5-27B's, the sibling with the same 16 key heads, "
         "6144 value width and conv kernel 4 (engines/tokenspeed/models/qwen3.5-27b.json), whose GDN layout the "
         "qwen_gdn recipe verifies at that checkpoint; one value: each more adds a member (32 points) to the "
         "default run"),
    Axis("text_config.linear_key_head_dim", (128,),
         "no source gives it (the GGUF's ssm.state_size was not read); 128 is Qwen3.5-27B's "
         "(engines/tokenspeed/models/qwen3.5-27b.json); one value, as for the value heads; the recipe refuses "
         "none (a shape factor of the conv and SSM state, configs/linear_attn.py:86-105)"),
    Axis("text_config.ple_layer_ids", ((), tuple(range(1, LAYERS + 1))),
         "no source names the PLE layers (1-based: models/qwen4_exp.py:197-199; the cited heads_per_ngram says "
         "the n-gram embedding exists, not where): none (the recipe's PLE-less path, recipes/qwen4_exp.py:92) "
         "and all 48, the most conv fields the PLE group can hold"),
    Axis("text_config.ngram_size", (2, 3),
         "no source gives it; 1 is refused (layers/qwen4_exp_ple.py:132-133), and (n - 1) x the cited "
         "heads_per_ngram 8 must divide the PLE width (layers/qwen4_exp_ple.py:135-140), the cited hidden size "
         "2560 where the checkpoint names no ple_embed_dim (configs/qwen4_exp_config.py:82): 2 and 3 are the "
         "orders that build below 4, which fails that"),
    Axis("text_config.ple_conv_kernel_size", (4,),
         "no source gives it; 4 is the model's one published short-conv kernel (the GDN's ssm.conv_kernel 4); "
         "one value, as for linear_key_head_dim"),
)


def _valid(values: dict[str, Any]) -> bool:
    """Without PLE layers the n-gram keys are never read: one such member, not two alike."""
    if values["text_config.ple_layer_ids"]:
        return True
    return values["text_config.ngram_size"] == AXES[3].values[0]


QWEN4 = Family(
    name="qwen3.8-flash-next", not_a_verdict_on="Qwen/Qwen3.8-Flash-Next", cited=CITED, axes=AXES, cap=3,
    derived={"text_config.linear_value_head_dim": lambda v: INNER // v["text_config.linear_num_value_heads"]},
    valid=_valid,
    absent={"linear_attn_config": "Kimi-K3's KDA dict, which a GDN checkpoint has not (configs/linear_attn.py:128 "
                                  "probes for it)",
            "cache_layer_types": "no Qwen GDN config has one: the layer labels are layer_types, which the config "
                                 "class derives (configs/base.py:91 probes for it first)",
            "sliding_window": "neither Qwen4ExpTextConfig nor Qwen3_5TextConfig defines one, nor has Qwen3.5-27B's "
                              "config.json (configs/mha.py:70 probes for it)"},
)


def text_config(config: dict) -> HFConfig:
    """The text config as tokenspeed's Qwen4ExpTextConfig exposes it (configs/qwen4_exp_config.py):
    with no checkpoint layer_types, layer i is full attention iff (i + 1) % full_attention_interval
    == 0 (configs/qwen3_5_text_base_config.py:267-297); short_conv_layer_ids = sorted({id - 1 for id
    in ple_layer_ids}) (:131-133); short_conv_state_shape = (hidden_size x hc_count,
    (ple_conv_kernel_size - 1) x ngram_size), None without PLE (:135-140); ngram_context_len =
    max(ngram_size - 1, 0) with PLE, else 0 (:142-144)."""
    text = config["text_config"]
    interval = int(text["full_attention_interval"])
    labels = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
              for i in range(int(text["num_hidden_layers"]))]
    ple = list(text["ple_layer_ids"])
    short = sorted({int(i) - 1 for i in ple})
    shape = None
    if short:
        shape = (int(text["hidden_size"]) * int(text["hc_count"]),
                 (int(text["ple_conv_kernel_size"]) - 1) * int(text["ngram_size"]))
    return HFConfig(text, {
        "model_type": "qwen4_exp_text",  # Qwen4ExpTextConfig.model_type (:49)
        "layer_types": labels,
        "linear_layer_ids": [i for i, label in enumerate(labels) if label == "linear_attention"],
        "short_conv_layer_ids": short, "short_conv_state_shape": shape,
        "ngram_context_len": max(int(text["ngram_size"]) - 1, 0) if ple else 0,
    })


def draft_text_config(config: dict) -> HFConfig:
    """The draft worker's text config: utils/hf_transformers_utils.py:450-458 rewrites a Qwen4-Exp
    checkpoint to Qwen4ExpForCausalLMNextN with num_hidden_layers 1, layer_types ["full_attention"]
    and no PLE layers, so Qwen4ExpTextConfig's explicit labels give no linear layer (:107-123)."""
    text = {**config["text_config"], "num_hidden_layers": 1, "layer_types": ["full_attention"],
            "ple_layer_ids": []}
    return HFConfig(text, {"model_type": "qwen4_exp_text", "linear_layer_ids": [], "short_conv_layer_ids": [],
                           "short_conv_state_shape": None, "ngram_context_len": 0})


def top_config(config: dict, text: HFConfig, architectures: list[str]) -> HFConfig:
    """Qwen4ExpConfig (model_type qwen4_exp, :150), which forwards what it lacks to its text config
    (configs/qwen3_5_config.py)."""
    return HFConfig({"architectures": architectures},
                    {"model_type": "qwen4_exp", "text_config": text, "layer_types": text.layer_types,
                     "linear_layer_ids": text.linear_layer_ids})


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp divides the attention heads and both GDN head counts (LinearAttnConfig requires the latter,
    configs/linear_attn.py:78-83); drafts: none, or the checkpoint's MTP layers."""
    out = []
    for name in configs:
        text = configs[name]["text_config"]
        heads = gcd(int(text["num_attention_heads"]), int(text["linear_num_key_heads"]),
                    int(text["linear_num_value_heads"]))
        out += [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype, "drafts": drafts,
                 "assume": f"{SSM}={ssm}"}
                for drafts in (0, int(text["mtp_num_hidden_layers"]))
                for ssm in ASSUMPTIONS[SSM][0] for dtype in CACHE_DTYPES for tp in divisors(heads)]
    return out


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    config = configs[point["model"] + ".json"]
    text = text_config(config)
    mc = qwen35.gdn_model_config(modules, top_config(config, text, list(config["architectures"])), text,
                       int(text.num_hidden_layers))
    # --speculative-eagle-topk 1 (the default: no tree); ReplaySSM off (see LIMITS).
    sa = server_args(point["tp"], point["dtype"], speculative="MTP" if point["drafts"] else None,
                     extra={"speculative_eagle_topk": 1, "enable_replay_ssm": False})
    attn = startup.attn_config(modules, sa, mc)
    startup.check_family(modules, FAMILY, sa, mc, attn)
    draft_mc = draft_attn = None
    if point["drafts"]:
        draft = draft_text_config(config)
        # configs/model_config.py:779-790: a draft worker's attention layers are mtp_num_hidden_layers.
        draft_mc = qwen35.gdn_model_config(modules, top_config(config, draft, ["Qwen4ExpForCausalLMNextN"]), draft,
                                 int(text.mtp_num_hidden_layers))
        draft_attn = startup.attn_config(modules, sa, draft_mc, is_draft=True)
    return startup.recipe(modules, FAMILY, server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=draft_mc, draft_attn_config=draft_attn)


LIMITS = ("not modelled: ReplaySSM, the launch default, which asks the GPU kernel gdn_replay_commit_supported and "
          "sizes only the verify workspace (recipes/qwen35.py:216-229), so drafts are planned with "
          "--disable-replay-ssm; tp 16, which divides both GDN head counts and which the recipe plans, but not the "
          "24 attention heads; draft trees (--speculative-eagle-topk > 1); PD disaggregation "
          "(recipes/qwen4_exp.py:300-305); a checkpoint layer_types list or sliding window; other GDN splits of "
          "the 6144 value width, key head dims, PLE layer sets, n-gram orders and PLE kernels than the axes'")

PROFILE: Profile = Profile((), startup.MODULES, points, build, LIMITS, family=QWEN4)

faults.declare({
    "ts_qwen4_qsa_shared_plane": "tokenspeed's qwen4_exp recipe puts every QSA layer's compressed index rows on "
    "one plane instead of a plane per layer",
})
_RECIPE = Path("runtime/layers/attention/kv_cache/recipes/qwen4_exp.py")
# Seeded bugs of this recipe (engines/tokenspeed/mutants.py applies them): fault -> (file, text, broken).
EDITS: dict[str, tuple[Path, str, str]] = {
    "ts_qwen4_qsa_shared_plane": (_RECIPE, 'f"qwen4_exp.qsa.unit.{unit}.compressed"',
                                  '"qwen4_exp.qsa.unit.0.compressed"'),
}
# The released recipe is clean at these points; the shared plane's stride is the engine's own layout check's refusal.
MUTANTS: tuple[Mutant, ...] = (
    Mutant("ts_qwen4_qsa_shared_plane", ("verify engine tokenspeed --recipe qwen4_exp --tp 8 --dtype fp8",),
           expect="boots"),
)
