"""`verify config`: every launch rule fails on a launch that breaks it, and the fix it suggests
passes; the flag parser never raises anything but its one-line error."""

from __future__ import annotations

import json
import time

import pytest
from bites import fails_under
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from launch_cases import BREAKS, TILED

# declares the faults fails_under switches on (main imports a command's module only to run it)
import kvproof.cli.cmd_config  # noqa: F401
from kvproof.cli.main import main
from kvproof.engines.tokenspeed.launch_flags import SIZE_SPELLINGS, LaunchFlagError, launch_argv, parse_launch
from kvproof.impl import faults
from kvproof.spec.catalog import load_model
from kvproof.spec.launch import (
    MAX_THREADS_PER_BLOCK,
    MERGE_STATE_THREADS_PER_HEAD,
    MERGE_STATE_UNTILED_MAX_HEADS,
    RULE_NAMES,
    RULES,
    Enforced,
    Launch,
    OutOfTime,
    assumption_cases,
    candidate_sizes,
    elsewhere,
    nowhere,
    resolution,
    resolve_launch,
    smallest_fix,
    violated,
)
from kvproof.spec.launch_fix import UNCHECKED, Search, check
from kvproof.spec.policy import POLICIES

# fix-quality tests must not depend on the machine's load: the time limit has its own test
ROOMY = ("--time-limit", "120")


def config(capsys, options, launch) -> tuple[int, dict]:
    code = main(["config", "--model", "kimi-k3", "--json", *ROOMY, *options, "--", *launch])
    return code, json.loads(capsys.readouterr().out)


def test_every_rule_has_a_breaking_launch_a_reason_and_a_source():
    assert set(BREAKS) == {*RULE_NAMES, "cache_contract"}
    assert len(set(RULE_NAMES)) == len(RULES)
    for rule in RULES:
        assert rule.why and rule.source and rule.engine_enforces.text and rule.flags


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_each_rule_fails_and_its_fix_passes(capsys, rule):
    options, launch = BREAKS[rule]
    code, out = config(capsys, options, launch)
    assert code == 1 and not out["ok"]
    assert [v["rule"] for v in out["violations"]] == [rule], out["violations"]
    found = out["violations"][0]
    assert found["reason"] and found["fix"], found
    code, fixed = config(capsys, options, found["fixed"])
    assert code == 0 and fixed["ok"] and fixed["violations"] == [], (found["fix"], fixed["violations"])


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_rule_check_bites(capsys, rule):
    """Seeded faults launch_<rule>_unchecked (spec/launch_fix.py UNCHECKED): the rule's row dropped
    from the table, or the contract skipped; its breaking launch then comes back OK."""
    fails_under(UNCHECKED[rule], test_each_rule_fails_and_its_fix_passes, capsys, rule)


def test_fix_objective_bites(capsys):
    """Seeded fault launch_fix_ignores_flag_count: without the flag count, nearer sizes win."""
    fails_under("launch_fix_ignores_flag_count", test_fix_changes_the_fewest_flags_then_the_least, capsys)


def test_fix_changes_the_fewest_flags_then_the_least(capsys):
    """Dense tp 8 under attention DP: dropping the flag (one flag, dense tp back to the attention
    tp 2) beats any other change; 96 heads at tp 1: tp 2 is the nearest that fits 64 per rank."""
    _, out = config(capsys, TILED, BREAKS["dense_tp_is_attention_tp"][1])
    assert out["violations"][0]["fix"] == ["drop --dense-tp-size"]
    _, out = config(capsys, *BREAKS["merge_state_heads"])
    assert out["violations"][0]["fix"] == ["--tp 2"]
    _, out = config(capsys, TILED, BREAKS["tp_divides_heads"][1])
    assert out["violations"][0]["fix"] == ["--tp 4"]


def test_draft_layers_enter_the_contract(capsys):
    """One draft layer widens K3's bf16 arena at tp 32 past the target padding bound (the engine
    drops its bound with drafts; we keep the one the user accepts): the fix moves the point."""
    launch = ("--tp", "32", "--kv-cache-dtype", "bfloat16")
    code, out = config(capsys, (*TILED, "--drafts", "1"), launch)
    assert code == 1 and [v["rule"] for v in out["violations"]] == ["cache_contract"]
    assert "padding_bound" in out["violations"][0]["reason"]
    assert config(capsys, (*TILED, "--drafts", "1"), out["violations"][0]["fixed"])[0] == 0
    assert config(capsys, (*TILED, "--drafts", "1", "--max-padding", "inf"), launch)[0] == 0
    assert config(capsys, TILED, launch)[0] == 0


