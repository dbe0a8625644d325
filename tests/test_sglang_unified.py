"""SGLang's unified memory pool (--enable-unified-memory): the pool its configurator builds, read into plan
documents on the meta device; its entries aligned, its sink reserved, and its fronts where SGLang's own
allocators' gate lets them reach, crossing only under a seeded bug."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest

try:  # the adapter imports SGLang's pools from the installed wheel (make .venv/.sglang)
    metadata.version("sglang")
except metadata.PackageNotFoundError:
    pytest.skip("make .venv/.sglang installs SGLang's pools (engines/sglang-requirements.txt)", allow_module_level=True)

from kvproof.cli.main import main
from kvproof.engines.replaced import replaced
from kvproof.engines.sglang import engine, loader, mutants, planner, unified, unified_mutants
from kvproof.impl import faults
from kvproof.spec.encoding import violations
from kvproof.spec.plan_reader import concrete_facts

RECIPE = "qwen3-next-80b-a3b"


@pytest.fixture(scope="module")
def mods() -> Any:
    with loader.session(loader.source_of(None)) as loaded:
        yield loaded


def _documents(mods: Any, point: planner.Point) -> dict[str, dict]:
    bundle = unified.build(mods, planner.model(mods, engine.RECIPES[RECIPE].hf()), point)
    layout = mods[unified.LAYOUT]
    return {name: unified.document(mods[unified.POOL], bundle, name, (layout.ENTRY_ALIGN_BYTES, layout.ROW_ALIGN_BYTES))
            for name in unified.SUB_POOLS}


def test_the_documents_are_sglangs_views_of_one_buffer(mods: Any) -> None:
    """Qwen3-Next at tp 2, bf16, one-token pages: the Mamba entry holds 36 layers of a 4096 x 3 bf16 conv
    state and a 16 x 128 x 128 fp32 SSM state; the full entry 12 layers' K and V, one 256-wide head each.
    Both sub-pools' views lie in the one buffer, 4 slots of each side's tokens (unified.SLOTS)."""
    docs = _documents(mods, planner.Point(2, "bf16", 1))
    mamba, full = docs["mamba"], docs["full"]
    assert mamba["parent_bytes"] == 36 * (4096 * 3 * 2 + 16 * 128 * 128 * 4)
    assert full["parent_bytes"] == 12 * 2 * 256 * 2
    assert mamba["arena_bytes"] == full["arena_bytes"] == 4 * (mamba["parent_bytes"] + full["parent_bytes"])
    assert [(f["id"], f["shape"], f["offset"]) for f in mamba["fields"]] == [
        ("mamba.conv0", [36, 4096, 3], 0), ("mamba.temporal", [36, 16, 128, 128], 36 * 4096 * 3 * 2)]
    assert [f["offset"] for f in full["fields"][:4]] == [0, 512, 1024, 1536]  # K_0 | V_0 | K_1 | V_1
    mamba_end, full_end = mamba["groups"][0]["end"], full["groups"][0]["end"]
    assert (mamba_end["grows"], full_end["grows"]) == ("up", "down")
    # the sink is one Mamba entry: the Mamba end hands out from slot 1, the full end past 3,144 of its slots
    assert mamba_end["sink_bytes"] == full_end["sink_bytes"] == mamba["parent_bytes"]
    assert (mamba_end["min_page"], full_end["min_page"]) == (1, mamba["parent_bytes"] // full["parent_bytes"])
    for doc in docs.values():
        assert violations(concrete_facts(doc)) == []


def test_the_gate_keeps_the_fronts_apart_where_the_pages_do_not_divide(mods: Any) -> None:
    """At 64-token pages the full end's pages (786,432 B) do not divide the Mamba entry (38,633,472 B), and
    SGLang's available_size() gate still keeps the fronts apart: the Mamba end reaches slot 2 only once the
    full end's front is at or above 2 entries (watermark q with (q + 1) x 786,432 >= 77,266,944: q >= 98), and
    the full end stops at the page whose front is the Mamba end's or above it."""
    bundle = unified.build(mods, planner.model(mods, engine.RECIPES[RECIPE].hf()), planner.Point(2, "bf16", 64))
    assert unified.reach(bundle, "mamba") == [
        {"peer_from": 49, "peer_to": 97, "own": 1}, {"peer_from": 98, "peer_to": 146, "own": 2},
        {"peer_from": 147, "peer_to": 195, "own": 3}, {"peer_from": 196, "peer_to": 199, "own": 4}]
    assert unified.reach(bundle, "full") == [{"peer_from": q, "peer_to": q, "own": own}
                                             for q, own in ((1, 49), (2, 98), (3, 147), (4, 196))]
    results = unified.checked(mods, engine.RECIPES[RECIPE].hf(), RECIPE, {}, planner.Point(2, "bf16", 64), "replay")
    assert {name: r.verdict for name, r in results.items()} == {"unified.mamba": "ok", "unified.full": "ok"}


