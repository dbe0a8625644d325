"""`verify engine sglang` through the one engine interface: a narrowed slice of Qwen3-Next's domain
is planned by SGLang's pools and holds, bad input exits 2 with one line, the seeded MambaPool
without its dummy slot is caught at the point `verify mutants` runs, and the JSON has the keys
every engine's `verify engine --json` has."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

try:  # the adapter imports SGLang's pools from the installed wheel (make .venv/.sglang)
    metadata.version("sglang")
except metadata.PackageNotFoundError:
    pytest.skip("make .venv/.sglang installs SGLang's pools (engines/sglang-requirements.txt)", allow_module_level=True)

from kvproof.cli.main import main
from kvproof.engines import registry
from kvproof.engines.sglang import engine, loader, pairs
from kvproof.impl import faults

RECIPE = "qwen3-next-80b-a3b"
GOLDEN = Path(__file__).resolve().parent / "golden" / "cli" / "engine_tokenspeed_kimi_k3.json"  # a recorded run


def test_the_domain_is_the_models_own_and_a_slice_holds() -> None:
    # Qwen3-Next and Qwen3.5-35B: 16 attention heads and 2 KV heads (models/qwen3_next.py:623-634,
    # models/qwen3_5.py:1293-1299), the larger Qwen3.5 32; Kimi-Linear: 32 MLA heads (models/kimi_linear.py:693-696);
    # Kimi-K3: 96 KDA and MLA heads (models/kimi_k3.py:1542, models/deepseek_v2.py:2057), every divisor;
    # Nemotron-3 Nano: 32 heads, 2 KV heads, 64 Mamba heads in 8 groups, so 16 is refused by its Mamba mixer
    # (layers/attention/mamba/mamba.py:249)
    domains = {name: r.tps(r.hf()) for name, r in engine.RECIPES.items()}
    assert domains == {RECIPE: (1, 2, 4, 8, 16), "qwen3.5-35b-a3b": (1, 2, 4, 8, 16),
                       "qwen3.5-122b-a10b": (1, 2, 4, 8, 16, 32), "qwen3.5-397b-a17b": (1, 2, 4, 8, 16, 32),
                       "kimi-linear-48b-a3b": (1, 2, 4, 8, 16, 32),
                       "kimi-k3": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96),
                       "nemotron-3-nano-30b-a3b-bf16": (1, 2, 4, 8), "nemotron-3-ultra-550b-a55b-bf16": (1, 2, 4, 8)}
    assert engine.RECIPES["kimi-linear-48b-a3b"].pages == engine.MLA_PAGES  # FA4's 128 is for a model not MLA
    recipe = engine.RECIPES[RECIPE]
    # every tp at 4 dtypes x 3 pages, unified off and on, and mxfp8 at page 128 with unified off; then the other
    # 2 values of each Mamba dtype, paired
    points = recipe.points()
    assert len(points) == 5 * (len(engine.DTYPES) * len(engine.MHA_PAGES) * len(engine.UNIFIED_VALUES) + 1) + 5 * 2
    assert {(p["page_size"], p["unified"]) for p in points if p["dtype"] == engine.MXFP8} == {(128, "off")}
    assert {(p["mamba_conv"], p["mamba_ssm"], p["dtype"], p["page_size"]) for p in points} >= {
        ("float32", "bfloat16", "auto", 1), ("float16", "float16", "auto", 1)}
    assert engine.MXFP8 not in {p["dtype"] for p in engine.RECIPES["kimi-k3"].points()}

    run = engine.verify([RECIPE], [2, 16], ["bf16", "fp8_e5m2"], None, assume=["page_size=64", "unified=off"])
    assert (run.engine, run.version, run.commit) == ("sglang", metadata.version("sglang"), None)
    assert "installed" in run.source
    (result,) = run.recipes
    assert result.not_verified is None and "nvfp4" in result.limits
    assert [(p.point["tp"], p.point["dtype"]) for p in result.points] == [
        (2, "bf16"), (2, "fp8_e5m2"), (16, "bf16"), (16, "fp8_e5m2")]
    assert all(p.verdict == "ok" and p.point["page_size"] == 64 for p in result.points), result.points
    assert result.points[0].packing == {"mamba": 1, "full_attention": 1}
    assert result.points[0].replay == (f"verify engine sglang --recipe {RECIPE} --tp 2 --dtype bf16 "
                                       "--assume page_size=64 unified=off mamba_conv=bfloat16 mamba_ssm=float32")


@pytest.mark.parametrize(("argv", "says"), [
    (["--tp", "5"], "--tp 5: no point"),
    (["--dtype", "fp16"], "--dtype fp16: no point"),
    (["--assume", "page_size=7"], "sglang takes page_size=1|64|128"),
    (["--drafts", "1"], "do not apply to sglang"),
    (["--recipe", "kimi-linear"], "no recipe 'kimi-linear'"),
    (["--recipe", "kimi-linear-48b-a3b", "--assume", "page_size=128"], "--assume page_size 128: no point"),
    (["--recipe", "qwen3-next-80b-a3b", "kimi-linear-48b-a3b", "--tp", "32"], "leaves qwen3-next-80b-a3b no point"),
    (["--tp", "96", "--assume", "page_size=128"], "no point"),
])
def test_bad_input_exits_2_with_one_line(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "sglang", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_a_recipe_the_narrowing_empties_is_named_not_verified_with_no_point() -> None:
    run = engine.verify(None, [96], ["bf16"], None, assume=["page_size=1"])
    assert [r.recipe for r in run.recipes] == ["kimi-k3"]
    assert ("narrowed out: qwen3-next-80b-a3b, qwen3.5-35b-a3b, qwen3.5-122b-a10b, qwen3.5-397b-a17b, "
            "kimi-linear-48b-a3b, nemotron-3-nano-30b-a3b-bf16, nemotron-3-ultra-550b-a55b-bf16") in run.source


# the allocation each seeded bug breaks: the conv tensor that lost its dummy slot, the conv entries whose
# transfer item spans every rank's segments
BROKEN = {"sglang_mamba_no_dummy_slot": "mamba.conv0: ", "sglang_conv_item_merged_segments": "mamba.conv0: ",
          "sglang_mxfp8_scales_no_padding_page": "kv.layer",  # every layer's K and V scales
          # the KV heads of either pair (prefill 2 into decode 4, 4 into 2); the state of prefill 4 into decode 2,
          # whose prefill ranks 2 and 3 write past the slot
          "sglang_pd_kv_heads_no_floor": "prefill at tp ",
          # the unified pool's sub-pool each bug breaks: the Mamba entry's alignment, the full end's front (the
          # gap rounded up), both ends' fronts (each looking through the other), the Mamba end's slot 0 past the sink
          "sglang_unified_mamba_entry_slack": "unified.mamba: ",
          "sglang_unified_gap_rounded_up": "unified.full: ",
          "sglang_unified_end_opaque_lost": "unified.",
          "sglang_unified_sink_smallest_entry": "unified.mamba: ",
          "sglang_pd_state_writer_unwrapped": "prefill at tp 4, decode at tp 2: state entry 0 (layer 0): prefill "
          "rank 2 writes bytes 24,576..30,720 of decode rank 1's 24,576 B slot",
          # the sized launch of the point (engines/sglang/sizing.py)
          "sglang_spec_state_decode_prealloc": "sizing on h100, spec auto: Mamba share priced ",
          "sglang_spec_state_priced_prealloc": "sizing on h100, spec auto: Mamba share priced "}


@pytest.mark.parametrize("mutant", registry.adapter("sglang").mutants, ids=lambda m: m.name)
def test_each_mutant_is_killed_where_verify_mutants_runs_it(mutant: Any, capsys: pytest.CaptureFixture[str]) -> None:
    (check,) = mutant.checks
    argv = check.split()[1:]
    assert main([*argv, "--json"]) == 0  # the check passes without the fault
    capsys.readouterr()
    with faults.inject(mutant.name):
        # only cross-point findings: exit 3 (CROSS-POINT FINDINGS)
        assert main([*argv, "--json"]) == (3 if mutant.expect in pairs.CROSS_POINT else 1)
    report = json.loads(capsys.readouterr().out)
    assert mutant.expect in {key[4] for key in report["new_findings"]}
    assert f"mutated: {mutant.name}" in report["source"]
    found = [f["message"] for point in report["recipes"][0]["points"] for f in point["findings"]
             if f["property"] == mutant.expect]
    assert found and all(m.startswith(BROKEN[mutant.name]) for m in found)


def test_prefill_and_decode_ranks_pair_as_sglang_maps_them() -> None:
    # decode rank d pulls from prefill rank d // (D / P), or from P / D prefill ranks (common/conn.py:1452-1477)
    assert pairs.ranks(2, 4) == [(0, 0), (0, 1), (1, 2), (1, 3)]
    assert pairs.ranks(4, 2) == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert pairs.ranks(2, 2) == [(0, 0), (1, 1)]
    assert pairs._covered([(0, 4), (4, 4)]) == 8 and pairs._covered([(0, 4), (2, 4)]) == 4  # overlap: written twice


def test_kimi_linears_pairs_hold_and_its_latent_is_not_head_split() -> None:
    """Kimi-Linear's KDA states sliced by SGLang's own arithmetic between tp 1 and tp 32 land in their
    slots; its MLA pool gives no heads to split (prefill.py:336: only a non-MLA pool sets kv_head_num)."""
    run = engine.verify(["kimi-linear-48b-a3b"], [1, 32], ["bf16"], None, assume=["page_size=64", "unified=off"])
    (result,) = run.recipes
    assert [(p.point["tp"], p.verdict) for p in result.points] == [(1, "ok"), (32, "ok")], result.points


def test_every_buffer_is_walked_by_the_item_length_sglang_gives_its_transfer() -> None:
    """Each field's reader is the disaggregation transfer, stepping by the item length SGLang's
    get_state_buf_infos / get_contiguous_buf_infos give: at tp 2 and 64-token pages, a Qwen3-Next conv
    slot of 4096 x 3 bf16, a temporal slot of 16 x 128 x 128 fp32, a K or V page of 64 x 256 bf16."""
    from kvproof.engines.sglang import planner

    with loader.session(loader.source_of(None)) as mods:
        allocations, transfer = planner.allocations(mods, planner.model(mods, engine.RECIPES[RECIPE].hf()),
                                                   planner.Point(2, "bf16", 64), 3)
    # one of Qwen3-Next's 2 KV heads per rank; a conv slot's [q | k | v] sub-blocks, whole: 16 x 128 key
    # heads twice and 32 x 128 value heads (linear_num_key_heads, linear_num_value_heads, their head dims)
    assert (transfer.heads, transfer.total_heads) == (1, 2)
    assert {e.groups for e in transfer.state} == {(2048, 2048, 4096), None}
    items = {a.name.rstrip("0123456789"): set(a.items) for a in allocations}
    assert items == {"mamba.conv": {4096 * 3 * 2}, "mamba.temporal": {16 * 128 * 128 * 4}, "kv.layer": {64 * 256 * 2}}
    for a in allocations:
        doc = planner.document(a)
        assert [f["readers"] for f in doc["fields"]] == [
            [{"name": planner.TRANSFER, "walks": "item", "item_bytes": f["stride"]}] for f in doc["fields"]]


def test_json_has_every_engines_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "sglang", "--recipe", RECIPE, "--tp", "1", "--dtype", "auto", "--assume", "page_size=1",
                 "unified=off", "mamba_conv=bfloat16", "mamba_ssm=float32", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    golden = json.loads(GOLDEN.read_text())
    assert list(doc) == list(golden)
    assert list(doc["recipes"][0]) == list(golden["recipes"][0])
    axes = {"tp", "dtype", "page_size", "unified", "mamba_conv", "mamba_ssm"}
    (point,) = doc["recipes"][0]["points"]
    assert [k for k in point if k not in axes] == [k for k in golden["recipes"][0]["points"][0]
                                                   if k not in {"tp", "dtype", "drafts"}]
    assert point["verdict"] == "ok" and doc["new_findings"] == [] and doc["cross_point"] == sorted(pairs.CROSS_POINT)



def test_a_checkout_is_read_at_the_version_its_build_wrote(tmp_path: Path) -> None:
    """--engine-path DIR with SGLang's repository layout (DIR/python/sglang): the installed package linked
    in, whose _version.py its build wrote; without that file the version is unknown, not version.py's
    fallback literal."""
    package = tmp_path / "built" / "python" / "sglang"
    package.parent.mkdir(parents=True)
    package.symlink_to(loader.source_of(None).package_dir, target_is_directory=True)
    built = loader.source_of(str(tmp_path / "built"))
    assert (built.version, built.where, built.commit) == (metadata.version("sglang"),
                                                          f"checkout {(tmp_path / 'built').resolve()}", None)
    bare = tmp_path / "bare" / "sglang"
    (bare / "srt" / "mem_cache").mkdir(parents=True)
    (bare / "srt" / "mem_cache" / "memory_pool.py").write_text("")
    (bare / "version.py").write_text('__version__ = "0.0.0.dev0"\n')
    assert loader.source_of(str(tmp_path / "bare")).version == "unknown"
