"""tokenspeed's deepseek_v41 recipe (DeepseekV41Recipe) for DeepSeek-V4.1-Flash, over a stated family:
member x attention tp x cache dtype x DSpark stages x the platform assumption.

No verbatim config.json of deepseek-ai/DeepSeek-V4.1-Flash is published. Every key the recipe
reads has a value stated by a partial source (NVIDIA NeMo AutoModel's V4.1 config tests, sglang's
V4.1 pull requests, sqliteai/warp's DS41.md), each cited below; where several state one they
agree, and they agree with the geometry the recipe itself pins (recipes/deepseek_v41.py:120-132).
So the family is the one member those citations make: what it covers is the platform (the row
format, `current_platform().is_hopper`, configs/deepseek_v41.py:125) and the DSpark draft, whose
stage count tokenspeed reads from the weights, not from config.json.

The attention config is the registry's `_create_attn_config`, which picks DeepseekV41Config for a
V4.1 config (configs/deepseek_v41.py:38-44); the layout reads neither tp nor the cache dtype (every
row is uint8, fp32 or bf16, configs/deepseek_v41.py:86), so identical plans share one check.
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
from kvproof.engines.tokenspeed.inputs import CAPACITY, MATH, divisors, server_args
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS
from kvproof.engines.tokenspeed.profile import Profile
from kvproof.engines.verdict import AdapterGap
from kvproof.impl import faults

MODULES = startup.MODULES
CACHE_DTYPES = ("fp8", "bfloat16")  # as deepseek_v4: the recipe stores uint8 rows whatever is asked
# configs/model_config.py _ATTENTION_FAMILY_SPECS (:294-301): the V4.1 family's default
# prefix_granularity, 256.
BLOCK = 256

_NEMO = ("NVIDIA-NeMo/Automodel @f9091117a447409ca7bd38b58ac83e3742ec05de "
         "tests/unit_tests/models/deepseek_v41/test_config.py")
_NEMO_DEFAULTS = f"{_NEMO} test_released_defaults_preserve_precision_and_architecture (DeepseekV41Config() defaults)"
_NEMO_FIXTURE = f"{_NEMO} test_checkpoint_nested_configs_and_unknown_metadata_roundtrip's hand-written fixture"
_WARP = "sqliteai/warp docs/DS41.md (read from the release's config.json)"
_SGLANG_INDEXER = ("sgl-project/sglang PR #38944: the candidate-source layer (layer 20) publishes "
                   "candidate_topk_blocks blocks; the index-source layers after it are 24/28/32/36")
_PINNED = "the geometry recipes/deepseek_v41.py:120-132 requires"

FAMILY = Family(
    name="deepseek-v4.1-flash",
    not_a_verdict_on="deepseek-ai/DeepSeek-V4.1-Flash",
    cited=(
        Cited("architectures", ["DeepseekV41ForCausalLM"],
              "the architecture tokenspeed dispatches the deepseek_v41 family by (layers/attention/registry.py:447); "
              f"also in {_NEMO_FIXTURE}"),
        Cited("model_type", "deepseek_v41", "ztxz16/fastllm PR #727 (model_type = deepseek_v41)"),
        Cited("text_config.model_type", "deepseek_v41_text",
              "the text config class tokenspeed parses the nested config with (DeepseekV41TextConfig); "
              f"{_NEMO_FIXTURE}"),
        Cited("text_config.num_hidden_layers", 40,
              f"{_WARP} (40 layers); NeMo AutoModel deepseek-v41-flash page (40 layers); {_PINNED}"),
        Cited("text_config.num_attention_heads", 64, f"{_WARP} (64 heads x 512)"),
        Cited("text_config.head_dim", 512, f"{_WARP} (64 heads x 512); {_PINNED}"),
        Cited("text_config.qk_rope_head_dim", 64, f"{_WARP} (rope on 64 of 512 dims)"),
        Cited("text_config.index_topk", 512,
              "local-inference-lab/vllm PR #776 (512 is V4.1-Flash's qualified index_topk)"),
        Cited("text_config.candidate_source_layer_id", 20, _SGLANG_INDEXER),
        Cited("text_config.candidate_topk_blocks", 2048,
              "sgl-project/sglang PR #39057 (layer 20 publishes up to 16,384 candidate positions: 2048 blocks of 8)"),
        Cited("text_config.candidate_block_size", 8,
              "sgl-project/sglang PR #39671 (its candidate_topk_blocks best blocks of 8)"),
        Cited("text_config.index_source_layer_ids", [2, 8, 14, 20, 24, 28, 32, 36],
              f"{_SGLANG_INDEXER}; the first four are the KV-source layers below"),
    ),
    # What no published source states: each a one-value axis, with what the value rests on. The
    # recipe's own pins make three of them the only values it accepts.
    axes=(
        Axis("text_config.index_head_dim", (128,), f"{_PINNED}: it refuses any other; no published source states it"),
        Axis("text_config.sliding_window", (128,), f"{_PINNED}: it refuses any other; no published source states it"),
        Axis("text_config.kv_source_layer_ids", ([2, 8, 14, 20],),
             f"{_PINNED}: exactly these KV-source layers; ztxz16/fastllm PR #727 names the key"),
        # 43 entries: the 40 backbone layers, then three zeros past them (the recipe reads the
        # first num_attention_layers, configs/deepseek_v41.py:92-94).
        Axis("text_config.compress_ratios", ([0, 0] + [2] * 18 + [1] * 20 + [0] * 3,),
             f"the list of {_NEMO_FIXTURE}, not a published config; {_PINNED} fixes the KV-source layers' ratios "
             "(2, 2, 2, 1), and the other layers' ratios do not change the layout "
             "(tests/test_recipe_deepseek_v41.py); values 0/1/2 as ztxz16/fastllm PR #727 says"),
        Axis("text_config.dspark_block_size", (5,),
             f"{_NEMO_DEFAULTS}, a library's constructor default, not a checkpoint fact: the one value planned; "
             "it sets the DSpark launch widths (draft tokens), which a published config may change"),
    ),
    cap=1,
    absent={
        # registry._resolve_attn_side and configs/deepseek_v41.py:40 probe the nested text config
        # by getattr(hf, "text_config", hf): the text config itself has none.
        "text_config": "the text config nests nothing further (a structural getattr(hf, 'text_config', hf) probe)",
    },
)

# The DSpark stage counts planned: tokenspeed counts the checkpoint's contiguous mtp.<stage>
# weight namespaces (models/deepseek_v4_dspark.py:125-160) and writes the count on the draft's text
# config (configs/model_config.py:579-586); the recipe refuses fewer than one
# (recipes/deepseek_v41.py:100-102), and its DSpark packing tables (deepseek_v41_geometry.py:117-124,
# 139-146) fit three stages.
DSPARK_STAGES = (3,)
LIMITS = ("DSpark drafts at 3 stages only: the stage count is the weights' (mtp.<stage>), not config.json's; 3 is "
          f"the num_nextn_predict_layers and the three dspark_target_layer_ids of {_NEMO_DEFAULTS}, as "
          "DeepSeek-V4-Flash-0731's embedded DSpark has mtp.0 to mtp.2 (jundot/omlx PR #2460); the recipe refuses "
          "1 and 4 stages on both platforms and 2 on sm_100 (its packing tables fit 3). Not modelled: launch values "
          "other than tokenspeed's defaults for --chunked-prefill-size, --max-num-seqs and --data-parallel-size "
          "(they size max_query_tokens, which only the workspace reads); --prefix-granularity other than the "
          "family default 256; prefill/decode disaggregation; pipeline parallelism (the recipe refuses PP > 1)")


def points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp divides the attention heads; the layout reads neither tp nor the cache dtype, so each
    point of a member and platform plans the same. Drafts: none, or the same-checkpoint DSpark
    draft at each stage count; the platform is the row format's question."""
    return [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype, "drafts": drafts,
             "assume": f"platform={platform}"}
            for name in configs for platform in ASSUMPTIONS["platform"][0] for drafts in (0, *DSPARK_STAGES)
            for dtype in CACHE_DTYPES
            for tp in divisors(int(configs[name]["text_config"]["num_attention_heads"]))]


