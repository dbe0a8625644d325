"""The seeded-bug catalog: every fault declared to kvproof.impl.faults, plus the historical
policies, with the checks that must kill each. An engine's seeded bugs are its adapter's (`mutants`
of kvproof.engines.interface.EngineAdapter), in registry order.

A check is a pytest node id (run with the fault switched on through KVPROOF_FAULTS) or a `verify`
command line (run with the mutant's --policy). Every check must first pass as it is (the
baseline); a mutant is killed when a check then fails (for a policy: with a counterexample for
the expected property), and survives otherwise.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from kvproof.engines import registry
from kvproof.engines.interface import Mutant
from kvproof.impl import faults
from kvproof.spec.launch_fix import UNCHECKED

# The modules of kvproof's own code that hold fault hooks, each declaring its faults when imported
# (an engine's are declared by its adapter's mutants module, imported with the adapter). Imported
# when a description is asked for, the kernels last: they import torch and triton.
HOOKS = (
    "kvproof.impl.packer", "kvproof.impl.recipe", "kvproof.impl.capacity", "kvproof.impl.allocator",
    "kvproof.impl.arena", "kvproof.cli.cmd_plan", "kvproof.cli.cmd_config", "kvproof.kernels.latent_format",
    "kvproof.kernels.store_latent", "kvproof.kernels.merge_state", "kvproof.kernels.mla_decode",
    "kvproof.kernels.kda_decode",
)

POLICY_HISTORY = {
    "policy_pinned12": "K_mla pinned to 12: every attention-DP boot (tp < 8) breaks the MLA stride",
    "policy_ceil": "K_mla = ceil(state / page): bf16 at tp = 32 packs 2/1 with 51% padding",
}

PACKER = "tests/test_packer_properties.py::"
MACHINE = "tests/test_cache_stateful.py::test_synthetic_arena_matches_oracle"
KDA = "tests/test_kda_decode.py::"
CONFIG = "tests/test_config.py::"

MUTANTS: tuple[Mutant, ...] = (
    Mutant("policy_pinned12", ("verify prove --model kimi-k3",), policy="pinned12", expect="exact_stride"),
    Mutant("policy_ceil", ("verify prove --model kimi-k3",), policy="ceil", expect="padding_bound"),
    Mutant("offset_skips_null_slot", (PACKER + "test_every_page_inside_its_slab_and_parent", MACHINE)),
    Mutant("field_end_in_elements", (PACKER + "test_field_ranges_inside_a_page_never_overlap", MACHINE)),
    Mutant("field_offset_unrounded", ("tests/test_check_schema.py::test_packer_plans_mixed_dtypes_aligned",)),
    Mutant("stride_in_elements", (PACKER + "test_stride_times_packing_is_the_plane", MACHINE)),
    # right at every catalog checkpoint; only a family reaches a layer pattern where it is wrong
    Mutant("split_count_floor_plus_one", ("verify sweep --model kimi-k3 --vary num_layers=24 mla_every=2",)),
    Mutant("search_skips_first", ("tests/test_conformance.py::test_spec_equals_impl_at_every_catalog_point",)),
    Mutant("draft_shares_target_plane", ("tests/test_conformance.py::test_spec_equals_impl_with_drafts",)),
    Mutant("draft_own_group", ("tests/test_conformance.py::test_spec_equals_impl_with_drafts",)),
    Mutant("capacity_largest_packing", ("tests/test_capacity.py::test_max_tokens_is_the_exact_inverse",)),
    Mutant("allocator_hands_out_null_page", (MACHINE,)),
    Mutant("allocator_shares_parent", (MACHINE,)),
    Mutant("allocator_double_free_parent", (MACHINE,)),
    Mutant("allocator_reuses_live_page", (MACHINE,)),
    Mutant("arena_dense_page_stride", (MACHINE,)),
    Mutant("store_latent_no_sanitize", ("tests/test_store_latent.py::test_sanitize",)),
    Mutant("mla_decode_lse_log2", ("tests/test_mla_decode.py::test_k3_heads_per_rank",)),
    Mutant("mla_page_stride_int32", ("tests/test_mla_decode.py::test_page_offsets_are_int64",)),
    Mutant("merge_state_single_block", ("tests/test_merge_state.py::test_launch_fits_a_block_for_every_head_count",)),
    Mutant("merge_state_empty_nan", ("tests/test_merge_state.py::test_empty_partitions",)),
    Mutant("kda_conv_shift_wrong_way", (KDA + "test_matches_oracle_k3",)),
    Mutant("kda_gate_sign", (KDA + "test_matches_oracle_k3",)),
    Mutant("kda_beta_no_sigmoid", (KDA + "test_matches_oracle_k3",)),
    Mutant("kda_dense_state_stride", (KDA + "test_matches_oracle_k3",)),
    Mutant("kda_no_page_guard", (KDA + "test_unchecked_bad_page_leaves_arena_alone",)),
    *(mutant for adapter in registry.adapters() for mutant in adapter.mutants),
    *(Mutant(fault, (f"{CONFIG}test_each_rule_fails_and_its_fix_passes[{rule}]",))
      for rule, fault in UNCHECKED.items()),
    Mutant("launch_fix_ignores_flag_count", (CONFIG + "test_fix_changes_the_fewest_flags_then_the_least",)),
    Mutant("plan_draft_bound_dropped", ("tests/test_drafts.py::test_plan_reports_padding_over_the_accepted_bound",)),
    Mutant("draft_takes_target_dtype", ("tests/test_drafts.py::test_hand_worked_k3_fp8_tp8_five_bf16_drafts",)),
)


def describe(mutant: Mutant) -> str:
    """What the mutant breaks: the historical policy, or the fault as its hook's module declares it
    (the hook modules imported in turn until one has)."""
    if mutant.policy:
        return POLICY_HISTORY[mutant.name]
    for module in HOOKS:
        if mutant.name in faults.declared():
            break
        importlib.import_module(module)
    return faults.declared()[mutant.name]


def every_fault() -> Mapping[str, str]:
    """Every fault kvproof's code and the registered engines declare: name -> description."""
    for module in HOOKS:
        importlib.import_module(module)
    return faults.declared()
