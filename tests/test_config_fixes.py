"""`verify config`'s fix search against the fixes recorded from the z3 search it replaced
(tests/golden/config_fixes.json), on random launches: same rules violated, same fixes.

Recorded from commit 0928433 (one z3 Optimize per fix): in a worktree of it, with this file
copied into its tests/, `python tests/test_config_fixes.py --record`. The launches are drawn from
a seeded generator, so the recording keeps only their digest and the answers.

Where two launches are equally close (every objective of the search equal) the old search took
whichever z3 reached first; the test then accepts either, after checking that both are fixes and
equally close by the objectives stated here, independently of the search's own code. Of the
recording's 1,097 fixes, 21 are such ties, each `--tp N` against `--world-size N`.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from kvproof.engines.tokenspeed.launch_flags import launch_argv, parse_launch
from kvproof.spec.catalog import load_model
from kvproof.spec.contract import MAX_PADDING
from kvproof.spec.launch import (
    CORE,
    CORE_RESOLVED,
    OPTIONAL,
    RESOLVED_FROM,
    RULES,
    SIZE_FLAGS,
    Launch,
    assumption_cases,
    resolve_launch,
    violated,
)
from kvproof.spec.launch_fix import Drafts, Fix, Search, check
from kvproof.spec.policy import policy_named

GOLDEN = Path(__file__).parent / "golden" / "config_fixes.json"
CASES = 300
SEED = 20261202
# sizes an operator writes: the head-count divisors, powers of two, a few that divide nothing
SIZES = (1, 1, 1, 2, 2, 3, 4, 4, 5, 6, 7, 8, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 1024)
DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "mxfp8")


def random_case(rng: random.Random) -> dict[str, Any]:
    """One launch as flags, with the options verify config takes beside it."""
    argv: list[str] = []
    spelling = {"tp": "--tp", "dp": "--data-parallel-size", "pp": "--pipeline-parallel-size", "world": "--world-size",
                "dense_tp": "--dense-tp-size", "ep": "--ep-size", "moe_tp": "--moe-tp-size",
                "dcp": "--decode-context-parallel-size", "nnodes": "--nnodes"}
    for name in SIZE_FLAGS:
        if rng.random() < (0.55 if name in ("tp", "dp") else 0.25):
            argv += [spelling[name], str(rng.choice(SIZES))]
    if rng.random() < 0.2:
        argv.append("--enable-expert-parallel")
    if rng.random() < 0.4:
        argv += ["--dist-init-addr", "10.0.0.1:4000"]
    if rng.random() < 0.2:
        argv += ["--disaggregation-mode", "prefill"]
    if rng.random() < 0.5:
        argv += ["--kv-cache-dtype", rng.choice(DTYPES)]
    drafts = rng.choice((0, 0, 0, 5))
    return {"argv": argv, "tiled": rng.choice((None, None, True, False)),
            "policy": rng.choice(("search", "search", "ceil", "pinned12")),
            "drafts": drafts, "draft_dtype": rng.choice(("bf16", "fp8"))}


def cases() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    return [random_case(rng) for _ in range(CASES)]


def _digest(drawn: list[dict[str, Any]]) -> str:
    """The recording keeps this, not the launches: the seeded generator draws them again."""
    return hashlib.sha256(json.dumps(drawn).encode()).hexdigest()


FIELDS = [f.name for f in fields(Launch)]


def _fix(fix: Fix | None) -> list[Any] | str | None:
    """A fixed launch as its field values in Launch's order (the recording's form)."""
    return fix if fix is None or isinstance(fix, str) else [getattr(fix, n) for n in FIELDS]


def answer(case: dict[str, Any]) -> dict[str, Any]:
    """The violated rules with their fixes, and the fix for all at once, as JSON."""
    model = load_model("kimi-k3")
    launch = parse_launch(case["argv"]).launch
    violations, whole = check(launch, model, case["tiled"], policy_named(case["policy"]), RULES,
                              Search(time.monotonic() + 600, 600),
                              Drafts(case["drafts"], case["draft_dtype"], MAX_PADDING))
    return {"violations": [[v.rule, _fix(v.fix)] for v in violations], "fix_all": _fix(whole)}


def closeness(before: Launch, after: Launch) -> tuple[int, int, int, int]:
    """The search's objectives, in order: flags changed, the change of the resolved sizes, flags
    given of those the engine can resolve, the sum of the sizes given."""
    old, new = resolve_launch(before), resolve_launch(after)
    return (sum(getattr(before, f.name) != getattr(after, f.name) for f in fields(Launch)),
            sum(abs(getattr(new, n) - getattr(old, n)) for n in SIZE_FLAGS),
            sum(getattr(after, n) is not None for n in OPTIONAL),
            sum(getattr(after, n) or 0 for n in SIZE_FLAGS))


def same_or_tied(launch: Launch, model: Any, case: dict[str, Any], rule: str | None,
                 got: Any, want: Any) -> bool:
    """The recorded fix, or a different launch exactly as close that fixes the same rule."""
    if got == want:
        return True
    if not isinstance(got, list) or not isinstance(want, list):
        return False
    a, b = (Launch(**dict(zip(FIELDS, values, strict=True))) for values in (got, want))
    if closeness(launch, a) != closeness(launch, b):
        return False
    broken = {r.name for c in assumption_cases(case["tiled"]) for r in violated(launch, model, c)}
    for fixed in (a, b):
        now = {r.name for c in assumption_cases(case["tiled"]) for r in violated(fixed, model, c)}
        if (rule is None and now) or (rule is not None and (rule in now or now - broken)):
            return False
    return True


@pytest.fixture(scope="module")
def golden() -> list[dict[str, Any]]:
    recorded = json.loads(GOLDEN.read_text())
    assert recorded["cases_sha256"] == _digest(cases()) and recorded["fields"] == FIELDS, "record again"
    return recorded["answers"]


@pytest.mark.parametrize("chunk", range(10))
def test_fixes_are_the_recorded_ones(golden: list[dict[str, Any]], chunk: int) -> None:
    model = load_model("kimi-k3")
    for i, case in list(enumerate(cases()))[chunk::10]:
        got, want = answer(case), golden[i]
        launch = parse_launch(case["argv"]).launch
        assert [r for r, _ in got["violations"]] == [r for r, _ in want["violations"]], (case, got, want)
        for (rule, fix), (_, recorded) in zip(got["violations"], want["violations"], strict=True):
            assert same_or_tied(launch, model, case, rule, fix, recorded), (case, rule, fix, recorded)
        assert same_or_tied(launch, model, case, None, got["fix_all"], want["fix_all"]), (case, got, want)


def test_the_cases_cover_every_rule_and_multi_flag_fixes(golden: list[dict[str, Any]]) -> None:
    rules = {r for a in golden for r, _ in a["violations"]}
    assert rules == {r.name for r in RULES} | {"cache_contract"}, rules
    changed = [closeness(parse_launch(c["argv"]).launch, Launch(**dict(zip(FIELDS, a["fix_all"], strict=True))))[0]
               for c, a in zip(cases(), golden, strict=True) if isinstance(a["fix_all"], list)]
    assert max(changed) >= 3, changed


def record() -> None:
    out = []
    for i, case in enumerate(cases()):
        start = time.perf_counter()
        out.append(answer(case))
        print(i, f"{time.perf_counter() - start:.2f} s", launch_argv(parse_launch(case["argv"]).launch), flush=True)
    GOLDEN.write_text(json.dumps({"cases_sha256": _digest(cases()), "fields": FIELDS, "answers": out},
                                 separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: tests/test_config_fixes.py --record")
    record()


def test_each_resolved_size_reads_only_the_fields_the_search_groups_it_with() -> None:
    """The search solves each group of flags apart (spec/launch.py RESOLVED_FROM): a
    resolved size must not move when a field outside its own and the core changes."""
    rng = random.Random(SEED)
    for case in cases()[:60]:
        launch = parse_launch(case["argv"]).launch
        before = resolve_launch(launch)
        for f in fields(Launch):
            other = rng.choice([v for v in (None, True, False, "fp8", "bf16", *SIZES) if v != getattr(launch, f.name)
                                and _fits(f.name, v)])
            changed: dict[str, Any] = {**vars(launch), f.name: other}
            after = resolve_launch(Launch(**changed))
            for name in RESOLVED_FROM:
                if f.name not in (*RESOLVED_FROM[name], *CORE):
                    assert getattr(after, name) == getattr(before, name), (launch, f.name, other, name)
            if f.name not in CORE:
                assert all(getattr(after, n) == getattr(before, n) for n in CORE_RESOLVED), (launch, f.name)


def _fits(name: str, value: Any) -> bool:
    if name in SIZE_FLAGS:
        return (isinstance(value, int) and not isinstance(value, bool)) or (value is None and name in OPTIONAL)
    if name == "dtype":
        return value in ("fp8", "bf16", None)
    return isinstance(value, bool)
