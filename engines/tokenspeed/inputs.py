"""The server_args and model_config a point hands tokenspeed's attention configs and recipes.

Every value is a domain axis of the point, a fact of the published config.json (derived by the
formula of tokenspeed's own ModelConfig, cited at each line), a listed constant with its reason,
or Unavailable: values only capacity, scheduling or attention math read, which must never
decide the arena layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import isqrt
from typing import Any

from kvproof.engines.stubs import Unavailable
from kvproof.engines.tokenspeed.configs import HFConfig, Strict

CAPACITY = "capacity and scheduling only; the arena layout never reads it"
MATH = "attention math, not cache bytes"
# tokenspeed's launch defaults (runtime/utils/server_args.py): --speculative-num-steps 3, and
# --speculative-num-draft-tokens unset, which its post-init resolves to steps + 1.
SPEC_STEPS, SPEC_DRAFT_TOKENS = 3, 4


def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, isqrt(n) + 1) if n % d == 0]
    return tuple(sorted({*small, *(n // d for d in small)}))


def mla_model_config(config: dict, text: HFConfig, num_attention_layers: int, arch: Any,
                     extra: dict[str, Any] | None = None) -> Strict:
    """ModelConfig for an MLA checkpoint. configs/model_config.py `configure_mla_attention`
    copies kv_lora_rank and qk_rope_head_dim from the text config (the cache reads only these);
    head dims and scaling feed attention math only. `arch`: the engine's AttentionArch member
    ModelConfig sets (startup.arch). `extra`: a family's own facts (DSA's indexer)."""
    return Strict("model_config", {
        "attention_arch": arch,
        "hf_config": HFConfig(config, {"text_config": text}) if "text_config" in config else text,
        "hf_text_config": text,
        "num_attention_layers": num_attention_layers,
        "num_attention_heads": int(text.num_attention_heads),
        "kv_lora_rank": int(text.kv_lora_rank),
        "qk_rope_head_dim": int(text.qk_rope_head_dim),
        "model_profile": None,  # no plugin profile: in-tree models only
        **{name: Unavailable(f"model_config.{name}", MATH)
           for name in ("num_key_value_heads", "head_dim", "qk_nope_head_dim", "v_head_dim", "scaling", "dtype")},
        "context_len": Unavailable("model_config.context_len", CAPACITY),
        **(extra or {}),
    })


def server_args(tp: int, cache_dtype: str, *, speculative: str | None = None, block: Any = None,
                extra: dict[str, Any] | None = None) -> Strict:
    """Launch flags at a point: attention tp, --kv-cache-dtype, the speculative algorithm, and
    the block size (--prefix-granularity) where the family reads it; `extra` adds a family's
    own flags at their defaults."""
    attn = Strict("server_args.mapping.attn", {
        "tp_size": tp,
        # Decode and query context parallelism off: tokenspeed's defaults.
        "dcp_size": 1, "dcp_rank": 0, "dcp_group": (0,), "qcp_size": 1, "qcp_rank": 0, "qcp_group": (0,),
        "dp_size": Unavailable("server_args.mapping.attn.dp_size", CAPACITY),
    })
    # distributed/mapping.py: linear-attention tp defaults to the attention tp.
    linear = Strict("server_args.mapping.linear_attn", {"tp_size": tp})
    values: dict[str, Any] = {
        "attn_tp_size": tp,
        # utils/server_args.py rewrites --kv-cache-dtype fp8 to fp8_e4m3 before anything reads it.
        "kv_cache_dtype": "fp8_e4m3" if cache_dtype == "fp8" else cache_dtype,
        "kv_cache_quant_method": "none",  # the flag's default
        "speculative_algorithm": speculative,
        "attention_backend": None,  # the default: the registry picks the backend
        "drafter_attention_backend": None,  # the default
        "disaggregation_mode": "null",  # the default: no prefill/decode split
        "data_parallel_size": None,  # the default: dp comes from the mapping
        "mapping": Strict("server_args.mapping", {"attn": attn, "linear_attn": linear}),
        "prefix_granularity": block if block is not None else Unavailable("server_args.prefix_granularity",
                                                                           "the family fixes its own block"),
        **{name: Unavailable(f"server_args.{name}", CAPACITY)
           for name in ("max_num_seqs", "spec_context_pad", "device", "max_cudagraph_capture_size",
                        "chunked_prefill_size", "skip_softmax_threshold")},
    }
    if speculative is not None:
        values |= {"speculative_num_steps": SPEC_STEPS, "speculative_num_draft_tokens": SPEC_DRAFT_TOKENS}
    return Strict("server_args", values | (extra or {}))


# --speculative-algorithm for a draft the target checkpoint carries itself (its MTP / NextN
# head): utils/server_args.py resolve_speculative_decoding reads an MTP draft from the target
# checkpoint when no --speculative-draft-model-path is given (draft_model_path_use_base).
MTP = "MTP"


def mtp_layers(text: Mapping[str, Any]) -> int:
    """The draft layers of the checkpoint's own MTP head, as configs/model_config.py
    ModelConfig.__init__ counts them for a draft worker on it: mtp_num_hidden_layers where the
    config has it, else num_nextn_predict_layers when above 0 (dspark_num_stages comes first
    only under DSPARK); 0 when the checkpoint carries no draft."""
    mtp = text.get("mtp_num_hidden_layers")
    if mtp is not None:
        return int(mtp)
    nextn = text.get("num_nextn_predict_layers")
    return int(nextn) if nextn is not None and int(nextn) > 0 else 0


def draft_counts(text: Mapping[str, Any]) -> tuple[int, ...]:
    """The drafts axis of a checkpoint: none, and its own MTP head's layers where it has one."""
    layers = mtp_layers(text)
    return (0, layers) if layers else (0,)


def nextn_architectures(config: Mapping[str, Any]) -> list[str]:
    """The draft worker's architectures on the target checkpoint: utils/hf_transformers_utils.py
    get_config appends "NextN" to the first (no NextN/MTP/Eagle/DFlash/DSpark in it yet)."""
    first, *rest = config["architectures"]
    return [first + "NextN", *rest]