def test_contract_fix_leaves_a_well_formed_world(capsys):
    """world 8 != tp 4 x dp 1 and pinned12 fails at fp8 tp 4: the contract's fix must not keep the
    malformed world (every fix keeps world_product)."""
    options = (*TILED, "--policy", "pinned12")
    code, out = config(capsys, options, ("--world-size", "8", "--tp", "4", "--data-parallel-size", "1",
                                         "--kv-cache-dtype", "fp8"))
    found = {v["rule"]: v for v in out["violations"]}
    assert code == 1 and set(found) == {"world_product", "cache_contract"}
    fixed = parse_launch(found["cache_contract"]["fixed"]).launch
    assert not violated(fixed, load_model("kimi-k3"), assumption_cases(True)[0], RULES[:1])


def test_rule_fix_keeps_the_contract_where_the_launch_had_no_point(capsys):
    """tp 5 has no contract point; its fix --tp 4 would land where pinned12 fails at fp8."""
    options, launch = (*TILED, "--policy", "pinned12"), ("--tp", "5", "--kv-cache-dtype", "fp8")
    code, out = config(capsys, options, launch)
    assert code == 1 and [v["rule"] for v in out["violations"]] == ["tp_divides_heads"]
    assert config(capsys, options, out["violations"][0]["fixed"])[0] == 0


def test_a_draft_model_needs_its_layer_count(capsys):
    """DSpark on K3 pads 0.607 at fp8 tp 8 with its 5 bf16 drafts: a launch running a draft model
    is not OK without them. The count is in the draft's config, so it is asked for (exit 2)."""
    launch = ("--tp", "8", "--kv-cache-dtype", "fp8", "--speculative-algorithm", "DSPARK")
    assert main(["config", "--model", "kimi-k3", "--", *launch]) == 2
    assert "--drafts 5 --draft-dtype bf16" in capsys.readouterr().err
    assert config(capsys, ("--drafts", "0"), launch)[0] == 0  # stated: no draft layers in this cache


def test_no_fix_for_the_padding_names_the_bound_you_accept(capsys):
    """With 5 bf16 drafts no K3 point keeps 0.25: the answer says how to accept more."""
    code, out = config(capsys, ("--drafts", "5", "--time-limit", "0.5"), ("--tp", "8", "--kv-cache-dtype", "fp8"))
    assert code == 1 and out["violations"][0]["fix"] is None
    assert out["violations"][0]["no_fix"].endswith("or accept more padding with --max-padding X|inf")


def test_merge_state_assumption_defaults_to_both(capsys):
    launch = BREAKS["merge_state_heads"][1]
    code, out = config(capsys, (), launch)
    assert code == 1 and out["assume"]["merge_state_head_tiled"] is None
    found = [(v["rule"], v["only_if"]) for v in out["violations"]]
    assert found == [("merge_state_heads", "merge_state_head_tiled=no")]
    assert config(capsys, TILED, launch)[0] == 0


