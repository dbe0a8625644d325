"""vLLM's own planner under test: the representative subset `make test` runs (Qwen3-Next at tp 1
and 2, both kv dtypes, plus Kimi-Linear and Nemotron-H with prefix caching), the translation into the plan
schema, the tp_block_size cross-point finding and its baseline, the loud stand-ins, the CLI's bad
input, and the seeded vLLM bugs of kvproof.engines.vllm.mutants."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

from kvproof.engines import baseline
from kvproof.engines.stubs import StubUsed
from kvproof.engines.verdict import EngineError
from kvproof.engines.vllm import backends, catalog, engine, planner, platform
from kvproof.impl import faults

BASELINE = Path(__file__).resolve().parent.parent / "engines" / "vllm" / "baseline.json"
Only = dict[str, Sequence[Any] | None]  # engine.run's narrowing: the values kept per axis (None: all)
QWEN = catalog.MODELS["qwen3-next-80b-a3b"]
KIMI = catalog.MODELS["kimi-linear-48b-a3b"]
K3 = catalog.MODELS["kimi-k3"]
NEMOTRON = catalog.MODELS["nemotron-h-56b-base-8k"]


def point(model: catalog.Model = QWEN, tp: int = 1, dtype: str = "auto", mamba: str = "auto",
          prefix: bool = False) -> planner.Point:
    return planner.Point(model, tp, dtype, mamba, prefix, model.backends[0])


@pytest.fixture(scope="module")
def subset() -> engine.EngineRun:
    """The issue's representative subset: one model at tp 1 and 2, both kv dtypes (and both state
    dtypes and every backend, since they come at no extra import cost)."""
    return engine.run(["qwen3-next-80b-a3b"], {"tp": [1, 2], "dtype": ["auto", "fp8"], "spec": [0], "pp": [1],
                                             "prefix": ["off"]})


def test_the_subset_plans_every_point_and_every_plan_holds_for_every_n(subset) -> None:
    (recipe,) = subset.recipes
    assert recipe.not_verified is None
    # tp x kv dtype x state dtype x (FLASH_ATTN, TRITON_ATTN, FLASHINFER@sm_90 x trtllm, @sm_100 x trtllm x cuda)
    assert len(recipe.points) == 2 * 2 * 2 * (1 + 1 + 2 + 4)
    bad = [(p.point, [f.message for f in p.findings]) for p in recipe.points if p.verdict != "ok"]
    assert not bad
    assert all(p.parents and p.parents[1] > 1000 for p in recipe.points)  # checked for every N, not a few


def test_vllm_raises_the_block_so_one_attention_page_holds_a_state_page() -> None:
    """Qwen3-Next at tp 1, bf16: A1 = 2 x 2 heads x 256 x 2 B = 2048 B/token; the GDN state is
    conv (3, 8192) + ssm (32, 128, 128) bf16 = 1,097,728 B; FlashAttention's kernel block is 16,
    so B = 16 x ceil(1,097,728 / (16 x 2048)) = 544 and P = 544 x 2048 = 1,114,112 B."""
    planned = planner.plan(point())
    assert planned.block_size == 544
    doc = planned.documents[1]
    attention = [f for f in doc["fields"] if f["id"].endswith(".kv")]
    states = [f for f in doc["fields"] if not f["id"].endswith(".kv")]
    assert {f["stride"] for f in doc["fields"]} == {1_114_112} == {p["bytes"] for p in doc["planes"]}
    assert {tuple(f["shape"]) for f in attention} == {(544, 1024)}  # payload 544 x 2,048 B = the stride
    assert {(tuple(f["shape"]), f["offset"]) for f in states} == {((3, 8192), 0), ((32, 128, 128), 49_152)}
    assert planned.mamba_padded == 1_114_112  # the state page padded up to the attention page


def test_plans_are_bound_with_the_null_block_and_affine_in_n() -> None:
    planned = planner.plan(point(tp=2, dtype="fp8"))
    for n, doc in planned.documents.items():
        assert {g["page_count"] for g in doc["groups"]} == {n + 1}  # block 0 is vLLM's null block
        assert doc["arena_bytes"] == (n + 1) * doc["parent_bytes"]


def test_prefix_caching_runs_vllms_align_mode_with_the_layers_own_answer() -> None:
    """Kimi-Linear's KDA layers keep MambaBase's checkpoint alignment (None), so align mode
    rounds the block to the MLA minimum of 128 only; the state block follows the block."""
    on, off = planner.plan(point(KIMI, prefix=True)), planner.plan(point(KIMI))
    assert on.block_size % 128 == 0 and off.block_size % 128 == 0


def test_kimi_k3_block_and_page_worked_by_hand_from_its_config() -> None:
    """Kimi-K3 (engines/tokenspeed/models/kimi-k3.json, text_config) at tp 1, bf16, FlashMLA. An MLA
    layer keeps one latent head of kv_lora_rank 512 + qk_rope_head_dim 64 = 576 bf16 values, so
    A1 = 1,152 B/token. A KDA layer (linear_attn_config: 96 heads of head_dim 128, short conv 4)
    keeps conv (3, 3 x 96 x 128 = 36,864) bf16 = 221,184 B and recurrent (96, 128, 128) float32
    (KDA's auto) = 6,291,456 B: M = 6,512,640 B. MLA's quantum is 128 (interface.py:1088; FlashMLA's
    64 divides it): B = 128 x ceil(6,512,640 / (128 x 1,152)) = 128 x 45 = 5,760 tokens and
    P = 5,760 x 1,152 = 6,635,520 B. vLLM groups the 24 MLA layers and the 69 KDA layers (3 groups
    of 24 once padded) into 24 slots, so a parent is 24 x P. At tp 2 the state halves (M =
    3,256,320 B) while A1 does not: B = 128 x 23 = 2,944, the tp_block_size finding."""
    planned = planner.plan(point(K3))
    assert (planned.block_size, planned.mamba_padded, planned.kernel_tokens) == (5760, 6_635_520, 64)
    doc = planned.documents[1]
    assert {f["stride"] for f in doc["fields"]} == {6_635_520} == {p["bytes"] for p in doc["planes"]}
    assert doc["parent_bytes"] == 24 * 6_635_520 and len(doc["planes"]) == 24
    attention = {(tuple(f["shape"]), f["dtype"]) for f in doc["fields"] if f["id"].endswith(".kv")}
    states = {(tuple(f["shape"]), f["dtype"], f["offset"]) for f in doc["fields"] if not f["id"].endswith(".kv")}
    assert attention == {((5760, 576), "bfloat16")}
    assert states == {((3, 36_864), "bfloat16", 0), ((96, 128, 128), "float32", 221_184)}
    # FlashMLA takes the 5,760-token block as 90 pages of 64: split, so its 24 MLA fields need P exactly
    assert sum(1 for f in doc["fields"] if f["exact_stride"]) == 24
    assert planner.plan(point(K3, tp=2)).block_size == 2944


def test_the_tp_domain_is_every_divisor_vllm_accepts() -> None:
    """tp sizes come from each checkpoint's language model: every divisor of the head counts vLLM
    divides by tp, not only powers of two. Kimi-K3 (96 MLA heads, 96 KDA heads) at tp 3, bf16: the
    KDA state is conv (3, 36,864 / 3 = 12,288) bf16 = 73,728 B plus recurrent (32, 128, 128) float32
    = 2,097,152 B, M = 2,170,880 B; A1 stays 1,152 B (one latent head), so B = 128 x ceil(2,170,880 /
    147,456) = 128 x 15 = 1,920 tokens and P = 1,920 x 1,152 = 2,211,840 B. A tp outside the domain
    is one vLLM's own config check refuses (96 heads at tp 5)."""
    tps = {name: m.tps(json.loads(m.config_text())) for name, m in catalog.MODELS.items()}
    assert tps == {"qwen3-next-80b-a3b": (1, 2, 4, 8, 16), "kimi-linear-48b-a3b": (1, 2, 4, 8, 16, 32),
                   "nemotron-h-56b-base-8k": (1, 2, 4, 8),  # Mamba2's 8 groups (mamba_mixer2.py:320)
                   "kimi-k3": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96),
                   "jamba-v0.1": (1, 2, 4, 8, 16, 32),  # 32 heads; Mamba-1's 8,192 inner channels
                   "lfm2-350m": (1, 2, 4, 8, 16),  # 16 heads; its 8 KV heads replicated at tp 16
                   "lfm2-vl-450m-family-0": (1, 2, 4, 8, 16),  # LFM2-350M's text model
                   # LFM2.5-8B-A1B's family: 32 heads; its 8 KV heads replicated at tp 16 and 32
                   "lfm2.5-8b-a1b-family-0": (1, 2, 4, 8, 16, 32),
                   "lfm2.5-1.2b-base": (1, 2, 4, 8, 16, 32),  # 32 heads; its 8 KV heads replicated at 16 and 32
                   **dict.fromkeys(("nemotron-3-nano-30b-a3b-bf16", "nemotron-3-super-120b-a12b-fp8",
                                    "nemotron-3-ultra-550b-a55b-bf16", "nemotron-3.5-lightning-30b-a3b-nvfp4"),
                                   (1, 2, 4, 8)),  # Mamba2's 8 groups
                   # 16 GDN key heads; the 27B's 24 attention heads stop it at 8
                   **dict.fromkeys(("qwen3.5-27b", "qwen3.6-27b-nvfp4"), (1, 2, 4, 8)),
                   **dict.fromkeys(("qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b",
                                    "qwen3.6-35b-a3b-nvfp4"), (1, 2, 4, 8, 16)),
                   # with their EAGLE3 drafts: 16 heads and 2 KV heads each, the targets' own
                   **dict.fromkeys(("qwen3-next-80b-a3b-eagle3", "qwen3.5-35b-a3b-eagle3"), (1, 2, 4, 8, 16)),
                   # with its DFLASH draft: 32 heads and 4 KV heads, replicated to 8 and 16 (qwen3_dflash.py)
                   "qwen3.5-35b-a3b-dflash": (1, 2, 4, 8, 16),
                   # with its DSpark draft, whose 64 heads the draft's tp divides too (kimi_k3/nvidia/mla.py:201)
                   "kimi-k3-dspark": (1, 2, 4, 8, 16, 32),
                   # Granite-4.0-H's family: 12 heads, 48 Mamba2 heads, 1 group; its KV heads 1, 2, 3, 4, 6, 12
                   # divide tp or are replicated to it
                   **{f"granite-4.0-h-tiny-family-{i}": tps for i, tps in (
                       (0, (1, 2, 3, 4, 6, 12)), (1, (1, 2, 3, 4, 6, 12)), (2, (1, 2, 3, 4, 6, 12)),
                       (4, (1, 2, 4, 6, 12)), (8, (1, 3, 6, 12)), (12, (1, 2, 4, 12)), (16, (1, 2, 3, 6, 12)),
                       (20, (1, 2, 3, 4, 6, 12)))},
                   # Falcon-H1-0.5B's family: 8 heads, 24 Mamba2 heads (gcd 8), 1 group, 2 KV heads
                   "falcon-h1-0.5b-family-0": (1, 2, 4, 8),
                   # Zamba2-7B's family: its 2 Mamba2 groups must divide tp (mamba_mixer2.py:320)
                   "zamba2-7b-family-0": (1, 2),
                   # OLMo Hybrid's family: 30 heads, 30 KV heads, 30 GDN key and value heads: every divisor of 30
                   **dict.fromkeys(("olmo-hybrid-7b-family-0", "olmo-hybrid-7b-family-1"),
                                   (1, 2, 3, 5, 6, 10, 15, 30)),
                   # GLM-5.3-Flash's family: 64 MLA heads, 64 KDA heads: every divisor of 64
                   **dict.fromkeys(("glm53-flash-family-0", "glm53-flash-family-1"), (1, 2, 4, 8, 16, 32, 64)),
                   # MiniCPM-V 4.6's family: 8 heads, 16 GDN key and value heads; its 2 KV heads replicated at 4 and 8
                   "minicpm-v-4.6-family-0": (1, 2, 4, 8),
                   # Qwen4-Exp's family: 24 heads, 16 and 48 GDN heads; its 2 KV heads replicated at 4 and 8
                   **dict.fromkeys((f"qwen3.8-flash-next-family-{i}" for i in range(4)), (1, 2, 4, 8)),
                   # Ling-3.0-tiny's family: 16 MLA heads, which are the KDA heads too; Ling-3.0-flash's and its VL
                   # model's: 32
                   "ling-3.0-tiny-family-0": (1, 2, 4, 8, 16),
                   **dict.fromkeys(("ling-3.0-flash-family-0", "ling-3.0-flash-family-1", "ling-3.0-flash-vl-family-0",
                                    "ling-3.0-flash-vl-family-1"), (1, 2, 4, 8, 16, 32)),
                   # Bailing V2.5's 1T family: 64 heads, but the linear layer's 8 norm groups (bailing_linear_attn.py:
                   # 446-453) stop tp at 8
                   **dict.fromkeys((f"ling-2.5-1t-family-{i}" for i in range(4)), (1, 2, 4, 8)),
                   # Ling-2.6-flash's: 32 heads, 4 norm groups
                   "ling-2.6-flash-family-0": (1, 2, 4),
                   # Nemotron-3-Nano-Omni's: Nemotron-3-Nano-30B-A3B's text config, 8 Mamba2 groups
                   "nemotron-3-nano-omni-family-0": (1, 2, 4, 8)}
    # (backend, kv dtype): FLASHMLA, TRITON_MLA, FLASHINFER_MLA at both, FLASH_ATTN_MLA at auto; x prefix, state
    # dtype; times tp at pp 1 (12, each at 0 to 3 ngram tokens) and 2 (12) and pp 4 and 8 at tp 1
    assert len(engine.points(K3)) == 7 * 2 * 2 * (12 * 4 + 12 + 1 + 1)
    planned = planner.plan(point(K3, tp=3))
    assert (planned.block_size, planned.mamba_padded) == (1920, 2_211_840)
    assert {tuple(f["shape"]) for f in planned.documents[1]["fields"]} == {(1920, 576), (3, 12_288), (32, 128, 128)}
    with pytest.raises(ValueError, match=r"attention heads \(96\) must be divisible by tensor parallel size \(5\)"):
        planner.plan(point(K3, tp=5))


