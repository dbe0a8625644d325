"""The Kimi-K3 cache recipe: which groups, fields and planes a hybrid MLA + KDA model needs, and
the packing policies an engine may choose between.

MLA layers keep one latent page of `granularity` tokens; KDA layers keep one fixed-size state per
request. Each MLA layer gets a plane of its own; KDA layers are split into state groups whose
layers reuse those planes, so a parent owned by a state group holds K_lin requests' states.

Draft layers of a speculative decoder (DSpark, MTP) continue the layer numbering, join the
full-attention group with its packing and add one plane each; state groups stay on the target
planes. With any draft the engine checks no padding (docs/contract.md#draft-layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kvproof.impl import faults
from kvproof.impl.packer import FieldSpec, GroupSpec, Plan, PlanError, cdiv, field_offsets, pack
from kvproof.spec.catalog import CACHE_DTYPES, ModelGeometry

faults.declare({
    "split_count_floor_plus_one": "the state-group count is n_kda // n_mla + 1, not ceil(n_kda / n_mla): right for K3 "
    "(69/24) and Kimi-Linear (20/7), one group too many whenever n_mla divides n_kda",
    "search_skips_first": "the search policy starts one past ceil(state / page), skipping the first candidate",
    "draft_own_group": "draft layers get a group and packing of their own instead of joining full_attention",
    "draft_shares_target_plane": "draft layer j lands on target plane slot.j: draft planes left out of the count",
    "draft_takes_target_dtype": "draft layers silently take the target's cache dtype instead of the draft's",
})

POLICIES = ("search", "ceil", "pinned12")
CACHE_STORAGE = {"fp8": "uint8", "bf16": "bfloat16"}  # fp8 e4m3 is stored as raw bytes
GRANULARITY = 128  # tokens per MLA page
ALIGNMENT = 256
MAX_PADDING = Fraction(1, 4)
# TMA descriptors need 16-byte strides, so every page stride is a multiple of 16.
STRIDE_ALIGNMENT = 16
# `search` gives up past this packing (the synthesizer searches the same range).
SEARCH_LIMIT = 256
FULL = "full_attention"
# tokenspeed forces a K3 DSpark draft's cache to bf16; MTP drafts follow the target's dtype.
DRAFT_DTYPE = "bf16"
DRAFT_LIMIT = 64


@dataclass(frozen=True)
class RecipePlan:
    model: ModelGeometry
    tp: int
    dtype: str
    policy: str
    plan: Plan
    state_bytes: int  # one KDA layer's state per request, offsets rounded (0 for MLA-only)
    page_bytes: int  # one target MLA page: granularity x latent_dim x element size
    drafts: int = 0
    draft_dtype: str = DRAFT_DTYPE


def split_sizes(n_kda: int, n_mla: int) -> list[int]:
    """The fewest state groups that keep each within the MLA plane count, sizes as even as
    possible, larger groups first (K3: 69 KDA layers over 24 planes -> 23, 23, 23)."""
    n = n_kda // n_mla + 1 if faults.active("split_count_floor_plus_one") else cdiv(n_kda, n_mla)
    base, extra = divmod(n_kda, n)
    return [base + 1] * extra + [base] * (n - extra)


def draft_layers(model: ModelGeometry, drafts: int) -> tuple[int, ...]:
    """Config-style (1-based) numbers of the draft layers: they continue the target's."""
    return tuple(range(model.num_layers + 1, model.num_layers + 1 + drafts))


