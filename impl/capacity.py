"""How many tokens and requests a plan serves, and how many parents a workload needs.

Full-attention groups hold tokens (`granularity` per page); every other group holds request
state. A request's state takes 2 pages per state group (the engine double-buffers state so a
step can read the old while writing the new). A batch of R requests with T tokens in all needs
at most ceil(T / granularity) + R - 1 full-attention pages, since each request's last page may
be partial.
"""

from __future__ import annotations

from kvproof.impl import faults
from kvproof.impl.packer import Plan, cdiv

faults.declare({
    "capacity_largest_packing": "token capacity uses the largest packing of any group, state groups included",
})

STATE_PAGES_PER_REQUEST = 2


def usable_parents(plan: Plan, budget_bytes: int) -> int:
    """Parents a byte budget yields once the null parent is paid for."""
    return max(0, min(budget_bytes // plan.parent_bytes - 1, plan.max_parents))


def _token_groups(plan: Plan, token_group: str) -> tuple[int, list[int]]:
    return plan.group(token_group).packing, [g.packing for g in plan.groups if g.id != token_group]


def token_capacity(plan: Plan, num_parents: int, token_group: str = "full_attention") -> int:
    """Tokens N parents hold when every parent serves the token group."""
    return num_parents * plan.group(token_group).packing * plan.granularity


def state_slots(plan: Plan, num_parents: int) -> dict[str, int]:
    """Pages each group gets when every parent serves that group."""
    return {g.id: num_parents * g.packing for g in plan.groups}


def parents_needed(plan: Plan, tokens: int, requests: int, token_group: str = "full_attention") -> int:
    """Parents for T tokens spread over R live requests."""
    if tokens < 0 or requests < 0:
        raise ValueError("tokens and requests must be non-negative")
    if requests == 0:
        return 0
    k_tokens, k_state = _token_groups(plan, token_group)
    pages = cdiv(tokens, plan.granularity) + requests - 1
    return cdiv(pages, k_tokens) + sum(cdiv(STATE_PAGES_PER_REQUEST * requests, k) for k in k_state)


def max_tokens(plan: Plan, num_parents: int, requests: int, token_group: str = "full_attention") -> int:
    """The largest T with parents_needed(T, R) <= N: the exact inverse of parents_needed.

    Returns -1 when even T = 0 does not fit (the requests' state alone is too large).
    """
    if requests <= 0:
        raise ValueError("requests must be positive")
    k_tokens, k_state = _token_groups(plan, token_group)
    if faults.active("capacity_largest_packing"):
        k_tokens = max(g.packing for g in plan.groups)
    spare = num_parents - sum(cdiv(STATE_PAGES_PER_REQUEST * requests, k) for k in k_state)
    token_pages = spare * k_tokens - (requests - 1)
    return token_pages * plan.granularity if token_pages >= 0 else -1