def test_kimi_k3_kda_layers_export_flashkda_checkpoints_by_vllms_own_choice(monkeypatch) -> None:
    """KimiK3DeltaAttention.get_kv_cache_spec sets the prefill checkpoint fields from the KDA prefill
    backend its constructor resolved: FlashKDA on sm_90 (kda.py:363), 16 tokens (kda_checkpoint.py:9)."""
    captured: dict = {}
    original = planner._specs

    def spy(*args: object) -> dict:
        out = original(*args)  # type: ignore[arg-type]
        captured.update(out)
        return out

    monkeypatch.setattr(planner, "_specs", spy)
    planner.plan(point(K3, prefix=True))
    state = captured["language_model.model.layers.0.self_attn"]
    assert (state.num_prefill_checkpoint_blocks, state.prefill_checkpoint_alignment) == (1, 16)
    assert type(captured["language_model.model.layers.3.self_attn"]).__name__ == "MLAAttentionSpec"  # layer 4: MLA


def test_kimi_k3_on_a_platform_bound_at_import_that_is_not_the_points_raises(monkeypatch) -> None:
    """kda.py binds current_platform when imported; if that is another GPU's, the resolved KDA
    backend would be that GPU's, so planning refuses by name instead."""
    planner.plan(point(K3))  # imports vllm.models.kimi_k3 under the point's platform
    from vllm.models.kimi_k3.nvidia import kda
    from vllm.platforms.cpu import CpuPlatform

    monkeypatch.setattr(kda, "current_platform", CpuPlatform())
    with pytest.raises(StubUsed, match="kimi_k3 was first imported under a platform with capability"):
        planner.plan(point(K3))


def test_a_mamba2_hybrid_keeps_one_block_size_at_every_tp() -> None:
    """Nemotron-H-56B: 8 KV heads and 256 Mamba heads in 8 groups all shard with tp, so A1 and M
    shrink together and B = 16 x ceil(M / (16 x A1)) stays 4128 tokens (bf16; the model's config
    hook makes the SSM state float32)."""
    only: Only = {"tp": [1, 8], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["on"], "backend": ["FLASH_ATTN"],
            "pp": [1], "spec": [0]}
    points = engine.run(["nemotron-h-56b-base-8k"], only).recipes[0].points
    assert [p.verdict for p in points] == ["ok", "ok"]
    assert planner.plan(point(catalog.MODELS["nemotron-h-56b-base-8k"], tp=8)).block_size == 4128


def test_qwen3_next_with_prefix_caching_aligns_to_flashinfers_checkpoints() -> None:
    """Qwen3-Next's GDN layer sets its checkpoint alignment in its constructor: vLLM's own
    _resolve_gdn_prefill_backend picks FlashInfer on sm_90, whose prefill exports a state every 64
    tokens, so align mode rounds the block to lcm(16, 64) = 64: B = 64 x ceil(1,097,728 / (64 x
    2,048)) = 576 (544 without prefix caching), and the state spec exports one checkpoint block."""
    on = planner.plan(point(prefix=True))
    assert (on.block_size, planner.plan(point()).block_size) == (576, 544)
    assert on.mamba_padded == 576 * 2048
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["on"], "backend": ["TRITON_ATTN"],
            "spec": [0, 2], "pp": [1], "draft_dtype": ["target"], "draft_backend": ["target"]}
    assert [p.verdict for p in engine.run(["qwen3-next-80b-a3b"], only).recipes[0].points] == ["ok", "ok"]
    assert True in QWEN.prefix_caching and "prefix caching" not in QWEN.limits


