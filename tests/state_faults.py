"""The check of a seeded class-level state bug at a vLLM family (vllm#57721's kind: the model class sizes the state
the hybrid alignment pads by without the speculative conv rows its layers keep): shown by the token count whose rows
outgrow the page's slack, and hidden by the count before it."""

from __future__ import annotations

from typing import Any

from kvproof.engines.vllm import engine
from kvproof.impl import faults


def killed_past_the_slack(fault: str, recipe: str, at: dict[str, Any], hidden: int, shown: int) -> None:
    """With `fault` on, `recipe`'s point `at` boots and holds every property at `hidden` tokens (the page's slack
    holds the rows the class leaves out) and fails to boot at `shown`, on vLLM's own assertion."""
    with faults.inject(fault):
        fits, fails = engine.run([recipe], {**at, "spec": [hidden, shown]}).recipes[0].points
    assert fits.verdict == "ok" and not fits.findings
    assert [f.property for f in fails.findings] == ["boots"]
    assert "vllm/v1/kv_cache_interface.py:" in fails.findings[0].message
