"""The gate's verdict and pull-request summary (the gate itself runs this suite, so it is not run here)."""

from __future__ import annotations

from typing import Any

from kvproof.ci.gate import markdown, verdict


def _summary(*, proved=True, tests=True, survived=False, engine=True) -> dict[str, Any]:
    mutants = [
        {"name": "policy_ceil", "killed": True, "by": "verify prove --model kimi-k3 --policy ceil", "seconds": 1.2},
        {"name": "kda_gate_sign", "killed": not survived, "by": None if survived else "t::x", "seconds": 3.4},
    ]
    summary: dict[str, Any] = {
        "prove": [{"model": "kimi-k3", "proved": proved, "error": "", "result": {
            "policy": "search", "seconds": 0.4,
            "counterexamples": [] if proved else [{"tp": 32, "dtype": "bf16", "property": "padding_bound"}],
        }}],
        "engines": [{"engine": "tokenspeed", "passed": engine, "error": "", "result": {
            "version": "0.1.1", "baselined": [["tokenspeed", "0.1.1", "kimi_k3", "dtype=bfloat16,tp=32", "boots"]],
            "stale": [], "new_findings": [] if engine else [["tokenspeed", "0.1.1", "kimi_k3", "dtype=fp8,tp=8",
                                                            "exact_stride"]]}}],
        "tests": {"passed": tests, "tests": 10, "failures": 0 if tests else 1, "errors": 0, "skipped": 1, "seconds": 9},
        "mutants": {"passed": not survived, "result": {"mutants": mutants}, "error": ""},
    }
    summary["passed"] = verdict(summary)
    return summary


def test_all_green_says_merge():
    assert verdict(_summary())
    text = markdown(_summary())
    assert text.startswith("## kvproof gate: MERGE") and "**FAIL**" not in text


def test_each_failure_says_do_not_merge_and_names_itself():
    assert not any(verdict(_summary(**{k: v})) for k, v in
                   [("proved", False), ("tests", False), ("survived", True), ("engine", False)])
    assert "| kimi_k3 dtype=fp8,tp=8 | exact_stride |" in markdown(_summary(engine=False))
    assert "tp=32 bf16 | padding_bound" in markdown(_summary(proved=False))
    assert "DO NOT MERGE" in markdown(_summary(tests=False))
    text = markdown(_summary(survived=True))
    assert "DO NOT MERGE" in text and "| kda_gate_sign | **SURVIVED** |" in text


def test_the_draft_domain_run_is_named_in_the_summary():
    summary = _summary(proved=False)
    summary["prove"].append(summary["prove"][0] | {"drafts": "0-8", "result": {
        "policy": "search", "seconds": 2.0,
        "counterexamples": [{"tp": 32, "dtype": "bf16", "drafts": 1, "draft_dtype": "bf16", "property": "no_overlap"}],
    }})
    text = markdown(summary)
    assert "| kimi-k3 (drafts 0-8) | search | **FAIL** |" in text
    assert "tp=32 bf16 drafts=1 bf16 | no_overlap" in text
