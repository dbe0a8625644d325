"""The models `verify engine vllm` plans, each choice cited, at the attention backends of backends.py.

A model is a published config.json (models/, SOURCES.md says where each came from), or a member of a stated family,
and the facts of vLLM's model class that decide which layers keep attention pages and which keep state pages.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from importlib import resources
from typing import Any

from kvproof.engines import families
from kvproof.engines.stubs import StubUsed
from kvproof.engines.user_config import UserConfig
from kvproof.engines.verdict import Coverage, EngineError
from kvproof.engines.vllm import (
    bailing_v3,
    bailing_v3_vl,
    bailing_v25,
    falcon_h1,
    glm53_flash,
    granite,
    kimi_k3_dspark,
    lfm2_moe,
    lfm2_vl,
    minicpm_v46,
    nemotron_omni,
    olmo_hybrid,
    qwen4_exp,
    zamba2,
)
from kvproof.engines.vllm.backends import (
    CAUSAL_CONV1D,
    FLASH_ATTN,
    FLASH_ATTN_MLA,
    FLASHINFER_MLA,
    FLASHINFER_SM90,
    FLASHINFER_SM100,
    FLASHMLA,
    FUSED_RECURRENT_KDA,
    GATED_DELTA_RULE,
    LMCACHE,
    SELECTIVE_STATE_UPDATE,
    TRITON_ATTN,
    TRITON_MLA,
)
from kvproof.engines.vllm.parts import Backend, Reader
from kvproof.impl import faults


def _layer_number(name: str) -> int:
    found = re.search(r"layers\.(\d+)", name)
    if found is None:
        raise ValueError(f"layer {name} names no decoder layer")
    return int(found.group(1))


@dataclass(frozen=True)
class Model:
    recipe: str  # the name --recipe takes
    config: str  # the published config.json, relative to kvproof.engines (one copy per checkpoint)
    backends: tuple[Backend, ...]
    state_layer: str  # module:class of the model's state (linear-attention or Mamba) layer
    state_type: str  # its MambaAttentionBackendEnum (the layer's mamba_type)
    layers: Callable[[Any], list[tuple[str, str]]]  # (layer name, "attention" | "state") from the HF config
    prefix_caching: tuple[bool, ...]  # the prefix-caching values kvproof can plan
    limits: str
    draft: str | None = None  # the speculative method of the model's own draft layers (MTP)
    # from the draft's HF config; a draft checkpoint's own attention layers are "draft" (planned at its geometry)
    draft_layers: Callable[[Any], list[tuple[str, str]]] = lambda _hf: []
    speculative: tuple[int, ...] = ()  # num_speculative_tokens values planned (empty: no draft modelled)
    # a draft that is a checkpoint of its own (EAGLE3, DFLASH): its config.json, relative to kvproof.engines, the folder
    # SpeculativeConfig(model=...) reads; None where the draft is the target's own layers or keeps no page
    draft_config: str | None = None
    # whether its own draft's layers keep the cache config they are built under (side caches that read its block,
    # draft_cache_config): then a draft KV dtype equal to the target's is a configuration of its own (the engine's
    # draft_dtype axis plans it), since vLLM copies the cache config whenever the speculative config names one
    draft_keeps_cache_config: bool = False
    # where the draft's attention layers name their own backend (no pin or selection reaches it): which, for the
    # limits of a point with a draft KV dtype of its own
    draft_own_backend: str | None = None
    # a drafted recipe planned at one of its target's backends: the target's others, which --speculative-config's
    # attention_backend may still give the draft's layers (draft_backends)
    draft_candidates: tuple[Backend, ...] = ()
    readers: tuple[Reader, ...] = ()  # what reads its state pages (the state layer's kernels, connectors)
    # What the state layer's constructor sets that planning reads (the alignment in align mode, the layer's
    # own get_kv_cache_spec), computed by vLLM's own functions from the config and the point's platform:
    # the attributes of each layer shell
    state_init: Callable[[Any], dict[str, Any]] | None = None
    # the GPUs at which planning asks the CUDA runtime's major version (the state layer's constructor does), so
    # their points carry it as an assumption (cuda_runtime axis)
    cuda_runtime_at: tuple[str, ...] = ()
    # a member of a stated family (engines/families.py), planned from its config.json in place of a
    # published one: `config` then names the member, never a file. Not hashed: its cited values hold lists
    # (a layer pattern), and the recipe tells members apart (a point is hashed where Plans reuses a planning)
    member: families.Member | None = field(default=None, hash=False)
    # the decoder layer a cache layer's name belongs to (what a pipeline stage builds): the index after
    # `layers.` unless the model class names its layers otherwise
    hidden_layer: Callable[[str, Any], int] = lambda name, _hf: _layer_number(name)
    # whether the model class is SupportsPP at this config.json (else vLLM refuses pp > 1 in its config check)
    pipeline: Callable[[dict[str, Any]], bool] = lambda _config: True
    # the model's cache layers besides its state layers and plain attention, each as its constructor leaves it
    # (a shell, whose own get_kv_cache_spec and get_attn_backend vLLM calls), from the point's config, its
    # attention backend and the layer names; it may write to the config as those constructors do
    built: Callable[[Any, Any, list[tuple[str, str]]], dict[str, Any]] | None = None
    # what a member's verdict states of its family (where it is written down, what it assumes), before `limits`
    family_limits: str = ""
    # --config FILE: a user's config.json planned in place of `config` or `member`, at this model's points
    user_config: UserConfig | None = field(default=None, hash=False)
    # a count every tp must divide besides the heads, from the config.json (a layer constructor's own refusal of the
    # others): None where there is none
    tp_divides: Callable[[dict[str, Any]], int] | None = None

    @property
    def coverage(self) -> Coverage | None:
        """What the model's points stand for: None for a published checkpoint; a family member's
        family, with the member's own values (its name, index and varied keys), its members enumerated
        left to the run that plans it to count (engine._coverage)."""
        if self.user_config is not None:
            return Coverage(config=self.user_config.path)
        if self.member is None:
            return None
        family = self.member.family
        return Coverage({**family.as_dict(), "member": self.member.name, "member_values": self.member.varied()},
                        family.size(), None, tuple(family.citations()))

    @property
    def stated_limits(self) -> str:
        """What its verdict says of what it plans and does not: a member's family first; at a user's
        --config, the file in the family's place."""
        if self.user_config is not None:
            return "; ".join(part for part in (f"planned at --config {self.user_config.path} over {self.recipe}'s "
                                               f"points", self.limits, self._draft_dtype_limits) if part)
        return "; ".join(part for part in (self.family_limits, self.limits, self._draft_dtype_limits) if part)

    @property
    def every_backend(self) -> tuple[Backend, ...]:
        """The backends its points may name: the target's (`backends`), and for the draft's layers those and
        `draft_candidates` (draft_backends takes those on the point's GPU)."""
        return tuple({b.label: b for b in (*self.backends, *self.draft_candidates)}.values())

    def draft_backends(self, backend: Backend) -> tuple[Backend, ...]:
        """The backends other than the target's `backend` that --speculative-config's attention_backend may give the
        draft's layers, each other backend the model plans on that GPU (`every_backend`): an MTP or EAGLE3 draft is
        built under the target's attention config but for it (Model Runner V2, v1/worker/gpu/spec_decode/eagle/
        utils.py:86, config/speculative.py:396-403), a DFLASH draft under it too, for non-causal attention
        (dflash/utils.py:26-33; engine._domain keeps the backends that take it). A DSpark draft's pin adds no point
        (_draft_dtype_limits): none."""
        if self.draft not in ("mtp", "eagle3", "dflash"):
            return ()
        return tuple(b for b in self.every_backend if b.gpu == backend.gpu and b.label != backend.label)

    @property
    def _draft_dtype_limits(self) -> str:
        """What a drafted point assumes of the draft's backend: at a draft KV dtype of its own (the engine's
        draft_dtype axis), and where --speculative-config's attention_backend names one (its draft_backend axis)."""
        if self.draft in (None, "ngram"):
            return ""
        if self.draft_own_backend is not None:
            return f"a draft KV dtype of its own (draft_dtype=) is planned at {self.draft_own_backend}"
        if self.draft == "dspark":
            return ("a draft KV dtype of its own (draft_dtype=) is planned with the draft's backend selected at it, as "
                    "vLLM selects it unpinned; a draft backend pinned by --speculative-config's attention_backend adds "
                    "no point: of the MLA backends planned, only the one selected takes the draft's non-causal "
                    "attention on its GPU")
        if self.draft == "dflash":
            return ("a draft KV dtype of its own (draft_dtype=) is planned at the draft's backend: without "
                    "draft_backend=, the point's, FLASH_ATTN, which vLLM's selection for the draft's non-causal "
                    "attention (dflash/utils.py:26-33) gives on sm_90 at either dtype (read, not run); draft_backend= "
                    "plans the draft's layers at each other backend its target plans on the GPU whose class takes "
                    "non-causal attention and declares the draft's KV dtype, as --speculative-config's "
                    "attention_backend pins it (dflash/utils.py:32)")
        pinned = ("a drafted point without draft_backend= assumes its backend pinned by --attention-backend, which "
                  "Model Runner V2 builds the draft's layers under (eagle/utils.py:86), and leaves out a draft KV "
                  "dtype (draft_dtype=) that backend does not declare")
        if not any(self.draft_backends(b) for b in self.backends):
            return f"{pinned}; another draft backend (--speculative-config's attention_backend) is not planned"
        planned = "its target plans" if self.draft_candidates else "planned"
        return (f"{pinned}; draft_backend= plans the draft's layers at each other backend {planned} on the GPU whose "
                "class declares the draft's KV dtype, as --speculative-config's attention_backend names it, which "
                "covers vLLM's own selection at the draft's dtype where nothing is pinned (read, not run)")

    def state_readers(self) -> tuple[Reader, ...]:
        """The readers, with LMCache's entry flipped to walking by payload while the seeded
        LMCache#5166 fault is on."""
        if faults.active("lmcache_walks_by_payload"):
            return tuple(replace(r, walks="payload") if r is LMCACHE else r for r in self.readers)
        return self.readers

    def config_text(self) -> str:
        if self.user_config is not None:
            return json.dumps(self.user_config.config, indent=2) + "\n"
        if self.member is not None:
            return json.dumps(self.member.config(), indent=2) + "\n"
        return resources.files("kvproof.engines").joinpath(self.config).read_text(encoding="utf-8")

    def draft_text(self) -> str | None:
        return (resources.files("kvproof.engines").joinpath(self.draft_config).read_text(encoding="utf-8")
                if self.draft_config else None)

    def state_layer_class(self) -> type:
        module, cls = self.state_layer.split(":")
        return getattr(importlib.import_module(module), cls)

    def state_backend_enum(self, registry: Any) -> Any:
        return registry.MambaAttentionBackendEnum[self.state_type]

    def state_backend(self, registry: Any) -> type:
        return self.state_backend_enum(registry).get_class()

    def tps(self, hf: dict) -> tuple[int, ...]:
        """Every tensor-parallel size vLLM builds the model's cache layers at, from the language
        model's config: each head count vLLM divides by tp must be divisible (attention heads,
        ModelConfig.verify_with_parallel_config, config/model.py:1559; GDN key and value heads,
        mamba_utils.py:282-291; KDA heads, kimi_gdn_linear_attn.py:189 and kimi_k3/nvidia/kda.py:613;
        Mamba2 heads, mamba_mixer2.py:316), Mamba2's groups divide by tp or are 1 (:320), and GQA's
        KV heads divide by tp or are replicated to it (QKVParallelLinear, layers/linear.py:1066-1070).
        Nothing else vLLM shards sets a page: MLA keeps one latent head at any tp, and a MoE layer
        pads its per-rank experts (kimi_k3/nvidia/model.py:423-428). A layer constructor that refuses
        other tp besides says so in `tp_divides` (Bailing V2.5's norm groups).

        No cap besides the heads: they bound the domain already (96 for Kimi-K3, the most), vLLM
        runs tp across nodes, and a tp that no single NVLink domain holds (K3's 96) is still one a
        prefill/decode pair may pair with tp 1. Every divisor, not only powers of two: K3's 3, 6,
        12, 24, 48 and 96 are as valid to vLLM as 2-32. With a draft checkpoint of its own, its heads
        too: the draft runs at the target's tp (SpeculativeConfig's draft_tensor_parallel_size default)."""
        draft = self.draft_text()
        return tuple(tp for tp in _tps(hf) if (draft is None or tp in _tps(json.loads(draft)))
                     and (self.tp_divides is None or self.tp_divides(hf) % tp == 0))


