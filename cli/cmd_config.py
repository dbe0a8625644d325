"""Check an engine launch (its own flags, after --) against the launch rules and the cache contract.

Answers OK, or one line per violated rule with the numbers, the reason, and the smallest change
that fixes it (fewest flags changed, then the smallest change of the resolved sizes, ties to the
fewest flags given), found by an exact search of the flag space within --time-limit: the change keeps every
rule that held holding. With --engine tokenspeed
it also runs the engine's own parallel resolution on the launch and reports every violated rule
that tokenspeed enforces nowhere (`Enforced.by == "nowhere"`) as a finding.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, fields

from kvproof.cli.args import UsageError, add_draft_arguments, add_model_arguments
from kvproof.engines.tokenspeed.launch_flags import (
    CANONICAL,
    DTYPE_SPELLING,
    LaunchFlagError,
    ParsedLaunch,
    launch_argv,
    parse_launch,
)
from kvproof.impl import faults
from kvproof.spec.catalog import ModelGeometry, load_model
from kvproof.spec.launch import RULES, Launch, resolve_launch
from kvproof.spec.launch_fix import CONTRACT, UNCHECKED, Drafts, Fix, Search, Violation, check
from kvproof.spec.policy import POLICIES, policy_named

faults.declare({
    # One per launch rule (spec/launch_fix.py UNCHECKED), its row dropped from RULES; then the fix search's.
    "launch_dense_tp_unchecked": "verify config drops the rule dense tp == attention tp under attention DP",
    "launch_world_product_unchecked": "verify config drops the rule world = pp x attention tp x dp",
    "launch_tp_divides_heads_unchecked": "verify config drops the rule attention tp divides the head counts",
    "launch_dense_tp_tiles_stage_unchecked": "verify config drops the rule dense tp divides the stage",
    "launch_merge_state_heads_unchecked": "verify config drops the rule untiled merge_state holds <= 64 heads",
    "launch_dist_init_addr_unchecked": "verify config drops the rule dp or nnodes > 1 needs --dist-init-addr",
    "launch_moe_tiles_stage_unchecked": "verify config drops the rule MoE tp x EP divides the stage",
    "launch_moe_tp_or_ep_unchecked": "verify config drops the rule MoE tp and EP are not both above 1",
    "launch_dcp_divides_tp_unchecked": "verify config drops the rule DCP divides attention tp",
    "launch_nodes_tile_world_unchecked": "verify config drops the rule nnodes divides the world",
    "launch_pp_without_attention_dp_unchecked": "verify config drops the rule dp > 1 needs pp 1",
    "launch_pp_needs_prefill_role_unchecked": "verify config drops the rule pp > 1 needs --disaggregation-mode prefill",
    "launch_pp_within_layers_unchecked": "verify config drops the rule pp <= the model's layers",
    "launch_kv_cache_dtype_unchecked": "verify config drops the rule --kv-cache-dtype is in the contract",
    "launch_cache_contract_unchecked": "verify config skips the cache contract at the launch's point",
    "launch_fix_ignores_flag_count": "verify config's fix search drops its first objective, the flags changed",
})

ASSUMPTIONS = ("merge_state_head_tiled",)
SHOWN_IGNORED = 10  # the text echoes no unbounded input (--json lists every one)
TIME_LIMIT = 2.0  # every fix search and contract point comes out of it


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


def _fixed(launch: Launch, fix: Fix) -> tuple[list[str] | None, list[str] | None, str | None]:
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


def _finding(launch: Launch, v: Violation) -> Finding:
    return Finding(v.rule, v.reason, v.why, v.source, v.engine_enforces.text, v.only_if, *_fixed(launch, v.fix))


def _engine(parsed: ParsedLaunch, violations: list[Violation]) -> dict:
    from kvproof.engines.tokenspeed.loader import SourceError
    from kvproof.engines.tokenspeed.parallel import ENFORCED_BY_RESOLUTION, engine_verdict

    try:
        verdict = engine_verdict(parsed.launch)
    except SourceError as err:
        raise UsageError(str(err)) from None
    ours = sorted(v.rule for v in violations if v.rule in ENFORCED_BY_RESOLUTION)
    return {
        "engine": "tokenspeed", "rejects": verdict,
        "agrees": bool(ours) == (verdict is not None),
        "not_enforced": [v.rule for v in violations if verdict is None and v.engine_enforces.by == "nowhere"],
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
    search = Search(time.monotonic() + args.time_limit, args.time_limit,
                    count_flags=not faults.active("launch_fix_ignores_flag_count"))
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
    violations, fix_all = check(parsed.launch, model, tiled, policy_named(args.policy), rules, search, drafts,
                                check_contract=not faults.active(UNCHECKED[CONTRACT]))
    findings = [_finding(parsed.launch, v) for v in violations]
    whole = None if fix_all is None else dict(zip(("fix", "fixed", "no_fix"), _fixed(parsed.launch, fix_all),
                                                  strict=True))
    engine = _engine(parsed, violations) if args.engine else None
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
