"""The seeded-bug catalog: every fault of kvproof.impl.faults, plus the historical policies, with
the checks that must kill each.

A check is a pytest node id (run with the fault switched on through KVPROOF_FAULTS) or a `verify`
command line (run as is; a policy mutant is the policy itself). A mutant is killed when a check
fails; it survives when every check passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvproof.impl.faults import FAULTS


@dataclass(frozen=True)
class Mutant:
    name: str
    checks: tuple[str, ...]
    fault: str | None = None  # None: the checks themselves select the broken variant

    @property
    def description(self) -> str:
        return FAULTS[self.fault] if self.fault else HISTORICAL[self.name]


HISTORICAL = {
    "policy_pinned12": "K_mla pinned to 12: every attention-DP boot (tp < 8) breaks the MLA stride",
    "policy_ceil": "K_mla = ceil(state / page): bf16 at tp = 32 packs 2/1 with 51% padding",
}

PACKER = "tests/test_packer_properties.py::"

MUTANTS: tuple[Mutant, ...] = (
    Mutant("policy_pinned12", ("verify prove --model kimi-k3 --policy pinned12",)),
    Mutant("policy_ceil", ("verify prove --model kimi-k3 --policy ceil",)),
    Mutant("offset_skips_null_slot", (PACKER + "test_every_page_inside_its_slab_and_parent",), "offset_skips_null_slot"),
    Mutant("field_end_in_elements", (PACKER + "test_field_ranges_inside_a_page_never_overlap",), "field_end_in_elements"),
    Mutant("stride_in_elements", (PACKER + "test_stride_times_packing_is_the_plane",), "stride_in_elements"),
    Mutant(
        "capacity_largest_packing",
        ("tests/test_capacity.py::test_max_tokens_is_the_exact_inverse",),
        "capacity_largest_packing",
    ),
)
