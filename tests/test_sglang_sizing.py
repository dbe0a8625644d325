"""SGLang's pool sizing under test (engines/sglang/sizing.py): the rest memory a stated device leaves, the
sizing axes and their one-line refusals, and a launch whose Mamba share is priced exactly as allocated
beside the adaptive speculative one that allocates past its price (the 0.5.23 finding)."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

from kvproof.cli.main import main
from kvproof.engines.sglang import sizing
from kvproof.engines.verdict import EngineError
from kvproof.spec import properties as P

GIB = 1 << 30


def test_the_property_holds_between_the_allocation_and_the_allocation_plus_its_bound() -> None:
    assert P.priced_covers_allocated(10, 10, 0) and P.priced_covers_allocated(12, 10, 2)
    assert not P.priced_covers_allocated(9, 10, 5)  # promises less than the pool takes
    assert not P.priced_covers_allocated(13, 10, 2)  # over-prices past the bound
    assert P.PRICED_COVERS_ALLOCATED in P.SIZING and P.PRICED_COVERS_ALLOCATED not in P.PROPERTIES


def test_the_rest_memory_is_the_fraction_of_the_device_less_a_ranks_weights() -> None:
    # Qwen3-Next's 80 x 10^9 bf16 parameters over 4 ranks of an H100 (81,559 MiB) at SGLang's fraction 0.824
    weights = 80 * 10**9 * 2
    assert sizing.params("qwen3-next-80b-a3b") == 80 * 10**9 and sizing.params("kimi-k3") is None
    assert sizing.rest_gib(81_559, 0.824, weights, 4) == pytest.approx(81_559 / 1024 * 0.824 - weights / 4 / GIB)
    # SGLang keeps at least 10 GiB out of the fraction (memory_hook.py:315): 40 GB a rank fits an H100, 80 GB not
    assert sizing.fits(81_559, weights, 4) and not sizing.fits(81_559, weights, 2)
    # Nemotron-3 Ultra's 550 x 10^9 bf16 parameters fit no H100 at tp 8
    assert not sizing.fits(81_559, 550 * 10**9 * 2, 8)


def test_speculation_is_planned_where_the_checkpoint_ships_an_mtp_head() -> None:
    assert sizing.axes("qwen3-next-80b-a3b") == {"device": ("h100", "h200"), "spec": tuple(sizing.SPECS)}
    assert sizing.axes("kimi-linear-48b-a3b")["spec"] == ("none",)
    # a topk-1 chain drafts steps + 1 tokens (speculative_hook.py:1255-1266)
    for name in ("steps1", "steps7"):
        flags = sizing.SPECS[name]
        assert flags["speculative_num_draft_tokens"] == flags["speculative_num_steps"] + 1


def test_the_sizing_axes_are_taken_out_of_assume_and_a_value_none_has_is_refused() -> None:
    rest, only = sizing.narrowing(["page_size=1", "device=h200", "spec=adaptive"])
    assert rest == ["page_size=1"] and only == {"device": ["h200"], "spec": ["adaptive"]}
    with pytest.raises(EngineError, match=re.escape("sizing takes device=h100|h200")):
        sizing.narrowing(["device=a100"])
    assert sizing._assuming("verify engine sglang --assume page_size=1 unified=off --max-padding 0.5",
                            ["spec=auto"]) == ("verify engine sglang --assume page_size=1 unified=off spec=auto "
                                               "--max-padding 0.5")


@pytest.mark.parametrize(("value", "says"), [("device=a100", "device=h100|h200"), ("spec=eagle", "spec=none|auto")])
def test_a_bad_sizing_value_exits_2_with_one_line(value: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "sglang", "--assume", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_a_launch_is_priced_as_allocated_and_adaptive_speculation_allocates_past_its_price() -> None:
    try:  # SGLang's sizing code from the installed wheel (make .venv/.sglang)
        metadata.version("sglang")
    except metadata.PackageNotFoundError:
        pytest.fail("make .venv/.sglang installs SGLang, which this test sizes with")
    from kvproof.engines.sglang import engine

    run = engine.verify(["qwen3-next-80b-a3b"], [4], ["auto"], None, assume=["page_size=1", "device=h100"])
    (result,) = run.recipes
    assert "sizing: 6 launches sized, 0 whose weights leave no memory" in result.limits
    sized = [p for p in result.points if all(p.point.get(axis, v) == v for axis, v in sizing.SIZED.items())]
    (point,) = sized
    (finding,) = [f for f in point.findings if f.property == P.PRICED_COVERS_ALLOCATED]
    # adaptive NEXTN drafts 4 tokens and may switch to 8 (spec_info.py:268-289): the pool holds 8 per slot
    assert finding.message.startswith("sizing on h100, spec adaptive: Mamba share priced ")
    assert "draft tokens 4 (largest 8)" in finding.message
    assert point.replay.endswith(" device=h100 spec=adaptive") and "--assume page_size=1 " in point.replay
    # the points at other launch values are not sized: no sizing finding
    assert not [f for p in result.points if p not in sized for f in p.findings
                if f.property == P.PRICED_COVERS_ALLOCATED]
