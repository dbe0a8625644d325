"""Zamba2 (Zamba2ForCausalLM) over a stated family, for want of a published config.json.

No whole config.json of a Zyphra/Zamba2-* checkpoint in transformers' key names was found. One
public copy of the Zamba2-7B config in Zyphra's original key names is held by a benchmark of
NX-AI's mlstm_kernels (a public fork's mlstm_kernels/utils/benchmark/benchmarks/
huggingface_model_benchmark.py, `zamba_config`, registered there as "zamba2"; its
transformers_version 4.43.0.dev0 predates transformers' Zamba2Config). What `verify engine vllm`
plans for this model class is therefore a family (engines/families.py): that copy's values, each
under the transformers key it is (state_size is mamba_d_state, conv_dimension mamba_d_conv,
expansion_factor mamba_expand), and the keys the copy does not give, derived from its values by
the rule vLLM's layers hold them to (the Mamba2 heads, the shared attention's width and head) or by
transformers' own (the hybrid layers' indices).

What vLLM reads of this class to plan (vllm/model_executor/models/zamba2.py, 0.33.0): the layer
kinds from layers_block_type ("hybrid": a shared attention block's own Attention plus a Mamba2
mixer, any other: a Mamba2 mixer, :751-778) and hybrid_layer_ids (:731), num_mem_blocks (which
shared block, hence which name, :187-202, :739-746), the attention page from num_attention_heads,
attention_hidden_size and attention_head_dim (:147-153; num_key_value_heads, which ModelConfig
reads, is the heads), the state from get_mamba_state_shape_from_config (:869-897: mamba_expand x
hidden_size, mamba_ngroups, n_mamba_heads, mamba_headdim, mamba_d_state, mamba_d_conv and the
speculative tokens) and the model dtype (:858). transformers' Zamba2Config derives
attention_hidden_size, attention_head_dim, mamba_headdim and hybrid_layer_ids when a file names
none, and takes a file's own when it does: each is a key of the member.

Strictness, as for Granite-4.0-H (granite.py): a member's config.json is exactly the cited and
derived keys, and tests/test_vllm_mamba2_families.py changes every model key a member lacks at once and
shows a drafted, tensor-parallel, prefix-caching point plans exactly as before.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Cited, Family, Member

COPY = ("the Zamba2-7B config in Zyphra's original key names held by a benchmark of NX-AI's mlstm_kernels "
        "(subho406/mlstm_kernels, mlstm_kernels/utils/benchmark/benchmarks/huggingface_model_benchmark.py, "
        "`zamba_config`)")
# Its layers_block_type: hybrid layers at 6, 11, 17, 23, ..., 77 (13 of the 81).
PATTERN = ["mamba"] * 6 + ["hybrid"] + ["mamba"] * 4 + ["hybrid"] + (["mamba"] * 5 + ["hybrid"]) * 11 + ["mamba"] * 3


def _mamba_heads(values: dict[str, Any]) -> int:
    """The Mamba2 heads, which the copy does not name: MambaMixer2 shards its intermediate size as heads of
    head_dim (intermediate_size = n_heads x head_dim, mamba_mixer2.py:303-304) and Zamba2's layer takes its
    head as the intermediate size over the heads (zamba2.py:545), so 7,168 / 64 = 112 is the one count that
    keeps the copy's mamba_headdim, which the model class reads (:893)."""
    return int(values["mamba_expand"] * values["hidden_size"] // values["mamba_headdim"])


def _attention_width(values: dict[str, Any]) -> int:
    """The shared attention's width: it attends over the hidden state concatenated with the original
    embedding (zamba2.py:479-485), 2 x hidden_size, what Zamba2Config derives when the file names none."""
    return int(2 * values["hidden_size"])


def _attention_head(values: dict[str, Any]) -> int:
    """The one head Zamba2Attention accepts: attention_head_dim x heads must be the width (zamba2.py:155-163)."""
    return _attention_width(values) // int(values["num_attention_heads"])


def _hybrids(values: dict[str, Any]) -> list[int]:
    """The hybrid layers' indices, as Zamba2Config derives them from layers_block_type."""
    return [i for i, t in enumerate(values["layers_block_type"]) if t == "hybrid"]


FAMILY = Family(
    name="zamba2-7b",
    not_a_verdict_on="Zyphra/Zamba2-7B",
    cited=(
        Cited("architectures", ["Zamba2ForCausalLM"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:217); {COPY}"),
        Cited("model_type", "zamba2", f"transformers' Zamba2Config.model_type; {COPY}"),
        Cited("num_hidden_layers", len(PATTERN), f"{COPY} (num_hidden_layers 81)"),
        Cited("layers_block_type", PATTERN, f"{COPY} (layers_block_type, 81 entries)"),
        Cited("hidden_size", 3584, f"{COPY} (hidden_size 3584)"),
        Cited("num_attention_heads", 32, f"{COPY} (num_attention_heads 32)"),
        Cited("num_key_value_heads", 32, f"{COPY} (num_key_value_heads 32)"),
        Cited("num_mem_blocks", 2, f"{COPY} (num_mem_blocks 2)"),
        Cited("mamba_headdim", 64, f"{COPY} (mamba_headdim 64)"),
        Cited("mamba_d_state", 64, f"{COPY} (state_size 64)"),
        Cited("mamba_d_conv", 4, f"{COPY} (conv_dimension 4)"),
        Cited("mamba_expand", 2, f"{COPY} (expansion_factor 2)"),
        Cited("mamba_ngroups", 2, f"{COPY} (mamba_ngroups 2)"),
        Cited("torch_dtype", "bfloat16", f"{COPY} (torch_dtype bfloat16)"),
    ),
    axes=(),
    cap=1,
    # Zamba2Config derives these when a file names none, and takes a file's own over its derivation: each is a
    # key of the member, so no derivation of transformers' stands in for one
    derived={"n_mamba_heads": _mamba_heads, "attention_hidden_size": _attention_width,
             "attention_head_dim": _attention_head, "hybrid_layer_ids": _hybrids},
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())


def _attention_names(hf: Any) -> dict[int, str]:
    """Hybrid layer -> its Attention's name. Zamba2Model builds num_mem_blocks shared blocks before the
    layers (:739-746); block b owns every num_mem_blocks-th hybrid layer from b and names their
    Attentions `model.attn.j`, j counting on from b x (hybrids + num_mem_blocks - 1) // num_mem_blocks
    (:187-202). They are built in that order: block 0's, then block 1's."""
    hybrids = [i for i, t in enumerate(hf.layers_block_type) if t == "hybrid"]
    blocks = hf.num_mem_blocks
    out: dict[int, str] = {}
    for b in range(blocks):
        j = b * (len(hybrids) + blocks - 1) // blocks
        for k in range(b, len(hybrids), blocks):
            out[hybrids[k]] = f"model.attn.{j}"
            j += 1
    return out


def layers(hf: Any) -> list[tuple[str, str]]:
    """The shared blocks' Attentions first, then one MambaMixer2 per layer, named
    `{hybrids + i}.mixer` with no `model.` (:754, :551), so no two cache layers share an index."""
    attention = _attention_names(hf)
    hybrids = len(attention)
    return ([(name, "attention") for name in attention.values()]
            + [(f"{hybrids + i}.mixer", "state") for i in range(hf.num_hidden_layers)])


def hidden_layer(name: str, hf: Any) -> int:
    """The decoder layer a cache layer belongs to (Zamba2 plans no pipeline stages: no SupportsPP)."""
    if name.startswith("model.attn."):
        return next(i for i, n in _attention_names(hf).items() if n == name)
    return int(name.split(".")[0]) - len(_attention_names(hf))


def mixer(hf: Any) -> dict[str, int]:
    """What Zamba2MambaDecoderLayer hands its MambaMixer2 (zamba2.py:535-551): head_dim is the
    intermediate size over the heads, not the config's mamba_headdim the model class reads."""
    intermediate = hf.mamba_expand * hf.hidden_size
    return {"intermediate_size": intermediate, "n_groups": hf.mamba_ngroups, "num_heads": hf.n_mamba_heads,
            "head_dim": intermediate // hf.n_mamba_heads, "state_size": hf.mamba_d_state,
            "conv_kernel": hf.mamba_d_conv}