def test_block_size_changes_with_tp_is_found_across_points() -> None:
    run = engine.run(["qwen3-next-80b-a3b"], {"tp": [1, 2, 4], "dtype": ["auto"], "mamba_dtype": ["auto"],
                                             "backend": ["FLASH_ATTN"], "spec": [0], "pp": [1], "prefix": ["off"]})
    verdicts = {p.point["tp"]: p for p in run.recipes[0].points}
    assert verdicts[1].verdict == verdicts[2].verdict == "ok"
    assert verdicts[4].verdict == "counterexample"
    assert [f.property for f in verdicts[4].findings] == [engine.TP_BLOCK_SIZE]
    assert "272 tokens at tp=4 but 544 at tp=1" in verdicts[4].findings[0].message


def test_cross_point_findings_alone_exit_3_and_a_plan_finding_exits_1() -> None:
    """tp_block_size is no plan's property: alone it is exit 3 (CROSS-POINT FINDINGS), with any
    finding at a point exit 1, with nothing new 0."""
    from kvproof.cli.cmd_engine import exit_code

    across = set(engine.CROSS_POINT)
    cross = ("vllm", "0.33.0", "qwen3-next-80b-a3b", "tp=4", engine.TP_BLOCK_SIZE)
    plan = ("vllm", "0.33.0", "qwen3-next-80b-a3b", "tp=4", "no_overlap")
    assert exit_code(baseline.Comparison([cross], [], []), across) == 3
    assert exit_code(baseline.Comparison([cross, plan], [], []), across) == 1
    assert exit_code(baseline.Comparison([], [cross], []), across) == 0
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--recipe", "qwen3-next-80b-a3b",
                           "--tp", "1", "4", "--dtype", "auto", "--assume", "backend=FLASH_ATTN", "mamba_dtype=auto",
                           "spec=0", "pp=1", "prefix=off"], capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 3 and "verdict: CROSS-POINT FINDINGS: 1 new finding(s)" in proc.stdout, proc.stderr


def test_vllm_plans_are_held_to_the_contracts_padding_bound() -> None:
    """vLLM states no bound, so its plans are held to the contract's 1/4 (inf lifts it). Kimi-Linear,
    bf16, 7 MLA and 20 KDA layers in 7 slots (the KDA layers in 3 groups of 7, one slot of the last
    empty). At tp 1: P = 2,211,840 B and a state page M = 2,170,880 B, so the group of 6 KDA layers
    pads (7 x 2,211,840 - 6 x 2,170,880) / (6 x 2,170,880) = 0.1887. At tp 32 the state shrinks with
    its one KDA head, M = 3 x 384 x 2 + 128 x 128 x 4 = 67,840 B, while the MLA page cannot go below
    128 tokens x 1,152 B = 147,456 B: (7 x 147,456 - 6 x 67,840) / (6 x 67,840) = 1.5358."""
    only: Only = {"tp": [1, 32], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "backend": ["FLASHMLA"],
            "pp": [1], "spec": [0]}
    at_tp1, at_tp32 = engine.run(["kimi-linear-48b-a3b"], only).recipes[0].points
    assert at_tp1.verdict == "ok" and at_tp1.worst_padding == pytest.approx((7 * 2_211_840 - 6 * 2_170_880)
                                                                             / (6 * 2_170_880))
    assert "padding_bound" in {f.property for f in at_tp32.findings}
    assert at_tp32.worst_padding == pytest.approx((7 * 147_456 - 6 * 67_840) / (6 * 67_840))
    (unbounded,) = engine.run(["kimi-linear-48b-a3b"], {**only, "tp": [32]}, None).recipes[0].points
    assert "padding_bound" not in {f.property for f in unbounded.findings}


def test_a_kda_class_that_drops_the_speculative_rows_does_not_boot_at_two_ngram_tokens(monkeypatch) -> None:
    """Kimi-Linear at tp 1, bf16, FLASHMLA: each KDA layer keeps conv (3 + spec, 12,288) bf16 and 32 x 128 x 128
    float32, 2,170,880 B at 0 tokens, in a 1,920-token page of 1,920 x 1,152 = 2,211,840 B. Its model class sizing
    the state without the speculative rows (the seeded vllm_kimi_linear_state_unwidened) leaves that page: one
    token's 2,195,456 B fit it, two tokens' 2,220,032 B do not, and vLLM's own assertion stops the boot. Were the
    layers given the class's shape (as before), the plan would stay consistent and the bug would pass."""
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "backend": ["FLASHMLA"],
                  "pp": [1], "spec": [1, 2]}
    with faults.inject("vllm_kimi_linear_state_unwidened"):
        one, two = engine.run(["kimi-linear-48b-a3b"], only, workers=1).recipes[0].points
        assert one.verdict == "ok" and one.parent_bytes == 7 * 2_211_840
        assert [f.property for f in two.findings] == ["boots"]
        assert "vllm/v1/kv_cache_interface.py:" in two.findings[0].message
        monkeypatch.setitem(catalog.MODELS, "kimi-linear-48b-a3b", replace(KIMI, state_init=None))
        (unseen,) = engine.run(["kimi-linear-48b-a3b"], {**only, "spec": [2]}, workers=1).recipes[0].points
    assert unseen.verdict == "ok"


def test_points_with_draft_tokens_state_no_bound_as_in_the_contract() -> None:
    """The contract bounds a plan without drafts only (spec/contract.py); so does the default here.
    Qwen3-Next at tp 4, bf16, prefix caching, with one MTP token pads 0.2745, past 1/4: no finding
    by default, one when `--max-padding 0.25` holds every point."""
    only: Only = {"tp": [4], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["on"], "backend": ["FLASH_ATTN"],
            "pp": [1], "spec": [1], "draft_dtype": ["target"], "draft_backend": ["target"]}
    (default,) = engine.run(["qwen3-next-80b-a3b"], only).recipes[0].points
    assert default.worst_padding == pytest.approx(0.2745, abs=5e-5)
    assert "padding_bound" not in {f.property for f in default.findings}
    (held,) = engine.run(["qwen3-next-80b-a3b"], only, Fraction(1, 4)).recipes[0].points
    assert "padding_bound" in {f.property for f in held.findings}


def test_a_vllm_that_moved_an_answer_a_point_needs_is_not_verified_by_the_adapter(monkeypatch) -> None:
    """Importing a backend answers a point too (the platform, FlashInfer's artifactory check): at a
    vLLM without vllm.utils.flashinfer.has_nvidia_artifactory the model is NOT VERIFIED (adapter),
    naming kvproof's line that reached for it, and never a finding."""
    import vllm.utils.flashinfer as flashinfer_utils

    monkeypatch.delattr(flashinfer_utils, "has_nvidia_artifactory")
    run = engine.verify(["qwen3-next-80b-a3b"], [1], ["auto"], None,
                        assume=["backend=FLASH_ATTN", "mamba_dtype=auto", "prefix=off", "pp=1", "spec=0"])
    (recipe,) = run.recipes
    assert recipe.adapter and not recipe.points and recipe.not_verified is not None
    assert "engines/vllm/platform.py:" in recipe.not_verified and "has_nvidia_artifactory" in recipe.not_verified
    assert "(at tp=1 " in recipe.not_verified and "1 of 1 points" in recipe.not_verified
    assert baseline.findings(run.engine, run.version, run.recipes) == [
        ("vllm", run.version, "qwen3-next-80b-a3b", "", "not_verified_adapter")]


def test_a_run_narrowed_past_tp_1_still_compares_with_tp_1() -> None:
    """tp_block_size compares a point with the same configuration at tp 1: a run narrowed to tp 4
    plans that reference for its block only, so it finds what the full run finds (544 tokens at
    tp 1, 272 at 4, docs/findings/vllm-0.33.0.md) and the baseline entry is known, not stale; the reference is
    not reported as a point of the run."""
    run = engine.run(["qwen3-next-80b-a3b"], {"tp": [4], "dtype": ["auto"], "mamba_dtype": ["auto"],
                                             "backend": ["FLASH_ATTN"], "spec": [0], "pp": [1], "prefix": ["off"]})
    (point,) = run.recipes[0].points
    assert point.point["tp"] == 4
    assert [f.property for f in point.findings] == [engine.TP_BLOCK_SIZE]
    assert "272 tokens at tp=4 but 544 at tp=1" in point.findings[0].message
    found = baseline.findings(run.engine, run.version, run.recipes)
    cmp = baseline.compare(found, baseline.load(BASELINE), run.engine, run.version, baseline.ran(run.recipes))
    assert len(cmp.known) == 1 and not cmp.new and not cmp.stale


