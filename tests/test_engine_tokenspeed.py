"""tokenspeed's own recipes under test: the loud-stub rule, the affine-in-N check, the CLI and
its baseline, --engine-path, and the seeded engine bugs of kvproof.engines.tokenspeed.mutants."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bites import fails_under

from kvproof.engines import baseline
from kvproof.engines.stubs import StubUsed, Unavailable
from kvproof.engines.tokenspeed import engine, loader, pipeline
from kvproof.engines.tokenspeed.configs import HFConfig, Strict
from kvproof.impl import faults
from kvproof.spec.catalog import ConfigError
from kvproof.spec.plan_reader import affine_facts

BASELINE = Path(__file__).resolve().parent.parent / "engines" / "tokenspeed" / "baseline.json"


def verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvproof.cli.main", *args], capture_output=True, text=True,
                          check=False, timeout=300)


@pytest.fixture(scope="module")
def installed() -> loader.Source:
    return loader.installed_source()


# ---------------------------------------------------------------- never plan with invented numbers


@pytest.mark.parametrize("use", [
    lambda u: u(), lambda u: bool(u), lambda u: u == 1, lambda u: u < 1, lambda u: int(u), lambda u: [*u],
    lambda u: range(u), lambda u: str(u), lambda u: (u + 1) > 0, lambda u: u.x.y(), lambda u: f"{u // 2}",
])
def test_every_decision_on_an_unavailable_value_raises_naming_it(use) -> None:
    with pytest.raises(StubUsed, match=r"server_args\.max_num_seqs"):
        use(Unavailable("server_args.max_num_seqs", "capacity only"))


def test_strict_objects_raise_on_unset_attributes_even_under_getattr_default() -> None:
    args = Strict("server_args", {"attn_tp_size": 8})
    assert args.attn_tp_size == 8
    with pytest.raises(StubUsed, match=r"server_args\.kv_cache_dtype"):
        getattr(args, "kv_cache_dtype", "auto")
    with pytest.raises(StubUsed):
        args.attn_tp_size = 4


def test_hf_config_missing_key_is_an_attribute_error_like_transformers() -> None:
    config = HFConfig({"num_hidden_layers": 93}, {"linear_layer_ids": [0]})
    assert (config.num_hidden_layers, config.linear_layer_ids) == (93, [0])
    assert getattr(config, "mla_use_nope", None) is None


RECIPES = "runtime/layers/attention/kv_cache/recipes"
PACKING_HOOK = "        fields_by_group = {spec.group_id: fields for spec, fields in groups}\n"


def edited_copy(installed: loader.Source, folder: Path, path: str, old: str, new: str) -> Path:
    """A copy of the installed package with one edit, as a pull request would make it."""
    copy = folder / "tokenspeed"
    shutil.copytree(installed.package_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / path
    text = target.read_text()
    assert old in text, f"{path} no longer has {old!r}"
    target.write_text(text.replace(old, new))
    return folder


def test_planning_through_a_replaced_kernel_module_is_that_recipes_adapter_gap(installed, tmp_path) -> None:
    """A recipe that asks the GPU kernel package a layout question cannot be verified by
    guessing: that recipe is NOT VERIFIED (adapter), naming the engine's line that asked and the
    name asked for, and the other recipes are still planned and checked (exit 1, not 2)."""
    asks = ("        from tokenspeed_kernel.ops.attention.kda import kda_recurrent_layout\n"
            "        if kda_recurrent_layout():\n            pass\n")
    edited_copy(installed, tmp_path, f"{RECIPES}/kimi_k3.py", PACKING_HOOK, asks + PACKING_HOOK)
    proc = verify("engine", "tokenspeed", "--engine-path", str(tmp_path), "--recipe", "kimi_k3", "mla", "--tp", "8",
                  "--json")
    assert proc.returncode == 1, proc.stdout[-1500:] + proc.stderr
    doc = json.loads(proc.stdout)
    k3, mla = doc["recipes"]
    assert not k3["verified"] and k3["reason"].startswith("adapter: tokenspeed/runtime/layers/attention/kv_cache/"
                                                           "recipes/kimi_k3.py:")
    assert "`if kda_recurrent_layout():`" in k3["reason"]
    assert "tokenspeed_kernel.ops.attention.kda.kda_recurrent_layout" in k3["reason"]
    assert "6 of 6 points" in k3["reason"] and k3["points"] == []
    assert mla["verified"] and {p["verdict"] for p in mla["points"]} == {"ok"}
    assert ["tokenspeed", "0.1.1", "kimi_k3", "", "not_verified_adapter"] in doc["new_findings"]
    text = verify("engine", "tokenspeed", "--engine-path", str(tmp_path), "--recipe", "kimi_k3", "--tp", "8")
    assert text.returncode == 1 and "kimi_k3: NOT VERIFIED (adapter): tokenspeed/runtime/" in text.stdout


# ---------------------------------------------------------------- bound plans are affine in N


def _doc(n: int, slab_gap: int = 0) -> dict:
    return {
        "num_parents": n, "parent_bytes": 1024, "alignment": 256, "max_padding": 0.25,
        "planes": [{"id": "a", "bytes": 512, "arena_offset": 0},
                   {"id": "b", "bytes": 512, "arena_offset": (n + 1) * 512 + slab_gap * n * n}],
        "groups": [{"id": "g", "packing": 2, "page_count": 1 + 2 * n}],
        "fields": [{"id": "x", "group": "g", "plane": "a", "shape": [64], "dtype": "float32", "offset": 0,
                    "stride": 256, "exact_stride": True},
                   {"id": "y", "group": "g", "plane": "b", "shape": [64], "dtype": "float32", "offset": 0,
                    "stride": 256, "exact_stride": True}],
    }


def test_affine_facts_spans_every_parent_count() -> None:
    facts = affine_facts({n: _doc(n) for n in (1, 2, 3)})
    assert facts.plane("b").arena_offset_bytes.per_parent == 512 and facts.plane("b").arena_offset_bytes.fixed == 512
    assert facts.group("g").page_count.per_parent == 2 and facts.parents == (1, (2**31 - 1) // 2)


def test_affine_facts_refuses_a_binding_off_the_line() -> None:
    with pytest.raises(ConfigError, match=r"planes\[b\]\.arena_offset .* not affine in N"):
        affine_facts({n: _doc(n, slab_gap=256) for n in (1, 2, 3)})


def test_a_plan_the_reader_refuses_leaves_its_recipe_not_verified_by_the_adapter(installed, monkeypatch) -> None:
    """Bindings off one line in N (a cap or a threshold in bind) are no plan kvproof can state: the recipe is NOT
    VERIFIED (adapter), naming the refusal and the point, never verified, and the run goes on."""
    monkeypatch.setattr(engine, "_plan", lambda *_: pipeline.Planned({n: _doc(n, slab_gap=256) for n in (1, 2, 3)}))
    (mla,) = engine.run(installed, ["mla"], {"drafts": [0], "tp": [8]}).recipes
    assert mla.adapter and not mla.points and mla.not_verified is not None
    assert mla.not_verified.startswith("bind: tokenspeed's plan read into a plan kvproof refuses: engine plan: "
                                       "planes[b].arena_offset is ")
    assert "(at model=deepseek-v3 tp=8 " in mla.not_verified


# ---------------------------------------------------------------- the command


def test_released_engine_refuses_k3_bf16_tp32_and_plans_the_rest(installed) -> None:
    run = engine.run(installed, ["kimi_k3"], {"drafts": [0]})
    (k3,) = run.recipes
    bad = [(p.point["tp"], p.point["dtype"], p.findings[0].property) for p in k3.points if p.verdict != "ok"]
    assert bad == [(32, "bfloat16", "boots")]
    assert len(k3.points) == 36
    refusal = next(p for p in k3.points if p.verdict != "ok")
    assert "padding fraction 0.512059 exceeds limit 0.250000" in refusal.findings[0].message
    assert refusal.packing == {"full_attention": 2, "linear_attention_0": 1, "linear_attention_1": 1,
                               "linear_attention_2": 1}
    fp8_tp8 = next(p for p in k3.points if p.point == {"tp": 8, "dtype": "fp8", "drafts": 0})
    assert (fp8_tp8.parent_bytes, fp8_tp8.packing["full_attention"]) == (21_233_664, 12)
    assert fp8_tp8.parents == (1, (2**31 - 1) // 12)


def test_cli_baseline_json_and_exit_codes(tmp_path) -> None:
    proc = verify("engine", "tokenspeed", "--json", "--baseline", str(BASELINE))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["engine"], doc["version"]) == ("tokenspeed", "0.1.1")
    assert doc["new_findings"] == [] and doc["stale"] == []
    k3 = next(r for r in doc["recipes"] if r["recipe"] == "kimi_k3")
    assert {"tp", "dtype", "verdict", "property", "message", "packing", "parent_bytes"} <= set(k3["points"][0])
    verified = {r["recipe"]: r["coverage"] for r in doc["recipes"] if r["verified"]}
    assert verified == {**dict.fromkeys(("kimi_k3", "mla", "dsa", "mha", "qwen_gdn", "mamba2", "deepseek_v4", "msa"),
                                        "checkpoint"),
                        **dict.fromkeys(("qwen4_exp", "inkling", "glm53_flash", "deepseek_v41"), "family")}

    assert verify("engine", "tokenspeed", "--recipe", "kimi_k3", "--dtype", "bfloat16").returncode == 1

    stale = tmp_path / "stale.json"
    entry = ("tokenspeed", "0.1.1", "kimi_k3", "drafts=0,dtype=fp8,tp=8", "exact_stride")
    stale.write_text(baseline.dump([*baseline.load(BASELINE), entry]))
    proc = verify("engine", "tokenspeed", "--recipe", "kimi_k3", "--tp", "8", "32", "--baseline", str(stale))
    assert proc.returncode == 0 and "STALE baseline entry (no longer found): " + " ".join(entry) in proc.stdout
    # A narrowed run judges no baselined point it did not run.
    assert proc.stdout.count("STALE") == 1


@pytest.mark.parametrize("args, names", [
    (["--recipe", "kimi_k4"], "registers no recipe 'kimi_k4'"),
    (["--assume", "TOKENSPEED_MAMBA_SSM_DTYPE=float16"], "TOKENSPEED_MAMBA_SSM_DTYPE takes float32|bfloat16"),
    (["--assume", "platform=sm_80"], "platform takes sm_90|sm_100"),
    (["--assume", "NO_SUCH_SWITCH=1"], "not an assumption of tokenspeed's recipes"),
    (["--dtype", "fp4"], "--dtype fp4: no point of the chosen recipes has it; dtype takes bfloat16, fp8, mxfp8"),
    (["--recipe", "mla", "--tp", "3"], "--tp 3: no point of the chosen recipes has it; tp takes 1, 2, 4, 8, 16, 32"),
    (["--max-padding", "-1"], "--max-padding must be a finite number >= 0"),
    (["--engine-path", "/nonexistent"], "no tokenspeed package"),
    (["--baseline", "/nonexistent.json"], "cannot read baseline"),
    (["--recipe", "msa", "--drafts", "1"], "--drafts: the chosen recipes' points have no drafts axis"),
    (["--recipe", "deepseek_v4", "--assume", "TOKENSPEED_MAMBA_SSM_DTYPE=bfloat16"], "makes that assumption"),
])
def test_bad_input_is_one_line_exit_2(args, names) -> None:
    proc = verify("engine", "tokenspeed", *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and names in proc.stderr, proc.stderr


def test_engine_path_takes_a_checkout_layout(installed, tmp_path) -> None:
    shutil.copytree(installed.package_dir, tmp_path / "python" / "tokenspeed",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "python" / "pyproject.toml").write_text('[project]\nname = "tokenspeed"\nversion = "9.9.9"\n')
    proc = verify("engine", "tokenspeed", "--engine-path", str(tmp_path), "--recipe", "kimi_k3", "--tp", "8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"tokenspeed 9.9.9 (path: {tmp_path / 'python' / 'tokenspeed'}" in proc.stdout


def test_a_checkouts_version_is_its_projects_not_another_tables(tmp_path) -> None:
    """The version is [project]'s, never another table's version key; a pyproject whose version is
    dynamic leaves it to version.py."""
    package = tmp_path / "python" / "tokenspeed"
    package.mkdir(parents=True)
    (tmp_path / "python" / "pyproject.toml").write_text(
        '[tool.bumpver]\nversion = "0.0.1"\n\n[project]\nname = "tokenspeed"\nversion = "9.9.9"\n')
    assert loader._version_at(package) == "9.9.9"
    (tmp_path / "python" / "pyproject.toml").write_text('[project]\nname = "tokenspeed"\ndynamic = ["version"]\n')
    (package / "version.py").write_text('__version__ = "1.2.3"\n')
    assert loader._version_at(package) == "1.2.3"


# ---------------------------------------------------------------- seeded engine bugs


@pytest.mark.parametrize("fault, expect", [
    ("ts_k3_packing_floor", {"boots"}),
    ("ts_plan_widened_stride", {"exact_stride", "partition"}),
    ("ts_bind_forgets_null_parent", {"no_overlap"}),
])
def test_a_broken_engine_is_flagged(installed, fault, expect) -> None:
    """The check passes on the released engine's fp8 points and fails on the mutated copy."""
    clean = engine.run(installed, ["kimi_k3"], {"dtype": ["fp8"], "drafts": [0]})
    assert all(p.verdict == "ok" for r in clean.recipes for p in r.points)
    with faults.inject(fault):
        broken = engine.run(installed, ["kimi_k3"], {"dtype": ["fp8"], "drafts": [0]})
    assert "mutated: " + fault in broken.source
    found = {f.property for r in broken.recipes for p in r.points for f in p.findings}
    assert expect <= found, found


