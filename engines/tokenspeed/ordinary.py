"""tokenspeed's ordinary recipe (OrdinaryRecipe) for its `mla`, `dsa` and `mha` families, at a
point: attention tp x cache dtype (x the assumed GPU where the engine asks about it).

`mla` is DeepSeek-V3 (DeepseekV3ForCausalLM, an MLA architecture: MLAConfig.generate); `dsa` is
DeepSeek-V3.2 (DeepseekV32ForCausalLM, DSA: DSAConfig.generate, which asks the GPU whether an fp8
cache is possible); `mha` is Llama-3.1-8B and Qwen3-8B (MHA: MHAConfig.generate). Each is built
through the engine's start-up entries (startup.py): `_create_attn_config` picks the config class
by the architecture, `_RECIPES[family]` the recipe. The block size is the
--prefix-granularity default, 64 (utils/server_args.py), except for mxfp8 MHA, whose scale tiles
need 128 (the recipe asserts it: recipes/ordinary.py). Drafts: DeepSeek-V3 and -V3.2 carry their
own one-layer MTP head (num_nextn_predict_layers 1), run with --speculative-algorithm MTP, which
reads the draft from the target checkpoint as DeepseekV3ForCausalLMNextN /
DeepseekV32ForCausalLMNextN, a continuation layer of the target's one full-attention group (the
same family, so the target's recipe plans it); DeepSeek-V3 also has the EAGLE3 draft SpecForge
trains for it, an MHA layer the engine binds as a heterogeneous MHA view of the target's one plan
(startup.check_draft_family), run with --speculative-algorithm EAGLE3. Llama-3.1-8B and Qwen3-8B carry
no draft of their own: theirs are checkpoints of their own, each run with its --speculative-algorithm: an EAGLE3 draft
for each (one LlamaForCausalLMEagle3 layer; models/llama_eagle3.py refuses any other layer count),
and for Qwen3-8B a DFLASH and a DSPARK block drafter too (DFlashDraftModel, DSparkDraftModel: five
layers each). Their configs are the ones SpecForge, the SGLang project's draft trainer, trains each
target's drafts with (models/SOURCES.md); the draft worker's ModelConfig reads each as an MHA
architecture (no MLA/DSA table of configs/model_config.py names them) with num_hidden_layers
attention layers, and the mha recipe plans its layers after the target's (recipes/ordinary.py: an
MHA draft is layers of their own geometry in the same plan). A block drafter writes at the target's
cache locations in a bfloat16 cache whatever the target's dtype, unless its backend is trtllm
(configs/mha.py, configs/base.py is_block_drafter): the default backend is what is planned. Its
launch widths are its checkpoint's block size where the revision derives them so
(configs/model_config.py _apply_block_spec_widths, through utils/spec_block_geometry.py), else the
launch defaults; no cache recipe reads them.
"""

from __future__ import annotations

import types
from math import gcd
from typing import Any

from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed import startup
from kvproof.engines.tokenspeed.configs import HFConfig, MemberDict, Strict
from kvproof.engines.tokenspeed.inputs import (
    CAPACITY,
    MATH,
    MTP,
    divisors,
    draft_counts,
    mla_model_config,
    mtp_layers,
    nextn_architectures,
    server_args,
)
from kvproof.engines.tokenspeed.loader import ASSUMPTIONS
from kvproof.engines.tokenspeed.profile import published, targets
from kvproof.engines.verdict import AdapterGap
from kvproof.impl import faults