def test_a_vllm_whose_planning_api_moved_is_not_verified_not_a_finding(monkeypatch) -> None:
    """A vLLM whose planning functions reach for a name that is gone fails in its own code, but with
    no refusal (NameError is none): the model is NOT VERIFIED (adapter), naming vLLM's line, never a
    `boots` finding; an attribute missing from vLLM's own objects is not blamed on the layer shells."""
    import vllm.v1.core.kv_cache_planning as planning

    monkeypatch.delattr(planning, "_get_kv_cache_bytes_per_block")
    (recipe,) = engine.run(["qwen3-next-80b-a3b"], {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"],
                                                   "backend": ["FLASH_ATTN"], "spec": [0], "pp": [1],
                                                   "prefix": ["off"]}).recipes
    assert recipe.adapter and not recipe.points and recipe.not_verified is not None
    assert re.search(r"vllm/v1/core/kv_cache_planning\.py:\d+ .*NameError: .*_get_kv_cache_bytes_per_block",
                     recipe.not_verified), recipe.not_verified
    shell = planner._shell(QWEN.state_layer_class())
    with pytest.raises(StubUsed, match="which a layer sets in its constructor"):
        planner._check_shell_call(lambda: shell.prefix, "GDN layer state", {"layer": shell})
    missing = "no_such_answer"  # through getattr: the module lacks it, which mypy refuses in the dotted form
    with pytest.raises(AttributeError, match=missing):
        planner._check_shell_call(lambda: getattr(planning, missing), "GDN layer state", {"layer": shell})


def test_the_baseline_lists_exactly_what_these_points_find() -> None:
    run = engine.run(["qwen3-next-80b-a3b"], {"tp": [1, 4, 8], "dtype": ["fp8"], "mamba_dtype": ["float32"],
                                             "spec": [0, 3], "pp": [1]})
    found = baseline.findings(run.engine, run.version, run.recipes)
    cmp = baseline.compare(found, baseline.load(BASELINE), run.engine, run.version, baseline.ran(run.recipes))
    assert found and not cmp.new and not cmp.stale


@pytest.mark.parametrize(("fault", "expect"), [("vllm_hybrid_block_floor", "boots"),
                                               ("vllm_state_slab_by_payload", "no_overlap")])
def test_each_seeded_vllm_bug_is_flagged_and_the_release_is_clean(fault, expect) -> None:
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "backend": ["FLASH_ATTN"], "spec": [0],
            "pp": [1], "prefix": ["off"]}
    (clean,) = engine.run(["qwen3-next-80b-a3b"], only).recipes[0].points
    assert clean.verdict == "ok"
    with faults.inject(fault):
        run = engine.run(["qwen3-next-80b-a3b"], only)
    (broken,) = run.recipes[0].points
    assert expect in {f.property for f in broken.findings}
    assert fault in run.source
    if expect == "boots":  # vLLM's own bare assert, located: the attention page must hold the state page
        assert "vllm/platforms/interface.py:" in broken.findings[0].message


def test_speculative_tokens_widen_the_state_and_the_draft_keeps_pages() -> None:
    """Qwen3-Next with its MTP draft: each speculated token adds a conv row (8,192 bf16 values,
    16,384 B) to the GDN state, and the draft's one full-attention layer (vLLM's default of one MTP
    layer) joins the cache. At 2 tokens M = 5 x 16,384 + 1,048,576 = 1,130,496 B, so
    B = 16 x ceil(1,130,496 / 32,768) = 560 tokens."""
    planned = {spec: planner.plan(planner.Point(QWEN, 1, "auto", "auto", False, QWEN.backends[0], spec))
               for spec in (0, 2)}
    assert (planned[0].block_size, planned[2].block_size) == (544, 560)
    states = {f["shape"][0] for f in planned[2].documents[1]["fields"] if f["id"].endswith("state0")}
    assert states == {5}
    draft = [f for f in planned[2].documents[1]["fields"] if ".mtp.layers.0." in f["id"]]
    assert [f["shape"] for f in draft] == [[560, 1024]]
    assert not any(".mtp." in f["id"] for f in planned[0].documents[1]["fields"])


def test_padding_planned_without_the_speculative_widening_is_flagged() -> None:
    """vllm#57721 reintroduced: the block is aligned to the unwidened state (544 tokens, P =
    1,114,112 B) while the layers keep 2 speculative conv rows (1,130,496 B): vLLM's own assertion
    that the padded page holds the state fails. One token still fits (1,114,112 B exactly)."""
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "backend": ["FLASH_ATTN"], "spec": [1, 2],
            "prefix": ["off"], "draft_dtype": ["target"], "draft_backend": ["target"]}
    assert [p.verdict for p in engine.run(["qwen3-next-80b-a3b"], only).recipes[0].points] == ["ok", "ok"]
    with faults.inject("vllm_spec_padding_unwidened"):
        one, two = engine.run(["qwen3-next-80b-a3b"], only).recipes[0].points
    assert one.verdict == "ok" and [f.property for f in two.findings] == ["boots"]
    assert "vllm/v1/kv_cache_interface.py:" in two.findings[0].message


def test_a_pipeline_stage_without_attention_skips_the_alignment(monkeypatch) -> None:
    """vllm#51752, live in 0.33.0: at pp 8 vLLM's own split gives Kimi-Linear's stage 0 layers 0-2,
    all KDA, so that worker finds no attention backend and keeps the default block of 16 tokens
    (its state checkpoints every 16 tokens) while stages 1-7 align to 1,920. With the fix (every
    stage aligned as one that holds attention, vllm#51764) the stages agree."""
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["on"], "backend": ["FLASHMLA"],
            "pp": [8]}
    # the stages' padding is padding_bound's (a test of its own); this one is about their blocks
    (found,) = engine.run(["kimi-linear-48b-a3b"], only, None).recipes[0].points
    assert [f.property for f in found.findings] == [engine.PP_BLOCK_SIZE]
    assert found.findings[0].message.startswith("pipeline stages plan different block sizes (16 tokens at rank 0 "
                                                "(no attention layer among layers 0-2); 1920 tokens at rank 1, 2,")
    assert found.replay.endswith("prefix=on spec=0 pp=8")
    # at pp 2 (planned at every tp) both stages hold MLA layers and agree: 1,920 tokens at tp 1, 512
    # at tp 4, so the pp-2 pair differs across tp (tp_block_size) but no pp-2 point's stages do
    at_tp1, at_tp4 = engine.run(["kimi-linear-48b-a3b"], {**only, "tp": [1, 4], "pp": [2]}, None).recipes[0].points
    assert at_tp1.verdict == "ok" and [f.property for f in at_tp4.findings] == [engine.TP_BLOCK_SIZE]
    assert "block size 512 tokens at tp=4 but 1920 at tp=1" in at_tp4.findings[0].message
    original = planner.point_answers
    monkeypatch.setattr(planner, "point_answers",
                        lambda platform, cap, found, *facts: original(platform, cap, list(found), *facts))
    (fixed,) = engine.run(["kimi-linear-48b-a3b"], only, None).recipes[0].points
    assert fixed.verdict == "ok"


def test_every_state_reader_walks_the_plans_stride_and_a_flipped_entry_is_caught() -> None:
    """Each state reader is recorded from cited code; vLLM's conv, delta-rule and SSM kernels
    step by the view's stride(0), so by the padded page. Qwen3-Next at tp 1, bf16: the state page
    is padded from 1,097,728 B to 1,114,112 B, so a reader that walks by payload (LMCache#5166, the
    entry flipped) reads every page p >= 1 at the wrong bytes; at fp8 P = M and it is harmless."""
    for model in catalog.MODELS.values():
        assert {r.walks for r in model.readers} == {"page"} and backends.LMCACHE in model.readers
        assert all(re.search(r"(\S+:\d+|#\d+)", r.source) for r in model.readers)
    only: Only = {"tp": [1], "mamba_dtype": ["auto"], "backend": ["FLASH_ATTN"], "spec": [0], "pp": [1],
            "prefix": ["off"]}
    assert {p.verdict for p in engine.run(["qwen3-next-80b-a3b"], only).recipes[0].points} == {"ok"}
    with faults.inject("lmcache_walks_by_payload"):
        auto, fp8 = engine.run(["qwen3-next-80b-a3b"], only).recipes[0].points
    assert (auto.point["dtype"], fp8.point["dtype"], fp8.verdict) == ("auto", "fp8", "ok")
    assert {f.property for f in auto.findings} == {"consumer_stride"}
    assert "by their payload 1,097,728 B, but the plan's stride is 1,114,112 B" in auto.findings[0].message


def test_each_kernel_gets_a_page_its_own_source_allows() -> None:
    """Kimi-Linear at tp 1, bf16: vLLM's block is 1,920 tokens and FlashMLA's decode kernel takes
    64-token pages only (deepseek-ai/FlashMLA csrc/api/dense_decode.h:67), so the model runner
    must split the block into 30 kernel pages of 64; Triton's MLA decode takes any page."""
    flashmla = planner.plan(point(KIMI))
    triton = planner.plan(planner.Point(KIMI, 1, "auto", "auto", False, backends.TRITON_MLA))
    assert (flashmla.block_size, flashmla.kernel_tokens, triton.kernel_tokens) == (1920, 64, 1920)
    (kernel,) = {json.dumps(k) for f in flashmla.documents[1]["fields"] for k in f.get("kernels", [])}
    assert json.loads(kernel) == {"name": "flashmla_dense_decode", "tokens": 64, "block": 64, "max_tokens": 64}