# ---------------------------------------------------------------- differential against impl


def _impl_numbers(plan) -> dict:
    """impl's plan in tokenspeed's vocabulary: engine layer id = config layer - 1."""
    def engine_id(field_id: str) -> str:
        _, layer, name = field_id.split(".", 2)
        return f"layer.{int(layer) - 1}.{name}"

    bound = plan.bind(2)
    return {
        "packing": dict(plan.packing),
        "parent": plan.parent_bytes,
        "planes": {p.id: p.plane_bytes for p in plan.planes},
        "fields": {engine_id(f.id): (f.offset_bytes, f.page_stride_bytes, bound.page_count(f.group))
                   for f in plan.fields},
    }


def _engine_numbers(doc: dict) -> dict:
    pages = {g["id"]: g["page_count"] for g in doc["groups"]}
    return {
        "packing": {g["id"]: g["packing"] for g in doc["groups"]},
        "parent": doc["parent_bytes"],
        "planes": {p["id"]: p["bytes"] for p in doc["planes"]},
        "fields": {f["id"]: (f["offset"], f["stride"], pages[f["group"]]) for f in doc["fields"]},
    }


def _first_difference(ours: dict, theirs: dict, where: str = "") -> str | None:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if set(ours) != set(theirs):
            return f"{where}: keys differ: {sorted(set(ours) ^ set(theirs))[:3]}"
        return next((d for k in sorted(ours) if (d := _first_difference(ours[k], theirs[k], f"{where}.{k}"))), None)
    return None if ours == theirs else f"{where}: impl {ours} vs tokenspeed {theirs}"


