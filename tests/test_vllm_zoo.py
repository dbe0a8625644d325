"""`verify engine vllm` over the hybrid zoo: the models vLLM 0.33.0 serves that have a published
config (engines/vllm/models/SOURCES.md), planned as the first four are; the Qwen3.5 / 3.6 ones with
kvproof's guarded torchvision stand-in, which planning them never uses."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import subprocess
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from transformers import AutoConfig
from transformers.utils.import_utils import is_torchvision_available

from kvproof.engines.stubs import StubUsed
from kvproof.engines.verdict import EngineRun
from kvproof.engines.vllm import catalog, engine, planner, stand_ins
from kvproof.impl import faults

Only = dict[str, Sequence[Any] | None]
QWEN3_5 = ("qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b", "qwen3.6-27b-nvfp4",
           "qwen3.6-35b-a3b-nvfp4")
ZOO = ("jamba-v0.1", "nemotron-3-nano-30b-a3b-bf16", "nemotron-3-super-120b-a12b-fp8",
       "nemotron-3-ultra-550b-a55b-bf16", "nemotron-3.5-lightning-30b-a3b-nvfp4", *QWEN3_5)
JAMBA = catalog.MODELS["jamba-v0.1"]
TP1: Only = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "backend": ["FLASH_ATTN"], "pp": [1],
             "prefix": ["off"], "draft_dtype": ["target"], "draft_backend": ["target"]}
IMAGE_PROCESSOR = "transformers.models.qwen2_vl.image_processing_qwen2_vl"  # what binds torchvision (:26)


def _hf(model: catalog.Model, tmp_path: Any) -> Any:
    """The model's config as transformers reads it from the folder vLLM reads."""
    (tmp_path / "config.json").write_text(model.config_text(), encoding="utf-8")
    return AutoConfig.from_pretrained(tmp_path)


def _states(planned: planner.Planned) -> dict[str, list[tuple[int, ...]]]:
    """Each state layer's state shapes, as kvproof's plan document records them."""
    out: dict[str, list[tuple[int, ...]]] = {}
    for f in planned.documents[1]["fields"]:
        if not f["id"].endswith(".kv"):
            out.setdefault(f["id"].rsplit(".state", 1)[0], []).append(tuple(f["shape"]))
    return out


@pytest.mark.parametrize("recipe", ZOO)
def test_each_zoo_model_plans_at_tp_1_and_every_plan_holds(recipe: str) -> None:
    # every zoo model speculates: by its MTP draft, or by ngram (Jamba, Nemotron-3-Nano)
    (result,) = engine.run([recipe], {**TP1, "spec": [0, 1]}, workers=1).recipes
    assert result.not_verified is None, result.not_verified
    assert len(result.points) == 2
    assert all(p.verdict == "ok" for p in result.points), [f.message for p in result.points for f in p.findings]
    assert all(p.parents and p.parents[1] > 1000 for p in result.points)


def test_every_zoo_model_is_in_the_default_run_and_every_held_config_is_accounted_for() -> None:
    assert set(ZOO) <= set(catalog.MODELS)
    held = {m.config for m in catalog.MODELS.values()} | {m.draft_config for m in catalog.MODELS.values()}
    sources = (resources.files("kvproof.engines") / "vllm/models/SOURCES.md").read_text()
    for name in resources.files("kvproof.engines").joinpath("vllm/models").iterdir():
        if name.name.endswith(".json"):
            assert f"vllm/models/{name.name}" in held, name.name
            assert name.name in sources, name.name
    for recipe in QWEN3_5:
        assert json.loads(catalog.MODELS[recipe].config_text())["architectures"][0].startswith("Qwen3_5")


def test_the_torchvision_stand_in_raises_by_name_even_where_the_use_was_swallowed() -> None:
    """vLLM's Qwen3.5 module imports while a point plans, through transformers' Qwen2-VL image
    processor, which binds torchvision's functional module; reading it raises StubUsed naming it, a
    use vLLM's registry would swallow is raised once the point is done, and afterwards torchvision is
    as absent as before (transformers' own answer included)."""
    with pytest.raises(StubUsed) as raised, stand_ins.planning():
        importlib.import_module("vllm.model_executor.models.qwen3_5")
        functional = sys.modules[IMAGE_PROCESSOR].tvF
        with pytest.raises(StubUsed, match=r"planning read torchvision\.transforms\.v2\.functional\.resize"):
            functional.resize  # noqa: B018
        with pytest.raises(StubUsed, match=r"planning called torchvision\.transforms\.v2\.functional,"):
            functional()
    assert str(raised.value).startswith("planning read torchvision.transforms.v2.functional.resize, ")
    assert str(raised.value).endswith(" (and 1 more)")
    pad = r"functional\.pad, kvproof's stand-in .*\(in process \d+\)$"
    with pytest.raises(StubUsed, match=pad), stand_ins.planning(), contextlib.suppress(StubUsed):
        functional.pad  # swallowed, as vLLM's registry swallows a failed import  # noqa: B018
    assert not [name for name in sys.modules if name.startswith("torchvision")]
    assert importlib.util.find_spec("torchvision") is None and not is_torchvision_available()