def test_a_raised_block_handed_to_flashmla_is_flagged() -> None:
    """vllm#25811 reintroduced: select_common_block_size hands the kernel the manager's block."""
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1], "spec": [0]}
    with faults.inject("vllm_kernel_gets_raised_block"):
        run = engine.run(["kimi-linear-48b-a3b"], only)
    by_backend = {p.point["backend"]: p for p in run.recipes[0].points}
    assert by_backend["TRITON_MLA@sm_90"].verdict == "ok"  # its kernel takes any page
    bad = by_backend["FLASHMLA@sm_90"]
    assert {f.property for f in bad.findings} == {"kernel_page"}
    assert "handed pages of 1,920 tokens, past its limit of 64" in bad.findings[0].message
    assert by_backend["FLASH_ATTN_MLA@sm_90"].verdict == "ok"  # FA3 takes any page
    blackwell = by_backend["FLASHINFER_MLA@sm_100"]  # the GPU vllm#25811 was reported on
    assert {f.property for f in blackwell.findings} == {"kernel_page"}
    assert "flashinfer_mla_decode" in blackwell.findings[0].message
    assert "handed pages of 1,920 tokens, past its limit of 64" in blackwell.findings[0].message


def test_sm_100_flashinfer_mla_block_and_kernel_page_worked_by_hand() -> None:
    """FLASHINFER_MLA@sm_100 (first MLA choice there, cuda.py:123), bf16 cache and state, no prefix caching.
    MLA keeps one 576-value latent per token: A1 = (512 + 64) x 2 = 1,152 B, and the block is a multiple
    of 128 tokens. Kimi-Linear at tp 1: M = 3 x 12,288 x 2 (conv, bf16) + 32 x 128 x 128 x 4 (recurrent,
    float32) = 2,170,880 B, B = 128 x ceil(2,170,880 / 147,456) = 1,920, P = 1,920 x 1,152 = 2,211,840 B.
    Kimi-K3 at tp 2 (48 heads, within trtllm-gen's limit): M = 3 x 18,432 x 2 + 48 x 128 x 128 x 4 =
    3,256,320 B, B = 128 x 23 = 2,944, P = 3,391,488 B. FlashInferMLABackend declares kernel blocks
    32 and 64 (flashinfer_mla.py:204), so the model runner hands FlashInfer 64-token pages (30 and 46
    of them), within the 32 or 64 its MLA decode takes."""
    for model, tp, block, page in ((KIMI, 1, 1920, 2_211_840), (K3, 2, 2944, 3_391_488)):
        planned = planner.plan(planner.Point(model, tp, "auto", "auto", False, backends.FLASHINFER_MLA))
        assert (planned.block_size, planned.mamba_padded, planned.kernel_tokens) == (block, page, 64)
        kv = next(f for f in planned.documents[1]["fields"] if f["id"].endswith(".kv"))
        assert (kv["shape"], kv["stride"]) == ([block, 576], page)
        assert kv["kernels"] == [{"name": "flashinfer_mla_decode", "tokens": 64, "block": 32, "max_tokens": 64}]


def test_sm_90_and_sm_100_plan_in_one_process_each_with_its_own_answers() -> None:
    """vLLM modules bind current_platform when first imported (kda.py among them); kvproof's one
    platform answers for the point being planned, so K3's KDA layers resolve their prefill backend
    on each point's GPU (FlashKDA on both, kda.py:363) and sm_90 plans the same after sm_100."""
    first = planner.plan(point(K3, tp=2))  # first, so kda.py is first imported under planning, as in a run
    from vllm.models.kimi_k3.nvidia import kda

    blackwell = planner.plan(planner.Point(K3, 2, "auto", "auto", True, backends.FLASHINFER_MLA))
    again = planner.plan(point(K3, tp=2))
    assert kda.current_platform is platform.cuda_assumed(platform.modules())
    assert first.documents == again.documents and blackwell.block_size == first.block_size == 2944
    with pytest.raises(StubUsed, match="outside planning a point"):
        kda.current_platform.get_device_capability()


def test_flash_attn_mla_is_planned_only_at_the_kv_dtypes_its_class_declares() -> None:
    """FlashAttnMLABackend declares auto, float16 and bfloat16 (flashattn_mla.py:42): at fp8 vLLM's
    validate_configuration rejects it and the platform selects FLASHMLA, so no fp8 point assumes it.
    Its FA3 kernel takes any page, so it is handed the whole block."""
    assumed = {(p["backend"], p["dtype"]) for p in engine.points(KIMI)}
    assert ("FLASH_ATTN_MLA@sm_90", "auto") in assumed and ("FLASH_ATTN_MLA@sm_90", "fp8") not in assumed
    assert ("FLASHINFER_MLA@sm_100", "fp8") in assumed
    assert planner.plan(planner.Point(KIMI, 1, "auto", "auto", False, backends.FLASH_ATTN_MLA)).kernel_tokens == 1920


def test_a_stand_in_raises_by_name_when_used_and_flashinfer_stays_absent() -> None:
    """The guarded stand-ins let the backends' modules import; a call or attribute read raises
    StubUsed naming the stand-in, and they are gone from sys.modules once the import is done."""
    from vllm.utils.flashinfer import has_flashinfer

    flashattn_mla = sys.modules[backends.FLASH_ATTN_MLA.load().__module__]
    flashinfer_mla = sys.modules[backends.FLASHINFER_MLA.load().__module__]
    with pytest.raises(StubUsed, match=r"fa_utils\.flash_attn_varlen_func"):
        flashattn_mla.flash_attn_varlen_func()
    with pytest.raises(StubUsed, match=r"flashinfer\.decode\.trtllm_batch_decode_with_kv_cache_mla\.shape"):
        flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla.shape  # noqa: B018
    assert "flashinfer" not in sys.modules and not has_flashinfer()


def test_an_attention_page_needs_an_exact_stride_only_where_vllm_splits_it() -> None:
    """Every kernel here steps pages by its tensor's stride(0), so a padded page is read right; vLLM
    addresses split kernel pages at a payload-sized step inside the block, so there the page must be
    dense. Kimi-Linear at tp 1, bf16: FlashMLA takes the 1,920-token block as 64-token pages (split:
    exact), Triton MLA the whole block (not split); Qwen3-Next's FlashAttention takes its 544 (not
    split). State fields never need it: their readers step by the page."""
    def exact(model: catalog.Model, backend: catalog.Backend) -> set[tuple[str, bool]]:
        doc = planner.plan(planner.Point(model, 1, "auto", "auto", False, backend)).documents[1]
        return {(f["id"].rsplit(".", 1)[-1][:5], f["exact_stride"]) for f in doc["fields"]}

    assert exact(KIMI, backends.FLASHMLA) == {("kv", True), ("state", False)}
    assert exact(KIMI, backends.TRITON_MLA) == {("kv", False), ("state", False)}
    assert exact(KIMI, backends.FLASH_ATTN_MLA) == {("kv", False), ("state", False)}  # FA3 takes the whole block
    assert exact(KIMI, backends.FLASHINFER_MLA) == {("kv", True), ("state", False)}  # 64-token pages on sm_100
    assert exact(QWEN, backends.FLASH_ATTN) == {("kv", False), ("state", False)}


def test_a_padded_page_split_into_kernel_pages_is_flagged() -> None:
    """vllm_split_page_padded: every layer-outer block reserves two pages. Kimi-Linear at tp 1, bf16:
    P = 1,920 x 1,152 = 2,211,840 B becomes a stride of 4,423,680 B. FlashMLA's split 64-token pages
    then miss the block (exact_stride); Triton MLA steps by the stride and reads every page right."""
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1], "spec": [0]}
    with faults.inject("vllm_split_page_padded"):
        run = engine.run(["kimi-linear-48b-a3b"], only)
    by_backend = {p.point["backend"]: p for p in run.recipes[0].points}
    for whole in ("TRITON_MLA@sm_90", "FLASH_ATTN_MLA@sm_90"):  # read right, but half the memory is padding
        assert {f.property for f in by_backend[whole].findings} == {"padding_bound"}
    for split in ("FLASHMLA@sm_90", "FLASHINFER_MLA@sm_100"):
        bad = [f for f in by_backend[split].findings if f.property == "exact_stride"]
        assert {f.property for f in by_backend[split].findings} == {"exact_stride", "padding_bound"}
        assert len(bad) == 7  # Kimi-Linear's 7 MLA layers
        assert "needs stride 2,211,840 B (its payload) but gets 4,423,680 B" in bad[0].message


