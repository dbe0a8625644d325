"""The check every vLLM family test makes of its members' run: each plans at the installed vLLM, holds every plan
property at the points asked, and says it stands for its family, never for the checkpoint it is no verdict on."""

from __future__ import annotations

from typing import Any

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline
from kvproof.engines.vllm import engine


def stand_for_their_family(names: list[str], only: dict[str, Any], checkpoint: str,
                           members: int) -> tuple[str, list[dict[str, Any]]]:
    """The recipes `names` run at `only`: every point plans and holds every property, each result says family, the
    family's `members`, and `checkpoint` as the one it is no verdict on; the text and each result's JSON, for the
    caller's own checks."""
    run = engine.run(names, only)
    text = render(run, baseline.compare([], set(), "vllm", run.version, set()), False, set())
    assert text.count(f"not a verdict on {checkpoint}; --config FILE gives one") == len(names)
    outs = []
    for result in run.recipes:
        assert result.not_verified is None and [p.point["spec"] for p in result.points] == list(only["spec"])
        assert all(p.verdict == "ok" and not p.findings for p in result.points)
        out = result.as_dict()
        assert (out["coverage"], out["members"], out["enumerated"]) == ("family", members, members)
        assert out["family"]["not_a_verdict_on"] == checkpoint
        outs.append(out)
    return text, outs
