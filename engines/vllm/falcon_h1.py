"""Falcon-H1 (FalconH1ForCausalLM) over a stated family, for want of a published config.json.

No whole config.json of a tiiuae/Falcon-H1-* checkpoint was found, so what `verify engine vllm`
plans for this model class is a family (engines/families.py) of the 0.5B model: the values two
independent public sources state, cited below, and the one key they do not state, derived by
transformers' own rule. The sources: the size table of transformers' FalconH1Config documentation
(its "H1 0.5B" row: depth 36, dim 1024, 8 attention heads, 2 KV, 24 Mamba heads, d_head 64 / 64,
d_state 128), and NVIDIA's Megatron Bridge unit test of its Falcon-H1 bridge, whose
FALCON_H1_500M_CONFIG holds the 0.5B model's config keys (not the whole file: no mamba_d_ssm, no
transformers_version); the two agree on every key both give.

What vLLM reads of this class to plan (vllm/model_executor/models/falcon_h1.py, 0.33.0): every
decoder layer is a parallel hybrid (FalconH1ParallelHybrid, :323), one attention layer and one
Mamba2 mixer side by side, so there is no layer pattern; the attention page from
num_attention_heads, num_key_value_heads and head_dim (:221-238, ModelConfig.get_head_size), the
state from get_mamba_state_shape_from_config (:538-572: mamba_d_ssm or mamba_expand x hidden_size,
mamba_n_groups, mamba_n_heads, mamba_d_head, mamba_d_state, mamba_d_conv, the speculative tokens)
and get_mamba_state_dtype_from_config (the model dtype, :527).

Strictness, as for Granite-4.0-H (granite.py): a member's config.json is exactly the cited and
derived keys, and tests/test_vllm_mamba2_families.py changes every model key a member lacks at once and
shows a drafted, tensor-parallel, prefix-caching point plans exactly as before.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Cited, Family, Member

TABLE = ("transformers' FalconH1Config documentation, its size table (docs/source/en/model_doc/falcon_h1.md, "
         "the 'H1 0.5B' row)")
BRIDGE = ("NVIDIA-NeMo/Megatron-Bridge's unit test of its Falcon-H1 bridge (tests/unit_tests/models/falcon_h1/, "
          "FALCON_H1_500M_CONFIG, the Falcon-H1-0.5B config's keys)")
LAYERS = 36


def _d_ssm(values: dict[str, Any]) -> int:
    """The Mamba intermediate size: transformers' FalconH1Config.validate_architecture accepts only
    mamba_d_head x mamba_n_heads (configuration_falcon_h1.py:124-130), and its class default (1,024)
    would stand in for a missing key."""
    return int(values["mamba_d_head"] * values["mamba_n_heads"])


FAMILY = Family(
    name="falcon-h1-0.5b",
    not_a_verdict_on="tiiuae/Falcon-H1-0.5B-Instruct",
    cited=(
        Cited("architectures", ["FalconH1ForCausalLM"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:110); {BRIDGE}"),
        Cited("model_type", "falcon_h1", f"transformers' FalconH1Config.model_type; {BRIDGE}"),
        Cited("num_hidden_layers", LAYERS, f"{TABLE} (depth 36); {BRIDGE}"),
        Cited("hidden_size", 1024, f"{TABLE} (dim 1024); {BRIDGE}"),
        Cited("num_attention_heads", 8, f"{TABLE} (8 attention heads); {BRIDGE}"),
        Cited("num_key_value_heads", 2, f"{TABLE} (KV 2); {BRIDGE}"),
        Cited("head_dim", 64, f"{TABLE} (d_head 64 / 64, attention's first); {BRIDGE}"),
        Cited("mamba_n_heads", 24, f"{TABLE} (24 Mamba heads); {BRIDGE}"),
        Cited("mamba_d_head", 64, f"{TABLE} (d_head 64 / 64, Mamba's second); {BRIDGE}"),
        Cited("mamba_d_state", 128, f"{TABLE} (d_state 128); {BRIDGE}"),
        Cited("mamba_d_conv", 4, BRIDGE),
        Cited("mamba_n_groups", 1, BRIDGE),
        Cited("mamba_expand", 2, BRIDGE),
        Cited("torch_dtype", "bfloat16", BRIDGE),
    ),
    axes=(),
    cap=1,
    derived={"mamba_d_ssm": _d_ssm},
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())


def layers(hf: Any) -> list[tuple[str, str]]:
    """Each FalconH1ParallelHybrid (falcon_h1.py:323) builds its attention layer's Attention at
    `model.layers.i.attn` (:335, :280) and, named apart so the two layers' indices differ, its
    MambaMixer2 at `model.{num_hidden_layers + i}.mixer` (:344-353, :134), in that order."""
    n = hf.num_hidden_layers
    return [pair for i in range(n)
            for pair in ((f"model.layers.{i}.attn", "attention"), (f"model.{n + i}.mixer", "state"))]


def hidden_layer(name: str, hf: Any) -> int:
    """The decoder layer a cache layer belongs to (the one a pipeline stage builds, make_layers, :446)."""
    parts = name.split(".")
    index = int(parts[2] if parts[1] == "layers" else parts[1])
    return index if parts[1] == "layers" else index - hf.num_hidden_layers


def mixer(hf: Any) -> dict[str, int]:
    """What FalconH1SSMDecoderLayer hands its MambaMixer2 (falcon_h1.py:112-133)."""
    return {"intermediate_size": hf.mamba_d_ssm if hf.mamba_d_ssm is not None else hf.mamba_expand * hf.hidden_size,
            "n_groups": hf.mamba_n_groups, "num_heads": hf.mamba_n_heads, "head_dim": hf.mamba_d_head,
            "state_size": hf.mamba_d_state, "conv_kernel": hf.mamba_d_conv}