@pytest.mark.parametrize(("args", "message"), [
    (["--recipe", "llama"], "plans no vllm model 'llama'"),
    (["--assume", "backend=CUTLASS_MLA"], "vllm takes backend="),
    (["--assume", "trtllm=maybe"], "trtllm=on|off"),
    (["--engine-path", "/tmp"], "no vllm/__init__.py there"),
    # 5, 10, 15 and 30 are the OLMo Hybrid members' (30 heads); no model takes 7
    (["--tp", "7"], "has tp 7; tp takes 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 16, 24, 30, 32, 48, 64, 96"),
    (["--dtype", "bogus"], "has dtype bogus; dtype takes auto, fp8"),
    # the Falcon-H1 member speculates up to 2 tokens
    (["--recipe", "qwen3-next-80b-a3b", "falcon-h1-0.5b-family-0", "--assume", "spec=3"],
     "--recipe falcon-h1-0.5b-family-0: the narrowing leaves it no point"),
])
def test_bad_input_is_one_line_and_exit_2(args, message) -> None:
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", *args], capture_output=True,
                          text=True, check=False, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_checkout_plans_from_its_own_files(tmp_path) -> None:
    """--engine-path: the checkout's vllm package comes first on sys.path (here a link to the
    installed one, so the findings must be the release's); its version is its build stamp."""
    import vllm

    (tmp_path / "vllm").symlink_to(Path(vllm.__file__).parent)
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--engine-path", str(tmp_path),
                           "--recipe", "qwen3-next-80b-a3b", "--tp", "1", "4", "--dtype", "auto", "--assume",
                           "backend=FLASH_ATTN", "mamba_dtype=auto", "spec=0", "pp=1", "prefix=off", "--baseline",
                           str(BASELINE),
                           "--json"],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["source"] == f"vllm 0.33.0 (checkout {tmp_path.resolve()}, planned on CPU)"
    assert len(report["baselined"]) == 1 and not report["new_findings"]


def test_every_backend_names_the_vllm_line_that_selects_it() -> None:
    """The platform's priority line, or, for a backend its layer names itself (Qwen4-Exp's QSA), the layer's."""
    for model in catalog.MODELS.values():
        for backend in model.backends:
            own = backend.name == "QWEN4_EXP_QSA_TRITON"
            assert re.search(r"vllm/models/\S+\.py:\d+" if own else r"vllm/platforms/cuda\.py:\d+", backend.why)
            assert backend.load().get_name() == backend.name
            assert backend.kernels and all(re.search(r"\S+/\S+@[\w.]+ \S+:\d+", k.source) for k in backend.kernels)


def test_unknown_recipe_is_an_engine_error_before_any_planning() -> None:
    with pytest.raises(EngineError, match="it has: qwen3-next-80b-a3b, kimi-linear-48b-a3b, nemotron-h"):
        engine.run(["nope"])


@pytest.mark.parametrize("model", [KIMI, K3], ids=lambda m: m.recipe)
def test_vllms_own_validation_selects_flashinfer_mla_first_on_sm_100(model, tmp_path) -> None:
    """vLLM's own BackendClass.validate_configuration (backend.py:279), run under the sm_100 platform
    with the model's config current (its supports_combination reads qk_nope_head_dim): FLASHINFER_MLA,
    first on sm_100's MLA list (cuda.py:123), accepts both models at auto and fp8, so the platform
    selects it there. FLASH_ATTN_MLA rejects fp8 by its declared kv dtypes."""
    import torch
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.config.cache import CacheDType
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backend import AttentionBackend
    from vllm.v1.attention.selector import AttentionSelectorConfig

    (tmp_path / "config.json").write_text(model.config_text(), encoding="utf-8")
    v = platform.modules()
    flashinfer_mla, flash_attn_mla = backends.FLASHINFER_MLA.load(), backends.FLASH_ATTN_MLA.load()
    with platform.point_answers(platform.cuda_assumed(v), (10, 0), [flashinfer_mla]):
        model_config = ModelConfig(model=str(tmp_path), skip_tokenizer_init=True, dtype="auto")
        dtype = model_config.dtype
        assert isinstance(dtype, torch.dtype)  # ModelConfig resolves "auto" to the checkpoint's dtype
        with set_current_vllm_config(VllmConfig(model_config=model_config)):
            def reasons(backend: type[AttentionBackend], kv: CacheDType, capability: tuple[int, int]) -> list[str]:
                selector = AttentionSelectorConfig(head_size=model_config.get_head_size(), dtype=dtype,
                                                   kv_cache_dtype=kv, block_size=None, use_mla=True)
                return backend.validate_configuration(
                    device_capability=DeviceCapability(*capability), **selector._asdict())

            assert model_config.get_head_size() == 576
            assert reasons(flashinfer_mla, "auto", (10, 0)) == reasons(flashinfer_mla, "fp8", (10, 0)) == []
            assert "kv_cache_dtype not supported" in reasons(flash_attn_mla, "fp8", (9, 0))


def fi(model: catalog.Model, backend: catalog.Backend = backends.FLASHINFER_SM100, trtllm: bool | None = True,
       cuda_runtime: int | None = 13, prefix: bool = False, tp: int = 1, dtype: str = "auto") -> planner.Point:
    return planner.Point(model, tp, dtype, "auto", prefix, backend, trtllm=trtllm,
                         cuda_runtime=cuda_runtime if model.cuda_runtime_at else None)


def test_sm_100_flashinfer_block_and_kernel_page_worked_by_hand() -> None:
    """FLASHINFER@sm_100 (first non-MLA choice there, cuda.py:162), bf16, tp 1. Both models keep GQA
    attention of 2 (Qwen3-Next, head 256) and 8 (Nemotron-H, head 128) KV heads: A1 = 2 x 2 x 256 x 2 =
    2,048 B and 8 x 2 x 128 x 2 = 4,096 B per token; FlashInfer's smallest kernel block is 16.

    Qwen3-Next, M = 1,097,728 B. With prefix caching on a CUDA 13 runtime the GDN layer prefills with
    FlashInfer (qwen_gdn_linear_attn.py:250-254), which checkpoints every 64 tokens: B = 64 x ceil(1,097,728
    / (64 x 2,048)) = 576, P = 1,179,648 B; on CUDA 12 it prefills with Triton, no checkpoints: B = 16 x 34
    = 544. Nemotron-H: conv (3, 16,384 + 2 x 8 x 256) bf16 = 122,880 B plus SSM (256, 64, 256) float32 =
    16,777,216 B: M = 16,900,096 B, B = 16 x ceil(16,900,096 / 65,536) = 4,128, P = 16,908,288 B.

    The kernel page is the largest declared size dividing the block (select_common_block_size): 576 -> 64,
    544 -> 32, 4,128 -> 32 (also with TRTLLM's larger pages on offer: no multiple of 128). FA2 takes any
    page; trtllm-gen a power of two."""
    cases = ((fi(QWEN, prefix=True), 576, 1_179_648, 64, 1024), (fi(QWEN, prefix=True, cuda_runtime=12), 544,
             1_114_112, 32, 1024), (fi(NEMOTRON, trtllm=False), 4128, 16_908_288, 32, 2048))
    for at, block, page, kernel, per_token in cases:
        planned = planner.plan(at)
        assert (planned.block_size, planned.mamba_padded, planned.kernel_tokens) == (block, page, kernel)
        kv = next(f for f in planned.documents[1]["fields"] if f["id"].endswith(".kv"))
        assert (kv["shape"], kv["stride"]) == ([block, per_token], page)
        names = [k["name"] for k in kv["kernels"]]
        assert names == (["flashinfer_fa2_paged", "trtllm_gen_fmha"] if at.trtllm else ["flashinfer_fa2_paged"])
        assert {k["tokens"] for k in kv["kernels"]} == {kernel}


# A fresh interpreter that imports vLLM's Qwen3.5 module outside any point first (as a caller inspecting the class
# may), so the GDN layer's module binds this machine's platform, then plans Qwen3-Next's sm_100 point above.
FIRST_IMPORTED_OUTSIDE_A_POINT = """
import importlib, json
from kvproof.engines.vllm import backends, catalog, planner, stand_ins
planner.modules()
with stand_ins.planning():
    importlib.import_module("vllm.model_executor.models.qwen3_5")
m = catalog.MODELS["qwen3-next-80b-a3b"]
p = planner.plan(planner.Point(m, 1, "auto", "auto", True, backends.FLASHINFER_SM100, trtllm=True, cuda_runtime=13))
print(json.dumps([p.block_size, p.asked]))
"""