def _planned(installed: loader.Source, family: str, point: dict[str, Any]) -> engine.pipeline.Planned:
    """engine.plan at a point the recipe is expected to plan (not refuse)."""
    out = engine.plan(installed, family, point)
    assert isinstance(out, engine.pipeline.Planned), (family, point, out)
    return out


def _compare_k3(installed, drafts: int, tps) -> tuple[int, set]:
    """impl's ceil plan against tokenspeed's at every tp x dtype; returns (points both accept,
    slab orders seen). Where impl refuses, tokenspeed must refuse with padding 0.512."""
    from kvproof.impl.recipe import plan_model
    from kvproof.spec.catalog import load_model

    model = load_model("kimi-k3")
    both, orders = 0, set()
    for dtype, flag in (("fp8", "fp8"), ("bf16", "bfloat16")):
        for tp in tps(model):
            ours = plan_model(model, tp, dtype, "ceil", drafts=drafts, draft_dtype="bf16").plan
            theirs = engine.plan(installed, "kimi_k3", {"tp": tp, "dtype": flag, "drafts": drafts})
            if not ours.accepted:
                assert isinstance(theirs, engine.pipeline.Refused) and not theirs.unsupported
                assert "0.512059" in theirs.message and (tp, dtype, drafts) == (32, "bf16", 0)
                assert {v.property for v in ours.violations} == {"padding_bound"}
                continue
            assert isinstance(theirs, engine.pipeline.Planned), (tp, dtype, theirs)
            doc = theirs.documents[2]
            diff = _first_difference(_impl_numbers(ours), _engine_numbers(doc), f"tp={tp} {dtype} drafts={drafts}")
            assert diff is None, diff
            orders.add(tuple(p["id"] for p in sorted(doc["planes"], key=lambda p: p["arena_offset"]))[:3])
            both += 1
    return both, orders


def test_tokenspeed_equals_impl_under_ceil_at_every_k3_point(installed) -> None:
    """The released recipe ships the ceil formula: at the 23 points where both accept, every packing,
    the parent, every plane's bytes and every field's offset, stride and page count agree; at
    bf16 tp 32 both refuse with padding 0.512. Slab order is a convention, reported apart."""
    both, orders = _compare_k3(installed, 0, lambda model: model.tp_domain)
    assert both == 23
    # tokenspeed lays slabs out in sorted plane-id order, impl in plane order.
    assert orders == {("slot.0", "slot.1", "slot.10")}


def test_tokenspeed_equals_impl_with_the_dspark_draft(installed) -> None:
    """With the published DSpark draft (5 bf16 layers: impl's layers 94..98, tokenspeed's 93..97)
    both plan every DSpark tp (those dividing its 64 heads too) identically, number for number."""
    both, _ = _compare_k3(installed, 5, lambda model: [tp for tp in model.tp_domain if 64 % tp == 0])
    assert both == 12


# ---------------------------------------------------------------- assumptions


def test_an_environment_switch_is_an_assumption_axis_run_at_every_value(installed) -> None:
    """qwen_gdn's SSM state dtype comes from TOKENSPEED_MAMBA_SSM_DTYPE: the default domain runs
    both values, and the state field's dtype follows the assumption, not the environment."""
    run = engine.run(installed, ["qwen_gdn"], {"tp": [8], "dtype": ["bfloat16"]})
    (gdn,) = run.recipes
    assumed = {p.point["assume"]: p for p in gdn.points}
    assert set(assumed) == {"TOKENSPEED_MAMBA_SSM_DTYPE=float32", "TOKENSPEED_MAMBA_SSM_DTYPE=bfloat16"}
    # Qwen3.5-27B at tp 8: 48/8 = 6 value heads of 128 x 128 SSM state per linear layer.
    docs = {k: _planned(installed, "qwen_gdn", p.point) for k, p in assumed.items()}
    ssm = {k: next(f for f in d.documents[1]["fields"] if f["id"].endswith(".ssm")) for k, d in docs.items()}
    assert ssm["TOKENSPEED_MAMBA_SSM_DTYPE=float32"]["dtype"] == "float32"
    assert ssm["TOKENSPEED_MAMBA_SSM_DTYPE=bfloat16"]["dtype"] == "bfloat16"
    assert ssm["TOKENSPEED_MAMBA_SSM_DTYPE=float32"]["shape"] == [6, 128, 128]


def _super_config() -> dict:
    return engine.configs(engine.PROFILES["mamba2"])["nemotron-3-super-120b-a12b-fp8.json"]


def test_nemotron_h_cache_layers_are_the_mamba_and_attention_blocks_only() -> None:
    """Nemotron-3 Super's 88 blocks (MEMEMEM*E...) own 40 Mamba2 + 8 attention cache layers,
    numbered densely (MoE blocks own none); Nemotron-H-56B's 118 own 54 + 10 (MLP blocks none),
    and its config names the head size attention_head_dim, so head_dim is transformers' 128."""
    from kvproof.engines.tokenspeed import nemotron_h

    configs = engine.configs(engine.PROFILES["mamba2"])
    sup = nemotron_h.hf_config(configs["nemotron-3-super-120b-a12b-fp8.json"])
    assert (sup.num_hidden_layers, len(sup.cache_layer_types), len(sup.linear_layer_ids)) == (88, 48, 40)
    assert sup.cache_layer_types[:6] == ["linear_attention"] * 4 + ["full_attention", "linear_attention"]
    big = nemotron_h.hf_config(configs["nemotron-h-56b-base-8k.json"])
    assert (big.num_hidden_layers, len(big.cache_layer_types), len(big.linear_layer_ids)) == (118, 64, 54)
    assert "head_dim" not in configs["nemotron-h-56b-base-8k.json"] and big.head_dim == 128