# where the revision has it (0.1.1 on), the module a block drafter's launch widths come from
BLOCK_GEOMETRY = "runtime.utils.spec_block_geometry"
MODULES = (*startup.MODULES, f"{BLOCK_GEOMETRY}?")
MLA_MODELS = ("deepseek-v3.json",)
# DeepSeek-V3's EAGLE3 draft (SpecForge's training config): an MHA draft of an MLA target
MLA_DRAFTS: dict[str, tuple[tuple[str, str], ...]] = {"deepseek-v3.json": (("EAGLE3", "deepseek-v3-eagle3.json"),)}
MLA_DRAFT_FILES = tuple(file for drafts in MLA_DRAFTS.values() for _, file in drafts)
DSA_MODELS = ("deepseek-v3.2.json",)
MHA_MODELS = ("llama-3.1-8b.json", "qwen3-8b.json")
# Each mha target's drafts (checkpoints of their own, paired by SpecForge's training configs), each with
# the --speculative-algorithm that runs it.
MHA_DRAFTS: dict[str, tuple[tuple[str, str], ...]] = {
    "llama-3.1-8b.json": (("EAGLE3", "llama-3.1-8b-eagle3.json"),),
    "qwen3-8b.json": (("EAGLE3", "qwen3-8b-eagle3.json"), ("DFLASH", "qwen3-8b-dflash.json"),
                      ("DSPARK", "qwen3-8b-dspark.json")),
}
MHA_DRAFT_FILES = tuple(file for drafts in MHA_DRAFTS.values() for _, file in drafts)
DRAFT_READS = ("architectures", "hidden_size", "num_hidden_layers", "vocab_size")
MLA_DTYPES = ("fp8", "bfloat16")  # mxfp8 resolves to the fp8 cache for MLA (no scale planes)
MHA_DTYPES = ("fp8", "bfloat16", "mxfp8")
DEFAULT_BLOCK, MXFP8_BLOCK = 64, 128
BLOCK_LIMIT = "--prefix-granularity other than the default 64 (128 for mxfp8 MHA)"
LIMITS = f"not modelled: {BLOCK_LIMIT}; MTP draft depths other than the checkpoint's num_nextn_predict_layers"
MLA_LIMITS = (f"{LIMITS}; EAGLE3 drafts other than the one SpecForge trains for the checkpoint (tokenspeed's MLA "
              "EAGLE3 class Eagle3DeepseekV2ForCausalLM among them; a --config FILE is planned with it where it shares "
              "that target's architecture, hidden size, layer count and vocabulary)")
MHA_LIMITS = (f"not modelled: {BLOCK_LIMIT}; drafts other than the ones SpecForge trains for each checkpoint "
              "(a --config FILE is planned with them where it shares that target's architecture, hidden size, layer "
              "count and vocabulary); a block drafter whose backend is trtllm (--drafter-attention-backend trtllm, or "
              "--attention-backend trtllm without it): its cache in the target's dtype")


def mla_points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """Drafts: none, the checkpoint's own MTP head (inputs.draft_counts) and the EAGLE3 draft trained
    for it, each named by its --speculative-algorithm (both are one layer); with the EAGLE3 draft tp
    also divides the draft's query heads, and mxfp8 is planned too."""
    out: list[dict[str, Any]] = []
    for name in targets(configs, MLA_DRAFT_FILES):
        heads = int(configs[name]["num_attention_heads"])
        model = name.removesuffix(".json")
        out += [{"model": model, "tp": tp, "dtype": dtype, "drafts": drafts, **({"algorithm": MTP} if drafts else {})}
                for drafts in draft_counts(configs[name]) for dtype in MLA_DTYPES for tp in divisors(heads)]
        # the draft's MHA layer keeps mxfp8's scale planes where the MLA target keeps an fp8 cache, so mxfp8 is
        # a cache of its own there (at block 128, as the recipe asserts for an mxfp8 MHA layer)
        out += _draft_points(MLA_DRAFTS, configs, name)
    return out


def dsa_points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """An fp8 DSA cache is a question to the GPU (configs/dsa.py), so fp8 runs on each assumed
    platform; bfloat16 asks nothing. Drafts as mla_points."""
    out: list[dict[str, Any]] = []
    for name in configs:
        tps = divisors(int(configs[name]["num_attention_heads"]))
        model = name.removesuffix(".json")
        for drafts in draft_counts(configs[name]):
            out += ([{"model": model, "tp": tp, "dtype": "bfloat16", "drafts": drafts} for tp in tps]
                    + [{"model": model, "tp": tp, "dtype": "fp8", "drafts": drafts, "assume": f"platform={gpu}"}
                       for gpu in ASSUMPTIONS["platform"][0] for tp in tps])
    return out


