"""tokenspeed's inkling recipe (InklingRecipe) over a stated family of Inkling geometries, at a
point: attention tp x cache dtype x the INKLING_FP8_SCONV switch x MTP draft depths.

No Inkling config.json is published where kvproof can read it (thinkingmachines/Inkling and
thinkingmachines/Inkling-NVFP4: tokenspeed's own tests download it at test time and keep no
copy), so the recipe is planned over a family: the layer pattern and KV head counts tokenspeed's
tests assert for the hub checkpoint, the MTP depth count vLLM's recipe states, the hidden size of
the DSpark draft SpecForge trains for it, and axes over the geometry nobody published (head_dim,
the sliding window, the ShortConv kernel, the MTP head's local depths). The recipe is built as
tokenspeed's start-up builds it (startup.py):
`_create_attn_config` makes MHAConfig (Inkling is no MLA/DSA architecture, configs/model_config.py
falls through to AttentionArch.MHA), `_resolve_cache_family` picks "inkling" by the architecture
(registry.py `_INKLING_ARCHITECTURES`), `_RECIPES["inkling"]` the recipe. The HF config objects are
tokenspeed's InklingMMConfig / InklingModelConfig as runtime/configs/inkling_config.py derives
them from the member's keys (each derivation cited below). The hiddenconv dtype is the
environment switch INKLING_FP8_SCONV (recipes/inkling.py `_fp8_sconv`), answered by the point's
assumption through loader.py's `os` stand-in.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from kvproof.engines.families import Axis, Cited, Family
from kvproof.engines.interface import Mutant
from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed import startup
from kvproof.engines.tokenspeed.configs import HFConfig, Strict
from kvproof.engines.tokenspeed.inputs import CAPACITY, MATH, server_args
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS
from kvproof.engines.tokenspeed.profile import Profile
from kvproof.impl import faults

SCONV = "INKLING_FP8_SCONV"
# --kv-cache-dtype values MHAConfig resolves to distinct caches (configs/base.py resolve_dtype;
# mxfp8 adds the recipe's scale fields, recipes/inkling.py fields_for_layer).
CACHE_DTYPES = ("fp8", "bfloat16", "mxfp8")
# Past 16 ranks every layer keeps one KV head (recipes/inkling.py _layer_kv_heads:
# max(1, count // attn_tp), the sliding layers' 16 the largest count): tp 32 plans as tp 16.
TPS = (1, 2, 4, 8, 16)
TARGET, DRAFT = "InklingForConditionalGeneration", "InklingForConditionalGenerationNextN"
_TESTS = ("tokenspeed test/runtime/models/test_inkling_models.py @6083537ed3a712d49eb30ce1170dd28c1d037f70 "
          "(its last change; unchanged at the mirror's HEAD f4d8ec6e039c), asserting the hub config of "
          "thinkingmachines/Inkling-NVFP4 (inkling_fixtures.py INKLING_NVFP4; the same config as "
          "thinkingmachines/Inkling plus hf_quant_config.json)")
_SPECFORGE = "sgl-project/SpecForge @a6b6b0230009d15ec2a97a57384e6f53f0f96946 (2026-08-08)"
LAYERS = 66
LOCAL = tuple(i for i in range(LAYERS) if i % 6 != 5)
DEPTHS = 8  # mtp_config.num_nextn_predict_layers


def _cited() -> tuple[Cited, ...]:
    return (
        Cited("architectures", [TARGET], "registry.py _INKLING_ARCHITECTURES: the architecture the inkling family "
              "is the recipe of (the family's definition); tokenspeed test/cli/test_serve_smg_unit.py:444 writes "
              "it for an Inkling config"),
        Cited("model_type", "inkling_mm_model", f"{_TESTS}:54,57-59: get_config loads it as InklingMMConfig, "
              "the class registered for model_type inkling_mm_model"),
        Cited("text_config.num_hidden_layers", LAYERS, f"{_TESTS}:61"),
        Cited("text_config.local_layer_ids", list(LOCAL), f"{_TESTS}:63-67 (swa_attention_layer_ids, which is "
              "local_layer_ids: runtime/configs/inkling_config.py:326-329): full attention at 5, 11, ..., 65"),
        Cited("text_config.num_key_value_heads", 8, f"{_TESTS}:97 (ckpt_num_key_value_heads, the config's "
              "num_key_value_heads: inkling_config.py:254)"),
        Cited("text_config.swa_num_key_value_heads", 16, f"{_TESTS}:98"),
        Cited("mtp_config.num_nextn_predict_layers", DEPTHS, "vllm-project/recipes PR #655: \"Inkling ships 8 "
              "chained MTP heads\" (inkling_config.py:495-511 reads the count from mtp_config)"),
        Cited("text_config.hidden_size", 6144, f"{_SPECFORGE} configs/inkling-dspark.json: hidden_size 6144, the "
              "DSpark draft SpecForge trains for thinkingmachines/Inkling (examples/configs/"
              "inkling-dspark-disaggregated.yaml: target_model_path thinkingmachines/Inkling; num_target_layers 66, "
              "as above); the draft's fc takes len(target_layer_ids) x hidden_size inputs (specforge/modeling/draft/"
              "dflash.py:362-366, DSparkDraftModel's base class), the target's hidden states at its 5 target layers "
              "concatenated (dflash.py:284-293 extract_context_feature), so the target's hidden size is the "
              "draft's"),
    )


FAMILY = Family(
    name="inkling",
    not_a_verdict_on="thinkingmachines/Inkling or thinkingmachines/Inkling-NVFP4",
    cited=_cited(),
    axes=(
        Axis("text_config.head_dim", (128, 256), "128: transformers 5.20.2 InklingTextConfig's default (its "
             "docstring checkpoint thinkingmachines/Inkling; a library default, so an axis value only) and "
             "Qwen3-8B's and MiniMax-M3's head_dim; 256: Qwen3.5-27B's (models/SOURCES.md). Both are multiples of "
             "the 32-wide mxfp8 scale block the recipe's scale fields require (recipes/plan.py "
             "MXFP8_SCALE_BLOCK_SIZE)"),
        Axis("text_config.sliding_window_size", (128, 512), "512: the default of transformers 5.20.2's "
             "InklingTextConfig and of tokenspeed's InklingModelConfig (defaults, so axis values only); 128: "
             "DeepSeek-V4's sliding window (models/deepseek-v4-flash.json)"),
        Axis("text_config.sconv_kernel_size", (4, 5), "lablup/mlxcel issue #1318 states a 4-slot conv cache per "
             "layer: kernel 5 if a slot is a cached row (the recipe keeps kernel - 1 rows, recipes/inkling.py "
             "_conv_columns), kernel 4 if it is a tap (transformers 5.20.2's conv_kernel_size default; "
             "Nemotron-H's conv_kernel)"),
        Axis("mtp_config.local_layer_ids", ((), (0, 2, 4, 6), tuple(range(DEPTHS))), "the MTP head's "
             "sliding-window depths: none (the legacy all-full heads, tokenspeed "
             "test/runtime/test_inkling_mtp_load_weights.py:9-13), every other depth, every depth: the three "
             "label shapes InklingModelConfig.cache_layer_types gives (inkling_config.py:364-379)"),
    ),
    cap=3,  # below the 6 members that take every axis value once, so the default list is those 6
)


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """Every cache dtype x INKLING_FP8_SCONV value at each config. The (tp, drafts) pairs are
    numbered k = 0..44, pair k being tp TPS[k % 5] at k % 9 MTP depths (--speculative-num-steps;
    0 for none): 5 and 9 are coprime, so these are every pair once. A family member is planned at
    the pairs of its index i in the whole family, i, i + 24, ... below 45, so the whole family
    plans every pair once; planning all of them at every member is over a hundred seconds of
    checks. Any other config (--config FILE) is planned at every pair. One step more than the
    depths is refused by the recipe (recipes/inkling.py num_draft_layers, read by
    CacheRecipe.setup(), which kvproof's pipeline does not run), so the draft counts stop there."""
    out = []
    for name in configs:
        model = name.removesuffix(".json")
        family, _, index = model.rpartition("-family-")
        depths = int(configs[name].get("mtp_config", {}).get("num_nextn_predict_layers", 0))
        if family == FAMILY.name and index.isdigit():  # the cited 8 depths: 9 draft counts, coprime with 5 tps
            every = len(TPS) * (depths + 1)
            pairs = [(TPS[k % len(TPS)], k % (depths + 1)) for k in range(int(index), every, FAMILY.size())]
        else:
            pairs = [(tp, drafts) for tp in TPS for drafts in range(depths + 1)]
        out += [{"model": model, "tp": tp, "dtype": dtype, "drafts": drafts, "assume": f"{SCONV}={sconv}"}
                for tp, drafts in pairs for sconv in ASSUMPTIONS[SCONV][0] for dtype in CACHE_DTYPES]
    return out


def _labels(layers: int, local: list[int]) -> list[str]:
    """InklingModelConfig.cache_layer_types (runtime/configs/inkling_config.py:364-379): sliding
    layers dealt round-robin into ceil(sliding / full) sub-groups."""
    sliding, full = set(local), layers - len(set(local))
    if not sliding:
        return ["full_attention"] * layers
    if not full:
        return ["sliding_attention"] * layers
    groups, rank, labels = -(-len(sliding) // full), 0, []
    for i in range(layers):
        if i in sliding:
            labels.append(f"sliding_attention_{rank % groups}")
            rank += 1
        else:
            labels.append("full_attention")
    return labels


def text_config(text: dict, layers: int, local: list[int], extra: dict[str, Any] | None = None) -> HFConfig:
    """InklingModelConfig at `layers` layers with `local` sliding ones: ckpt_num_key_value_heads
    is the config's num_key_value_heads and the served count the larger of it and the sliding
    layers' (inkling_config.py:253-255), sliding_window is sliding_window_size (:381-385), and
    model_type the class's own (:153)."""
    return HFConfig(text, {
        "model_type": "inkling_model",
        "num_hidden_layers": layers, "local_layer_ids": local,
        "ckpt_num_key_value_heads": int(text["num_key_value_heads"]),
        "num_key_value_heads": max(int(text["num_key_value_heads"]), int(text["swa_num_key_value_heads"])),
        "sliding_window": int(text["sliding_window_size"]),
        "cache_layer_types": _labels(layers, local),
        **(extra or {}),
    })


def _model_config(modules: dict[str, types.ModuleType], top: dict, arch: str, text: HFConfig,
                  layers: int) -> Strict:
    """ModelConfig of one side. InklingMMConfig forwards cache_layer_types and sliding_window to
    its text config (inkling_config.py:518-527); a draft worker's architecture gains "NextN"
    (utils/hf_transformers_utils.py:461-475) and its text config is swapped in (configs/model_config.py:591-608)."""
    hf = HFConfig({k: v for k, v in top.items() if k not in ("text_config", "architectures")}, {
        "architectures": [arch], "text_config": text, "get_text_config": lambda *a, **k: text,
        "cache_layer_types": text.cache_layer_types, "sliding_window": text.sliding_window})
    return Strict("model_config", {
        "attention_arch": startup.arch(modules, "MHA"),
        "hf_config": hf, "hf_text_config": text,
        "num_attention_layers": layers,
        "num_key_value_heads": int(text.num_key_value_heads),
        "head_dim": int(text.head_dim),
        "num_attention_heads": Unavailable("model_config.num_attention_heads", MATH),
        "model_profile": None,
        "dtype": Unavailable("model_config.dtype", MATH),
        "context_len": Unavailable("model_config.context_len", CAPACITY),
    })


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    """An InklingRecipe for one point; with drafts, the MTP head planned as its continuation
    layers under --speculative-algorithm MTP with --speculative-num-steps = drafts."""
    config = configs[point["model"] + ".json"]
    raw = config["text_config"]
    text = text_config(raw, int(raw["num_hidden_layers"]), list(raw["local_layer_ids"]))
    mc = _model_config(modules, config, TARGET, text, int(text.num_hidden_layers))
    steps = point["drafts"]
    # --speculative-num-steps is read even without a draft (recipes/inkling.py num_draft_layers):
    # its launch default, 3, and the draft tokens steps + 1 (utils/server_args.py:495,749-750).
    sa = server_args(point["tp"], point["dtype"], speculative="MTP" if steps else None, block=128, extra={
        "speculative_num_steps": steps or 3, "speculative_num_draft_tokens": (steps or 3) + 1})
    attn = startup.attn_config(modules, sa, mc)
    startup.check_family(modules, "inkling", sa, mc, attn)
    draft_mc = draft_attn = None
    if steps:
        mtp = config["mtp_config"]
        # inkling_mtp_text_config (inkling_config.py:105-140): depths beyond the steps pruned,
        # the MTP head's local depths below that; its attention layers are the depths (model_config.py:780-790).
        depths = int(mtp["num_nextn_predict_layers"])
        depth = steps if 0 < steps < depths else depths
        draft = text_config(raw, depth, [i for i in mtp["local_layer_ids"] if i < depth],
                            {"num_nextn_predict_layers": depth})
        draft_mc = _model_config(modules, config, DRAFT, draft, depth)
        draft_attn = startup.attn_config(modules, sa, draft_mc, is_draft=True)
    return startup.recipe(modules, "inkling", server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=draft_mc, draft_attn_config=draft_attn)


PROFILE: Profile = Profile(
    models=(), modules=startup.MODULES, points=points, build=build, family=FAMILY,
    family_limits="each member at some (tp, draft count) pairs: numbering the 45 pairs k (tp the (k mod 5)-th of 1, 2, "
    "4, 8, 16 at k mod 9 MTP depths), member i is planned at pairs i and i + 24 below 45, so the whole family meets "
    "every pair once, as a --config FILE is planned at all of them",
    limits="not modelled: prefill/decode disaggregation (the recipe's PD transfer policies); tree speculation "
    "(--speculative-eagle-topk above 1); --prefix-granularity (the recipe fixes its block at 128)")
faults.declare({
    "ts_inkling_kv_heads_unclamped": "tokenspeed's inkling recipe splits a layer's KV heads over the attention tp "
    "without keeping at least one per rank (count // tp, not max(1, count // tp))",
})
# Seeded bugs of this recipe (engines/tokenspeed/mutants.py applies them): fault -> (file, text, broken).
EDITS: dict[str, tuple[Path, str, str]] = {
    "ts_inkling_kv_heads_unclamped": (
        Path("runtime/layers/attention/kv_cache/recipes/inkling.py"),
        "return max(1, self.layer_kv_head_counts[layer_id] // spec.attn_tp_size)",
        "return self.layer_kv_head_counts[layer_id] // spec.attn_tp_size",
    ),
}
# At tp 16 the full-attention layers' 8 KV heads keep one per rank; with the bf16 hiddenconv
# (INKLING_FP8_SCONV=0) the released recipe is clean there, so a finding is the edit's.
MUTANTS: tuple[Mutant, ...] = (
    Mutant("ts_inkling_kv_heads_unclamped",
           (f"verify engine tokenspeed --recipe inkling --tp 16 --assume {SCONV}=0",), expect="boots"),
)
