"""Check an engine launch (its own flags, after --) against the launch rules and the cache contract.

Answers OK, or one line per violated rule with the numbers, the reason, and the smallest change
that fixes it (fewest flags changed, then the smallest change of the resolved sizes, ties to the
fewest flags given), found by z3 over the flag space within --time-limit: the change keeps every
rule that held holding. With --engine tokenspeed
it also runs the engine's own parallel resolution on the launch and reports every violated rule
that tokenspeed enforces nowhere (its `engine_enforces` says "no") as a finding.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, fields, replace
from fractions import Fraction

from kvproof.ci.cli import UsageError
from kvproof.ci.cmd_plan import add_draft_arguments, add_model_arguments
from kvproof.ci.launch_flags import (
    CANONICAL,
    DTYPE_SPELLING,
    LaunchFlagError,
    ParsedLaunch,
    launch_argv,
    parse_launch,
)
from kvproof.impl import faults
from kvproof.spec.catalog import ConfigError, ModelGeometry, load_model
from kvproof.spec.contract import MAX_PADDING
from kvproof.spec.launch import (
    RULE_NAMES,
    RULES,
    Assumptions,
    Launch,
    OutOfTime,
    Rule,
    assumption_cases,
    resolve_launch,
    smallest_fix,
    violated,
)
from kvproof.spec.policy import POLICIES, Policy, policy_named
from kvproof.spec.prover import plan_point

ASSUMPTIONS = ("merge_state_head_tiled",)
CONTRACT = "cache_contract"
BASE = ("world_product",)  # a per-rule fix always leaves a well-formed world
SHOWN_IGNORED = 10  # the text echoes no unbounded input (--json lists every one)
# rule -> the seeded fault that drops its row, as a refactor that loses one row of the table would
UNCHECKED = {name: f"launch_{name}_unchecked" for name in (*RULE_NAMES, CONTRACT)} | {
    "dense_tp_is_attention_tp": "launch_dense_tp_unchecked"}
TIME_LIMIT = 2.0  # every z3 call and contract point comes out of it; the issue asks under 1 s on an idle core


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: a time limit is in (0, 600] seconds")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--engine", choices=["tokenspeed"], help="also run the engine's own parallel resolution")
    parser.add_argument("--assume", action="append", default=[], metavar="NAME=yes|no",
                        help="merge_state_head_tiled=yes|no (default: report both)")
    parser.add_argument("--policy", choices=list(POLICIES), default="search", help="K_mla policy of the contract")
    parser.add_argument("--time-limit", type=_seconds, default=TIME_LIMIT, metavar="S",
                        help=f"seconds the whole fix search may take (default {TIME_LIMIT})")
    add_draft_arguments(parser, domain=False)
    parser.set_defaults(drafts=None)  # not given: refused when the launch runs a draft model
    parser.add_argument("launch", nargs="*", help="the engine's launch flags, after --")


@dataclass(frozen=True)
class Finding:
    rule: str
    reason: str
    why: str
    source: str
    engine_enforces: str
    only_if: str | None  # the assumption under which alone it is violated
    fix: list[str] | None  # flags to change; None: see no_fix
    fixed: list[str] | None  # the whole fixed launch, as flags
    no_fix: str | None  # why there is no fix: none within the search bounds, or none found in time


def _tiled(assume: list[str]) -> bool | None:
    tiled = None
    for item in assume:
        name, _, value = item.partition("=")
        if name not in ASSUMPTIONS or value not in ("yes", "no"):
            raise UsageError(f"--assume {item[:60]!r}: expected merge_state_head_tiled=yes or =no")
        tiled = value == "yes"
    return tiled


@dataclass(frozen=True)
class Drafts:
    """The draft layers the launch adds to the cache (the draft model's, not a launch flag)."""

    count: int
    dtype: str
    bound: Fraction | None  # the padding bound the user accepts


NO_DRAFTS = Drafts(0, "bf16", MAX_PADDING)


class _Contract:
    """The prover's verdict at (tp, dtype) under the policy, each point decided once."""

    def __init__(self, model: ModelGeometry, policy: Policy, drafts: Drafts) -> None:
        self.model, self.policy, self.drafts = model, policy, drafts
        self.seen: dict[tuple[int, str], list[str]] = {}

    def violations(self, launch: Launch) -> list[str] | None:
        """The contract's violations at the launch's point; None where there is no point (bad tp or dtype)."""
        tp = resolve_launch(launch).tp
        if tp not in self.model.tp_domain or launch.dtype is None:
            return None
        key = (tp, launch.dtype)
        if key not in self.seen:
            try:
                d = self.drafts
                point = plan_point(self.model, tp, launch.dtype, self.policy, drafts=d.count, draft_dtype=d.dtype,
                                   bound=d.bound)
                self.seen[key] = [f"{p}: {v[0].message}" for p, v in point.violations.items() if v]
            except ConfigError as err:
                self.seen[key] = [f"the planner refuses the point: {err}"]
        return self.seen[key]


@dataclass(frozen=True)
class Search:
    """What every fix of one run shares: the deadline (time.monotonic()) and the time limit."""

    deadline: float
    limit: float

    def share(self, calls: int) -> Search:
        """The next of `calls` fixes still to find gets an equal share of the time left, so one
        hard rule cannot starve the rest."""
        now = time.monotonic()
        return replace(self, deadline=now + max(0.0, self.deadline - now) / max(1, calls))


def _fix(launch: Launch, model: ModelGeometry, cases: tuple[Assumptions, ...], must: tuple[Rule, ...],
         contract: _Contract | None, search: Search, avoid: tuple[tuple[int, str], ...] = ()) -> Launch | str:
    """smallest_fix, or why there is none. Where the cache contract must hold, an answer that
    lands on a point where it fails is asked again away from that point (each point planned once,
    only the points the search proposes; the domain is finite, so this ends)."""
    try:
        while True:
            fix = smallest_fix(launch, model, cases, must, avoid, search.deadline,
                               count_flags=not faults.active("launch_fix_ignores_flag_count"))
            if fix is None:
                return "no launch within the search bounds fixes it"
            if contract is None or not contract.violations(fix.launch):
                return fix.launch
            avoid = (*avoid, (resolve_launch(fix.launch).tp, str(fix.launch.dtype)))
    except OutOfTime:
        return f"no fix found within {search.limit:g} s (--time-limit)"


def _fixed(launch: Launch, fix: Launch | str) -> tuple[list[str] | None, list[str] | None, str | None]:
    return (None, None, fix) if isinstance(fix, str) else (_flags(launch, fix), launch_argv(fix), None)


def _flags(before: Launch, after: Launch) -> list[str]:
    out = []
    for f in fields(Launch):
        old, new = getattr(before, f.name), getattr(after, f.name)
        if old == new:
            continue
        flag = CANONICAL[f.name]
        if f.name == "dtype":
            out.append(f"{flag} {DTYPE_SPELLING[new]}")
        elif isinstance(new, bool):
            value = {"dist_init_addr": " HOST:PORT", "prefill": " prefill"}.get(f.name, "")
            out.append(flag + value if new else f"drop {flag}")
        else:
            out.append(f"drop {flag}" if new is None else f"{flag} {new}")
    return out


def _fix_text(fix: list[str] | None, fixed: list[str] | None, no_fix: str | None) -> str:
    if fix is None or fixed is None:
        return str(no_fix)
    r = resolve_launch(parse_launch(fixed).launch)
    return f"fix: {' '.join(fix)} (world {r.world} = pp {r.pp} x attention tp {r.tp} x dp {r.dp})"


def check(parsed: ParsedLaunch, model: ModelGeometry, tiled: bool | None, policy: Policy,
          rules: tuple[Rule, ...], search: Search, drafts: Drafts = NO_DRAFTS) -> tuple[list[Finding], dict | None]:
    launch = parsed.launch
    cases = assumption_cases(tiled)
    broken = {c: set(violated(launch, model, c, rules)) for c in cases}
    held = tuple(r for r in rules if not any(r in b for b in broken.values()))
    base = tuple(r for r in rules if r.name in BASE)
    contract = _Contract(model, policy, drafts)
    contract_now = None if faults.active(UNCHECKED[CONTRACT]) else contract.violations(launch)
    keep_contract = None if contract_now else contract  # a launch with no point yet must not fix onto a bad one
    resolved = resolve_launch(launch)
    findings = []
    broken_rules = [r for r in rules if r not in held]
    calls = len(broken_rules) + bool(contract_now)
    calls += calls > 1  # the fix for all at once
    for rule in broken_rules:
        only = [c for c in cases if rule in broken[c]]
        only_if = None if len(only) == len(cases) else "merge_state_head_tiled=" + (
            "yes" if only[0].merge_state_head_tiled else "no")
        must = tuple(r for r in rules if r in held or r in base or r is rule)
        fix = _fix(launch, model, cases, must, keep_contract, search.share(calls))
        calls -= 1
        findings.append(Finding(rule.name, rule.detail(resolved, model), rule.why, rule.source,
                                rule.engine_enforces, only_if, *_fixed(launch, fix)))
    if contract_now:
        assert launch.dtype is not None  # the contract found violations, so there is a point
        point = (resolved.tp, launch.dtype)
        must = tuple(r for r in rules if r in held or r in base)
        fix = _fix(launch, model, cases, must, contract, search.share(calls), (point,))
        if isinstance(fix, str) and any(v.startswith("padding_bound") for v in contract_now):
            fix += "; or accept more padding with --max-padding X|inf"
        calls -= 1
        findings.append(Finding(
            CONTRACT, f"at tp {point[0]} {point[1]} with {drafts.count} draft layer(s) under policy {policy.name}: "
            + "; ".join(contract_now),
            "the cache plan at the launch's (tp, dtype) point must satisfy every named property",
            "kvproof.spec.prover (verify prove)", "boot check of the planner", None, *_fixed(launch, fix)))
    whole = None
    if len(findings) > 1:
        fix = _fix(launch, model, cases, rules, contract, search.share(calls))
        whole = dict(zip(("fix", "fixed", "no_fix"), _fixed(launch, fix), strict=True))
    return findings, whole


def _engine(parsed: ParsedLaunch, findings: list[Finding]) -> dict:
    from kvproof.engines.tokenspeed.loader import SourceError
    from kvproof.engines.tokenspeed.parallel import ENFORCED_BY_RESOLUTION, engine_verdict

    try:
        verdict = engine_verdict(parsed.launch)
    except SourceError as err:
        raise UsageError(str(err)) from None
    ours = sorted(f.rule for f in findings if f.rule in ENFORCED_BY_RESOLUTION)
    return {
        "engine": "tokenspeed", "rejects": verdict,
        "agrees": bool(ours) == (verdict is not None),
        "not_enforced": [f.rule for f in findings if verdict is None and f.engine_enforces.startswith("no")],
        "ours_enforced_by_resolution": ours,
    }


def _render(model: ModelGeometry, parsed: ParsedLaunch, findings: list[Finding],
            whole: dict | None, engine: dict | None, seconds: float) -> str:
    r = resolve_launch(parsed.launch)
    lines = [f"{model.name}  world {r.world} = pp {r.pp} x attention tp {r.tp} x dp {r.dp}; dense tp {r.dense_tp}; "
             f"MoE tp {r.moe_tp} x EP {r.ep}; DCP {r.dcp}; kv cache {parsed.kv_cache_dtype} "
             f"({parsed.launch.dtype or 'not in the contract'})"]
    if parsed.ignored:
        more = len(parsed.ignored) - SHOWN_IGNORED
        lines.append("  ignored (not parallelism or cache flags): " + " ".join(parsed.ignored[:SHOWN_IGNORED])[:400]
                     + (f" (+{more} more)" if more > 0 else ""))
    for f in findings:
        cond = f" [if {f.only_if}]" if f.only_if else ""
        lines.append(f"  VIOLATED {f.rule}{cond}: {f.reason}; {f.why}. {_fix_text(f.fix, f.fixed, f.no_fix)}")
    if whole:
        lines.append(f"  all at once: {_fix_text(whole['fix'], whole['fixed'], whole['no_fix'])}")
    if engine:
        said = "accepts the launch" if engine["rejects"] is None else f"rejects it ({engine['rejects']})"
        lines.append(f"  engine: tokenspeed's parallel resolution {said}")
        for name in engine["not_enforced"]:
            lines.append(f"  FINDING tokenspeed does not enforce {name}: it accepts this launch")
        if not engine["agrees"]:
            lines.append("  FINDING kvproof's resolution rules and tokenspeed's resolution disagree on this launch")
    lines.append(("OK" if not findings and (engine is None or engine["agrees"]) else "VIOLATED")
                 + f" in {seconds:.2f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    search = Search(time.monotonic() + args.time_limit, args.time_limit)
    model = load_model(args.model, args.config)
    tiled = _tiled(args.assume)
    try:
        parsed = parse_launch(args.launch)
    except LaunchFlagError as err:
        raise UsageError(str(err)) from None
    rules = tuple(r for r in RULES if not faults.active(UNCHECKED[r.name]))
    if parsed.speculative and args.drafts is None:
        raise UsageError(" ".join(f"{f} {v[:40]}" for f, v in parsed.speculative[:2])
                         + " launches a draft model whose layers enter the cache, and their count is in its "
                         "config, not a flag: pass --drafts N --draft-dtype D (K3 DSpark: --drafts 5 "
                         "--draft-dtype bf16; an MTP draft: its layers, the target's dtype)")
    drafts = Drafts(args.drafts or 0, args.draft_dtype, args.max_padding)
    findings, whole = check(parsed, model, tiled, policy_named(args.policy), rules, search, drafts)
    engine = _engine(parsed, findings) if args.engine else None
    seconds = time.perf_counter() - start
    ok = not findings and (engine is None or engine["agrees"])
    if args.json:
        print(json.dumps({
            "model": model.name, "ok": ok, "launch": [list(g) for g in parsed.given], "ignored": list(parsed.ignored),
            "resolved": {k: v for k, v in asdict(resolve_launch(parsed.launch)).items() if k != "dtype"},
            "kv_cache_dtype": parsed.kv_cache_dtype, "assume": {"merge_state_head_tiled": tiled},
            "policy": args.policy, "drafts": drafts.count, "draft_dtype": drafts.dtype,
            "max_padding": None if drafts.bound is None else float(drafts.bound),
            "violations": [asdict(f) for f in findings], "fix_all": whole, "engine": engine, "seconds": seconds,
        }, indent=1))
    else:
        print(_render(model, parsed, findings, whole, engine, seconds))
    return 0 if ok else 1