def text_config(text: dict, **derived: Any) -> HFConfig:
    """The text config with the aliases tokenspeed's DeepseekV41TextConfig derives
    (configs/deepseek_v41_config.py:50-60), and any value start-up writes on it (`derived`)."""
    return HFConfig(text, {"kv_source_layers": text["kv_source_layer_ids"],
                           "index_source_layers": text["index_source_layer_ids"],
                           "candidate_source_layer": text["candidate_source_layer_id"], **derived})


def model_config(config: dict, text: HFConfig, arch: Any) -> Strict:
    """ModelConfig for a V4.1 checkpoint: configs/model_config.py configure_deepseek_v41_attention
    (:188-199) copies head_dim (as kv_lora_rank too), qk_rope_head_dim and index_head_dim from the
    text config; the rest feeds attention math or capacity only."""
    return Strict("model_config", {
        "hf_config": HFConfig(config, {"text_config": text}), "hf_text_config": text,
        "attention_arch": arch,
        # _derive_num_attention_layers: num_hidden_layers for DeepseekV41ForCausalLM.
        "num_attention_layers": int(text.num_hidden_layers),
        "num_attention_heads": int(text.num_attention_heads),
        "kv_lora_rank": int(text.head_dim),
        "qk_rope_head_dim": int(text.qk_rope_head_dim),
        "index_head_dim": int(text.index_head_dim),
        "model_profile": None,
        **{name: Unavailable(f"model_config.{name}", MATH)
           for name in ("num_key_value_heads", "head_dim", "qk_nope_head_dim", "v_head_dim", "scaling", "dtype")},
        "context_len": Unavailable("model_config.context_len", CAPACITY),
    })