def test_ok_launch_and_text(capsys):
    assert main(["config", "--model", "kimi-k3", "--", "--tp", "8", "--port", "30000", "/models/k3"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[-1].startswith("OK")
    assert "ignored (not parallelism or cache flags): --port 30000 /models/k3" in text
    assert main(["config", "--model", "kimi-k3", "--", "--tp", "8", *["--port", "1"] * 5000]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "ignored" in x)
    assert len(line) < 500 and line.endswith("(+4990 more)")


def test_several_violations_get_one_fix_for_all(capsys):
    code, out = config(capsys, (), ("--tp", "1", "--data-parallel-size", "8", "--dense-tp-size", "8"))
    assert code == 1 and len(out["violations"]) == 3
    code, fixed = config(capsys, (), out["fix_all"]["fixed"])
    assert code == 0, fixed["violations"]


def test_ties_go_to_dropping_a_flag(capsys):
    """Equal on flags changed and on sizes, the fix with fewer flags given wins (the third
    objective). MoE tp 8 x EP 8 on a stage of 8: `--ep-size 1` and
    dropping --moe-tp-size both change one flag by 7; the drop leaves one flag fewer given.
    The example of docs/commands/config.md: `--tp 8 --data-parallel-size 1` ties with dropping the dp flag."""
    launch = Launch(tp=2, dp=4, dense_tp=2, ep=8, moe_tp=8, dist_init_addr=True)
    fix = smallest_fix(launch, load_model("kimi-k3"), assumption_cases(None), RULES)
    assert fix is not None and fix.changed == ("moe_tp",) and fix.launch.moe_tp is None
    _, out = config(capsys, (), ("--tp", "1", "--data-parallel-size", "8", "--dense-tp-size", "8"))
    assert out["fix_all"]["fix"] == ["--tp 8", "drop --data-parallel-size"]


@pytest.mark.parametrize("argv", [
    ["--tp", "x"], ["--tp"], ["--tp", "0"], ["--tp=-3"], ["--tp", "2", "--attn-tp-size", "2"],
    ["--kv-cache-dtype", "fp4"], ["--enable-expert-parallel=1"], ["--world-size", str(10**30)],
    ["--tp", "8", "--data-paralel-size", "4", "--dense-tp-size", "4"], ["--tp", "8", "--nprocs-per-node", "3"],
    ["--lm-head-tp-size", "2"], ["--attn-head-tp-size", "3"], ["--prefill-context-parallel-size", "2"],
    ["--tp", "8", "--dist-init-addr="], ["--dist-init-addr", "10.0.0.1"],
])
def test_bad_launch_flags_exit_two_with_one_line(capsys, argv):
    assert main(["config", "--model", "kimi-k3", "--", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verify config: error:") and err.count("\n") == 1


def test_flags_are_tokenspeeds_own():
    """Every spelling the parser reads is one tokenspeed parses; a misspelling is refused with the
    spelling it is nearest to; the one value of a Mapping flag that changes nothing is accepted."""
    from kvproof.engines.tokenspeed.flags import BARE, SPELLINGS
    from kvproof.engines.tokenspeed.launch_flags import NOT_MODELLED, SPECULATIVE

    assert {*SIZE_SPELLINGS, *SPECULATIVE, *NOT_MODELLED, "--dist-init-addr", "--kv-cache-dtype"} <= SPELLINGS
    assert "--enable-expert-parallel" in BARE
    with pytest.raises(LaunchFlagError, match="did you mean --data-parallel-size"):
        parse_launch(["--data-paralel-size", "4"])
    assert parse_launch(["--prefill-context-parallel-size", "1", "--trust-remote-code", "/m"]).ignored == (
        "--prefill-context-parallel-size 1", "--trust-remote-code", "/m")


def test_bad_assumption_exits_two(capsys):
    assert main(["config", "--assume", "merge_state_head_tiled=maybe", "--", "--tp", "8"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


ANY_SIZE = st.integers(1, 64)


@st.composite
def launches(draw, size=ANY_SIZE) -> Launch:
    maybe = st.none() | size
    return Launch(tp=draw(maybe), dp=draw(maybe), pp=draw(size), world=draw(maybe), dense_tp=draw(maybe),
                  ep=draw(size), moe_tp=draw(maybe), dcp=draw(size), nnodes=draw(maybe), enable_ep=draw(st.booleans()),
                  dist_init_addr=draw(st.booleans()), prefill=draw(st.booleans()),
                  dtype=draw(st.sampled_from(["fp8", "bf16", None])))


@given(launches())
def test_written_launch_reads_back(launch):
    assert parse_launch(launch_argv(launch)).launch == launch


TOKENS = st.sampled_from([*SIZE_SPELLINGS, "--enable-expert-parallel", "--dist-init-addr", "--kv-cache-dtype",
                          "--speculative-algorithm", "--port", "--", "-", "=", "fp8", "mxfp8", "a:1", ":", "0", "-1",
                          "8", "96", "1e3", "٣", "--tp=", "--tp=4", "--dense-tp-size=x", "serve"])


@given(st.lists(TOKENS | st.text(max_size=8), max_size=12))
def test_parser_never_raises_anything_else(argv):
    try:
        parse_launch(argv)
    except LaunchFlagError as err:
        assert "\n" not in str(err)


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])  # read every example
@given(st.lists(TOKENS, max_size=8))
def test_cli_on_random_flags_answers_0_1_or_a_line(capsys, argv):
    code = main(["config", "--model", "kimi-k3", "--", *argv])
    out = capsys.readouterr()
    assert code in (0, 1, 2)
    if code == 2:
        assert out.err.count("\n") == 1 and not out.out


@settings(max_examples=4)
@given(launches(st.sampled_from([1, 2, 3, 4, 8, 16])))
def test_fix_for_all_passes_every_rule(launch):
    """The smallest fix for all rules at once does pass all of them, under both assumptions."""
    model = load_model("kimi-k3")
    fix = smallest_fix(launch, model, assumption_cases(None), RULES)
    assert fix is not None
    for case in assumption_cases(None):
        assert not violated(fix.launch, model, case), fix


# Primes near SEARCH_MAX on every flag: the fix for all at once changes every size flag.
ADVERSARIAL = ("--world-size", "4093", "--pipeline-parallel-size", "4091", "--tp", "4089", "--data-parallel-size",
               "4087", "--dense-tp-size", "4083", "--ep-size", "4079", "--moe-tp-size", "4073",
               "--decode-context-parallel-size", "4091", "--nnodes", "4093")


def test_fix_search_keeps_its_time_limit(capsys):
    """Every fix search takes its share of one time limit; what is not found in time says so."""
    limit = 0.3
    start = time.perf_counter()
    code = main(["config", "--model", "kimi-k3", "--json", "--time-limit", str(limit), "--", *ADVERSARIAL])
    elapsed = time.perf_counter() - start
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and elapsed < limit + 1.5, elapsed  # + imports and resolving, not searching
    assert out["fix_all"]["no_fix"] == f"no fix found within {limit:g} s (--time-limit)"


def test_candidate_sizes_are_divisors_and_powers_of_two():
    k3 = load_model("kimi-k3")
    sizes = candidate_sizes(Launch(tp=5, world=4093), k3)
    assert {1, 2, 3, 5, 6, 96, 4093, 4096} <= set(sizes) and 7 not in sizes and 4092 not in sizes


def test_merge_state_limit_is_the_kernels():
    """The rule's 64 heads per rank is where kvproof's own untiled merge_state launch breaks.
    Launch arithmetic only, so not marked `kernels`: the GPU check collects without z3."""
    from kvproof.kernels import merge_state as kernel

    assert (kernel.THREADS_PER_HEAD, kernel.MAX_THREADS) == (MERGE_STATE_THREADS_PER_HEAD, MAX_THREADS_PER_BLOCK)
    with faults.inject("merge_state_single_block"):
        broken = [h for h in range(1, 257) if kernel.launch_config(h).threads > kernel.MAX_THREADS]
    assert broken == list(range(MERGE_STATE_UNTILED_MAX_HEADS + 1, 257))


def test_the_fix_takes_the_nearest_size_above_or_below():
    """K3 has 96 heads: around --tp 15 the divisors are 12 (3 below) and 16 (1 above), around
    --tp 31 they are 24 (7 below) and 32 (1 above); the nearest wins, up as well as down."""
    model = load_model("kimi-k3")
    for tp, want in ((15, 16), (31, 32), (7, 6)):
        fix = smallest_fix(Launch(tp=tp), model, assumption_cases(None), RULES)
        assert fix is not None and fix.changed == ("tp",) and fix.launch.tp == want, (tp, fix)


def test_no_candidate_size_passes_search_max():
    """8,194 = 2 x 4,097: its divisors up to 4,096 are 1, 2; 4,097 is one past SEARCH_MAX."""
    sizes = candidate_sizes(Launch(world=8194), load_model("kimi-k3"))
    assert max(sizes) == 4096 and 4097 not in sizes and 2 in sizes


def test_a_tp_off_the_heads_names_each_head_count_the_tp_shards(capsys: pytest.CaptureFixture[str]) -> None:
    """K3 is hybrid: tp 5 must divide its 96 MLA and its 96 KDA heads; DeepSeek-V3 has MLA heads only."""
    _, out = config(capsys, *BREAKS["tp_divides_heads"])
    assert out["violations"][0]["reason"] == "attention tp 5 does not divide the head counts (96 MLA, 96 KDA)"
    main(["config", "--model", "deepseek-v3", "--json", *ROOMY, *TILED, "--", "--tp", "5"])
    out = json.loads(capsys.readouterr().out)
    assert out["violations"][0]["reason"] == "attention tp 5 does not divide the head counts (128 MLA)"


def test_a_fix_may_keep_a_world_of_search_max_ranks() -> None:
    """World 4,096 = tp 32 x dp 128 is well formed; only DCP 3 breaks (it does not divide tp 32).
    DCP 2 and 4 are both 1 away, the smaller value wins; the world stays at SEARCH_MAX."""
    launch = Launch(world=4096, tp=32, dp=128, dcp=3, dist_init_addr=True)
    fix = smallest_fix(launch, load_model("kimi-k3"), assumption_cases(None), RULES)
    assert fix is not None and fix.changed == ("dcp",) and fix.launch.dcp == 2 and fix.launch.world == 4096


def test_a_fix_search_with_under_a_millisecond_left_searches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With less than 1 ms before the deadline nothing is searched; with 1 ms (and a clock that
    stands still) the search runs to its answer: tp 5 is 1 from both 4 and 6, the smaller wins."""
    monkeypatch.setattr(time, "monotonic", lambda: 0.0)
    model = load_model("kimi-k3")
    with pytest.raises(OutOfTime):
        smallest_fix(Launch(tp=5), model, assumption_cases(True), RULES, deadline=0.0009)
    fix = smallest_fix(Launch(tp=5), model, assumption_cases(True), RULES, deadline=0.001)
    assert fix is not None and fix.changed == ("tp",) and fix.launch.tp == 4


def test_expert_parallel_makes_ep_the_stage_only_where_ep_is_left_at_1(capsys: pytest.CaptureFixture[str]) -> None:
    """--enable-expert-parallel at tp 8: EP takes the stage's 8 ranks and MoE tp what is left (1);
    with --ep-size 4 given EP stays 4 and MoE tp is 8 / 4 = 2; without the flag EP is 1, MoE tp 8."""
    for launch, ep, moe_tp in ((("--tp", "8", "--enable-expert-parallel"), 8, 1),
                               (("--tp", "8", "--enable-expert-parallel", "--ep-size", "4"), 4, 2),
                               (("--tp", "8"), 1, 8)):
        _, out = config(capsys, TILED, launch)
        assert (out["resolved"]["ep"], out["resolved"]["moe_tp"]) == (ep, moe_tp), launch


def test_without_the_flag_count_the_nearest_sizes_still_win() -> None:
    """count_flags=False (the seeded fault's hook) drops only the first objective: around --tp 15
    the nearest divisor of K3's 96 heads, 16, still wins over the smallest value that fits (2).
    Flags that are not sizes enter no other objective, so only the resolved sizes are pinned:
    `--tp 16` and `--world-size 16` (tp dropped) tie on every objective left."""
    fix = smallest_fix(Launch(tp=15), load_model("kimi-k3"), assumption_cases(None), RULES, count_flags=False)
    assert fix is not None
    r = resolve_launch(fix.launch)
    assert (r.tp, r.world, r.dp, fix.launch.dp) == (16, 16, 1, None), fix


def test_a_fix_search_stops_at_its_deadline() -> None:
    """ADVERSARIAL's fix for all at once changes every size flag, seconds of search here: with
    50 ms it gives up at the deadline, not at the end of the search."""
    launch = parse_launch(list(ADVERSARIAL)).launch
    start = time.monotonic()
    with pytest.raises(OutOfTime):
        smallest_fix(launch, load_model("kimi-k3"), assumption_cases(None), RULES, deadline=start + 0.05)
    assert time.monotonic() - start < 1


def test_where_the_engine_enforces_a_rule_reads_as_the_rules_table_says() -> None:
    """docs/commands/config.md, the rules' last column: a rule the engine never checks reads "no",
    with what happens instead in parentheses where that is known; `by` is what `verify config
    --engine` sorts on (a violated "nowhere" rule the engine accepts is a FINDING). RULES is built
    as the module is imported, so the helpers are called here as a new row would call them."""
    assert nowhere() == Enforced("no", "nowhere")
    assert nowhere("a stage gets an empty window") == Enforced("no (a stage gets an empty window)", "nowhere")
    assert resolution("Mapping (assert)") == Enforced("Mapping (assert)", "resolution")
    assert elsewhere("ServerArgs (raises at start)") == Enforced("ServerArgs (raises at start)", "elsewhere")


def test_checking_a_launch_checks_the_cache_contract_unless_told_not_to() -> None:
    """BREAKS' cache_contract launch (tp 4 fp8 under pinned12) breaks no launch rule, only the
    contract at its point: checked by default, and not with check_contract=False (the hook of the
    seeded fault launch_cache_contract_unchecked)."""
    launch, model, policy = Launch(tp=4, dtype="fp8"), load_model("kimi-k3"), POLICIES["pinned12"]
    found, _ = check(launch, model, True, policy, RULES, Search(time.monotonic() + 120, 120))
    assert [v.rule for v in found] == ["cache_contract"] and found[0].engine_enforces.by == "elsewhere"
    found, whole = check(launch, model, True, policy, RULES, Search(time.monotonic() + 120, 120),
                         check_contract=False)
    assert found == [] and whole is None
