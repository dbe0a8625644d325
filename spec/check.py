"""`verify check`: every named property of one concrete bound plan, given as a plain dict.

The schema (field names as in the packer contract; dtypes as in the engine's storage names):
{"num_parents", "parent_bytes", "alignment", "max_padding",
 "planes": [{"id", "bytes", "arena_offset"}], "groups": [{"id", "packing", "page_count"}],
 "fields": [{"id", "group", "plane", "shape", "dtype", "offset", "stride", "exact_stride"}]}.
Ids are unique per list, every group has a field, and page_count = 1 + num_parents x packing
(pages 0..N x K, page 0 the null page); anything else is malformed, not a verdict.
The checks are the prover's (spec/encoding.py) with N pinned to num_parents, so a plan from any
engine is judged by exactly the properties the prover proves for the contract.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvproof.spec import properties as P
from kvproof.spec.encoding import concrete_facts, violations


def check_plan(plan: dict, properties: Iterable[str] = tuple(P.PROPERTIES)) -> list[dict[str, str]]:
    """The violations of `plan`, each {property, message}; [] when it satisfies every property.
    Malformed input raises ConfigError naming the key."""
    return [v.as_dict() for v in violations(concrete_facts(plan), properties)]