def mha_points(configs: dict[str, dict]) -> list[dict[str, Any]]:
    """tp divides the query heads (the draft's too, with its draft); past the KV head count the
    recipe keeps one KV head per rank. Drafts: none, and each of the target's drafts, named by its
    --speculative-algorithm (Qwen3-8B's DFLASH and DSPARK drafts have five layers each)."""
    out: list[dict[str, Any]] = []
    for name in targets(configs, MHA_DRAFT_FILES):
        heads = int(configs[name]["num_attention_heads"])
        model = name.removesuffix(".json")
        out += [{"model": model, "tp": tp, "dtype": dtype, "drafts": 0} for dtype in MHA_DTYPES
                for tp in divisors(heads)]
        out += _draft_points(MHA_DRAFTS, configs, name)
    return out


def _draft_points(table: dict[str, tuple[tuple[str, str], ...]], configs: dict[str, dict],
                  name: str) -> list[dict[str, Any]]:
    """The points of target `name` with each of its drafts of `table` (an MHA draft: every MHA cache dtype), tp
    dividing both query head counts."""
    heads = int(configs[name]["num_attention_heads"])
    return [{"model": name.removesuffix(".json"), "tp": tp, "dtype": dtype,
             "drafts": int(configs[file]["num_hidden_layers"]), "algorithm": algorithm}
            for algorithm, file in _drafts(table, configs, name) for dtype in MHA_DTYPES
            for tp in divisors(gcd(heads, int(configs[file]["num_attention_heads"])))]


def _drafts(table: dict[str, tuple[tuple[str, str], ...]], configs: dict[str, dict],
            name: str) -> tuple[tuple[str, str], ...]:
    """The drafts of `table` planned with target `name` (algorithm, file): those trained for a shipped target whose
    architecture, hidden size, layer count and vocabulary the config shares (what a draft reads of its
    target: the hidden states of its layers, models/llama_eagle3.py and models/dflash.py, and its
    vocabulary), so a user's config.json of that model (its Instruct release, for one) is planned with
    them too; none for any other, nor for a stated family's member, whose family states its own drafts."""
    if isinstance(configs[name], MemberDict):
        return ()
    return next((drafts for target, drafts in table.items()
                 if all(file in configs for _, file in drafts)
                 and all(configs[name].get(key) == published(target).get(key) for key in DRAFT_READS)), ())


def _draft_config(table: dict[str, tuple[tuple[str, str], ...]], configs: dict[str, dict], name: str,
                  algorithm: str) -> dict:
    """The config of target `name`'s draft of `table` run with `algorithm`; an AdapterGap for a point the
    recipe's points never give (asked of engine.plan)."""
    file = dict(_drafts(table, configs, name)).get(algorithm)
    if file is None:
        raise AdapterGap("ordinary._draft_config", f"{name} has no {algorithm} draft kvproof plans with it")
    return configs[file]


def _mha_block(dtype: str) -> int:
    """The block of a cache with MHA layers: mxfp8's scale tiles need 128 (recipes/ordinary.py asserts it)."""
    return MXFP8_BLOCK if dtype == "mxfp8" else DEFAULT_BLOCK