def test_the_gdn_prefill_backend_is_the_points_whenever_its_module_was_first_imported() -> None:
    """qwen_gdn_linear_attn binds current_platform when first imported; imported outside a point it holds this
    machine's platform, which is no CUDA one, and would answer Triton (a 544-token block, the CUDA runtime never
    asked). The point's platform answers instead: FlashInfer's GDN prefill on CUDA 13, 576 tokens."""
    proc = subprocess.run([sys.executable, "-c", FIRST_IMPORTED_OUTSIDE_A_POINT], capture_output=True, text=True,
                          check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [576, {"cuda_runtime": 13, "trtllm": True}]

def test_the_trtllm_assumption_is_what_vllm_asks_and_the_config_is_current(tmp_path) -> None:
    """FlashInferBackend.get_supported_kernel_block_sizes (flashinfer.py:585) offers pages up to 1,024 only
    on sm_100 with TRTLLM obtainable and GQA, and only with a vLLM config current (as in vLLM's worker):
    the point's trtllm answer reaches vLLM's own supports_trtllm_attention through has_nvidia_artifactory
    (never a network request), and vLLM's function is back in place after the point."""
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.utils import flashinfer as vllm_flashinfer
    from vllm.v1.worker.utils import select_common_block_size

    own, bound = vllm_flashinfer.has_nvidia_artifactory, vllm_flashinfer.current_platform  # bound at its import
    backend = backends.FLASHINFER_SM100.load()
    (tmp_path / "config.json").write_text(QWEN.config_text(), encoding="utf-8")

    def sizes(capability: tuple[int, int], trtllm: bool, current: bool = True) -> tuple[list, int]:
        with platform.point_answers(platform.cuda_assumed(platform.modules()), capability, [backend], trtllm):
            config = VllmConfig(model_config=ModelConfig(model=str(tmp_path), skip_tokenizer_init=True,
                                                         dtype="auto"))
            with set_current_vllm_config(config) if current else contextlib.nullcontext():
                return backend.get_supported_kernel_block_sizes(), select_common_block_size(1024, [backend])

    assert sizes((10, 0), True) == ([16, 32, 64, 128, 256, 512, 1024], 1024)
    assert sizes((10, 0), False) == ([16, 32, 64], 64)
    assert sizes((9, 0), True) == ([16, 32, 64], 64)  # XQA decode only on sm_90: no large pages
    assert sizes((10, 0), True, current=False) == ([16, 32, 64], 64)  # what planning without the config saw
    assert vllm_flashinfer.has_nvidia_artifactory is own and vllm_flashinfer.current_platform is bound


def test_a_point_that_assumes_no_deployment_fact_refuses_to_guess() -> None:
    """FLASHINFER asks has_nvidia_artifactory, Qwen3-Next's GDN layer the CUDA runtime on sm_100: a point
    without the assumption raises StubUsed naming the axis, so no answer is ever this machine's."""
    with pytest.raises(StubUsed, match="give the point a trtllm axis"):
        planner.plan(fi(NEMOTRON, trtllm=None))
    with pytest.raises(StubUsed, match="give the point a cuda_runtime axis"):
        planner.plan(planner.Point(QWEN, 1, "auto", "auto", True, backends.FLASHINFER_SM100, trtllm=False))


def test_flashinfer_points_carry_both_values_of_each_assumption() -> None:
    """trtllm at every FLASHINFER point, cuda_runtime at Qwen3-Next's sm_100 points only (where vLLM asks)."""
    for model in (QWEN, NEMOTRON):
        grid = engine.points(model, {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["on"],
                                     "pp": [1], "spec": [0] if model.speculative else None})
        seen = {(p["backend"], p.get("trtllm"), p.get("cuda_runtime")) for p in grid}
        runtimes = (12, 13) if model is QWEN else (None,)
        assert seen == {("FLASH_ATTN@sm_90", None, None), ("TRITON_ATTN@sm_90", None, None),
                        *{("FLASHINFER@sm_90", t, None) for t in ("on", "off")},
                        *{("FLASHINFER@sm_100", t, c) for t in ("on", "off") for c in runtimes}}
    stages = {(p["tp"], p["pp"]) for p in engine.points(NEMOTRON, {"backend": ["FLASHINFER"]}) if p["pp"] > 1}
    assert stages == {(1, 2)}  # its axes multiply its points: pp 2 at tp 1 only (FLASH_ATTN plans every stage)
    point = next(p for p in engine.run(["nemotron-h-56b-base-8k"], {"tp": [1], "dtype": ["auto"],
                 "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1], "backend": ["FLASHINFER@sm_100"],
                 "trtllm": ["on"]}).recipes[0].points)
    assert point.point["trtllm"] == "on" and point.replay.endswith("pp=1 trtllm=on")


@pytest.mark.parametrize("model", [QWEN, NEMOTRON], ids=lambda m: m.recipe)
def test_vllms_own_validation_accepts_flashinfer_for_both_gqa_models(model, tmp_path) -> None:
    """vLLM's own validate_configuration (backend.py:279): FLASHINFER accepts both models' head sizes
    (256, 128) and dtype at auto and fp8 on sm_90 and sm_100, so on sm_100 it is selected first
    (cuda.py:162) and FLASH_ATTN and TRITON_ATTN behind it are not reached."""
    import torch
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.selector import AttentionSelectorConfig

    (tmp_path / "config.json").write_text(model.config_text(), encoding="utf-8")
    backend = backends.FLASHINFER_SM100.load()
    for capability in ((9, 0), (10, 0)):
        for trtllm in (True, False):
            with platform.point_answers(platform.cuda_assumed(platform.modules()), capability, [backend], trtllm, 13):
                model_config = ModelConfig(model=str(tmp_path), skip_tokenizer_init=True, dtype="auto")
                dtype = model_config.dtype
                assert isinstance(dtype, torch.dtype)  # ModelConfig resolves "auto" to the checkpoint's dtype
                with set_current_vllm_config(VllmConfig(model_config=model_config)):
                    for kv in ("auto", "fp8"):
                        selector = AttentionSelectorConfig(head_size=model_config.get_head_size(),
                                                           dtype=dtype, kv_cache_dtype=kv,
                                                           block_size=None, use_mla=False)
                        assert backend.validate_configuration(
                            device_capability=DeviceCapability(*capability), **selector._asdict()) == []


def test_a_raised_block_handed_to_flashinfers_trtllm_kernels_is_flagged() -> None:
    """vllm#25811 as reported (Qwen3-Next on GB200) reintroduced: the model runner hands FlashInfer the
    manager's 544-token block. trtllm-gen takes power-of-two pages only (kernelParams.h:887), FA2 any page,
    so only the TRTLLM-on point is flagged; on sm_90 XQA's 128-token limit flags it too."""
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1], "spec": [0],
            "backend": ["FLASHINFER"]}
    clean = engine.run(["qwen3-next-80b-a3b"], only).recipes[0].points
    assert {p.verdict for p in clean} == {"ok"} and len(clean) == 2 + 4  # sm_90 x trtllm, sm_100 x trtllm x cuda
    with faults.inject("vllm_flashinfer_gets_raised_block"):
        run = engine.run(["qwen3-next-80b-a3b"], only)
    found = {(p.point["backend"], p.point["trtllm"]): p for p in run.recipes[0].points
             if p.point.get("cuda_runtime", 13) == 13}
    assert found[("FLASHINFER@sm_100", "off")].verdict == found[("FLASHINFER@sm_90", "off")].verdict == "ok"
    blackwell = found[("FLASHINFER@sm_100", "on")].findings
    assert len(blackwell) == 12 and {f.property for f in blackwell} == {"kernel_page"}  # one per attention layer
    assert {f.message.split(": kernel ")[1] for f in blackwell} == {
        "trtllm_gen_fmha is handed pages of 544 tokens, not a power of two as its source requires"}
    hopper = {f.message.split(": kernel ")[1] for f in found[("FLASHINFER@sm_90", "on")].findings}
    assert hopper == {"flashinfer_xqa_decode is handed pages of 544 tokens, past its limit of 128 tokens per page",
                      "flashinfer_xqa_decode is handed pages of 544 tokens, not a power of two as its source requires"}


def test_a_run_spread_over_processes_is_the_run_of_one_with_its_faults_on() -> None:
    """A worker process starts as the run's own did and switches on the faults on there (faults.inject
    reaches no other process by itself): two processes give what one gives, point for point, the
    seeded bug's findings included."""
    only: Only = {"tp": [1, 2], "dtype": ["auto"], "mamba_dtype": ["auto"], "backend": ["FLASHMLA"], "pp": [1, 2]}
    with faults.inject("vllm_kernel_gets_raised_block"):
        one, two = [engine.run(["kimi-linear-48b-a3b"], only, workers=n) for n in (1, 2)]
    assert [r.as_dict() for r in two.recipes] == [r.as_dict() for r in one.recipes]
    assert {f.property for p in two.recipes[0].points for f in p.findings} >= {"kernel_page"}


