"""Seeded bugs in tokenspeed's own code, applied to a temporary copy of the package.

Each is one textual edit of one recipe file, the kind of change a pull request makes. The
adapter loads the edited copy through the same loader as the real engine, so `verify mutants`
shows that `verify engine` flags a broken engine, not only a broken kvproof. An edit whose text
no longer occurs in the engine raises: a mutant that silently stopped applying proves nothing.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from kvproof.engines.interface import Mutant
from kvproof.engines.tokenspeed import deepseek_v41, glm53_flash, inkling, msa, qwen4_exp
from kvproof.engines.tokenspeed.loader import Source, SourceError
from kvproof.impl import faults

# recipe -> the adapter module that exports its PROFILE and its own seeded bugs (EDITS, MUTANTS)
NEWER = {"msa": msa, "qwen4_exp": qwen4_exp, "inkling": inkling, "glm53_flash": glm53_flash,
         "deepseek_v41": deepseek_v41}

faults.declare({
    # ts_*: the edits of EDITS, made in the copy mutated() loads; the last: parallel.py's hook.
    "ts_k3_packing_floor": "tokenspeed's K3 recipe rounds K_mla = state / page down instead of up",
    "ts_k3_group_size_literal": "tokenspeed's K3 recipe puts 23 KDA layers in each state group (K3's 69 / 3) instead "
    "of a third of the model's KDA layers",
    "ts_mamba2_kv_same_segment": "tokenspeed's mamba2 recipe puts an attention layer's K and V in the same segment",
    "ts_v4_state_own_plane": "tokenspeed's deepseek_v4 recipe moves the compressor state off the shared layer planes",
    "ts_plan_widened_stride": "tokenspeed's pack() gives every field a page stride 256 B wider than plane / K",
    "ts_bind_forgets_null_parent": "tokenspeed's bind() sizes each plane slab for N parents, not N + 1",
    "ts_qwen_draft_v_on_k": "tokenspeed's qwen_gdn recipe puts an MTP draft layer's V in its K segment",
    "ts_draft_units_from_zero": "tokenspeed's ordinary recipe numbers a draft layer's cache units from 0 (its own "
    "layer id) instead of after the target's, so a draft's K and V take the first target layers' units",
    "launch_engine_moe_check_dropped": "verify config --engine forgets resolve_parallelism's MoE tp / EP check after "
    "the Mapping, so tokenspeed seems to accept MoE tp and EP both above 1",
    # pipeline.py's hook: kvproof's adapter, not the engine's code.
    "ts_adapter_gap_as_boots": "kvproof's tokenspeed adapter judges an exception by its type alone, not by whose code "
    "raised it, so a ValueError in the adapter's own code becomes a baselinable boots finding of the engine",
    # ordinary.py's hook: kvproof's adapter, not the engine's code.
    "ts_adapter_block_draft_as_eagle3": "kvproof's tokenspeed adapter launches every mha draft with "
    "--speculative-algorithm EAGLE3, so a DFLASH or DSPARK block drafter is planned at the target's cache dtype "
    "instead of its own bfloat16",
})

_RECIPES = Path("runtime/layers/attention/kv_cache/recipes")

# fault name -> (file under the package, the text, its broken replacement)
EDITS: dict[str, tuple[Path, str, str]] = {
    "ts_k3_packing_floor": (
        _RECIPES / "kimi_k3.py",
        "mla_packing = max(1, -(-linear_plane_bytes // mla_page_bytes))",
        "mla_packing = max(1, linear_plane_bytes // mla_page_bytes)",
    ),
    "ts_k3_group_size_literal": (
        _RECIPES / "kimi_k3.py",
        "per_group = len(kda_layer_ids) // _KIMI_K3_STATE_GROUPS",
        "per_group = 23",
    ),
    "ts_mamba2_kv_same_segment": (
        _RECIPES / "mamba2.py",
        'f"unit.{2 * occurrence + 1}"',
        'f"unit.{2 * occurrence}"',
    ),
    "ts_v4_state_own_plane": (
        _RECIPES / "deepseek_v4.py",
        'f"unit.{state_slot}"',
        'f"state.{state_slot}"',
    ),
    "ts_plan_widened_stride": (
        _RECIPES / "plan.py",
        "page_stride_bytes=plane_bytes[field.plane_id] // packing[group_id],",
        "page_stride_bytes=plane_bytes[field.plane_id] // packing[group_id] + 256,",
    ),
    "ts_bind_forgets_null_parent": (
        _RECIPES / "plan.py",
        "arena_offset += (num_lcm_blocks + 1) * bytes_per_lcm_block",
        "arena_offset += num_lcm_blocks * bytes_per_lcm_block",
    ),
    "ts_qwen_draft_v_on_k": (
        _RECIPES / "qwen35.py",
        'f"layer.{layer_id}.v",\n                f"unit.{occurrence}.b",\n                self._draft_kv_shape,',
        'f"layer.{layer_id}.v",\n                f"unit.{occurrence}.a",\n                self._draft_kv_shape,',
    ),
    "ts_draft_units_from_zero": (
        _RECIPES / "ordinary.py",
        "local_layer_id=local_layer_id,\n            occurrence=occurrence,",
        "local_layer_id=local_layer_id,\n            occurrence=local_layer_id if config is self.draft_attn_config "
        "else occurrence,",
    ),
}
EDITS |= {name: edit for module in NEWER.values() for name, edit in module.EDITS.items()}


# The edited copies, kept for the process: the loaded modules live in them, so each is removed at exit.
_COPIES: list[tempfile.TemporaryDirectory[str]] = []


def mutated(source: Source) -> Source:
    """`source` itself, or a temporary edited copy when a tokenspeed fault is switched on."""
    chosen = [name for name in EDITS if faults.active(name)]
    if not chosen:
        return source
    folder = tempfile.TemporaryDirectory(prefix="kvproof-ts-mutant-", ignore_cleanup_errors=True)
    _COPIES.append(folder)
    copy = Path(folder.name) / "tokenspeed"
    shutil.copytree(source.package_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name in chosen:
        path, text, broken = EDITS[name]
        target = copy / path
        original = target.read_text(encoding="utf-8")
        if text not in original:
            raise SourceError(f"mutant {name} no longer applies: {path} has no {text!r}")
        target.write_text(original.replace(text, broken), encoding="utf-8")
    return Source(copy, source.version, f"{source.origin}, mutated: {', '.join(chosen)}", source.commit)


FP8 = "verify engine tokenspeed --recipe kimi_k3 --dtype fp8"
# K3's mla_every 4 at 80 layers: 60 KDA layers, three groups of 20; the released recipe boots at fp8.
FAMILY = "verify sweep --engine tokenspeed --vary num_layers=80 --dtype fp8"

# The released engine's fp8 points are clean, so a finding at one is the edit's.
MUTANTS: tuple[Mutant, ...] = (
    *(m for module in NEWER.values() for m in module.MUTANTS),
    Mutant("ts_k3_packing_floor", (FP8,), expect="boots"),
    # Right at K3's own 69 KDA layers, so only a family reaches it (tests/test_engine_sweep.py).
    Mutant("ts_k3_group_size_literal", (FAMILY,), expect="boots"),
    Mutant("ts_plan_widened_stride", (FP8,), expect="exact_stride"),
    # The engine's own layout checks refuse these (boots): kvproof reports the refusal.
    Mutant("ts_mamba2_kv_same_segment", ("verify engine tokenspeed --recipe mamba2 --tp 8 --dtype fp8",),
           expect="boots"),
    Mutant("ts_v4_state_own_plane", ("verify engine tokenspeed --recipe deepseek_v4 --tp 8 --dtype fp8",),
           expect="boots"),
    Mutant("ts_bind_forgets_null_parent", (FP8,), expect="no_overlap"),
    # Only an MTP draft layer has these fields, so only the drafts=1 points see it: the engine's own
    # layout check refuses the plan (boots) while the drafts=0 points plan as released.
    Mutant("ts_qwen_draft_v_on_k", ("verify engine tokenspeed --recipe qwen_gdn --tp 4 --dtype fp8",),
           expect="boots"),
    # Only the drafted points have draft layers: their K and V share the first target layers' planes, whose
    # strides the engine's own pack() then refuses (boots).
    Mutant("ts_draft_units_from_zero", ("verify engine tokenspeed --recipe mha --tp 8 --dtype fp8 --drafts 1 5",),
           expect="boots"),
    # Per-recipe isolation: an adapter failure must stay NOT VERIFIED (adapter), never the engine's verdict.
    Mutant("ts_adapter_gap_as_boots",
           ("tests/test_engine_tokenspeed.py::test_a_value_error_of_kvproofs_adapter_is_an_adapter_gap_not_boots",)),
    # The algorithm decides a block drafter's cache dtype, and no property sees a dtype: a test pins it.
    Mutant("ts_adapter_block_draft_as_eagle3",
           ("tests/test_drafts_tokenspeed.py::test_a_block_drafter_keeps_a_bfloat16_cache_beside_an_fp8_target",)),
    # kvproof's load of tokenspeed's parallel resolution for `verify config --engine` (parallel.py)
    Mutant("launch_engine_moe_check_dropped", ("tests/test_config_engine.py::test_cli_shows_the_engines_own_rejection",
                                               "tests/test_config_engine.py::"
                                               "test_resolution_rules_reject_exactly_what_the_engine_rejects")),
)