def mha_model_config(config: dict, arch: Any) -> Strict:
    """configs/model_config.py: head_dim is the config's, else hidden_size // heads;
    num_key_value_heads the config's, else the head count; attention_arch MHA (`arch`)."""
    text = HFConfig(config)
    heads = int(config["num_attention_heads"])
    return Strict("model_config", {
        "attention_arch": arch,
        "hf_config": text, "hf_text_config": text,
        "num_attention_layers": int(config["num_hidden_layers"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(config.get("num_key_value_heads") or heads),
        "head_dim": int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        "model_profile": None,
        "dtype": Unavailable("model_config.dtype", MATH),
        "context_len": Unavailable("model_config.context_len", CAPACITY),
    })


def _recipe(modules: dict[str, types.ModuleType], family: str, sa: Strict, mc: Strict,
            draft_mc: Strict | None = None) -> Any:
    attn = startup.attn_config(modules, sa, mc)
    startup.check_family(modules, family, sa, mc, attn)
    draft_attn = None
    if draft_mc is not None:
        draft_attn = startup.attn_config(modules, sa, draft_mc, is_draft=True)
        startup.check_draft_family(modules, family, sa, draft_mc, draft_attn)
    return startup.recipe(modules, family, server_args=sa, model_config=mc, attn_config=attn,
                          draft_model_config=draft_mc, draft_attn_config=draft_attn)


def build_mla(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    name = point["model"] + ".json"
    config = configs[name]
    mla = startup.arch(modules, "MLA")
    mc = mla_model_config(config, HFConfig(config), int(config["num_hidden_layers"]), mla)
    if not point.get("drafts"):
        return _recipe(modules, "mla", server_args(point["tp"], point["dtype"], block=DEFAULT_BLOCK), mc)
    algorithm = str(point.get("algorithm"))
    if algorithm == MTP:
        # The draft worker's config is the target's with DeepseekV3ForCausalLMNextN, an MLA
        # architecture too (configs/model_config.py _MLA_ARCHITECTURES).
        sa = server_args(point["tp"], point["dtype"], speculative=MTP, block=DEFAULT_BLOCK)
        return _recipe(modules, "mla", sa, mc, mla_model_config(
            config, HFConfig(config, {"architectures": nextn_architectures(config)}), mtp_layers(config), mla))
    draft = _draft_config(MLA_DRAFTS, configs, name, algorithm)
    sa = server_args(point["tp"], point["dtype"], speculative=algorithm, block=_mha_block(point["dtype"]))
    # an EAGLE3 draft is an MHA architecture (no MLA/DSA table names LlamaForCausalLMEagle3), so a heterogeneous
    # MHA view of the MLA target's plan (startup.check_draft_family)
    return _recipe(modules, "mla", sa, mc, mha_model_config(draft, startup.arch(modules, "MHA")))


def build_dsa(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    """configs/model_config.py `configure_dsa_attention`: the MLA facts plus the indexer's
    index_topk, index_head_dim and index_n_heads from the config, index_k_format "fp8_scaled"
    (fixed there), and index_kpool the config's (DeepSeek-V3.2 has none); attention_arch DSA."""
    config = configs[point["model"] + ".json"]
    dsa = startup.arch(modules, "DSA")
    indexer = {
        "index_topk": int(config["index_topk"]),
        "index_head_dim": int(config["index_head_dim"]),
        "index_n_heads": int(config["index_n_heads"]),
        "index_k_format": "fp8_scaled",
        "index_kpool": config.get("index_kpool"),
    }
    mc = mla_model_config(config, HFConfig(config), int(config["num_hidden_layers"]), dsa, indexer)
    # --speculative-algorithm MTP with the checkpoint's own draft, else none
    sa = server_args(point["tp"], point["dtype"], speculative=MTP if point.get("drafts") else None, block=DEFAULT_BLOCK)
    draft = None
    if point.get("drafts"):
        # DeepseekV32ForCausalLMNextN is a DSA architecture too (_DSA_ARCHITECTURES), with the
        # target's indexer.
        draft = mla_model_config(config, HFConfig(config, {"architectures": nextn_architectures(config)}),
                                 mtp_layers(config), dsa, indexer)
    return _recipe(modules, "dsa", sa, mc, draft)


def build_mha(modules: dict[str, types.ModuleType], configs: dict[str, dict], point: dict[str, Any]) -> Any:
    name = point["model"] + ".json"
    mha = startup.arch(modules, "MHA")
    mc = mha_model_config(configs[name], mha)
    block = _mha_block(point["dtype"])
    if not point.get("drafts"):
        return _recipe(modules, "mha", server_args(point["tp"], point["dtype"], block=block), mc)
    algorithm = str(point.get("algorithm"))
    draft = _draft_config(MHA_DRAFTS, configs, name, algorithm)
    widths: dict[str, int] = {}
    geometry = modules.get(BLOCK_GEOMETRY)
    if geometry is not None and algorithm in geometry.BLOCK_SPEC_ALGORITHMS:
        steps, tokens = geometry.resolve_block_widths(algorithm, geometry.read_checkpoint_block_size(HFConfig(draft)))
        widths = {"speculative_num_steps": steps, "speculative_num_draft_tokens": tokens}
    if faults.active("ts_adapter_block_draft_as_eagle3"):
        algorithm = "EAGLE3"
    sa = server_args(point["tp"], point["dtype"], speculative=algorithm, block=block, extra=widths)
    return _recipe(modules, "mha", sa, mc, mha_model_config(draft, mha))