def test_a_point_is_planned_once_for_the_assumptions_its_planning_never_asked(monkeypatch) -> None:
    """vLLM never asks whether FlashInfer's TRTLLM kernels are obtainable at FLASHINFER@sm_90, so there
    trtllm on and off are one configuration to it: planned once, each read with its own kernels (XQA's
    decode only where on). On sm_100 it asks, and each value is planned."""
    planned: list[planner.Point] = []
    original = planner.plan

    def spy(point: planner.Point, *rest: Any) -> planner.Planned:
        planned.append(point)
        return original(point, *rest)

    monkeypatch.setattr(planner, "plan", spy)
    plans = planner.Plans()
    sm90, sm100 = (next(b for b in QWEN.backends if b.label == label) for label in ("FLASHINFER@sm_90",
                                                                                      "FLASHINFER@sm_100"))
    on, off = (plans.plan(planner.Point(QWEN, 1, "auto", "auto", False, sm90, trtllm=t)) for t in (True, False))
    assert len(planned) == 1 and on.asked == {} and off.configs is on.configs
    kernels = [{k["name"] for f in p.documents[1]["fields"] for k in f.get("kernels", [])} for p in (on, off)]
    assert kernels == [{"flashinfer_fa2_paged", "flashinfer_fa3_paged", "flashinfer_xqa_decode"},
                       {"flashinfer_fa2_paged", "flashinfer_fa3_paged"}]
    asked = [plans.plan(planner.Point(QWEN, 1, "auto", "auto", False, sm100, trtllm=t, cuda_runtime=13)).asked
             for t in (True, False)]
    assert len(planned) == 3 and asked == [{"cuda_runtime": 13, "trtllm": True}, {"cuda_runtime": 13, "trtllm": False}]


def test_a_plan_that_pickles_as_one_checked_before_is_not_checked_again(monkeypatch) -> None:
    """Kimi-Linear plans the same documents with prefix caching on and off at FLASHMLA tp 1: the
    second point takes the first one's verdict, with its own point and replay."""
    checked: list[dict] = []
    original = engine.verdict.planned

    def spy(recipe: str, point: dict, *rest: Any) -> engine.PointResult:
        checked.append(point)
        return original(recipe, point, *rest)

    monkeypatch.setattr(engine.verdict, "planned", spy)
    only: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "backend": ["FLASHMLA"], "pp": [1],
                  "spec": [0]}
    off, on = engine.run(["kimi-linear-48b-a3b"], only).recipes[0].points
    assert [p["prefix"] for p in checked] == ["off"] and (off.point["prefix"], on.point["prefix"]) == ("off", "on")
    assert on.replay == off.replay.replace("prefix=off", "prefix=on") and on.findings == off.findings


def test_a_models_config_is_built_once_for_the_assumptions_building_it_never_asked(monkeypatch) -> None:
    """At FLASHINFER@sm_100 vLLM asks both assumptions while it plans a Qwen3-Next point, and none while it
    builds the ModelConfig: the four points build it once, and each is planned as it is alone."""
    config = platform.modules().config
    built: list[None] = []
    original = config.ModelConfig

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(None)
        return original(*args, **kwargs)

    monkeypatch.setattr(config, "ModelConfig", counted)
    sm100 = next(b for b in QWEN.backends if b.label == "FLASHINFER@sm_100")
    points = [planner.Point(QWEN, 1, "auto", "auto", False, sm100, trtllm=t, cuda_runtime=c)
              for t in (True, False) for c in (12, 13)]
    plans = planner.Plans()
    shared = [plans.plan(p) for p in points]
    assert len(built) == 1
    alone = [planner.plan(p) for p in points]
    assert [(p.documents, p.asked) for p in shared] == [(p.documents, p.asked) for p in alone]


def test_a_built_config_serves_only_points_with_the_answers_it_depends_on() -> None:
    """A build that asked an assumption is built again at another answer, and what is built from it
    depends on that answer too, though building it asks nothing."""
    sm100 = next(b for b in QWEN.backends if b.label == "FLASHINFER@sm_100")
    on, off = (planner.Point(QWEN, 1, "auto", "auto", False, sm100, trtllm=t) for t in (True, False))
    asks_on, asks_off = (platform.Answers((10, 0), [], t) for t in (True, False))

    builds = itertools.count()

    def built() -> bytes:  # what a build keeps: a pickle, a new one each build
        return f"build {next(builds)}".encode()

    def asking(point: planner.Point, answers: platform.Answers) -> Any:
        def build() -> bytes:
            answers.asked["trtllm"] = point.trtllm  # as the platform records an answer it gives
            return built()
        return build

    made: planner.ModelConfigs = {}
    top_on = planner._made(made, ("model",), on, asks_on, asking(on, asks_on))
    top_off = planner._made(made, ("model",), off, asks_off, asking(off, asks_off))
    assert top_on[0] != top_off[0] and top_off[1] == {"trtllm": False} and asks_off.asked == {"trtllm": False}
    drafted_on = planner._made(made, ("model", 2), on, asks_on, built, top_on[1])
    drafted_off = planner._made(made, ("model", 2), off, asks_off, built, top_off[1])
    assert drafted_on[0] != drafted_off[0] and drafted_on[1] == {"trtllm": True}
    assert planner._made(made, ("model", 2), on, asks_on, built, top_on[1])[0] is drafted_on[0]


def test_plans_give_what_planning_each_point_alone_gives() -> None:
    """planner.Plans builds a model's ModelConfig once per backend (and answers building it asked) and hands each point
    its own copy, which the point's VllmConfig changes: the plans are those of each point planned
    alone (two tps, a draft's tokens, a pipeline's two stages); a drafted point's three configs are built
    once per tp and tokens and copied to each point that differs in its cache only (the kv dtype)."""
    backend = QWEN.backends[0]
    points = [planner.Point(QWEN, tp, dtype, "auto", False, backend, spec, pp, rank)
              for tp, dtype, spec, pp, rank in ((1, "auto", 0, 1, 0), (2, "auto", 0, 1, 0), (1, "auto", 2, 1, 0),
                                                (1, "fp8", 2, 1, 0), (2, "fp8", 2, 1, 0), (1, "auto", 0, 2, 0),
                                                (1, "auto", 0, 2, 1))]
    plans = planner.Plans()
    shared = [plans.plan(p) for p in points]
    alone = [planner.plan(p) for p in points]
    assert [(p.block_size, p.documents) for p in shared] == [(p.block_size, p.documents) for p in alone]


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads processes from /proc")
def test_a_worker_ends_with_the_run_that_started_it() -> None:
    """A run killed mid-way (a CI timeout, SIGKILL) leaves no worker behind: each watches its parent."""
    run = subprocess.Popen([sys.executable, "-c", "from kvproof.engines.vllm import engine; "
                            "engine.run(['qwen3-next-80b-a3b'], workers=2)"])

    def children() -> list[int]:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == run.pid:
                    found.append(int(stat.parent.name))
        return found

    try:
        for _ in range(600):
            # a forked worker has its run's command line, a spawned one spawn_main's
            workers = [pid for pid in children() if (command := Path(f"/proc/{pid}/cmdline").read_bytes()) ==
                       Path(f"/proc/{run.pid}/cmdline").read_bytes() or b"spawn_main" in command]
            if workers:
                break
            time.sleep(0.1)
        assert workers, "the run started no worker within 60 s"
    finally:
        run.kill()
        run.wait()
    def alive(pid: int) -> bool:  # a zombie has ended: only its parent's wait is left
        with contextlib.suppress(OSError):
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        return False

    for _ in range(300):
        if not any(alive(pid) for pid in workers):
            return
        time.sleep(0.1)
    raise AssertionError(f"workers {workers} outlived the run")


def _die(*_: Any) -> list[engine.Outcome]:
    os._exit(9)


def test_a_worker_killed_mid_run_is_an_error_of_the_run_not_of_the_adapter(monkeypatch) -> None:
    """A worker that dies (out of memory, a signal) leaves its points unplanned: the run says so and
    to rerun, not that kvproof's adapter must follow a changed vLLM."""
    if engine._START != "fork":
        pytest.skip("a monkeypatch reaches a worker only when it is forked")
    monkeypatch.setattr(engine, "_plan_chunk", _die)  # in the worker only: this process plans its own chunks
    only: Only = {"tp": [1, 2], "dtype": ["auto"], "mamba_dtype": ["auto"], "backend": ["FLASHMLA"], "pp": [1]}
    with pytest.raises(EngineError, match=r"a worker process planning the run ended abruptly .*rerun") as raised:
        engine.run(["kimi-linear-48b-a3b"], only, workers=2)
    assert "adapter" not in str(raised.value)


def test_dtype_sizes_are_vllms_own_answers_kept() -> None:
    """The planner asks get_dtype_size for every layer each time it sizes a page; the kept answers are
    torch's element sizes, and every vLLM module that binds the function by name binds the kept one."""
    import torch

    v = platform.modules()
    kept = v.torch_utils.get_dtype_size
    assert kept.cache_info() is not None and v.kvi.get_dtype_size is kept and v.planning.get_dtype_size is kept
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.uint8, torch.int64):
        assert kept(dtype) == kept.__wrapped__(dtype) == torch.tensor([], dtype=dtype).element_size()
