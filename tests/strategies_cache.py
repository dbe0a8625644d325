"""Cache layouts for the stateful arena test: small synthetic hybrid models and Kimi-K3 itself.

A layout is only (model, tp, dtype, policy, parents): the machine plans it when it starts, so a
seeded packer fault active at that moment reaches the plan it runs against.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import assume, reject
from hypothesis import strategies as st

from kvproof.impl.packer import Plan, PlanError
from kvproof.impl.recipe import FULL, POLICIES, plan_model
from kvproof.spec.catalog import ModelGeometry, load_model, parse_config

# State pages per request and state group, as the recipe's capacity counts them (2R): the live
# state and the one being written.
STATE_SLOTS = 2
# Keeps one synthetic example's arena small enough to check every byte after every step.
MAX_ARENA_BYTES = 4 << 20


@dataclass(frozen=True)
class Layout:
    model: ModelGeometry
    tp: int
    dtype: str
    policy: str
    num_parents: int


@st.composite
def hybrid_configs(draw) -> dict:
    """An HF-style config.json dict that obeys the catalog rules: 1-3 MLA layers and m times as
    many KDA layers in a random order (so every state group fills the MLA planes, as in real
    hybrids; fewer KDA layers pad any plan past the bound), or no linear_attn_config at all;
    head counts divisible by tp 1, 2 or 4; small dims."""
    tp = draw(st.sampled_from([t for t in (1, 2, 4)]))
    n_mla = draw(st.integers(1, 3))
    n_kda = n_mla * draw(st.integers(1, 3)) if draw(st.integers(0, 9)) else 0
    num_layers = n_mla + n_kda
    cfg: dict = {
        "num_hidden_layers": num_layers,
        "num_attention_heads": tp * draw(st.integers(1, 4)),
        # Small latent pages next to large states make K_mla > 1, so parents hold several pages.
        "kv_lora_rank": draw(st.integers(1, 48)),
        "qk_rope_head_dim": draw(st.integers(1, 16)),
    }
    if n_kda:
        order = draw(st.permutations(range(1, num_layers + 1)))
        cfg["linear_attn_config"] = {
            "kda_layers": sorted(order[n_mla:]),
            "full_attn_layers": sorted(order[:n_mla]),
            "num_heads": tp * draw(st.integers(1, 4)),
            "head_dim": draw(st.integers(1, 24)),
            "short_conv_kernel_size": draw(st.integers(2, 4)),
        }
    return {"text_config": cfg} if draw(st.booleans()) else cfg


def parents_for_one_request(plan: Plan) -> int:
    """Parents the smallest request takes from an empty arena: one latent page, STATE_SLOTS
    pages of each state group."""
    return sum(1 if g.id == FULL else -(-STATE_SLOTS // g.packing) for g in plan.groups)


def accepted_plan(model: ModelGeometry, tp: int, dtype: str, policy: str) -> Plan | None:
    """The policy's plan, or None when the policy rejects the layout or (search) refuses it:
    either way no engine would boot it, so no allocator ever sees it."""
    try:
        plan = plan_model(model, tp, dtype, policy).plan
    except PlanError:
        return None
    return plan if plan.accepted else None


@st.composite
def synthetic_layouts(draw) -> Layout:
    """A synthetic hybrid model at a tp it allows, any dtype, any policy that accepts it, and
    from one parent fewer than a request needs to a few more."""
    model = parse_config(draw(hybrid_configs()), "synthetic")
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if t in model.tp_domain]))
    dtype = draw(st.sampled_from(["fp8", "bf16"]))
    policy = draw(st.sampled_from(POLICIES))
    plan = accepted_plan(model, tp, dtype, policy)
    if plan is None:
        reject()
    need = parents_for_one_request(plan)
    assume((need + 1) * plan.parent_bytes <= MAX_ARENA_BYTES)
    most = min(need + 5, MAX_ARENA_BYTES // plan.parent_bytes - 1)
    return Layout(model, tp, dtype, policy, draw(st.integers(max(1, need - 1), most)))


# Kimi-K3 at high tp, where a parent is a few MB, with enough parents for a request (one latent
# parent and one per state group) and some contention: each policy that accepts the layout,
# including the published bf16 tp 32 search packing 3 / 2 and the legacy pinned12 at tp 32.
K3_CASES = (  # tp, dtype, policy, parents (parent bytes, packing full / linear)
    (96, "fp8", "search", 8),  # 1.8 MB, 1 / 1
    (96, "bf16", "ceil", 6),  # 3.5 MB, 1 / 2
    (48, "fp8", "ceil", 8),  # 3.5 MB, 2 / 1
    (32, "bf16", "search", 5),  # 10.6 MB, 3 / 2
    (32, "fp8", "pinned12", 4),  # 21.2 MB, 12 / 4
)


def k3_layouts() -> st.SearchStrategy[Layout]:
    k3 = load_model("kimi-k3")
    return st.sampled_from(K3_CASES).map(lambda case: Layout(k3, *case))