def _tps(hf: dict) -> tuple[int, ...]:
    """Each tp the config's head counts allow (Model.tps)."""
    hf = hf.get("text_config", hf)  # a multimodal checkpoint's language model (Kimi-K3)
    heads = [hf["num_attention_heads"]]
    if "linear_num_key_heads" in hf:
        heads += [hf["linear_num_key_heads"], hf["linear_num_value_heads"]]
    if "linear_attn_config" in hf:
        heads.append(hf["linear_attn_config"]["num_heads"])
    if "mamba_num_heads" in hf:
        heads.append(hf["mamba_num_heads"])
    if "mamba_n_heads" in hf:  # GraniteMoeHybrid's (and FalconH1's) spelling of the Mamba2 heads and groups
        heads.append(hf["mamba_n_heads"])
    if "n_mamba_heads" in hf:  # Zamba2's
        heads.append(hf["n_mamba_heads"])
    groups = hf.get("n_groups", hf.get("mamba_n_groups", hf.get("mamba_ngroups", 1)))
    kv = None if "kv_lora_rank" in hf else hf.get("num_key_value_heads")
    # Mamba-1's inner channels shard with tp (MambaMixer's ColumnParallelLinear, mamba_mixer.py:91;
    # mamba1_state_shape divides them, mamba_utils.py:178)
    inner = hf["mamba_expand"] * hf["hidden_size"] if "mamba_expand" in hf else 0
    return tuple(tp for tp in range(1, min(heads) + 1)
                 if all(h % tp == 0 for h in heads) and (groups % tp == 0 or groups == 1)
                 and (kv is None or kv % tp == 0 or tp % kv == 0) and inner % tp == 0)


def _qwen3_next_layers(hf: Any) -> list[tuple[str, str]]:
    """transformers' Qwen3NextConfig.layer_types (every full_attention_interval-th layer is full)."""
    return [(f"model.layers.{i}.self_attn.attn", "attention") if t == "full_attention"
            else (f"model.layers.{i}.linear_attn", "state") for i, t in enumerate(hf.layer_types)]


def _qwen3_next_mtp_layers(draft: Any) -> list[tuple[str, str]]:
    """Qwen3NextMTP's layers: each a full-attention decoder layer under `mtp.layers.i`; their count
    is vLLM's own default of 1 where the config names none (qwen3_next_mtp.py:63, :93; the
    published config sets no num_nextn_predict_layers)."""
    return [(f"mtp.layers.{i}.self_attn.attn", "attention")
            for i in range(getattr(draft, "num_nextn_predict_layers", 1))]