def recipe_groups(model: ModelGeometry, tp: int, dtype: str, drafts: int = 0,
                  draft_dtype: str = DRAFT_DTYPE) -> list[GroupSpec]:
    model.check_tp(tp)
    for what, value in (("cache dtype", dtype), ("draft cache dtype", draft_dtype)):
        if value not in CACHE_DTYPES:
            raise PlanError(f"unknown {what} {value!r}; choose one of {', '.join(CACHE_DTYPES)}")
    if not 0 <= drafts <= DRAFT_LIMIT:
        raise PlanError(f"--drafts {drafts} outside 0..{DRAFT_LIMIT}")
    latents = [(layer, dtype) for layer in model.mla_layers]
    draft = dtype if faults.active("draft_takes_target_dtype") else draft_dtype
    latents += [(layer, draft) for layer in draft_layers(model, drafts)]
    # A draft plane follows the target's (slot.{n_mla + j}); the fault forgets to count them.
    shift = len(model.mla_layers) if faults.active("draft_shares_target_plane") else 0
    full = GroupSpec(FULL, tuple(
        FieldSpec(f"layer.{layer}.latent_kv", f"slot.{n - shift if n >= shift else n}",
                  (GRANULARITY, 1, model.latent_dim), CACHE_STORAGE[cache], exact_stride=True,
                  stride_alignment=STRIDE_ALIGNMENT)
        for n, (layer, cache) in enumerate(latents)
    ))
    if faults.active("draft_own_group") and drafts:
        cut = len(model.mla_layers)
        full, drafted = GroupSpec(FULL, full.fields[:cut]), GroupSpec("draft_attention", full.fields[cut:])
        groups = [full, drafted]
    else:
        groups = [full]
    layers = list(model.kda_layers)
    for i, size in enumerate(split_sizes(len(layers), len(model.mla_layers)) if layers else []):
        chunk, layers = layers[:size], layers[size:]
        groups.append(GroupSpec(f"linear_attention_{i}", tuple(
            f for n, layer in enumerate(chunk) for f in kda_fields(model, tp, layer, f"slot.{n}")
        )))
    return groups


def kda_fields(model: ModelGeometry, tp: int, layer: int, plane: str) -> tuple[FieldSpec, FieldSpec]:
    heads = model.kda_heads // tp
    return (
        FieldSpec(f"layer.{layer}.conv_state", plane, (3 * heads * model.kda_head_dim, model.conv_kernel - 1),
                  "bfloat16", stride_alignment=STRIDE_ALIGNMENT),
        FieldSpec(f"layer.{layer}.recurrent_state", plane, (heads, model.kda_head_dim, model.kda_head_dim),
                  "float32", stride_alignment=STRIDE_ALIGNMENT),
    )


def pack_k(groups: list[GroupSpec], k_mla: int, state: int, page: int, drafts: int = 0) -> Plan:
    """The recipe's plan for a given K_mla: state groups take K_lin = max(1, K_mla x page // state).
    With draft layers the engine's bound is infinite: the plan checks no padding (None)."""
    k_lin = max(1, k_mla * page // state) if state else 0
    pins = {g.id: (k_mla if g.id == FULL else k_lin) for g in groups}
    bound = None if drafts else MAX_PADDING
    return pack(groups, granularity=GRANULARITY, packings=pins, alignment=ALIGNMENT, max_padding=bound)


def plan_model(model: ModelGeometry, tp: int, dtype: str, policy: str = "search", drafts: int = 0,
               draft_dtype: str = DRAFT_DTYPE) -> RecipePlan:
    if policy not in POLICIES:
        raise PlanError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    groups = recipe_groups(model, tp, dtype, drafts, draft_dtype)
    page = groups[0].fields[0].payload_bytes
    state = field_offsets(kda_fields(model, tp, 0, "slot.0")).end_bytes if model.hybrid else 0
    ceil_k = cdiv(state, page)
    if not model.hybrid:
        # One group, nothing to share a plane with: a page per plane is exact and unpadded.
        plan = pack_k(groups, 1, state, page, drafts)
    elif policy == "pinned12":
        plan = pack_k(groups, 12, state, page, drafts)
    elif policy == "ceil":
        plan = pack_k(groups, ceil_k, state, page, drafts)
    else:
        start = ceil_k + (1 if faults.active("search_skips_first") else 0)
        if start > SEARCH_LIMIT:
            raise PlanError(
                f"policy search covers K_mla up to {SEARCH_LIMIT}, but {model.name} tp={tp} {dtype} needs "
                f"ceil(state / page) = {ceil_k}; try --policy ceil"
            )
        # When no packing in range is accepted, the first candidate shows why (a rejected plan).
        first = pack_k(groups, start, state, page, drafts)
        candidates = (pack_k(groups, k, state, page, drafts) for k in range(start + 1, SEARCH_LIMIT + 1))
        plan = first if first.accepted else next((p for p in candidates if p.accepted), first)
    return RecipePlan(model, tp, dtype, policy, plan, state, page, drafts, draft_dtype)
