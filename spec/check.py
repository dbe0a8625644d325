"""`verify check`: every named property of one concrete bound plan, given as a plain dict.

The schema (field names as in the packer contract; dtypes as in the engine's storage names):
{"num_parents", "parent_bytes", "alignment", "max_padding" (null: no bound), "arena_bytes" (optional),
 "planes": [{"id", "bytes", "arena_offset", "alignment" (optional)}], "groups": [{"id", "packing", "page_count"}],
 "fields": [{"id", "group", "plane", "shape", "dtype", "offset", "stride", "exact_stride"}]}.
Ids are unique per list, every group has a field, and page_count = 1 + num_parents x packing
(pages 0..N x K, page 0 the null page); anything else is malformed, not a verdict.
The checks are the prover's (spec/encoding.py) with N pinned to num_parents, so a plan from any
engine is judged by exactly the properties the prover proves for the contract.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from fractions import Fraction

from kvproof.spec import properties as P
from kvproof.spec.encoding import violations
from kvproof.spec.plan_reader import concrete_facts


@dataclass(frozen=True)
class PlanCheck:
    violations: list[dict[str, str]]  # each {property, message}; [] when every property holds
    max_padding: Fraction | None  # the bound padding_bound checked against; None: no bound to check


def check(plan: dict, properties: Iterable[str] = tuple(P.PROPERTIES),
          max_padding: Fraction | None = None) -> PlanCheck:
    """Check `plan`; `max_padding` imposes a padding bound over the document's own (or its null).
    Malformed input raises ConfigError naming the key."""
    facts = concrete_facts(plan)
    if max_padding is not None:
        facts = replace(facts, max_padding=max_padding)
    return PlanCheck([v.as_dict() for v in violations(facts, properties)], facts.max_padding)


def check_plan(plan: dict, properties: Iterable[str] = tuple(P.PROPERTIES)) -> list[dict[str, str]]:
    """The violations of `plan` against its own bound, each {property, message}."""
    return check(plan, properties).violations