def _gdn_layer_state(vllm_config: Any) -> dict[str, Any]:
    """The state shape each Gated DeltaNet layer computes of itself (get_state_shape:
    QwenGatedDeltaNetAttention's, qwen_gdn_linear_attn.py:545-556; OlmoHybridGatedDeltaNetAttention's,
    olmo_gdn_linear_attn.py:59-70): vLLM's gated_delta_net_state_shape of the text config's linear_* keys its
    constructor keeps (qwen_gdn_linear_attn.py:568-572; olmo_gdn_linear_attn.py:83-87), the tp and its own
    speculative tokens (gdn/base.py:33, :43-47). Not the model class's get_mamba_state_shape_from_config, which
    the hybrid alignment pads by: the cache holds the layers' states, and the two disagree where a class drops
    what its layers keep (vllm#57721)."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    hf, tp = vllm_config.model_config.hf_text_config, vllm_config.parallel_config.tensor_parallel_size
    shape = tuple(MambaStateShapeCalculator.gated_delta_net_state_shape(
        tp, hf.linear_num_key_heads, hf.linear_num_value_heads, hf.linear_key_head_dim, hf.linear_value_head_dim,
        hf.linear_conv_kernel_dim, vllm_config.num_speculative_tokens))
    return {"get_state_shape": lambda: shape}


def _qwen_gdn_state(vllm_config: Any) -> dict[str, Any]:
    """QwenGatedDeltaNetAttention's constructor (qwen_gdn_linear_attn.py:686-696 in 0.33.0; :291-292
    in 0.32.0): the GDN prefill backend is vLLM's _resolve_gdn_prefill_backend of the config on the
    point's platform (FlashInfer on sm_90, :249), and, in a vLLM whose GDN layer exports mid-prefill
    states (0.33.0: gdn_attn.py:34 defines FLASHINFER_GDN_CHECKPOINT_ALIGNMENT), in align mode a
    FlashInfer layer exports them every FLASHINFER_GDN_CHECKPOINT_ALIGNMENT tokens. The layer's own
    get_kv_cache_spec reads these (and the config it keeps, :688), with the state shape the layer computes of
    itself (_gdn_layer_state)."""
    from vllm import platforms
    from vllm.model_executor.layers.mamba.gdn import qwen_gdn_linear_attn as gdn
    from vllm.v1.attention.backends import gdn_attn

    # the module binds current_platform when first imported, which may be outside any point (under this
    # machine's platform, which is no CUDA one: the answer would be Triton): it asks the point's here
    bound, gdn.current_platform = gdn.current_platform, platforms.current_platform
    try:
        _, backend = gdn._resolve_gdn_prefill_backend(vllm_config)
    finally:
        gdn.current_platform = bound
    out: dict[str, Any] = {"gdn_prefill_backend": backend, "vllm_config": vllm_config}
    every = getattr(gdn_attn, "FLASHINFER_GDN_CHECKPOINT_ALIGNMENT", None)
    if every is not None:
        exports = vllm_config.cache_config.mamba_cache_mode == "align" and backend == "flashinfer"
        out["_checkpoint_alignment"] = every if exports else None
    return {**out, **_gdn_layer_state(vllm_config)}


def _kda_layer_state(vllm_config: Any) -> dict[str, Any]:
    """The state shape each KDA layer computes of itself (get_state_shape: KimiGatedDeltaNetAttention's,
    kimi_gdn_linear_attn.py:166-175; KimiK3DeltaAttention's, kimi_k3/nvidia/kda.py:582-591): vLLM's
    kda_state_shape of the head count, head dim and short-conv kernel its constructor keeps of the text config's
    linear_attn_config (kimi_gdn_linear_attn.py:187-194; kda.py:611-617), the tp and its own speculative tokens
    (gdn/base.py:33, :43-47). Not the model class's get_mamba_state_shape_from_config, which the hybrid alignment
    pads by: the cache holds the layers' states, and the two disagree where a class drops what its layers keep
    (vllm#57721)."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    linear = vllm_config.model_config.hf_text_config.linear_attn_config
    shape = MambaStateShapeCalculator.kda_state_shape(
        vllm_config.parallel_config.tensor_parallel_size, linear["num_heads"], linear["head_dim"],
        conv_kernel_size=linear["short_conv_kernel_size"], num_spec=vllm_config.num_speculative_tokens)
    return {"get_state_shape": lambda: shape}


def _kimi_linear_layers(hf: Any) -> list[tuple[str, str]]:
    """vLLM's own KimiLinearConfig.is_kda_layer (the model class asks it, kimi_k3/nvidia/model.py:715)."""
    return [(f"model.layers.{i}.self_attn", "state" if hf.is_kda_layer(i) else "attention")
            for i in range(hf.num_hidden_layers)]


def _kimi_k3_layers(hf: Any) -> list[tuple[str, str]]:
    """Kimi-K3's decoder layers sit under the multimodal wrapper's `language_model`
    (KimiK3ForConditionalGeneration builds KimiLinearForCausalLM there, kimi_k3/nvidia/model.py:1678;
    its `model`, :1419; `layers`, :995; `self_attn`, :724, :759); KimiLinearConfig.is_kda_layer picks the
    KDA layers (:715)."""
    return [(f"language_model.model.layers.{i}.self_attn", "state" if hf.is_kda_layer(i) else "attention")
            for i in range(hf.num_hidden_layers)]


def _kimi_k3_kda_state(vllm_config: Any) -> dict[str, Any]:
    """KimiK3DeltaAttention's constructor picks its KDA prefill backend with vLLM's own
    resolve_kda_prefill_backend (kimi_k3/nvidia/kda.py:824; "auto" unless additional_config names
    one, :819-823) from the layer's head_dim, the model dtype, its recurrent state dtype and the
    gate's lower bound; FlashKDA on sm_90 with K3's config (:363). Its get_kv_cache_spec sets the
    prefill checkpoint fields from that backend (kda.py:901-909), with the state shape the layer computes of
    itself (_kda_layer_state)."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator
    from vllm.models.kimi_k3.nvidia import kda
    from vllm.platforms import current_platform

    # kda.py binds current_platform when first imported (the first point's); the two answers
    # is_flashkda_supported asks of it must be the point's, or the backend would be another GPU's.
    bound = kda.current_platform
    if not bound.is_cuda() or bound.get_device_capability() != current_platform.get_device_capability():
        raise StubUsed(f"vllm.models.kimi_k3 was first imported under a platform with capability "
                       f"{bound.get_device_capability()}, not the point's; plan one GPU per process")
    hf, cache = vllm_config.model_config.hf_text_config, vllm_config.cache_config
    linear = hf.linear_attn_config
    recurrent = MambaStateDtypeCalculator.kda_state_dtype(
        vllm_config.model_config.dtype, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype)[1]
    extra = vllm_config.additional_config
    choice = extra.get("kda_prefill_backend", "auto") if isinstance(extra, dict) else "auto"
    return {"kda_prefill_backend": kda.resolve_kda_prefill_backend(
        choice, linear["head_dim"], vllm_config.model_config.dtype, recurrent, linear.get("gate_lower_bound")),
        **_kda_layer_state(vllm_config)}


def _nemotron_h_layers(hf: Any) -> list[tuple[str, str]]:
    """hybrid_override_pattern: M a Mamba2 mixer, * attention, - and E an MLP or MoE with no cache
    (the model class reads it, nemotron_h.py:597); an attention mixer's Attention sits under it at `.attn`
    (nemotron_h.py:487, :526)."""
    return [(f"backbone.layers.{i}.mixer", "state") if c == "M" else (f"backbone.layers.{i}.mixer.attn", "attention")
            for i, c in enumerate(hf.hybrid_override_pattern) if c in "M*"]


def _nemotron_omni_layers(hf: Any) -> list[tuple[str, str]]:
    """Nemotron-H's layers of the text config under the Omni class's `language_model` prefix
    (nano_nemotron_vl.py:985-990)."""
    return [(f"language_model.{name}", kind) for name, kind in _nemotron_h_layers(hf)]


def _nemotron_h_mtp_layers(draft: Any) -> list[tuple[str, str]]:
    """NemotronHMTP's layers: mtp_hybrid_override_pattern repeated num_nextn_predict_layers times
    (exactly one, nemotron_h_mtp.py:246-249), each `*` an attention decoder layer under
    `mtp.layers.i` (:270, :287), its Attention at `.mixer.attn` (nemotron_h.py:487, :526), each `E` a MoE layer
    with no cache."""
    pattern = draft.mtp_hybrid_override_pattern * draft.num_nextn_predict_layers
    return [(f"mtp.layers.{i}.mixer.attn", "attention") for i, c in enumerate(pattern) if c == "*"]


def _qwen3_5_layers(hf: Any) -> list[tuple[str, str]]:
    """Qwen3_5DecoderLayer builds a GDN layer or full attention from the text config's layer_types
    (qwen3_5.py:149-163, the model reads it at :259), under the multimodal wrapper's
    `language_model.model` (Qwen3_5ForConditionalGeneration, :523; the MoE class, :746)."""
    return [(f"language_model.model.layers.{i}.self_attn.attn", "attention") if t == "full_attention"
            else (f"language_model.model.layers.{i}.linear_attn", "state") for i, t in enumerate(hf.layer_types)]


def _qwen3_5_mtp_layers(draft: Any) -> list[tuple[str, str]]:
    """Qwen3_5MTP's layers: mtp_num_hidden_layers full-attention decoder layers under `mtp.layers.i`
    (qwen3_5_mtp.py:82, :119-124), read from the draft's text config (:75; SpeculativeConfig takes
    n_predict from the same key, config/speculative.py:998-1001)."""
    text = draft.get_text_config()
    return [(f"mtp.layers.{i}.self_attn.attn", "attention")
            for i in range(getattr(text, "mtp_num_hidden_layers", 1))]


def _jamba_layers(hf: Any) -> list[tuple[str, str]]:
    """JambaConfig.layers_block_type (every attn_layer_period-th layer from attn_layer_offset is
    attention; the model class reads it, jamba.py:322): an attention layer's Attention is
    `model.layers.i.attn` (jamba.py:237, the checkpoint's `.self_attn.` mapped away, :383), a Mamba
    layer's MambaMixer `model.layers.i.mixer` (:141)."""
    return [(f"model.layers.{i}.attn", "attention") if t == "attention" else (f"model.layers.{i}.mixer", "state")
            for i, t in enumerate(hf.layers_block_type)]


def _lfm2_layers(hf: Any) -> list[tuple[str, str]]:
    """Lfm2Config.layer_types (transformers derives it from full_attn_idxs, configuration_lfm2.py:81-90; the
    model class reads it, lfm2.py:435): an attention layer's Attention is `model.layers.i.self_attn.attn`
    (lfm2.py:171, :223), a conv layer's ShortConv `model.layers.i.short_conv` (:361)."""
    return [(f"model.layers.{i}.self_attn.attn", "attention") if t == "full_attention"
            else (f"model.layers.{i}.short_conv", "state") for i, t in enumerate(hf.layer_types)]


def _lfm2_vl_layers(hf: Any) -> list[tuple[str, str]]:
    """LFM2's layers under Lfm2VLForConditionalGeneration's `language` prefix (lfm2_vl.py:712-718)."""
    return [(f"language.{name}", kind) for name, kind in _lfm2_layers(hf)]


def _short_conv_state(vllm_config: Any, width: Callable[[Any], int] = lambda hf: hf.conv_dim) -> dict[str, Any]:
    """The state each ShortConv layer computes of itself (get_state_shape, short_conv.py:351-357): vLLM's
    short_conv_state_shape of the conv width the decoder layer hands it (config.conv_dim, lfm2.py:356), the
    config's conv_L_cache (short_conv.py:54) and its own speculative tokens (:56). Not the model class's
    get_mamba_state_shape_from_config, which the hybrid alignment pads by and which passes no num_spec
    (lfm2.py:556-578). `width`: the dim the model's decoder layer hands ShortConv (Lfm2MoeForCausalLM's
    hands hidden_size, lfm2_moe.py:345)."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    hf, tp = vllm_config.model_config.hf_text_config, vllm_config.parallel_config.tensor_parallel_size
    shape = tuple(MambaStateShapeCalculator.short_conv_state_shape(
        tp_world_size=tp, intermediate_size=width(hf), conv_kernel=hf.conv_L_cache,
        num_spec=vllm_config.num_speculative_tokens))
    return {"get_state_shape": lambda: shape}


GQA_BACKENDS = (FLASH_ATTN, TRITON_ATTN, FLASHINFER_SM90, FLASHINFER_SM100)  # sm_90 as before, then FlashInfer
GQA_LIMITS = ("FLASHINFER plans with guarded stand-ins for the FlashInfer entry points its module binds "
              "(engines/vllm/stand_ins.py), assuming (trtllm axis) whether FlashInfer's TRTLLM kernels are "
              "obtainable (vllm/utils/flashinfer.py:647); FLASH_ATTN and TRITON_ATTN on sm_100 (after FLASHINFER, "
              "vllm/platforms/cuda.py:163-164) are not planned: vLLM's validate_configuration accepts FLASHINFER "
              "there at both kv dtypes, so they are reached only without FlashInfer installed; FLASHINFER plans "
              "pipeline stages at tp 1, pp 2 only (its assumption axes multiply its points; FLASH_ATTN's stages "
              "show which stage lacks an attention layer, which depends on pp alone)")
MLA_BACKENDS = (FLASHMLA, TRITON_MLA, FLASH_ATTN_MLA, FLASHINFER_MLA)  # sm_90 as before, then the new
MLA_LIMITS = ("FLASH_ATTN_MLA and FLASHINFER_MLA plan with guarded stand-ins for the GPU entry points their modules "
              "bind (engines/vllm/stand_ins.py); FlashInfer's presence checks see it absent, as on this CPU")
# A checkpoint with no draft of its own still speculates by ngram (SpeculativeConfig(method="ngram"), whose proposer
# keeps no page), and its state layers widen their states by the tokens as under a draft (Mamba-1's excepted); up to 3
# tokens, as the MTP drafts. A class with an EAGLE interface also drafts with a checkpoint of its own, not modelled.
NGRAM = "; speculation by ngram, up to 3 tokens ({})"
EAGLE = "; EAGLE3 drafts with a checkpoint of its own ({}), not modelled"

MODELS: dict[str, Model] = {
    "qwen3-next-80b-a3b": Model(
        "qwen3-next-80b-a3b", "vllm/models/qwen3-next-80b-a3b.json", GQA_BACKENDS,
        "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn:QwenGatedDeltaNetAttention",
        "GDN_ATTN",  # GatedDeltaNetAttention.mamba_type, gdn/base.py:51
        _qwen3_next_layers, (False, True),
        GQA_LIMITS,
        draft="mtp", draft_layers=_qwen3_next_mtp_layers, speculative=(0, 1, 2, 3),
        readers=(CAUSAL_CONV1D, GATED_DELTA_RULE, LMCACHE), state_init=_qwen_gdn_state,
        # the GDN layer's constructor picks FlashInfer's GDN prefill on sm_100 only on a CUDA 13 runtime
        # (_resolve_gdn_prefill_backend, qwen_gdn_linear_attn.py:250-254)
        cuda_runtime_at=("sm_100",)),
    "kimi-linear-48b-a3b": Model(
        "kimi-linear-48b-a3b", "vllm/models/kimi-linear-48b-a3b.json", MLA_BACKENDS,
        "vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn:KimiGatedDeltaNetAttention",
        "GDN_ATTN",  # GatedDeltaNetAttention.mamba_type, gdn/base.py:51
        _kimi_linear_layers, (False, True),
        MLA_LIMITS + NGRAM.format("its config declares no MTP layer")
        + EAGLE.format("SupportsEagle3, kimi_k3/nvidia/model.py:1408"),
        draft="ngram", speculative=(0, 1, 2, 3),
        # KimiGatedDeltaNetAttention's conv and recurrent kernels (kimi_gdn_linear_attn.py:40, :489)
        readers=(CAUSAL_CONV1D, GATED_DELTA_RULE, LMCACHE), state_init=_kda_layer_state),
    "nemotron-h-56b-base-8k": Model(
        "nemotron-h-56b-base-8k", "tokenspeed/models/nemotron-h-56b-base-8k.json", GQA_BACKENDS,
        "vllm.model_executor.layers.mamba.mamba_mixer2:MambaMixer2", "MAMBA2",  # mamba_mixer2.py:1159
        _nemotron_h_layers, (False, True),
        GQA_LIMITS + NGRAM.format("its config declares no MTP layer")
        + EAGLE.format("SupportsEagle3, nemotron_h.py:724-725"),
        draft="ngram", speculative=(0, 1, 2, 3),
        readers=(CAUSAL_CONV1D, SELECTIVE_STATE_UPDATE, LMCACHE)),
    "kimi-k3": Model(
        "kimi-k3", "tokenspeed/models/kimi-k3.json", MLA_BACKENDS,
        "vllm.models.kimi_k3.nvidia.kda:KimiK3DeltaAttention",
        "GDN_ATTN",  # GatedDeltaNetAttention.mamba_type, gdn/base.py:51 (KimiK3DeltaAttention keeps it)
        _kimi_k3_layers, (False, True),
        MLA_LIMITS + NGRAM.format("no MTP draft: the published config declares num_nextn_predict_layers 0, and "
                                  "vLLM's SpeculativeConfig then divides by it, config/speculative.py:1606")
        + EAGLE.format("SupportsEagle3, kimi_k3/nvidia/model.py:1574") + "; its DSpark draft: kimi-k3-dspark"
        + "; its vision tower keeps no page",
        draft="ngram", speculative=(0, 1, 2, 3),
        # KimiK3DeltaAttention's conv update and recurrent KDA kernel (kimi_k3/nvidia/kda.py:1029, :1275)
        readers=(CAUSAL_CONV1D, FUSED_RECURRENT_KDA, LMCACHE), state_init=_kimi_k3_kda_state),
}

QWEN_GDN = "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn:QwenGatedDeltaNetAttention"
MAMBA2 = "vllm.model_executor.layers.mamba.mamba_mixer2:MambaMixer2"


def _qwen3_5(recipe: str, config: str, limits: str = "") -> Model:
    """A Qwen3.5 / 3.6 checkpoint: Qwen3_5ForConditionalGeneration or its MoE class (registry.py, the
    hybrid GDN model of qwen3_5.py), the GDN layer and draft of Qwen3-Next's entry. Its MTP draft
    (Qwen3_5MTP / Qwen3_5MoeMTP, config/speculative.py:988-1005) from mtp_num_hidden_layers 1. Its module
    imports torchvision, planned with kvproof's stand-in for it (stand_ins.py)."""
    return Model(
        recipe, config, GQA_BACKENDS, QWEN_GDN, "GDN_ATTN",  # GatedDeltaNetAttention.mamba_type, gdn/base.py:51
        _qwen3_5_layers, (False, True), GQA_LIMITS + "; its vision tower keeps no page" + limits,
        draft="mtp", draft_layers=_qwen3_5_mtp_layers, speculative=(0, 1, 2, 3),
        readers=(CAUSAL_CONV1D, GATED_DELTA_RULE, LMCACHE), state_init=_qwen_gdn_state,
        # the GDN prefill backend on sm_100 asks the CUDA runtime (qwen_gdn_linear_attn.py:250-254)
        cuda_runtime_at=("sm_100",))


def _nemotron_3(recipe: str, config: str, mtp: bool, limits: str = "") -> Model:
    """A Nemotron-3 checkpoint (NemotronHForCausalLM, nemotron_h.py): Nemotron-H's layers and state; with
    num_nextn_predict_layers 1, its MTP draft (NemotronHMTPModel, config/speculative.py:895-906), else ngram."""
    return Model(
        recipe, config, GQA_BACKENDS, MAMBA2, "MAMBA2",  # mamba_mixer2.py:1159
        _nemotron_h_layers, (False, True), GQA_LIMITS + limits,
        draft="mtp" if mtp else "ngram", draft_layers=_nemotron_h_mtp_layers if mtp else lambda _hf: [],
        speculative=(0, 1, 2, 3),
        readers=(CAUSAL_CONV1D, SELECTIVE_STATE_UPDATE, LMCACHE))


# The checkpoint's hf_quant_config.json (modelopt: its weights' quantization, kv_cache_quant_algo FP8) is
# a sibling of config.json that kvproof does not hold: vLLM reads config.json alone, so `auto` is the model
# dtype and the fp8 points stand for the checkpoint's own FP8 cache.
QUANTIZED = ("; planned from config.json alone: its hf_quant_config.json ({} weights, kv_cache_quant_algo FP8) "
             "is not read, so the checkpoint's FP8 cache is the fp8 points and `auto` the bf16 cache")
QUANTIZED_IN_CONFIG = "; its quantization_config (modelopt MIXED_PRECISION) is read as published"

# The hybrid models vLLM 0.33.0 serves whose published config.json kvproof holds (docs/engines/vllm.md,
# "Hybrid model classes"), planned in the default run.
def _lfm2(recipe: str) -> Model:
    """An Lfm2ForCausalLM checkpoint at every GQA backend, with ngram speculation up to 3 tokens."""
    return Model(
        recipe, f"vllm/models/{recipe}.json", GQA_BACKENDS,
        "vllm.model_executor.layers.mamba.short_conv:ShortConv", "SHORT_CONV",  # short_conv.py:360
        _lfm2_layers, (False, True),
        GQA_LIMITS + "; speculation by ngram only (Lfm2ForCausalLM has no MTP layers and no EAGLE interface, "
        "lfm2.py:520-522), up to 3 tokens",
        draft="ngram", speculative=(0, 1, 2, 3),
        # ShortConv's conv update (short_conv.py:313, :326)
        readers=(CAUSAL_CONV1D, LMCACHE), state_init=_short_conv_state)


MODELS.update({
    "jamba-v0.1": Model(
        "jamba-v0.1", "vllm/models/jamba-v0.1.json", GQA_BACKENDS,
        "vllm.model_executor.layers.mamba.mamba_mixer:MambaMixer", "MAMBA1",  # mamba_mixer.py:427
        _jamba_layers, (False, True),
        GQA_LIMITS + NGRAM.format("JambaForCausalLM has no MTP layers and no EAGLE interface, jamba.py:376")
        + "; Mamba-1's state takes no speculative rows (mamba1_state_shape has no num_spec, "
        "mamba_utils.py:171-183), so its pages are those of no speculation; the Mamba-1 prefill scan "
        "(selective_scan_fn, mamba_ssm.py:702, a CUDA op whose source kvproof did not read) is not recorded as a "
        "reader of the state pages",
        draft="ngram", speculative=(0, 1, 2, 3),
        # MambaMixer's conv update and selective state update (mamba_mixer.py:360, :377)
        readers=(CAUSAL_CONV1D, SELECTIVE_STATE_UPDATE, LMCACHE)),
    "lfm2-350m": _lfm2("lfm2-350m"),
    # its config.json gives layer_types whole (Lfm2Config derives it only when absent, configuration_lfm2.py:82)
    "lfm2.5-1.2b-base": _lfm2("lfm2.5-1.2b-base"),
    "nemotron-3-nano-30b-a3b-bf16": _nemotron_3(
        "nemotron-3-nano-30b-a3b-bf16", "vllm/models/nemotron-3-nano-30b-a3b-bf16.json", mtp=False,
        limits=NGRAM.format("the published config declares no num_nextn_predict_layers, NemotronHConfig: 0")
        + EAGLE.format("SupportsEagle3, nemotron_h.py:724-725")),
    "nemotron-3-super-120b-a12b-fp8": _nemotron_3(
        "nemotron-3-super-120b-a12b-fp8", "tokenspeed/models/nemotron-3-super-120b-a12b-fp8.json", mtp=True,
        limits=QUANTIZED.format("FP8")),
    "nemotron-3-ultra-550b-a55b-bf16": _nemotron_3(
        "nemotron-3-ultra-550b-a55b-bf16", "vllm/models/nemotron-3-ultra-550b-a55b-bf16.json", mtp=True),
    "nemotron-3.5-lightning-30b-a3b-nvfp4": _nemotron_3(
        "nemotron-3.5-lightning-30b-a3b-nvfp4", "vllm/models/nemotron-3.5-lightning-30b-a3b-nvfp4.json", mtp=True,
        limits=QUANTIZED.format("MIXED_PRECISION NVFP4")),
})

# Qwen3.5 / 3.6: vLLM imports Qwen3_5(Moe)ForConditionalGeneration's module, qwen3_5.py, which imports
# qwen3_vl.py and through it torchvision, which has no CPU wheel for torch 2.13.0+cpu: planned with kvproof's
# guarded torchvision stand-in (stand_ins.planning), which planning never uses.
MODELS.update({
    "qwen3.5-27b": _qwen3_5("qwen3.5-27b", "tokenspeed/models/qwen3.5-27b.json"),
    "qwen3.5-35b-a3b": _qwen3_5("qwen3.5-35b-a3b", "vllm/models/qwen3.5-35b-a3b.json"),
    "qwen3.5-122b-a10b": _qwen3_5("qwen3.5-122b-a10b", "vllm/models/qwen3.5-122b-a10b.json"),
    "qwen3.5-397b-a17b": _qwen3_5("qwen3.5-397b-a17b", "vllm/models/qwen3.5-397b-a17b.json"),
    "qwen3.6-27b-nvfp4": _qwen3_5("qwen3.6-27b-nvfp4", "vllm/models/qwen3.6-27b-nvfp4.json", QUANTIZED_IN_CONFIG),
    "qwen3.6-35b-a3b-nvfp4": _qwen3_5("qwen3.6-35b-a3b-nvfp4", "vllm/models/qwen3.6-35b-a3b-nvfp4.json",
                                      QUANTIZED_IN_CONFIG),
})


def _draft_layers(first: int) -> Callable[[Any], list[tuple[str, str]]]:
    """A draft checkpoint's layers: its decoder layers numbered on from the target's total hidden layers, each one
    attention layer of the draft's own geometry ("draft": planner._specs reads it from the draft's ModelConfig);
    EAGLE3's Eagle3LlamaForCausalLM (llama_eagle3.py:317-325, :202) and DFLASH's DFlashQwen3ForCausalLM
    (qwen3_dflash.py:747-752: start_layer_id is the target's get_total_num_hidden_layers; :471, each layer
    `layers.{layer_idx + start_layer_id}`) alike."""
    return lambda draft: [(f"model.layers.{first + i}.self_attn.attn", "draft")
                          for i in range(draft.num_hidden_layers)]


def _with_draft(target: str, method: str, draft_config: str, trained_for: str, tokens: tuple[int, ...]) -> Model:
    """`target` with a draft of its own checkpoint (SpeculativeConfig(method=`method`, model=the draft's folder)):
    the config SpecForge trains the target's draft with (models/SOURCES.md), the target at FLASH_ATTN on sm_90 (the
    draft's layers at its other backends there too: draft_candidates) and the speculative `tokens` (a drafted point
    plans no pipeline stages, _grid)."""
    model = MODELS[target]
    hf = json.loads(model.config_text())
    return replace(
        model, recipe=f"{target}-{method}", backends=(FLASH_ATTN,), draft_candidates=model.backends, draft=method,
        draft_config=draft_config,
        draft_layers=_draft_layers(hf.get("text_config", hf)["num_hidden_layers"]), speculative=tokens,
        cuda_runtime_at=(),
        limits=f"its {method.upper()} draft as SpecForge trains it for {trained_for} (engines/{draft_config}; no "
               f"draft checkpoint's own config.json found), the target at FLASH_ATTN on sm_90 only (the draft's "
               f"layers at its other sm_90 backends too, draft_backend=) and {tokens[0]} to {tokens[-1]} speculative "
               f"tokens: the target's other backends, stages and its undrafted points are {target}'s")


# vLLM drafts these classes with EAGLE3 and DFLASH, both of which read the target's hidden states at some of its layers
# (SupportsEagle3: qwen3_next.py:820; qwen3_vl.py:1946, the base of qwen3_5.py's). An EAGLE3 draft at 1 to 3 tokens; a
# DFLASH draft queries its anchor and K masked tokens as one block (v1/spec_decode/dflash.py:126, 1 + K a request), and
# the one SpecForge trains is trained at block_size 16: K up to 15 (vLLM itself accepts more).
MODELS.update({
    "qwen3-next-80b-a3b-eagle3": _with_draft("qwen3-next-80b-a3b", "eagle3",
                                             "vllm/models/qwen3-next-80b-a3b-eagle3.json",
                                             "Qwen/Qwen3-Next-80B-A3B-Instruct-FP8", (1, 2, 3)),
    "qwen3.5-35b-a3b-eagle3": _with_draft("qwen3.5-35b-a3b", "eagle3", "vllm/models/qwen3.5-35b-a3b-eagle3.json",
                                          "Qwen/Qwen3.5-35B-A3B", (1, 2, 3)),
    "qwen3.5-35b-a3b-dflash": _with_draft("qwen3.5-35b-a3b", "dflash", "vllm/models/qwen3.5-35b-a3b-dflash.json",
                                          "Qwen/Qwen3.5-35B-A3B", tuple(range(1, 16))),
})


# Kimi-K3 with its DSpark draft, a checkpoint of its own (Inferact/Kimi-K3-DSpark, whose config.json the tokenspeed
# adapter holds byte-exact): its five MLA layers at the backend vLLM selects for their non-causal attention
# (kimi_k3_dspark.py), in Model Runner V2 (V1 refuses the method). Its config names no block size, so vLLM takes the
# tokens from --speculative-config (config/speculative.py:1592-1599, else :1614-1617 raises); 1 to 7, the most a Kimi-K3
# DSpark draft of this shape proposes a step by lightseekorg/kimi-k3-dspark's card (five MLA layers, five target
# taps; not known to be the same weights). Drafted points plan no pipeline stages (_grid).
MODELS["kimi-k3-dspark"] = replace(
    MODELS["kimi-k3"], recipe="kimi-k3-dspark", draft="dspark", draft_config="tokenspeed/models/kimi-k3-dspark.json",
    draft_layers=kimi_k3_dspark.draft_layers(json.loads(MODELS["kimi-k3"].config_text())["text_config"][
        "num_hidden_layers"]),
    speculative=tuple(range(1, 8)), built=kimi_k3_dspark.built,
    limits=MLA_LIMITS + "; its DSpark draft (Inferact/Kimi-K3-DSpark) at 1 to 7 speculative tokens, each of its five "
    "MLA layers at the backend vLLM selects for non-causal attention (TRITON_MLA on sm_90, FLASHINFER_MLA on sm_100), "
    "as Model Runner V2 builds it (V1 refuses DSpark); its undrafted and ngram points are kimi-k3's")


# A family's members at FLASH_ATTN with pipeline stages at tp 1, pp 2 only: the members multiply the points, and
# which stage lacks an attention layer depends on pp and the layer pattern alone (pp 2 shows it for a pattern
# whose one attention layer is the last).
FAMILY_FLASH_ATTN = replace(FLASH_ATTN, all_stages=False)


def _mamba2_layer_state(mixer: Callable[[Any], dict[str, int]]) -> Callable[[Any], dict[str, Any]]:
    """The state shape each MambaMixer2 layer of a model computes of itself: vLLM's mamba2_state_shape of
    its constructor's inputs (get_state_shape, mamba_mixer2.py:1134-1145 in 0.33.0, :1168-1179 in 0.31.0),
    which the model's decoder layer passes from the config (`mixer`), with the groups its constructor widens
    to the tp (mamba_mixer2.py:333-341) and its own speculative tokens (vllm_config.num_speculative_tokens,
    :555). Not the model class's get_mamba_state_shape_from_config, which the hybrid alignment pads by: the
    cache holds the layers' states, and the two disagree where a class drops num_spec (vllm#57721)."""
    def state(vllm_config: Any) -> dict[str, Any]:
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

        if getattr(vllm_config.cache_config, "use_replayssm", False):
            raise StubUsed("--use-replayssm appends rings to MambaMixer2's state (mamba_mixer2.py:1146); kvproof "
                           "does not model them")
        hf, tp = vllm_config.model_config.hf_config, vllm_config.parallel_config.tensor_parallel_size
        inputs = mixer(hf)
        groups = inputs.pop("n_groups")
        if groups % tp:
            groups += MambaStateShapeCalculator.extra_groups_for_head_shards(groups, tp)
        shape = tuple(MambaStateShapeCalculator.mamba2_state_shape(
            tp_world_size=tp, n_groups=groups, num_spec=vllm_config.num_speculative_tokens, **inputs))
        return {"get_state_shape": lambda: shape}
    return state


def _granite_mixer(hf: Any) -> dict[str, int]:
    """What GraniteMoeHybridMambaDecoderLayer hands its MambaMixer2 (granitemoehybrid.py:73-80)."""
    return {"intermediate_size": hf.mamba_expand * hf.hidden_size, "n_groups": hf.mamba_n_groups,
            "num_heads": hf.mamba_n_heads, "head_dim": hf.mamba_d_head, "state_size": hf.mamba_d_state,
            "conv_kernel": hf.mamba_d_conv}


# The ngram drafter keeps no page in the cache: SpeculativeConfig makes the target's config the draft's
# (config/speculative.py:1329) and its proposer builds no layer. The only drafter of a class with no MTP
# layers and no EAGLE interface.
def family_clause(module: str, assumed: str = "") -> str:
    """A member's family_limits: where its family is written down, and what it assumes."""
    return f"planned over a stated family, not at a checkpoint (engines/vllm/{module}.py)" + (
        f", {assumed}" if assumed else "")


FAMILY_LIMITS = ("at FLASH_ATTN on sm_90 only, {stages}, up to 2 speculative tokens: every backend, stage and token "
                 "multiplies each member's points, and the other backends' pages, deeper pipelines and 3 tokens are "
                 "planned at the published checkpoints; speculation by ngram only (no MTP or EAGLE interface)")


def _family_member(member: families.Member, module: Any, mixer: Callable[[Any], dict[str, int]],
                   pipeline: bool = True) -> Model:
    """A member of a stated family of a Mamba2 hybrid class that speculates by ngram only, planned at
    FLASH_ATTN with its layers' own state shapes (`module`: the family's layers and their names)."""
    stages = "pipeline stages at tp 1, pp 2 only" if pipeline else "no pipeline stages (the class is not SupportsPP)"
    name = module.__name__.rsplit(".", 1)[1]
    return Model(
        member.name, f"family {member.family.name}, member {member.index}", (FAMILY_FLASH_ATTN,), MAMBA2,
        "MAMBA2",  # mamba_mixer2.py:1159
        module.layers, (False, True), FAMILY_LIMITS.format(stages=stages),
        draft="ngram", speculative=(0, 1, 2),
        # MambaMixer2's conv update and selective state update (mamba_mixer2.py)
        readers=(CAUSAL_CONV1D, SELECTIVE_STATE_UPDATE, LMCACHE), state_init=_mamba2_layer_state(mixer), member=member,
        hidden_layer=getattr(module, "hidden_layer", lambda name, _hf: _layer_number(name)),
        pipeline=lambda _config: pipeline, family_limits=family_clause(name))


# A stated family's name -> the family and how a member is planned: MODELS holds its default members (what the
# default run plans), model() any member by name (a sweep plans the whole family)
FAMILIES: dict[str, tuple[families.Family, Callable[[families.Member], Model]]] = {}


def _stated(family: families.Family, build: Callable[[families.Member], Model]) -> None:
    FAMILIES[family.name] = (family, build)
    MODELS.update({m.name: build(m) for m in family.members()})


def model(name: str) -> Model | None:
    """The model a recipe name names: one of the default run's, or a member of a stated family past its
    default list (`granite-4.0-h-tiny-family-3`); None for no model kvproof plans."""
    if name in MODELS:
        return MODELS[name]
    for family, build in FAMILIES.values():
        found = next((m for m in family.members(everything=True) if m.name == name), None)
        if found is not None:
            return build(found)
    return None


# Granite-4.0-H, Falcon-H1 and Zamba2: no published config.json found whole, each planned over its family's
# members. GraniteMoeHybridForCausalLM (granitemoehybrid.py:582), FalconH1ForCausalLM (falcon_h1.py:495) and
# Zamba2ForCausalLM (zamba2.py:833) have neither SupportsMTP nor SupportsEagle among their bases; Zamba2 has no
# SupportsPP either.
_stated(granite.FAMILY, lambda m: _family_member(m, granite, _granite_mixer))
_stated(falcon_h1.FAMILY, lambda m: _family_member(m, falcon_h1, falcon_h1.mixer))
_stated(zamba2.FAMILY, lambda m: _family_member(m, zamba2, zamba2.mixer, pipeline=False))


OLMO_GDN = "vllm.model_executor.layers.mamba.gdn.olmo_gdn_linear_attn:OlmoHybridGatedDeltaNetAttention"
# OLMo Hybrid: no config.json tied to a hub revision found, planned over its family's members at FLASH_ATTN on
# sm_90 and pp 2 at tp 1, as the Mamba2 families are, but with ngram up to 3 tokens: no published checkpoint
# of this class plans 3, and at 2 a class-level state shape that dropped the speculative tokens (vllm#57721's
# kind) still boots in the page's 53,760 B of slack, where 3 tokens do not. OlmoHybridForCausalLM
# (olmo_hybrid.py:382-384) is SupportsPP and has neither SupportsMTP nor SupportsEagle among its bases.
OLMO_LIMITS = ("at FLASH_ATTN on sm_90 only, pipeline stages at tp 1, pp 2 only, up to 3 speculative tokens: every "
               "backend and stage multiplies each member's points, and the other backends' pages and deeper pipelines "
               "are planned at the published checkpoints; speculation by ngram only (no MTP or EAGLE interface)")
_stated(olmo_hybrid.FAMILY, lambda m: Model(
    m.name, f"family {m.family.name}, member {m.index}", (FAMILY_FLASH_ATTN,), OLMO_GDN,
    "GDN_ATTN",  # GatedDeltaNetAttention.mamba_type, gdn/base.py:51
    olmo_hybrid.layers, (False, True), OLMO_LIMITS,
    draft="ngram", speculative=(0, 1, 2, 3),
    # the GDN layer's conv updates and recurrent kernel (olmo_gdn_linear_attn.py:366, :397, :443, :486)
    # the layer exports no prefill checkpoints (MambaBase's get_prefill_checkpoint_alignment, abstract.py:65-70)
    # and plans with MambaBase's get_kv_cache_spec (abstract.py:72): its state shape is all its constructor gives
    readers=(CAUSAL_CONV1D, GATED_DELTA_RULE, LMCACHE), state_init=_gdn_layer_state, member=m,
    family_limits=family_clause("olmo_hybrid")))


# LFM2-MoE: no published config.json found whole, planned over its family's one member at LFM2-350M's domain
# (every backend, stage and ngram token up to 3: one member multiplies nothing). Lfm2MoeForCausalLM
# (lfm2_moe.py:500-508) is SupportsPP, with neither SupportsMTP nor SupportsEagle among its bases.
_stated(lfm2_moe.FAMILY, lambda m: Model(
    m.name, f"family {m.family.name}, member {m.index}", GQA_BACKENDS,
    "vllm.model_executor.layers.mamba.short_conv:ShortConv", "SHORT_CONV",  # short_conv.py:360
    lfm2_moe.layers, (False, True),
    GQA_LIMITS + "; speculation by ngram only (Lfm2MoeForCausalLM has no MTP layers and no EAGLE interface, "
    "lfm2_moe.py:500-508), up to 3 tokens",
    draft="ngram", speculative=(0, 1, 2, 3),
    # ShortConv's conv update (short_conv.py:313, :326)
    readers=(CAUSAL_CONV1D, LMCACHE), state_init=partial(_short_conv_state, width=lfm2_moe.conv_width), member=m,
    family_limits=family_clause("lfm2_moe")))


def _minicpm_v46(member: families.Member) -> Model:
    """Qwen3.5's entry (its layers, GDN layer and backends: the class's language model is Qwen3_5ForCausalLM,
    minicpmv4_6.py:1252), speculating by ngram: the class drops the checkpoint's MTP weights
    (minicpmv4_6.py:1178) and vLLM has no MTP draft for minicpmv4_6."""
    return replace(
        _qwen3_5(member.name, f"family {member.family.name}, member {member.index}"),
        limits=GQA_LIMITS + "; its vision tower keeps no page; speculation by ngram only, up to 3 tokens (the class "
        "drops the MTP weights, minicpmv4_6.py:1178, and vLLM has no MTP draft for minicpmv4_6; EAGLE3 drafts with a "
        "checkpoint of its own, not modelled)",
        draft="ngram", draft_layers=lambda _hf: [], member=member, family_limits=family_clause("minicpm_v46"))


# MiniCPM-V 4.6: its one config copy names no dtype, planned over a family of one member (minicpm_v46.py) at
# Qwen3.5's domain. MiniCPMV4_6ForConditionalGeneration is SupportsPP (minicpmv4_6.py:1150-1158).
_stated(minicpm_v46.FAMILY, _minicpm_v46)


def _lfm2_vl(member: families.Member) -> Model:
    """LFM2's entry (its ShortConv layer, backends and ngram speculation), its layers under the multimodal
    class's `language` prefix, for a member of kvproof's LFM2-VL family (engines/vllm/lfm2_vl.py)."""
    return replace(
        _lfm2(member.name), config=f"family {member.family.name}, member {member.index}", layers=_lfm2_vl_layers,
        limits=GQA_LIMITS + "; its vision tower keeps no page; speculation by ngram only "
        "(Lfm2VLForConditionalGeneration has no MTP layers and no EAGLE interface, "
        "vllm/model_executor/models/lfm2_vl.py:616-623), up to 3 tokens",
        member=member, family_limits=family_clause("lfm2_vl"))


# LFM2-VL: its one config copy is the remote-code revision, planned over a family of one member at LFM2-350M's
# domain, whose text model it is. vLLM's Lfm2VLForConditionalGeneration is SupportsPP, with neither SupportsMTP nor
# SupportsEagle among its bases.
_stated(lfm2_vl.FAMILY, _lfm2_vl)


# GLM-5.3-Flash: no published config.json, planned over its family's members (glm53_flash.py): KDA states, the
# sparse MLA layers' latent pages, and each one's indexer K cache and tail ring (their own specs and backends).
# Glm5NextForConditionalGeneration is SupportsPP (Glm4vForConditionalGeneration, glm4_1v.py:1736-1743); its MTP
# draft is Glm5NextMTP (config/speculative.py:1146-1157).
_stated(glm53_flash.FAMILY, lambda m: Model(
    m.name, f"family {m.family.name}, member {m.index}", (glm53_flash.FLASHINFER_MLA_SPARSE_SM90,),
    "vllm.models.glm5next.common.kda:Glm5NextLinearAttention",
    "GDN_ATTN",  # GatedDeltaNetAttention.mamba_type, gdn/base.py:51 (Glm5NextLinearAttention keeps it)
    glm53_flash.layers, (False, True), glm53_flash.GLM_LIMITS,
    draft="mtp", draft_layers=glm53_flash.draft_layers, speculative=(0, 1, 2),
    # Glm5NextLinearAttention's conv update and recurrent KDA kernel (glm5next/common/kda.py:607, :673)
    readers=(CAUSAL_CONV1D, glm53_flash.GLM_FUSED_RECURRENT_KDA, LMCACHE), state_init=glm53_flash.kda_state, member=m,
    built=glm53_flash.built, draft_keeps_cache_config=True,
    family_limits=family_clause("glm53_flash", glm53_flash.ASSUMED)))


# Qwen4-Exp (Qwen/Qwen3.8-Flash-Next): no published config.json, planned over its family's members (qwen4_exp.py):
# GDN states, the QSA layers' pages and each one's two side caches, and, in a member with PLE, each PLE layer's
# short-conv state (its own class and backend). Qwen4ExpForConditionalGeneration is SupportsPP (Qwen3.5's VL
# class, its base), but vLLM refuses pp > 1 with PLE (model_executor/models/config.py:1041-1047); its MTP draft
# is Qwen4ExpMTP (config/speculative.py:915-931).
_stated(qwen4_exp.FAMILY, lambda m: Model(
    m.name, f"family {m.family.name}, member {m.index}", (qwen4_exp.QSA_SM90, qwen4_exp.QSA_SM100), QWEN_GDN,
    "GDN_ATTN",  # GatedDeltaNetAttention.mamba_type, gdn/base.py:51
    qwen4_exp.layers, (False, True), qwen4_exp.LIMITS,
    draft="mtp", draft_layers=qwen4_exp.draft_layers, speculative=(0, 1, 2, 3),
    readers=(CAUSAL_CONV1D, GATED_DELTA_RULE, LMCACHE), state_init=_qwen_gdn_state, cuda_runtime_at=("sm_100",),
    member=m, pipeline=lambda config: not qwen4_exp.has_ple(config), built=qwen4_exp.built,
    draft_keeps_cache_config=True, draft_own_backend="the MTP QSA layer's own backend, which the layer names itself "
    "(models/qwen4_exp/nvidia/qsa.py:475), pinned or not", family_limits=family_clause("qwen4_exp", qwen4_exp.ASSUMED)))


# Nemotron-3-Nano-Omni: no config.json found, planned over its family's one member (nemotron_omni.py): Mamba2 states
# and GQA pages, at FLASH_ATTN on sm_90 as a family's members are. NemotronH_Nano_VL_V2, the class of the Omni names,
# is not SupportsPP (nano_nemotron_vl.py:928-936); vLLM detects MTP layers for the Super Omni and Omni names only
# (config/speculative.py:888-893), and the class's EAGLE3 drafts are checkpoints of their own (none found): ngram.
_stated(nemotron_omni.FAMILY, lambda m: Model(
    m.name, f"family {m.family.name}, member {m.index}", (FAMILY_FLASH_ATTN,), MAMBA2,
    "MAMBA2",  # mamba_mixer2.py:1159
    _nemotron_omni_layers, (False, True),
    "at FLASH_ATTN on sm_90 only, no pipeline stages (the class is not SupportsPP), speculation by ngram up to 3 "
    "tokens (EAGLE3 drafts with a checkpoint of its own, none found, not modelled); --mamba-ssm-cache-dtype auto, as "
    "vLLM's config hooks leave it for the class's architecture",
    draft="ngram", speculative=(0, 1, 2, 3),
    readers=(CAUSAL_CONV1D, SELECTIVE_STATE_UPDATE, LMCACHE), member=m, pipeline=lambda _config: False,
    family_limits=family_clause("nemotron_omni")))


# Bailing V3 (Ling 3.0): no published config.json, planned over its family's members (bailing_v3.py): KDA states and
# MLA pages, at the first MLA backends sm_90 selects (FLASH_ATTN_MLA at a 16-bit KV cache, FLASHMLA the first that
# takes fp8) and pp 2 at tp 1, as a family's members are. BailingMoeV3ForCausalLM is SupportsPP (bailing_moe_v3.py:
# 1414); its MTP draft is BailingMoeV3MTPModel (config/speculative.py:946-970), and a member without MTP layers
# (Ling-3.0-tiny's) speculates by ngram.
BAILING_LIMITS = ("at FLASH_ATTN_MLA and FLASHMLA on sm_90 only (FLASHINFER_MLA and TRITON_MLA are planned at the "
                  "published MLA checkpoints), pipeline stages at tp 1, pp 2 only (each member's points multiply as "
                  "a family's do), {draft} up to 3 speculative tokens; FLASH_ATTN_MLA plans with guarded stand-ins "
                  "for the GPU entry points its module binds (engines/vllm/stand_ins.py); {launch}")
# the launch each text class is planned at: vLLM reads a `bailing_hybrid` file through transformers' class
HYBRID_LAUNCH = ("planned at vLLM's default launch, whose {heads} heads are the head_dim transformers' "
                 "BailingHybridConfig leaves (qk_rope_head_dim); the launch vLLM's own recipes give, with "
                 "--trust-remote-code, reads the checkpoint's own config class, not found, and is not planned, nor is "
                 "--hf-overrides")


def _bailing(member: families.Member, module: Any, state_layer: str, state_type: str, launch: str,
             readers: tuple[Reader, ...], mtp_key: str = "num_nextn_predict_layers", **kept: Any) -> Model:
    """A member of a Bailing class's family (`module`: its layers, draft layers and what its state layers keep), at
    the MLA backends above, with its own MTP draft where it has MTP layers (`mtp_key`) and ngram where it has none;
    `launch` says what launch it is planned at."""
    mtp = member.values[mtp_key] > 0
    return Model(
        member.name, f"family {member.family.name}, member {member.index}",
        tuple(replace(backend, all_stages=False) for backend in (FLASH_ATTN_MLA, FLASHMLA)), state_layer, state_type,
        module.layers, (False, True),
        BAILING_LIMITS.format(draft="its MTP draft" if mtp else "ngram speculation (no MTP layer)", launch=launch),
        draft="mtp" if mtp else "ngram", draft_layers=module.draft_layers if mtp else lambda _hf: [],
        speculative=(0, 1, 2, 3), readers=readers,
        member=member, family_limits=family_clause(module.__name__.rsplit(".", 1)[1]), **kept)


# its two models' families: Ling-3.0-tiny's and Ling-3.0-flash's
_bailing_v3 = partial(
    _bailing, module=bailing_v3,
    state_layer="vllm.model_executor.models.bailing_moe_v3:BailingMoeV3KimiDeltaAttention",
    state_type="GDN_ATTN",  # BailingMoeV3KimiDeltaAttention.mamba_type, bailing_moe_v3.py:638-640
    launch=HYBRID_LAUNCH.format(heads="KDA"),
    # the KDA layer's conv updates and recurrent kernel (bailing_moe_v3.py:948-1045, :1125)
    readers=(CAUSAL_CONV1D, bailing_v3.FUSED_RECURRENT_KDA, LMCACHE), state_init=bailing_v3.kda_state)
_stated(bailing_v3.FAMILY, _bailing_v3)
_stated(bailing_v3.FLASH_FAMILY, _bailing_v3)
# Bailing V3 VL (Ling-3.0-flash-VL): the text class's layers under its language model, read through vLLM's own config
# class. BailingMoeV3VLForConditionalGeneration is SupportsPP (bailing_moe_v3_vl.py:292); its MTP draft is
# BailingMoeV3MTPModel of the text config (config/speculative.py:938-970)
_stated(bailing_v3_vl.FAMILY, partial(
    _bailing_v3, module=bailing_v3_vl, mtp_key=bailing_v3_vl.MTP_LAYERS, state_init=bailing_v3_vl.kda_state,
    launch="read through vLLM's own BailingMoeV3VLConfig, which keeps the file's head_dim (configs/"
           "bailing_moe_v3_vl.py:170); a context past the file's 131,072 (rope scaling) is not planned"))


# Bailing V2.5 (Ling 2.5 and 2.6): no published config.json, planned over two families' members (bailing_v25.py):
# linear-attention states and MLA pages, at Bailing V3's backends and stages. BailingMoeV25ForCausalLM is SupportsPP
# (bailing_moe_linear.py:693); its MTP draft is BailingMoeV25MTPModel (config/speculative.py:951-963), and a member
# without MTP layers speculates by ngram.
_bailing_v25 = partial(
    _bailing, module=bailing_v25,
    state_layer="vllm.model_executor.layers.mamba.linear.bailing_linear_attn:BailingMoELinearAttention",
    state_type="LINEAR",  # LinearAttention.mamba_type, layers/mamba/linear/base.py:51-53
    launch=HYBRID_LAUNCH.format(heads="linear-attention"),
    readers=(bailing_v25.LIGHTNING_DECODE, bailing_v25.BAILING_DECODE_SPEC, LMCACHE),
    state_init=bailing_v25.linear_state, tp_divides=bailing_v25.norm_groups)
_stated(bailing_v25.FAMILY, _bailing_v25)
_stated(bailing_v25.FLASH_FAMILY, _bailing_v25)


def at_config(model: Model, user_config: UserConfig) -> Model:
    """`model` planning a user's config.json (--config FILE) in place of its own: its points, backends and
    reading of the layers, the file's numbers. The file must name the architecture the model's own config
    does (the class whose layers, state and drafts the model describes), and hold the head counts its tp
    values are read from; the rest vLLM reads as it reads any checkpoint's file."""
    if model.draft_config:
        raise EngineError(f"--config {user_config.path}: {model.recipe} is a checkpoint with the "
                          f"{str(model.draft).upper()} draft trained for it, which yours is not; plan yours with the "
                          "target's own recipe")
    own, path = json.loads(model.config_text()).get("architectures"), user_config.path
    if user_config.config.get("architectures") != own:
        raise EngineError(f"--config {path}: architectures {user_config.config.get('architectures')} is not "
                          f"{model.recipe}'s {own}; name a recipe of that class with --recipe")
    try:
        tps = model.tps(user_config.config)
        model.pipeline(user_config.config)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise EngineError(f"--config {path}: {model.recipe}'s tp values and stages are read from keys the file "
                          f"lacks or holds otherwise ({type(err).__name__}: {err})") from None
    if not tps:
        raise EngineError(f"--config {path}: no tp divides its head counts (each must be a positive integer)")
    return replace(model, member=None, user_config=user_config)