def build(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    config = configs[point["model"] + ".json"]
    text = config["text_config"]
    mla = startup.arch(modules, "MLA")  # configure_deepseek_v41_attention sets MLA
    mc = model_config(config, text_config(text), mla)
    dspark = int(point["drafts"])
    extra: dict[str, Any] = {
        "attention_backend": "deepseek_v41",  # attention/registry.py:447-448 forces it for a V4.1 target
        "pipeline_parallel_size": 1,  # the flag's default (utils/server_args.py:381)
        # DeepseekV41Config.generate sizes max_query_tokens = max(chunked_prefill_size, max_bs x
        # verify width) eagerly (configs/deepseek_v41.py:118-120); only workspace_bytes reads it.
        # tokenspeed's launch defaults: chunked_prefill_size 8192 (utils/server_args.py:768-769),
        # max_num_seqs 160, or 80 under a speculative algorithm (:785-789), and one attention-dp
        # replica (the world is the attention tp, distributed/mapping.py:134).
        "chunked_prefill_size": 8192,
        "max_num_seqs": 80 if dspark else 160,
        "data_parallel_size": 1,
    }
    if dspark:
        # The DSpark draft worker's ModelConfig sets the launch widths from the checkpoint's
        # dspark_block_size (configs/model_config.py:369-401): steps = block size, draft tokens =
        # steps + 1 (utils/spec_block_geometry.py:86-107).
        steps = int(text["dspark_block_size"])
        extra |= {"speculative_num_steps": steps, "speculative_num_draft_tokens": steps + 1}
    sa = server_args(point["tp"], point["dtype"], speculative="DSPARK" if dspark else None, block=BLOCK,
                     extra=extra)
    attn = startup.attn_config(modules, sa, mc)
    startup.check_family(modules, "deepseek_v41", sa, mc, attn)
    draft_mc = None
    if dspark:
        # The same checkpoint as DeepseekV41ForCausalLMDSpark (configs/model_config.py:298), with
        # the stage count start-up counts from its weights; it has no attention config of its own
        # (attention/registry.py:1390-1393: none for a DSpark draft).
        draft_text = text_config(text, dspark_num_stages=dspark)
        draft_mc = model_config({**config, "architectures": ["DeepseekV41ForCausalLMDSpark"]}, draft_text, mla)
        registry = modules[startup.REGISTRY]
        if hasattr(registry, "_resolve_attn_side") and not registry._resolve_attn_side(draft_mc, None).is_dspark:
            raise AdapterGap("registry._resolve_attn_side", "the V4.1 DSpark draft does not resolve as a DSpark "
                             "draft at this revision, so it would have an attention config of its own")
    return startup.recipe(modules, "deepseek_v41", server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=draft_mc, draft_attn_config=None)


PROFILE: Profile = Profile((), MODULES, points, build, LIMITS, family=FAMILY)

faults.declare({
    "ts_v41_dspark_stages_share_a_field": "tokenspeed's deepseek_v41 recipe names every DSpark stage's window rows "
    "after stage 0, so the stages share one field id",
})
_RECIPE = Path("runtime/layers/attention/kv_cache/recipes/deepseek_v41.py")
# Seeded bugs of this recipe (engines/tokenspeed/mutants.py applies them): fault -> (file, text, broken).
EDITS: dict[str, tuple[Path, str, str]] = {
    "ts_v41_dspark_stages_share_a_field": (_RECIPE, "v41_dspark_field_name(stage),", "v41_dspark_field_name(0),"),
}
# Only the DSpark points reach it: the engine's own field-id check refuses them (boots; the
# platform was asked earlier, but only to choose the row format, configs/deepseek_v41.py:125).
MUTANTS: tuple[Mutant, ...] = (
    Mutant("ts_v41_dspark_stages_share_a_field",
           ("verify engine tokenspeed --recipe deepseek_v41 --tp 8 --dtype fp8",), expect="boots"),
)