def test_a_subprocess_started_while_a_point_plans_gets_the_stand_in_and_its_use_is_raised() -> None:
    """vLLM inspects a model class in a subprocess (registry.py:1123): one started while a point plans
    imports torchvision's stand-in, its use there is raised here, and one started after finds none."""
    use = "import torchvision.transforms.v2 as v2; v2.functional.resize"
    with pytest.raises(StubUsed, match=r"functional\.resize, .*\(in process \d+\)"), stand_ins.planning():
        imported = subprocess.run([sys.executable, "-c", "import torchvision.transforms.v2"], capture_output=True)
        used = subprocess.run([sys.executable, "-c", use], capture_output=True)
    assert imported.returncode == 0, imported.stderr.decode()
    assert used.returncode == 1 and b"StubUsed" in used.stderr
    after = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True)
    assert after.returncode == 1 and b"No module named 'torchvision'" in after.stderr


def test_vllms_inspection_subprocess_reads_the_qwen3_5_class_with_the_stand_in(tmp_path: Path,
                                                                               monkeypatch: Any) -> None:
    """On a miss of vLLM's model-info cache (a fresh one here) the registry imports the class in its
    subprocess: it does so with the stand-in, never using it, and finds the hybrid multimodal model
    this process finds in the class."""
    from vllm.model_executor.models.registry import _LazyRegisteredModel, _ModelInfo

    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path))
    with stand_ins.planning():
        info = _LazyRegisteredModel("vllm.model_executor.models.qwen3_5",
                                    "Qwen3_5ForConditionalGeneration").inspect_model_cls()
        here = _ModelInfo.from_model_cls(
            importlib.import_module("vllm.model_executor.models.qwen3_5").Qwen3_5ForConditionalGeneration)
    assert info == here and info.is_hybrid and info.supports_multimodal
    assert [f.name for f in (tmp_path / "modelinfos").iterdir()] == [
        "vllm-model_executor-models-qwen3_5-Qwen3_5ForConditionalGeneration.json"]