def test_mamba2_plans_nemotron_3_super_as_worked_by_hand(installed) -> None:
    """Nemotron-3 Super at tp 8, fp8 KV, fp32 SSM state, every number from its config.json:
    SSM state (128/8 heads, 64, 128) fp32 = 524,288 B; conv window (2*8*128 + 128*64)/8 = 1,280
    channels x 3 bf16 = 7,680 B; K page 128 tokens x max(2/8, 1) head x 128 fp8 = 16,384 B, so a
    KV group packs 524,288 / 16,384 = 32 pages. 40 state layers over ceil(40/8) = 5 groups of 8
    and 8 attention layers over 2 groups of 4 give 8 unit segments and 8 conv segments:
    parent 8 x 524,288 + 8 x 7,680 = 4,255,744 B."""
    c = _super_config()
    tp, block = 8, 128
    ssm = c["mamba_num_heads"] // tp * c["mamba_head_dim"] * c["ssm_state_size"] * 4
    channels = (2 * c["n_groups"] * c["ssm_state_size"] + c["mamba_num_heads"] * c["mamba_head_dim"]) // tp
    conv = channels * (c["conv_kernel"] - 1) * 2
    k_page = block * max(c["num_key_value_heads"] // tp, 1) * c["head_dim"] * 1
    assert (ssm, conv, k_page) == (524_288, 7_680, 16_384)
    point = {"model": "nemotron-3-super-120b-a12b-fp8", "tp": tp, "dtype": "fp8",
             "assume": "TOKENSPEED_MAMBA_SSM_DTYPE=float32"}
    doc = _planned(installed, "mamba2", point).documents[1]
    assert doc["parent_bytes"] == 8 * ssm + 8 * conv == 4_255_744
    assert {g["id"]: g["packing"] for g in doc["groups"]} == {
        "full_attention_0": ssm // k_page, "full_attention_1": ssm // k_page,
        **{f"linear_attention_{i}": 1 for i in range(5)}}
    fields = {f["id"]: f for f in doc["fields"]}
    assert (fields["layer.0.ssm"]["shape"], fields["layer.0.ssm"]["dtype"]) == ([16, 64, 128], "float32")
    assert (fields["layer.0.conv"]["shape"], fields["layer.0.conv"]["stride"]) == ([channels, 3], conv)
    # Cache layer 4 is the first attention block: K and V in adjacent unit segments, 32 pages a parent.
    assert (fields["layer.4.k"]["plane"], fields["layer.4.v"]["plane"]) == ("unit.0", "unit.1")
    assert (fields["layer.4.k"]["shape"], fields["layer.4.k"]["dtype"], fields["layer.4.k"]["stride"]) == (
        [128, 1, 128], "uint8", k_page)
    half = _planned(installed, "mamba2", point | {"assume": "TOKENSPEED_MAMBA_SSM_DTYPE=bfloat16"}).documents[1]
    assert half["parent_bytes"] == 8 * ssm // 2 + 8 * conv


def test_a_broken_mamba2_recipe_is_flagged(installed) -> None:
    """K and V of one layer written to the same segment: the run reports it (the engine's own
    exact-stride check refuses the plan, a boots finding) at every Nemotron point, the Super's
    MTP draft points too."""
    with faults.inject("ts_mamba2_kv_same_segment"):
        run = engine.run(installed, ["mamba2"], {"tp": [8], "dtype": ["fp8"]})
    (mamba2,) = run.recipes
    assert len(mamba2.points) == 6
    assert {(p.verdict, p.findings[0].property) for p in mamba2.points} == {("counterexample", "boots")}


def test_deepseek_v4_flash_plans_as_worked_by_hand(installed) -> None:
    """DeepSeek-V4-Flash, every number from its config.json (head_dim 512, qk_rope_head_dim 64,
    index_head_dim 128, the first 43 compress_ratios: 2 x 0, then 4/128 alternating, 21 and 20).
    A token row is 448 nope + 2 x 64 rope + 448/64 + 1 scale bytes = 584 B, so a 64-row SWA or
    ratio-4 block is 64 x 584 = 37,376 B rounded up to the 576 B token stride: 37,440 B; a
    ratio-128 block holds 256/128 = 2 rows: 1,728 B. Compressor state is (4, 2 x 512 x 2) or
    (8, 512 x 2) fp32 = 32,768 B, indexer state (4, 128 x 2 x 2) fp32 = 8,192 B, indexer K 64 rows
    of 128 + 4 (fp8_scaled) = 8,448 B or 64 + 4 (mxfp4) = 4,352 B. Packing is the power of two
    below (largest group's bytes / the group's): the SWA group's 43 x 37,440 = 1,609,920 B over
    21 x 37,440, 21 x 32,768, 20 x 1,728, 20 x 32,768, 21 x 8,448 (21 x 4,352), 21 x 8,192.
    One plane per layer; a plane is the least multiple of 256 (and of its groups' K x 576 stride
    grain) holding K pages of every group in it: 20 planes of 5 x 18,432 = 92,160 B (all groups;
    K = 32 x 576 grain), 1 of 33 x 2,304 = 76,032 B (no ratio-128 layer left) and 22 SWA-only
    planes of 17 x 2,304 = 39,168 B: parent 2,780,928 B, at every tp and cache dtype."""
    c = engine.configs(engine.PROFILES["deepseek_v4"])["deepseek-v4-flash.json"]
    ratios = c["compress_ratios"][: c["num_hidden_layers"]]
    nope, rope = c["head_dim"] - c["qk_rope_head_dim"], c["qk_rope_head_dim"]
    stride = nope + 2 * rope
    row = stride + nope // 64 + 1

    def block(rows: int) -> int:
        return -(-rows * row // stride) * stride

    assert (ratios.count(0), ratios.count(4), ratios.count(128)) == (2, 21, 20)
    assert (row, block(64), block(256 // 128)) == (584, 37_440, 1_728)
    index_fp8, index_fp4 = 64 * (c["index_head_dim"] + 4), 64 * (c["index_head_dim"] // 2 + 4)
    group_bytes = {"v4.swa_kv": 43 * block(64), "v4.c4a.compressed_kv": 21 * block(64),
                   "v4.c4a.compressor_state": 21 * 4 * 2 * c["head_dim"] * 2 * 4,
                   "v4.c128a.compressed_kv": 20 * block(2), "v4.c128a.compressor_state": 20 * 8 * c["head_dim"] * 2 * 4,
                   "v4.c4a.indexer_kv": 21 * index_fp8,
                   "v4.c4a.indexer_compressor_state": 21 * 4 * c["index_head_dim"] * 2 * 2 * 4}
    packing = {g: 1 << ((group_bytes["v4.swa_kv"] // b).bit_length() - 1) for g, b in group_bytes.items()}
    assert packing == {"v4.swa_kv": 1, "v4.c4a.compressed_kv": 2, "v4.c4a.compressor_state": 2,
                       "v4.c128a.compressed_kv": 32, "v4.c128a.compressor_state": 2, "v4.c4a.indexer_kv": 8,
                       "v4.c4a.indexer_compressor_state": 8}
    parent = 20 * 92_160 + 76_032 + 22 * 39_168
    for tp, dtype in ((1, "fp8"), (64, "bfloat16")):
        point = {"model": "deepseek-v4-flash", "tp": tp, "dtype": dtype,
                 "assume": "dsv4_indexer_cache_format=fp8_scaled"}
        doc = _planned(installed, "deepseek_v4", point).documents[1]
        assert {g["id"]: g["packing"] for g in doc["groups"]} == packing
        assert doc["parent_bytes"] == parent == 2_780_928 and len(doc["planes"]) == 43
        assert sorted({p["bytes"] for p in doc["planes"]}) == [39_168, 76_032, 92_160]
    fields = {f["id"]: f for f in doc["fields"]}
    assert fields["layer.2.indexer_kv"]["shape"] == [index_fp8]
    assert (fields["layer.3.compressed_kv"]["shape"], fields["layer.3.compressor_state"]["shape"]) == (
        [1_728], [8, 1_024])
    fp4 = _planned(installed, "deepseek_v4", point | {"assume": "dsv4_indexer_cache_format=mxfp4"}).documents[1]
    assert {f["id"]: f for f in fp4["fields"]}["layer.2.indexer_kv"]["shape"] == [index_fp4] == [4_352]
    assert {g["id"]: g["packing"] for g in fp4["groups"]}["v4.c4a.indexer_kv"] == 16
    assert fp4["parent_bytes"] == parent


def test_identical_plans_share_a_check_but_keep_their_own_point_and_replay(installed) -> None:
    """V4's layout reads neither tp nor the cache dtype: one check serves those points, each
    reported under its own axes and replay; a different plan (mxfp4 indexer) is checked apart."""
    run = engine.run(installed, ["deepseek_v4"], {"model": ["deepseek-v4-flash"], "tp": [1, 64], "drafts": [0]})
    (v4,) = run.recipes
    assert len(v4.points) == 8 and len({p.replay for p in v4.points}) == 8
    assert {(p.point["tp"], p.point["dtype"]) for p in v4.points} == {(1, "fp8"), (1, "bfloat16"), (64, "fp8"),
                                                                       (64, "bfloat16")}
    assert all(f"--tp {p.point['tp']} --dtype {p.point['dtype']}" in p.replay for p in v4.points)
    indexer = {p.point["assume"]: p.packing["v4.c4a.indexer_kv"] for p in v4.points}
    assert indexer == {"dsv4_indexer_cache_format=fp8_scaled": 8, "dsv4_indexer_cache_format=mxfp4": 16}


def test_the_v4_indexer_format_is_an_assumption_and_an_explicit_request_is_refused(installed) -> None:
    loader.load(installed, ("deepseek_v4",))
    from tokenspeed_kernel.ops.attention.dsv4 import dsv4_indexer_cache_format

    loader.ASSUMED.point({})
    with pytest.raises(StubUsed, match=r"dsv4_indexer_cache_format\(None\), which the point does not assume"):
        dsv4_indexer_cache_format(None)
    loader.ASSUMED.point({"dsv4_indexer_cache_format": "mxfp4"})
    assert dsv4_indexer_cache_format(None) == "mxfp4"
    with pytest.raises(StubUsed, match=r"dsv4_indexer_cache_format\(True\); kvproof answers only"):
        dsv4_indexer_cache_format(True)


def test_a_broken_deepseek_v4_recipe_is_flagged(installed) -> None:
    """Compressor state moved off the shared layer planes: the parent grows and the engine's own
    padding bound (2.0) refuses the ratio-128 chain, at every V4 point run, with and without the
    MTP draft."""
    with faults.inject("ts_v4_state_own_plane"):
        run = engine.run(installed, ["deepseek_v4"], {"tp": [8], "dtype": ["fp8"]})
    (v4,) = run.recipes
    assert len(v4.points) == 8
    assert {(p.verdict, p.findings[0].property) for p in v4.points} == {("counterexample", "boots")}
    assert all("v4.c128a.compressed_kv" in p.findings[0].message for p in v4.points)


def test_a_switch_the_point_does_not_assume_raises_naming_it(installed) -> None:
    loader.load(installed, ("qwen35",))
    from tokenspeed.runtime.utils.env import envs

    loader.ASSUMED.point({})
    with pytest.raises(StubUsed, match="TOKENSPEED_MAMBA_SSM_DTYPE, which the point does not assume"):
        envs.TOKENSPEED_MAMBA_SSM_DTYPE.get()
    with pytest.raises(StubUsed, match=r"envs\.TOKENSPEED_CI_SMALL_KV_SIZE"):
        bool(envs.TOKENSPEED_CI_SMALL_KV_SIZE)


def test_a_gpu_question_is_an_assumption_and_a_declined_gpu_is_unsupported_there(installed) -> None:
    """DeepSeek-V3.2's DSA config asks the GPU whether an fp8 cache is possible: on Hopper the
    engine declines (refused, unsupported on sm_90), on Blackwell it plans; bf16 asks nothing."""
    run = engine.run(installed, ["dsa"], {"tp": [8], "drafts": [0]})
    verdicts = {(p.point["dtype"], p.point.get("assume")): (p.verdict, p.parent_bytes) for r in run.recipes
                for p in r.points}
    # 61 layers x 64 tokens: fp8 latent 576 B + the fp8_scaled index row 128 + 4 B per token.
    assert verdicts == {("bfloat16", None): ("ok", 61 * 64 * (576 * 2 + 132)),
                        ("fp8", "platform=sm_90"): ("refused", None),
                        ("fp8", "platform=sm_100"): ("ok", 61 * 64 * (576 + 132))}
    declined = next(p for r in run.recipes for p in r.points if p.verdict == "refused")
    assert declined.findings[0].message.startswith("on sm_90: GLM DSA FP8 KV cache currently requires NVIDIA Blackwell")


# ---------------------------------------------------------------- how an engine's failure is judged


@pytest.mark.parametrize("raised, verdict, message", [
    ("ValueError('no K3 packing for this tp')", "boots", "no K3 packing for this tp"),  # refuses a supported point
    ("NotImplementedError('no verified packing for tp 8')", "unsupported", "no verified packing"),  # declared
    # The engine's own assertion: boots too, its type named.
    ("AssertionError('the engine asserts this')", "boots", "AssertionError: the engine asserts this"),
])
def test_what_the_engines_code_raises_decides_the_verdict(installed, tmp_path, raised, verdict, message) -> None:
    edited_copy(installed, tmp_path, f"{RECIPES}/kimi_k3.py", PACKING_HOOK, f"        raise {raised}\n" + PACKING_HOOK)
    proc = verify("engine", "tokenspeed", "--engine-path", str(tmp_path), "--recipe", "kimi_k3", "--tp", "8",
                  "--drafts", "0", "--dtype", "fp8", "--json")
    assert proc.returncode == 1, proc.stdout[-1500:] + proc.stderr
    (recipe,) = json.loads(proc.stdout)["recipes"]
    (point,) = recipe["points"]
    assert point["property"] == verdict and message in point["message"]
    # A recipe every point of which is refused proves nothing: NOT VERIFIED, but not the adapter's.
    assert recipe["reason"] == (None if verdict == "boots" else "every point refused as unsupported")
    assert point["replay"].startswith("verify engine tokenspeed --recipe kimi_k3 --tp 8 --dtype fp8 --drafts 0")


def test_an_exception_of_the_engine_that_is_no_refusal_is_no_verdict(installed, tmp_path) -> None:
    """A TypeError or AttributeError from the engine's recipe is no refusal: kvproof cannot tell an
    engine bug from an input it handed the engine wrongly, so the recipe is NOT VERIFIED (adapter)
    naming the engine's line, never a boots finding a baseline could keep."""
    edited_copy(installed, tmp_path, f"{RECIPES}/kimi_k3.py", PACKING_HOOK,
                "        raise AttributeError('a recipe bug')\n" + PACKING_HOOK)
    code, doc = _run_copy(tmp_path, "--recipe", "kimi_k3", "--tp", "8", "--drafts", "0", "--dtype", "fp8")
    (k3,) = doc["recipes"]
    assert code == 1 and k3["points"] == [] and k3["reason"].startswith(f"adapter: tokenspeed/{RECIPES}/kimi_k3.py:")
    assert ("`raise AttributeError('a recipe bug')`: the engine's code raised AttributeError: a recipe bug"
            in k3["reason"])


def test_a_value_error_of_kvproofs_adapter_is_an_adapter_gap_not_boots(installed, monkeypatch) -> None:
    """Who raised decides, not the exception's type: a ValueError in kvproof's own adapter code (here
    the K3 profile's config derivation) makes that recipe NOT VERIFIED (adapter) naming kvproof's
    line, where the same ValueError raised by the engine's recipe is a boots finding (the test
    above); the other recipe of the run is planned and checked."""
    from kvproof.engines.tokenspeed import kimi_k3

    monkeypatch.setattr(kimi_k3, "hf_text_config", lambda config: int("four"))
    run = engine.run(installed, ["kimi_k3", "mla"], {"tp": [8], "drafts": [0], "dtype": ["fp8"]})
    k3, mla = run.recipes
    assert k3.adapter and k3.points == () and k3.baseline_property == "not_verified_adapter"
    assert k3.not_verified is not None and k3.not_verified.startswith("engines/tokenspeed/kimi_k3.py:")
    assert "ValueError: invalid literal for int() with base 10: 'four' (at tp=8 dtype=fp8 drafts=0; 1 of 1" in (
        k3.not_verified)
    assert not mla.adapter and [p.verdict for p in mla.points] == ["ok"]


def test_judging_an_adapter_failure_by_its_type_is_killed(installed, monkeypatch) -> None:
    """The seeded bug ts_adapter_gap_as_boots (the exception's type alone decides) turns that
    ValueError into a boots finding a baseline could hide: the test above fails under it."""
    fails_under("ts_adapter_gap_as_boots", test_a_value_error_of_kvproofs_adapter_is_an_adapter_gap_not_boots,
                installed, monkeypatch)


def test_a_seam_the_recipe_forgot_is_a_boots_counterexample_not_a_refusal(installed, tmp_path) -> None:
    """CacheRecipe's default seams raise NotImplementedError; a recipe whose seam was renamed
    hits them, and that is a broken recipe, not one declining a point."""
    edited_copy(installed, tmp_path, f"{RECIPES}/kimi_k3.py", "    def group_ids(self)", "    def group_idz(self)")
    proc = verify("engine", "tokenspeed", "--engine-path", str(tmp_path), "--recipe", "kimi_k3", "--tp", "8",
                  "--drafts", "0", "--json")
    assert proc.returncode == 1, proc.stdout[-1500:] + proc.stderr
    points = json.loads(proc.stdout)["recipes"][0]["points"]
    assert {p["verdict"] for p in points} == {"counterexample"} and {p["property"] for p in points} == {"boots"}


def test_a_release_without_a_module_a_recipe_needs_marks_that_recipe_only(installed, monkeypatch) -> None:
    """A module a profile loads that this release lacks: that recipe is NOT VERIFIED (adapter),
    naming the import, and the others run."""
    profile = engine.PROFILES["qwen_gdn"]
    missing = dataclasses.replace(profile, modules=(*profile.modules, "configs.not_in_this_release"))
    monkeypatch.setitem(engine.PROFILES, "qwen_gdn", missing)
    run = engine.run(installed, ["qwen_gdn", "mla"], {"tp": [8]})
    by_name = {r.recipe: r for r in run.recipes}
    gap = by_name["qwen_gdn"]
    assert gap.adapter and gap.not_verified is not None and gap.points == ()
    assert gap.not_verified.startswith("import tokenspeed.runtime.layers.attention.configs.not_in_this_release: ")
    assert by_name["mla"].not_verified is None and {p.verdict for p in by_name["mla"].points} == {"ok"}


# ---------------------------------------------------------------- whose code raised (engines/verdict.py)


def _raised(code: str, filename: str) -> BaseException:
    """An exception raised by `code` written to `filename` (an engine's or kvproof's file)."""
    Path(filename).parent.mkdir(parents=True, exist_ok=True)
    Path(filename).write_text(code)
    namespace: dict[str, Any] = {}
    exec(compile(code, filename, "exec"), namespace)
    try:
        namespace["main"]()
    except Exception as err:
        return err
    raise AssertionError("the code did not raise")


def test_blame_is_the_innermost_frame_of_the_engine_or_kvproof_whatever_the_type(tmp_path) -> None:
    from kvproof.engines import verdict

    engine_dir, adapter_dir = tmp_path / "tokenspeed", tmp_path / "kvproof"
    engine_file, adapter_file = str(engine_dir / "recipe.py"), str(adapter_dir / "build.py")
    # The engine raising a ValueError, and an AttributeError: the engine's.
    for error in ("ValueError('refused')", "AttributeError('bug')"):
        err = _raised(f"def main():\n    raise {error}\n", engine_file)
        b = verdict.blame(err, [engine_dir], [adapter_dir])
        assert b.engine and b.frame is not None and b.frame.filename == engine_file
    # kvproof's adapter raising the same ValueError: the adapter's, named by its line.
    err = _raised("def main():\n    raise ValueError('refused')\n", adapter_file)
    b = verdict.blame(err, [engine_dir], [adapter_dir])
    assert not b.engine and verdict.where(b) == "kvproof/build.py:2 `raise ValueError('refused')`"
    gap = verdict.gap(err, b)
    assert (gap.call, gap.why) == ("kvproof/build.py:2 `raise ValueError('refused')`", "ValueError: refused")
    # Frames of neither (torch, the standard library) are passed over: the engine calling json is the engine.
    err = _raised("import json\ndef main():\n    json.loads('{')\n", engine_file)
    assert verdict.blame(err, [engine_dir], [adapter_dir]).engine
    # A stand-in used by the engine's code: the adapter's, named by the engine's line that used it.
    from kvproof.engines.stubs import Unavailable

    namespace: dict[str, Any] = {"u": Unavailable("server_args.max_num_seqs", "capacity only")}
    Path(engine_file).write_text("def main():\n    return u + 1 > 0\n")
    exec(compile(Path(engine_file).read_text(), engine_file, "exec"), namespace)
    with pytest.raises(StubUsed) as stub:
        namespace["main"]()
    b = verdict.blame(stub.value, [engine_dir], [adapter_dir])
    assert not b.engine and b.frame is not None and b.frame.filename == engine_file
    # No frame of either: kvproof cannot say the engine raised.
    assert not verdict.blame(ValueError("no traceback"), [engine_dir], [adapter_dir]).engine


def test_judge_is_the_shared_entry_for_any_adapter(tmp_path) -> None:
    """verdict.judge: the engine's refusal is the point's verdict (refused for a declared type,
    boots for a ValueError or assertion), any other exception of the engine's and every one of
    kvproof's an AdapterGap; adapter_result makes a recipe of the outcomes."""
    from kvproof.engines import verdict

    engine_dir, ours_dir = [tmp_path / "engine"], [tmp_path / "engines"]
    point = {"tp": 8}
    refused = verdict.judge("r", point, _raised("def main():\n    raise NotImplementedError('no')\n",
                                                 str(tmp_path / "engine/a.py")), "replay", engine_dir, adapter=ours_dir)
    boots = verdict.judge("r", point, _raised("def main():\n    assert False, 'k'\n", str(tmp_path / "engine/b.py")),
                          "replay", engine_dir, adapter=ours_dir)
    bug = verdict.judge("r", point, _raised("def main():\n    raise KeyError('k')\n", str(tmp_path / "engine/c.py")),
                        "replay", engine_dir, adapter=ours_dir)
    ours = verdict.judge("r", point, _raised("def main():\n    raise ValueError('v')\n",
                                              str(tmp_path / "engines/x.py")), "replay", engine_dir, adapter=ours_dir)
    assert isinstance(refused, verdict.PointResult) and refused.verdict == "refused"
    assert isinstance(boots, verdict.PointResult) and boots.findings[0] == verdict.Finding("boots", "AssertionError: k")
    assert isinstance(bug, verdict.AdapterGap) and bug.why.startswith("the engine's code raised KeyError: 'k'")
    assert isinstance(ours, verdict.AdapterGap) and ours.why == "ValueError: v"
    result = verdict.adapter_result("r", [boots, ({"tp": 16}, ours)])
    assert result.adapter and result.points == (boots,) and result.baseline_property == "not_verified_adapter"
    assert result.not_verified == "engines/x.py:2 `raise ValueError('v')`: ValueError: v (at tp=16; 1 of 2 points)"
    assert result.as_dict()["reason"].startswith("adapter: engines/x.py:2")
    assert verdict.adapter_result("r", [boots]).not_verified is None


# ---------------------------------------------------------------- the engine's start-up entries, followed


def test_the_stages_kvproof_runs_are_setups_own(installed) -> None:
    """CacheRecipe.setup() needs the budget and the scheduler, so its code is read, not run: the
    layout stages it calls, in the order they run, and pack()'s keywords, are kvproof's."""
    from kvproof.engines.tokenspeed import pipeline

    base = loader.load(installed, ("base",))["base"]
    theirs = pipeline.stages(base.CacheRecipe.setup)
    assert theirs == pipeline.stages(pipeline.run)
    assert theirs == (("groups", "packing", "pack", "check_layout", "bind"),
                      ("prefix_granularity", "cache_blocks_per_lcm_block", "alignment", "max_padding_fraction"))
    pipeline.check_stages(base.CacheRecipe)


def test_the_registry_is_taken_in_part_from_its_source(installed) -> None:
    """attention/registry.py imports the whole runtime; kvproof runs only the statements that
    define what it reads, with the engine's own imports: the config classes are the recipes' own,
    AttentionArch is model_config.py's (a module kvproof replaces), and a name the revision lacks
    is an AttributeError."""
    from kvproof.engines.tokenspeed import startup

    modules = loader.load(installed, startup.MODULES)
    registry = modules[startup.REGISTRY]
    create = registry._create_attn_config
    assert create.__code__.co_filename == str(installed.package_dir / "runtime/layers/attention/registry.py")
    assert registry.MLAConfig is sys.modules["tokenspeed.runtime.layers.attention.configs.mla"].MLAConfig
    assert [a.name for a in registry.AttentionArch] == ["MLA", "MHA", "DSA", "MSA"]
    assert not hasattr(registry, "no_such_entry")
    assert "_BACKEND_REGISTRY" not in vars(registry) and "create_attn_components" not in vars(registry)
    assert hasattr(modules["setup"], "cache_recipe") and hasattr(registry, "_resolve_cache_family")


def test_a_flat_attention_config_is_followed() -> None:
    """Revisions from upstream #1117 on return a flat MLAConfig from generate(); 0.1.1 a composite
    AttnConfig: the window create_attn_components stamps lands on the softmax part of either."""
    from kvproof.engines.tokenspeed import startup

    class Flat:
        sliding_window_tokens = None

    flat = Flat()
    startup.stamp_window({}, flat, 128)
    assert flat.sliding_window_tokens == 128 and startup.softmax({}, flat) is flat


def _run_copy(tmp_path: Path, *args: str) -> tuple[int, dict]:
    proc = verify("engine", "tokenspeed", "--engine-path", str(tmp_path), *args, "--json")
    assert proc.returncode in (0, 1), proc.stdout[-1500:] + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


BASE = f"{RECIPES}/base.py"


@pytest.mark.parametrize("path, old, new, reason", [
    # The recipe's constructor takes an argument kvproof has no value for: a call shape changed.
    (BASE, "        overlap_schedule_depth: int,\n    ) -> None:",
     "        overlap_schedule_depth: int,\n        kv_budget_policy: str,\n    ) -> None:",
     "takes kv_budget_policy, which kvproof has no value for"),
    # setup() runs another stage order than kvproof's pipeline.
    (BASE, "        self.check_layout(layout)\n        # One parent",
     "        self.validate(layout)\n        # One parent", "it runs groups -> packing -> pack -> bind with pack("),
])
def test_a_revision_kvproof_cannot_drive_is_not_verified_adapter_not_exit_2(installed, tmp_path, path, old, new,
                                                                           reason) -> None:
    edited_copy(installed, tmp_path, path, old, new)
    code, doc = _run_copy(tmp_path, "--recipe", "kimi_k3", "mla", "--tp", "8")
    assert code == 1
    assert [(r["recipe"], r["verified"]) for r in doc["recipes"]] == [("kimi_k3", False), ("mla", False)]
    assert all(r["reason"].startswith("adapter: ") and reason in r["reason"] for r in doc["recipes"]), doc["recipes"]
    assert sorted(k[2] for k in doc["new_findings"] if k[4] == "not_verified_adapter") == ["kimi_k3", "mla"]


def test_kvproofs_model_resolving_to_another_family_is_that_recipes_adapter_gap(installed, tmp_path) -> None:
    edited_copy(installed, tmp_path, "runtime/layers/attention/registry.py",
                '    if type(softmax_attn) is MLAConfig:\n        return "mla"',
                '    if type(softmax_attn) is MLAConfig:\n        return "msa"')
    code, doc = _run_copy(tmp_path, "--recipe", "mla", "mha", "--tp", "8")
    mla, mha = doc["recipes"]
    assert code == 1 and mha["verified"]
    assert mla["reason"] == ("adapter: registry._resolve_cache_family: kvproof's model for recipe 'mla' resolves to "
                             "'msa' at this revision (at model=deepseek-v3 tp=8 dtype=fp8 drafts=0; 7 of 7 points)")


def test_recipes_that_do_not_import_are_each_not_verified_adapter(installed, tmp_path) -> None:
    """A revision without configs/linear_attn.py whose recipes still import it: the recipe list is
    read from setup.py's source, every recipe is NOT VERIFIED (adapter) with the import that
    failed, and the run is a verdict (exit 1), not exit 2."""
    shutil.copytree(installed.package_dir, tmp_path / "tokenspeed", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "tokenspeed/runtime/layers/attention/configs/linear_attn.py").unlink()
    code, doc = _run_copy(tmp_path, "--recipe", "kimi_k3", "msa")
    k3, msa = doc["recipes"]
    assert code == 1 and k3["reason"].startswith(
        "adapter: import tokenspeed.runtime.layers.attention.kv_cache.recipes.setup: ")
    assert "configs.linear_attn" in k3["reason"] and msa["reason"] == k3["reason"]


def test_a_release_without_the_recipes_package_is_unsupported_exit_2(installed, tmp_path) -> None:
    """tokenspeed 0.1.0 (PyPI) predates the one-pipeline-per-family recipes: one line, exit 2."""
    shutil.copytree(installed.package_dir, tmp_path / "tokenspeed", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(tmp_path / f"tokenspeed/{RECIPES}")
    proc = verify("engine", "tokenspeed", "--engine-path", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "error: unsupported: tokenspeed " in proc.stderr and "kv_cache/recipes/setup.py" in proc.stderr


def test_a_moved_helper_is_followed(installed, tmp_path) -> None:
    """Without setup.cache_recipe (the revisions before 0.1.1) the recipe comes from _RECIPES,
    and a renamed recipe class is found through it: the plans are the release's."""
    copy = edited_copy(installed, tmp_path, f"{RECIPES}/setup.py", "def cache_recipe(", "def _was_cache_recipe(")
    for name in ("kimi_k3.py", "setup.py"):
        target = copy / "tokenspeed" / RECIPES / name
        target.write_text(target.read_text().replace("KimiK3Recipe", "KimiK3CacheRecipe"))
    source = loader.path_source(copy)
    moved = engine.plan(source, "kimi_k3", {"tp": 8, "dtype": "fp8", "drafts": 0})
    released = engine.plan(loader.installed_source(), "kimi_k3", {"tp": 8, "dtype": "fp8", "drafts": 0})
    assert isinstance(moved, engine.pipeline.Planned) and isinstance(released, engine.pipeline.Planned)
    assert moved.documents == released.documents


# ---------------------------------------------------------------- baselines across versions


def test_a_baseline_matches_whatever_the_version(installed, tmp_path) -> None:
    """The gate runs on the engine's main branch plus one change, whose version is not the
    release's: 0.1.1's baseline still knows K3's bf16 tp 32 boots finding in a 9.9.9 checkout, and
    the JSON keys keep the run's version."""
    shutil.copytree(installed.package_dir, tmp_path / "python" / "tokenspeed",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "python" / "pyproject.toml").write_text('[project]\nname = "tokenspeed"\nversion = "9.9.9"\n')
    proc = verify("engine", "tokenspeed", "--engine-path", str(tmp_path), "--recipe", "kimi_k3", "--tp", "32",
                  "--dtype", "bfloat16", "--drafts", "0", "--baseline", str(BASELINE), "--json")
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == "9.9.9" and doc["new_findings"] == [] and doc["stale"] == []
    assert doc["baselined"] == [["tokenspeed", "9.9.9", "kimi_k3", "drafts=0,dtype=bfloat16,tp=32", "boots"]]


def test_baseline_files_old_and_new_and_what_is_never_baselined(tmp_path) -> None:
    old = baseline.load(BASELINE)  # kvproof's own file: a version on every entry
    assert {k[1] for k in old} == {"0.1.1"} and len(old) == 53
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"findings": [{"engine": "tokenspeed", "recipe": "msa", "point": "",
                                              "property": "not_verified"}]}))
    assert baseline.load(bare) == {("tokenspeed", "", "msa", "", "not_verified")}
    found = [("tokenspeed", "0.2.0", "msa", "", "not_verified"), ("tokenspeed", "0.2.0", "mla", "", "not_verified")]
    cmp = baseline.compare(found, baseline.load(bare) | {("vllm", "0.33.0", "x", "", "boots")}, "tokenspeed", "0.2.0",
                           {("msa", ""), ("mla", ""), ("x", "")})
    assert cmp.known == found[:1] and cmp.new == found[1:] and cmp.stale == []  # vllm's entry: another engine's
    gap = [("tokenspeed", "0.2.0", "qwen_gdn", "", "not_verified_adapter")]
    assert baseline.compare(gap, {*gap}, "tokenspeed", "0.2.0", {("qwen_gdn", "")}).new == gap  # always new
    with pytest.raises(ValueError, match="never baselined: qwen_gdn"):
        baseline.dump(gap)
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps({"findings": [dict(zip(baseline.FIELDS, gap[0], strict=True))]}))
    with pytest.raises(ConfigError, match=r"not_verified_adapter \(qwen_gdn\): kvproof's adapter failing is never"):
        baseline.load(listed)


def test_write_baseline_refuses_an_adapter_gap_naming_the_recipes(installed, tmp_path) -> None:
    asks = ("        from tokenspeed_kernel.ops.attention.kda import kda_recurrent_layout\n"
            "        if kda_recurrent_layout():\n            pass\n")
    edited_copy(installed, tmp_path, f"{RECIPES}/kimi_k3.py", PACKING_HOOK, asks + PACKING_HOOK)
    out = tmp_path / "written.json"
    proc = verify("engine", "tokenspeed", "--engine-path", str(tmp_path), "--recipe", "kimi_k3", "mla", "--tp", "8",
                  "--write-baseline", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and not out.exists()
    assert "NOT VERIFIED (adapter) is never baselined" in proc.stderr and "drive kimi_k3 at tokenspeed" in proc.stderr


# ---------------------------------------------------------------- upstream revisions (a checkout the reader has)

CHECKOUT = "KVPROOF_TOKENSPEED_CHECKOUT"  # a tokenspeed checkout (or its python/ folder) at any revision from #1117 on
AT_1117 = "KVPROOF_TOKENSPEED_1117"  # a checkout at upstream #1117 (6083537e), where 0.1.1's K3 fix is not yet in
HOW = ("set {} to a tokenspeed checkout (`git archive <rev> python/tokenspeed python/pyproject.toml | tar -x -C DIR`; "
       "docs/engines/tokenspeed-revisions.md)")


def _checkout(name: str) -> str:
    import os

    path = os.environ.get(name)
    if not path:
        pytest.skip(HOW.format(name))
    return path


def test_a_revision_since_1117_verifies_every_recipe_it_registers() -> None:
    path = _checkout(CHECKOUT)
    proc = verify("engine", "tokenspeed", "--engine-path", path, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    modelled = [r for r in doc["recipes"] if r["recipe"] in engine.PROFILES]
    assert modelled and all(r["verified"] for r in modelled), [(r["recipe"], r["reason"]) for r in modelled]
    assert all(r["reason"] == engine.NO_CONFIG for r in doc["recipes"] if r["recipe"] not in engine.PROFILES)


def test_at_1117_kimi_k3_reports_the_pinned_12_attention_dp_bug() -> None:
    """Before 0.1.1's fix the K3 recipe pins K_mla = 12: every attention-DP point (tp < 8) of the
    fp8 cache fails the engine's own exact-stride check, 28 boots counterexamples in all, each
    packed with 12 MLA pages."""
    proc = verify("engine", "tokenspeed", "--engine-path", _checkout(AT_1117), "--recipe", "kimi_k3", "--json")
    assert proc.returncode == 1, proc.stderr
    (k3,) = json.loads(proc.stdout)["recipes"]
    bad = [p for p in k3["points"] if p["verdict"] == "counterexample"]
    assert len(k3["points"]) == 54 and len(bad) == 28
    assert {p["property"] for p in bad} == {"boots"} and {p["packing"]["full_attention"] for p in bad} == {12}
    fp8 = {p["tp"] for p in bad if (p["dtype"], p["drafts"]) == ("fp8", 0)}
    assert {1, 2, 3, 4, 6} <= fp8 and 8 not in fp8
    assert any("needs page stride 73728 but plane 'slot.0' gives" in p["message"] for p in bad)


def test_a_registered_recipe_kvproof_has_no_profile_for_is_not_verified_not_skipped(
        installed: loader.Source, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recipe a revision adds upstream before kvproof plans it: NOT VERIFIED, counted, never dropped."""
    monkeypatch.delitem(engine.PROFILES, "msa")
    (msa,) = engine.run(installed, ["msa"]).recipes
    assert (msa.not_verified, msa.adapter, msa.points) == (engine.NO_CONFIG, False, ())


def test_a_draft_is_bound_through_the_two_argument_resolver_of_the_revisions_before_0_1_1(
        installed: loader.Source, tmp_path: Path) -> None:
    """The revisions since the recipes arrived take (target_family, draft_family); 0.1.1 adds the
    keyword draft_family_declared. The draft points plan the same through either."""
    edited_copy(installed, tmp_path, "runtime/layers/attention/registry.py",
                "    *,\n    draft_family_declared: bool,\n) -> CacheModelFamily | None:",
                ") -> CacheModelFamily | None:\n    draft_family_declared = False")
    older = engine.run(loader.path_source(tmp_path), ["mla"], {"drafts": [1], "tp": [8]})
    released = engine.run(installed, ["mla"], {"drafts": [1], "tp": [8]})
    assert older.recipes[0].not_verified is None and older.recipes[0].points
    assert [p.as_dict() | {"replay": ""} for p in older.recipes[0].points] == \
        [p.as_dict() | {"replay": ""} for p in released.recipes[0].points]