@pytest.mark.parametrize(("fault", "page_size", "sglang_says"), [
    # the gap counted in pages rounded up: the full end is promised a page the gap only partly holds, and its
    # backstop, which rounds the Mamba front down, lets the allocation through; SGLang's chain check sees it
    ("sglang_unified_gap_rounded_up", 64, {"unified.full": "[chain] full low frontier 77070336 overlaps the "
                                           "previous pool's high frontier 77266944"}),
    # ends that look through each other: both cross, and SGLang's own chain check, walking the same chain, does not
    # see it
    ("sglang_unified_end_opaque_lost", 1, {name: "SGLang's _chain_byte_accounting_violations reports nothing"
                                           for name in ("unified.mamba", "unified.full")}),
])
def test_the_fronts_cross_where_a_seeded_bug_lets_sglangs_allocations_cross(
        mods: Any, fault: str, page_size: int, sglang_says: dict[str, str]) -> None:
    with faults.inject(fault):
        results = unified.checked(mods, engine.RECIPES[RECIPE].hf(), RECIPE, {}, planner.Point(2, "bf16", page_size),
                                  "replay", lambda loaded: mutants.applied(loaded, [fault]))
    crossed = {name: r.findings for name, r in results.items() if r.findings}
    assert set(crossed) == set(sglang_says)
    for name, (finding,) in crossed.items():
        assert finding.property == "fronts_never_cross"
        said, sglang = finding.message.split("; ")
        up, down = (int(n.replace(",", "")) for n in said.split("the up front ")[1].split(":")[0].split(
            " passes the down front "))
        assert up > down and sglang == sglang_says[name]


def test_where_the_backstop_takes_less_than_the_gate_promised_the_walk_finds_what_it_takes(mods: Any) -> None:
    """A gate two pages over where the gap ends part way into a page: the full end's allocation of all it was
    promised is refused by the backstop, but one a page smaller is made, and it crosses; the walk records that one
    (the largest SGLang makes), not the refused whole."""
    def over_by_two(loaded: Any) -> Any:
        return replaced([("over_by_two", loaded[unified.ALLOCATOR], "MultiEndedAllocator._available_tokens",
                          unified_mutants.over_admitting(2))])

    results = unified.checked(mods, engine.RECIPES[RECIPE].hf(), RECIPE, {}, planner.Point(2, "bf16", 64), "replay",
                              over_by_two)
    assert results["unified.mamba"].verdict == "ok"
    (finding,) = results["unified.full"].findings
    assert finding.property == "fronts_never_cross"
    assert "with the end growing up at watermark 2, its allocations reach watermark 97" in finding.message
    assert finding.message.endswith("[chain] full low frontier 77070336 overlaps the previous pool's high frontier "
                                    "77266944")


@pytest.mark.parametrize(("argv", "says"), [
    (["--assume", "unified=yes"], "sglang takes page_size=1|64|128; unified=off|on"),
    (["--assume", "unified"], "unified=off|on"),
])
def test_bad_unified_values_exit_2_with_one_line(argv: list[str], says: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "sglang", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