def test_jambas_state_is_vllms_own_mamba1_shape_at_every_tp(tmp_path: Any) -> None:
    """JambaForCausalLM's get_mamba_state_shape_from_config (what vLLM's alignment and its
    MambaMixer layers size the state by) is what kvproof records, at each tp: the conv state of
    8,192 / tp channels by 3 taps and the SSM state of 8,192 / tp channels by 16."""
    from vllm.model_executor.models.jamba import JambaForCausalLM

    hf = _hf(JAMBA, tmp_path)
    for tp in (1, 2, 32):
        planned = planner.plan(planner.Point(JAMBA, tp, "auto", "auto", False, JAMBA.backends[0]))
        # what the classmethod reads of a VllmConfig (jamba.py:470-483), and nothing else
        config: Any = SimpleNamespace(parallel_config=SimpleNamespace(tensor_parallel_size=tp),
                                      model_config=SimpleNamespace(hf_config=hf))
        vllm = tuple(JambaForCausalLM.get_mamba_state_shape_from_config(config))
        states = _states(planned)
        assert len(states) == 28  # 32 layers, attention at 4, 12, 20, 28
        assert {tuple(s) for s in states.values()} == {vllm}
        assert sorted(vllm[0]) == [3, 8192 // tp] and vllm[1] == (8192 // tp, 16)


def test_jambas_block_worked_by_hand_from_its_config() -> None:
    """tp 1, bf16: the attention page is 2 x 8 KV heads x 128 x 2 B = 4,096 B a token; the Mamba-1
    state is conv 8,192 x 3 x 2 B + ssm 8,192 x 16 x 2 B = 311,296 B, so B = 16 x ceil(311,296 /
    (16 x 4,096)) = 80 tokens and P = 327,680 B. At tp 16 the 8 KV heads are replicated, one a rank
    (512 B a token), while the state shrinks 16-fold to 19,456 B: B = 16 x ceil(2.375) = 48."""
    at = {tp: planner.plan(planner.Point(JAMBA, tp, "auto", "auto", False, JAMBA.backends[0])) for tp in (1, 16)}
    assert (at[1].block_size, at[1].mamba_padded) == (80, 327_680)
    assert (at[16].block_size, at[16].mamba_padded) == (48, 48 * 512)


@pytest.mark.parametrize("recipe", ("nemotron-3-nano-30b-a3b-bf16", "nemotron-3-super-120b-a12b-fp8"))
def test_nemotron_3s_state_is_vllms_own_mamba2_shape_widened_by_its_draft(recipe: str, tmp_path: Any) -> None:
    """NemotronHForCausalLM's get_mamba_state_shape_from_config, with the speculated tokens' conv
    rows, speculated by the checkpoint's MTP draft or, without one, by ngram; and an MTP draft's one
    attention layer joins the cache."""
    from vllm.model_executor.models.nemotron_h import NemotronHForCausalLM

    model = catalog.MODELS[recipe]
    hf = _hf(model, tmp_path)
    spec = 2
    planned = planner.plan(planner.Point(model, 1, "auto", "auto", False, model.backends[0], spec))
    # what the classmethod reads of a VllmConfig (nemotron_h.py:796-811)
    config: Any = SimpleNamespace(
        parallel_config=SimpleNamespace(tensor_parallel_size=1), cache_config=SimpleNamespace(use_replayssm=False),
        model_config=SimpleNamespace(hf_config=hf), num_speculative_tokens=spec)
    vllm = tuple(tuple(s) for s in NemotronHForCausalLM.get_mamba_state_shape_from_config(config))
    states = _states(planned)
    assert len(states) == hf.hybrid_override_pattern.count("M")
    assert {tuple(s) for s in states.values()} == {vllm}
    conv = hf.mamba_num_heads * hf.mamba_head_dim + 2 * hf.n_groups * hf.ssm_state_size
    assert sorted(vllm[0]) == sorted((conv, hf.conv_kernel - 1 + spec))
    draft = [f["id"] for f in planned.documents[1]["fields"] if ".mtp." in f["id"]]
    assert len(draft) == (1 if model.draft == "mtp" else 0)
    assert all(d.endswith(".mtp.layers.0.mixer.attn.kv") for d in draft)


def test_a_mamba1_state_dtype_dropped_by_the_alignment_is_flagged_only_at_jamba() -> None:
    """The seeded bug vllm_mamba1_dtype_unaligned: vLLM's alignment sizes Jamba's state page as bf16
    (the model dtype) while its layers keep float32 states (--mamba-cache-dtype float32): the
    160-token block the layers need is aligned to 80, and vLLM's own check refuses the point. The
    Mamba-2, GDN and KDA models never ask mamba1_state_dtype: their float32 points stay clean."""
    only: Only = {**TP1, "mamba_dtype": ["float32"], "spec": [0]}
    (clean,) = engine.run(["jamba-v0.1"], only, workers=1).recipes[0].points
    assert clean.verdict == "ok"
    with faults.inject("vllm_mamba1_dtype_unaligned"):
        run = engine.run(["jamba-v0.1", "nemotron-3-nano-30b-a3b-bf16", "nemotron-h-56b-base-8k",
                          "qwen3-next-80b-a3b"], only, workers=1)
    jamba, *others = run.recipes
    (broken,) = jamba.points
    assert [f.property for f in broken.findings] == ["boots"]
    assert all(p.verdict == "ok" for r in others for p in r.points)
    assert "vllm_mamba1_dtype_unaligned" in run.source



def test_a_qwen3_5_class_state_without_the_speculative_rows_does_not_boot_at_one_mtp_token() -> None:
    """The seeded bug vllm_qwen3_5_state_unwidened: Qwen3_5ForConditionalGeneration's class shape, which the
    alignment pads by, without num_spec, while each GDN layer keeps its own conv rows. Qwen3.5-27B at tp 1, bf16
    (its config's float32 SSM state): the state is (2 x 16 x 128 + 48 x 128) x 3 x 2 B + 48 x 128 x 128 x 4 B =
    3,207,168 B, the block 16 x ceil(3,207,168 / 65,536) = 784 tokens of 4,096 B, 4,096 B to spare, 16 slots a
    parent; one MTP token's conv row is 20,480 B, so the drafted layers outgrow the page and vLLM's own assertion
    stops the boot. Undrafted, the point plans as without the bug."""
    with faults.inject("vllm_qwen3_5_state_unwidened"):
        run = engine.run(["qwen3.5-27b"], {**TP1, "spec": [0, 1]}, workers=1)
    undrafted, drafted = run.recipes[0].points
    assert undrafted.verdict == "ok" and undrafted.parent_bytes == 16 * 784 * 4096
    assert [f.property for f in drafted.findings] == ["boots"]
    assert "vllm_qwen3_5_state_unwidened" in run.source

LFM2_TP1: Only = {**TP1, "backend": ["FLASH_ATTN@sm_90"]}


def test_lfm2_pages_worked_by_hand_from_its_config() -> None:
    """LFM2-350M at tp 1, FLASH_ATTN, bf16: each ShortConv layer keeps (conv_dim 1,024, conv_L_cache 3 - 1 = 2)
    bf16 = 4,096 B, each attention layer 16 tokens x 2 x 8 KV heads x 64 x 2 B = 32,768 B a block (head 64 =
    1,024 / 16 heads); the 10 conv layers make two groups of 5 beside the 6 attention layers, one 32,768 B page a
    layer, so a parent is 6 x 32,768 = 196,608 B and a conv group pads (196,608 - 5 x 4,096) / 20,480 = 8.6."""
    (result,) = engine.run(["lfm2-350m"], {**LFM2_TP1, "spec": [0]}, workers=1).recipes
    (point,) = result.points
    assert point.parent_bytes == 196_608 and point.packing == {"g0": 1, "g1": 1, "g2": 1}
    assert [f.message for f in point.findings] == [
        f"group {g} pads 8.600 > bound 0.250 (parent 196,608 B / packing 1 per page for 20,480 B of payload)"
        for g in ("g0", "g1")]


def test_lfm2_with_three_ngram_tokens_and_a_float32_conv_state_does_not_boot_at_fp8() -> None:
    """Lfm2ForCausalLM's class-level state shape, which vLLM's hybrid alignment pads by, passes no num_spec
    (lfm2.py:556-578), while each ShortConv layer keeps its speculative tokens (short_conv.py:351-357): at
    --kv-cache-dtype fp8, --mamba-cache-dtype float32 and 3 tokens the layer's state is (1,024, 5) x 4 B =
    20,480 B, the page padded for the class's (1,024, 2) x 4 B = 8,192 B is one 16-token fp8 attention page,
    16 x 2 x 8 x 64 x 1 B = 16,384 B, and vLLM's own page_size_padded >= page_size assertion stops the boot.
    With the bf16 conv state (10,240 B) it fits."""
    only: Only = {**LFM2_TP1, "dtype": ["fp8"], "mamba_dtype": ["auto", "float32"], "spec": [3]}
    fits, fails = engine.run(["lfm2-350m"], only, workers=1).recipes[0].points
    assert (fits.point["mamba_dtype"], fits.verdict, fits.parent_bytes) == ("auto", "ok", 98_304)
    assert fails.point["mamba_dtype"] == "float32"
    assert [(f.property, f.message) for f in fails.findings] == [
        ("boots", "AssertionError: assertion failed at vllm/v1/kv_cache_interface.py:1127")]


def test_lfm2_5_pages_worked_by_hand_from_its_config() -> None:
    """LFM2.5-1.2B-Base at tp 1, FLASH_ATTN, bf16: each ShortConv layer keeps (conv_dim 2,048, conv_L_cache 3 - 1 =
    2) bf16 = 8,192 B, each attention layer 16 tokens x 2 x 8 KV heads x 64 x 2 B = 32,768 B a block (head 64 =
    2,048 / 32 heads); the 10 conv layers make two groups of 5 beside the 6 attention layers, one 32,768 B page a
    layer, so a parent is 6 x 32,768 = 196,608 B and a conv group pads (196,608 - 5 x 8,192) / 40,960 = 3.8."""
    (result,) = engine.run(["lfm2.5-1.2b-base"], {**LFM2_TP1, "spec": [0]}, workers=1).recipes
    (point,) = result.points
    assert point.parent_bytes == 196_608 and point.packing == {"g0": 1, "g1": 1, "g2": 1}
    assert [f.message for f in point.findings] == [
        f"group {g} pads 3.800 > bound 0.250 (parent 196,608 B / packing 1 per page for 40,960 B of payload)"
        for g in ("g0", "g1")]


def test_lfm2_5_with_three_ngram_tokens_boots_at_fp8_only_where_the_class_page_is_the_attention_page() -> None:
    """The class-level shape the alignment pads by passes no num_spec (lfm2.py:556-578). At --kv-cache-dtype fp8,
    tp 1 and 3 tokens one 16-token attention page is 16 x 2 x 8 x 64 x 1 B = 16,384 B. With the bf16 conv state the
    class's (2,048, 2) x 2 B = 8,192 B is padded to it, and the layer's own (2,048, 5) x 2 B = 20,480 B overflows
    it: vLLM's page_size_padded >= page_size assertion stops the boot. With the float32 one the class's (2,048, 2)
    x 4 B is the page exactly, so the alignment pads nothing (platforms/interface.py:1121-1122) and unifying the
    pages pads each attention page to the layer's (2,048, 5) x 4 B = 40,960 B (kv_cache_planning.py:396-399):
    a parent of 6 x 40,960 = 245,760 B."""
    only: Only = {**LFM2_TP1, "dtype": ["fp8"], "mamba_dtype": ["auto", "float32"], "spec": [3]}
    fails, boots = engine.run(["lfm2.5-1.2b-base"], only, workers=1).recipes[0].points
    assert fails.point["mamba_dtype"] == "auto"
    assert [(f.property, f.message) for f in fails.findings] == [
        ("boots", "AssertionError: assertion failed at vllm/v1/kv_cache_interface.py:1127")]
    assert (boots.point["mamba_dtype"], boots.verdict, boots.parent_bytes) == ("float32", "ok", 245_760)


def test_lfm2_5_at_tp_16_pads_the_float32_class_page_and_does_not_boot() -> None:
    """At tp 16 the 8 KV heads are replicated, one per rank: a 16-token fp8 page is 16 x 2 x 64 x 1 B = 2,048 B,
    the class's float32 (128, 2) x 4 B = 1,024 B is padded to it, and the layer's (128, 5) x 4 B = 2,560 B does not
    fit; at tp 32, (64, 5) x 4 B = 1,280 B does."""
    only: Only = {**LFM2_TP1, "tp": [16, 32], "dtype": ["fp8"], "mamba_dtype": ["float32"], "spec": [3]}
    at16, at32 = engine.run(["lfm2.5-1.2b-base"], only, workers=1).recipes[0].points
    assert (at16.point["tp"], [f.property for f in at16.findings]) == (16, ["boots"])
    assert (at32.point["tp"], at32.verdict, at32.parent_bytes) == (32, "ok", 12_288)


def test_a_short_conv_state_dtype_dropped_by_the_alignment_is_flagged_where_the_class_page_is_the_attention_page(
) -> None:
    """The seeded bug vllm_short_conv_dtype_unaligned: vLLM's alignment sizes LFM2.5-1.2B's ShortConv page as bf16,
    (2,048, 2) x 2 B = 8,192 B, where the float32 class page is the fp8 16-token attention page exactly (16,384 B).
    It is padded to that page, and a layer keeping 1 speculative token, (2,048, 3) x 4 B = 24,576 B, overflows it:
    vLLM's own check stops the boot, where without the bug the alignment pads nothing and unifying the pages
    holds it. Undrafted, (2,048, 2) x 4 B fits the padded page exactly. LFM2-350M hides the bug: its float32
    class page, (1,024, 2) x 4 B = 8,192 B, is a quarter of the bf16 16-token attention page and half the fp8 one,
    and a drafted layer's (1,024, 3) x 4 B = 12,288 B fits either."""
    only: Only = {**LFM2_TP1, "dtype": ["auto", "fp8"], "mamba_dtype": ["float32"], "spec": [0, 1]}
    names = ["lfm2.5-1.2b-base", "lfm2-350m"]

    def findings(run: EngineRun) -> dict[tuple[str, str, int], list[str]]:
        return {(r.recipe, p.point["dtype"], p.point["spec"]): [f.property for f in p.findings]
                for r in run.recipes for p in r.points}

    clean = findings(engine.run(names, only, workers=1))
    with faults.inject("vllm_short_conv_dtype_unaligned"):
        run = engine.run(names, only, workers=1)
    assert "vllm_short_conv_dtype_unaligned" in run.source
    assert clean[("lfm2.5-1.2b-base", "fp8", 1)] == []
    assert findings(run) == {**clean, ("lfm2.5-1.2b-base", "fp8", 1): ["boots"]}
