"""`verify sweep`: the family encoding agrees with the pointwise prover member by member, the
known bad K3 point is found inside any family that holds it, a bug right only at the catalog's
checkpoints is killed by the sweep and by no fixed-checkpoint check, and bad input is one line."""

from __future__ import annotations

import itertools
import json
import random
import time
from dataclasses import replace
from functools import cache
from typing import Any

import pytest
import z3
from bites import fails_under
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_conformance import check_model

from kvproof.cli.cmd_sweep import impl_conformance
from kvproof.cli.main import main
from kvproof.cli.sweep_report import cells
from kvproof.impl import faults
from kvproof.impl.recipe import plan_model
from kvproof.spec import sweep_table
from kvproof.spec.catalog import BUILTIN_MODELS, CACHE_DTYPES, ConfigError, load_model
from kvproof.spec.contract import FULL, Layout
from kvproof.spec.policy import POLICIES
from kvproof.spec.sweep import SEARCH_UNROLL, Query, confirm, derive_shape, describe_set, sweep
from kvproof.spec.sweep_family import PARAMETERS, Family, Member, divisors, mla_layers, parse_range

K3 = load_model("kimi-k3")
ISSUE_RANGES = {"num_layers": "24..128", "mla_every": "2..8", "kda_heads": "16..128",
                "head_dim": "64,128,256", "kv_lora_rank": "256..1024"}
K3_ALONE = {"num_layers": "93", "mla_every": "4", "kda_heads": "96", "head_dim": "128", "kv_lora_rank": "512"}


def family(ranges: dict[str, str]) -> Family:
    return Family.around(K3, {k: parse_range(k, v) for k, v in ranges.items()})


ISSUE = family(ISSUE_RANGES)


def test_the_layer_pattern_is_k3s() -> None:
    assert tuple(mla_layers(93, 4)) == K3.mla_layers
    k3 = Member(93, 96, 128, 512, 4, 8, "fp8")
    assert ISSUE.model(k3).mla_layers == K3.mla_layers and ISSUE.model(k3).kda_layers == K3.kda_layers
    assert family(K3_ALONE).size() == 2 * len(K3.tp_domain)


def test_k3_alone_under_ceil_is_refuted_exactly_at_bf16_tp32() -> None:
    result = sweep(family(K3_ALONE), POLICIES["ceil"], patterns=("kv_lora_rank",))
    assert result.proved is False
    assert result.counterexample == Member(93, 96, 128, 512, 4, 32, "bf16")
    assert result.failing_properties == ["padding_bound"]
    assert result.patterns == {"kv_lora_rank": "all"}  # its one rank, 512, fails there


def test_a_family_holding_k3_is_refuted_at_k3_bf16_tp32_or_a_smaller_member() -> None:
    bad = Member(93, 96, 128, 512, 4, 32, "bf16")
    assert all(getattr(bad, p) in ISSUE.ranges[p] for p in ISSUE.ranges)
    result = sweep(ISSUE, POLICIES["ceil"])
    m = result.counterexample
    assert not result.proved and m is not None and m.key() <= bad.key()
    point, _ = confirm(ISSUE, POLICIES["ceil"], m)
    assert point is not None and not point.accepted
    assert not plan_model(ISSUE.model(m), m.tp, m.dtype, "ceil").plan.accepted  # impl agrees


def test_search_is_proved_over_a_family_around_k3() -> None:
    fam = family({"num_layers": "92..94", "mla_every": "4"})
    start = time.perf_counter()
    result = sweep(fam, POLICIES["search"])
    assert 0 < result.seconds <= time.perf_counter() - start
    assert result.proved, result.counterexample
    assert result.size == 3 * 2 * len(divisors(96))


def test_search_over_the_issue_family_fails_at_a_short_state_group() -> None:
    """24 layers, MLA every 5th: groups of 5, 5, 5, 4 KDA layers share 5 MLA planes, so the last
    group pads 25% before rounding; at rank 257 no packing up to 256 removes the rest."""
    result = sweep(ISSUE, POLICIES["search"])
    assert result.counterexample == Member(24, 16, 64, 257, 5, 1, "fp8")
    assert result.refusal is None and result.point is not None and not result.point.accepted


def _pins(query: Query, m: Member) -> list:
    v = query.enc.vars
    return [v["num_layers"] == m.num_layers, v["mla_every"] == m.mla_every, v["kda_heads"] == m.kda_heads,
            v["tp"] == m.tp, v["head_dim"] == m.head_dim, v["kv_lora_rank"] == m.kv_lora_rank,
            v["bf16"] == z3.BoolVal(m.dtype == "bf16")]


@st.composite
def members(draw: st.DrawFn) -> Member:
    heads = draw(st.integers(16, 128))
    return Member(draw(st.integers(24, 128)), heads, draw(st.sampled_from([64, 128, 256])),
                  draw(st.integers(256, 1024)), draw(st.integers(2, 8)),
                  draw(st.sampled_from(divisors(heads))), draw(st.sampled_from(CACHE_DTYPES)))


@cache
def query_for(policy: str) -> Query:
    return Query(ISSUE, POLICIES[policy], derive_shape(ISSUE), SEARCH_UNROLL if policy == "search" else 1)



@settings(max_examples=15, deadline=None)
@given(members(), st.sampled_from(list(POLICIES)))
# An odd latent at fp8 makes a page an odd multiple of 128 B (off ALIGNMENT 256), so an odd K_mla
# x page is too: the plane rounds up and no stride is the page (exact_stride). Rank 517: latent
# 581, page 74,368 B, K_mla 1. Rank 851: latent 915, page 117,120 B, K_mla = ceil(1,227,520 /
# 117,120) = 11, plane 1,289,728 B, stride 117,248 B. Random draws reach this only now and then.
@example(Member(96, 33, 64, 517, 2, 33, "fp8"), "ceil")
@example(Member(89, 70, 64, 851, 6, 1, "fp8"), "ceil")
# A state plane's bytes must be a multiple of K_lin x 16 too: at head_dim 64, one KDA head per rank
# and rank 1,024 (bf16) K_mla 1 x page 278,528 B holds K_lin = 15 states of 17,536 B, and 240 does
# not divide 278,528, so the plane rounds up to 280,320 B: the latent's stride is not its page.
@example(Member(96, 16, 64, 1024, 4, 16, "bf16"), "ceil")
def test_encoding_agrees_with_the_pointwise_prover(m: Member, policy: str) -> None:
    """Pin one member: the encoding's 'fails' must be the pointwise prover's rejection (for
    search: the first SEARCH_UNROLL candidates all rejected). Its bit widths drop no member: with
    'fails' negated the pinned member still has a model."""
    query = query_for(policy)
    point, _ = confirm(ISSUE, POLICIES[policy], m)
    rejected = point is None or not point.accepted  # confirm gives no point exactly when it refuses
    if policy == "search" and not rejected:
        assert point is not None
        layout = point.layout
        first = -(-layout.state // layout.page)
        chosen = next(g["packing"] for g in point.plan["groups"] if g["id"] == FULL)
        rejected = chosen >= first + SEARCH_UNROLL
    solver = z3.SimpleSolver()
    solver.add(*query.enc.facts, *_pins(query, m))
    assert solver.check() == z3.sat, f"{m.text()} dropped by the encoding's bounds"
    assert (query.check(*_pins(query, m)) is not None) == rejected, m.text()


def test_seeded_bug_is_killed_by_the_sweep_and_by_no_fixed_checkpoint() -> None:
    """split_count_floor_plus_one is right at every catalog model (69/24 and 20/7 KDA/MLA
    layers), so impl still equals the contract number for number at every catalog point; the
    sweep's enumeration of layer patterns reaches 24 layers with MLA every 2nd (12 and 12),
    where impl makes two state groups instead of one."""
    fam = family({"num_layers": "24..26", "mla_every": "2..3"})
    assert impl_conformance(fam)[1] is None
    with faults.inject("split_count_floor_plus_one"):
        for name in BUILTIN_MODELS:
            check_model(name, "search")  # the fixed-checkpoint conformance check passes
        differs = impl_conformance(fam)[1]
    assert differs is not None and "num_layers=24" in differs and "mla_every=2" in differs


def _impl_matches(fam: Family) -> None:
    assert impl_conformance(fam)[1] is None


def test_impl_conformance_bites() -> None:
    fails_under("split_count_floor_plus_one", _impl_matches, family({"num_layers": "24", "mla_every": "2"}))


def test_describe_set_finds_residue_classes() -> None:
    domain = tuple(range(24, 48))
    assert describe_set([v for v in domain if v % 4 == 1], domain) == "6 of 24: ≡ 1 (mod 4)"
    assert describe_set([], domain) == "none" and describe_set(list(domain), domain) == "all"
    assert describe_set([24, 25, 30], domain) == "3 of 24: 24..25, 30"
    # Moduli up to len(domain) // 3: 6 values still try mod 2.
    assert describe_set([24, 26, 28], tuple(range(24, 30))) == "3 of 6: ≡ 0 (mod 2)"


def test_cli_json_and_replay(tmp_path, capsys) -> None:
    vary = [f"{k}={v}" for k, v in K3_ALONE.items()]
    code = main(["sweep", "--vary", *vary, "--policy", "ceil", "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and not out["proved"] and out["domain_size"] == 24
    assert out["counterexample"]["tp"] == 32 and out["counterexample"]["dtype"] == "bf16"
    assert out["impl"]["differs"] is None and "rejects" in out["impl"]["at_counterexample"]
    replay = out["counterexample"]["replay"].split()[1:]
    assert main(replay) == 1  # verify plan on the written config rejects the same point
    assert "padding_bound" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--vary", "layers=24..32"], "expected NAME=RANGE"),
    (["--vary", "num_layers=32..24"], "empty range"),
    (["--vary", "num_layers=0..24"], "must be in 1..1024"),
    (["--vary", "kda_heads=a..b"], "expected a..b"),
    (["--vary", "mla_every=1..4"], "must start at 2"),
    (["--vary", "num_layers=1..4"], "must start at 2"),
    (["--vary", "num_layers=24", "num_layers=25"], "twice"),
    (["--model", "deepseek-v3"], "hybrid"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, capsys) -> None:
    assert main(["sweep", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_undecided_family_is_never_proved(capsys) -> None:
    """A budget too small to decide is exit 2 with one line, not PROVED."""
    assert main(["sweep", "--vary", *(f"{k}={v}" for k, v in ISSUE_RANGES.items()), "--budget", "0.001"]) == 2
    err = capsys.readouterr().err
    assert "undecided" in err and len(err.strip().splitlines()) == 1


def test_report_cells_are_sub_family_verdicts() -> None:
    """A cell is PROVED exactly when the sweep proves its sub-family; a failing cell's member lies
    in the cell and the pointwise prover rejects it."""
    fam = Family.around(K3, {"num_layers": parse_range("num_layers", "24..25"),
                             "mla_every": parse_range("mla_every", "4..5")}, ("fp8",))
    grid = cells(fam, "ceil", "num_layers", "mla_every")
    assert grid[24, 4] is None and grid[24, 5] is not None
    for (layers, every), found in grid.items():
        if found is None:
            sub = Family.around(K3, {"num_layers": parse_range("num_layers", str(layers)),
                                     "mla_every": parse_range("mla_every", str(every))}, ("fp8",))
            assert sweep(sub, POLICIES["ceil"]).proved
        else:
            member, properties = found
            assert (member.num_layers, member.mla_every) == (layers, every) and properties == "padding_bound"
            point, _ = confirm(fam, POLICIES["ceil"], member)
            assert point is not None and not point.accepted


def test_report_sweep_writes_the_picture(tmp_path) -> None:
    code = main(["report", "--sweep", "num_layers=24", "mla_every=4..5", "--sweep-policy", "pinned12",
                 "--out", str(tmp_path)])
    assert code == 1  # pinned12 fails at K3's own geometry
    assert all((tmp_path / f"sweep.{e}").stat().st_size > 0 for e in ("png", "svg", "md"))
    assert "| 4 |" in (tmp_path / "sweep.md").read_text()


def test_each_small_comparison_is_the_integer_one() -> None:
    """Small (a bit-blasted count plus an offset) compares as its value: a policy may compare K_mla."""
    from kvproof.spec.sweep import Small

    x = z3.Int("x")
    five = Small(x, [], 2)  # x + 2 at x = 3
    def at_3(formula: z3.ExprRef) -> bool:
        return z3.is_true(z3.simplify(z3.substitute(formula, (x, z3.IntVal(3)))))
    assert [at_3(five < 5), at_3(five <= 5), at_3(five > 5), at_3(five >= 5), at_3(five == 5)] == [
        False, True, False, True, True]
    assert [at_3(five < 6), at_3(five > 4), at_3(five >= 6), at_3(five <= 4)] == [True, True, False, False]
    assert [at_3(five - 1 == 4), at_3(five + 1 == 6), at_3(five * 3 == 15)] == [True, True, True]


def test_a_pattern_pins_every_other_parameter_at_the_counterexample() -> None:
    """K3 under ceil fails at bf16 only at tp 32 (test above): with rank 512 varied alone, it
    fails at tp 32 and not at tp 16, where another member's failure must not leak in."""
    fam = family(K3_ALONE)
    query = Query(fam, POLICIES["ceil"], derive_shape(fam), 1)
    k3 = {"num_layers": 93, "mla_every": 4, "kda_heads": 96, "head_dim": 128, "kv_lora_rank": 512, "tp": 32, "bf16": 1}
    assert query.fails_at(k3, "kv_lora_rank")(512)
    assert not query.fails_at(k3 | {"tp": 16}, "kv_lora_rank")(512)
    assert query.fails_at(k3, "num_layers")(93) and not query.fails_at(k3 | {"bf16": 0}, "num_layers")(93)
    from kvproof.spec.sweep import failing_patterns

    assert failing_patterns(query, k3, fam, ("kv_lora_rank",)) == {"kv_lora_rank": "all"}
    assert failing_patterns(query, k3 | {"tp": 16}, fam, ("kv_lora_rank", "num_layers")) == {
        "kv_lora_rank": "none", "num_layers": "none"}
    assert failing_patterns(query, k3, fam, ()) == {}


def test_a_report_cell_refines_search_where_a_later_k_mla_boots(monkeypatch) -> None:
    """With one candidate unrolled, K3 at bf16 tp 32 seems to fail under search (its first K_mla
    is ceil's, which pads too much: test above); the pointwise prover takes a later K_mla, which
    becomes a candidate, and then no member of K3 alone fails."""
    from kvproof.spec.sweep import confirmed_failure

    fam = family(K3_ALONE)
    query = Query(fam, POLICIES["search"], derive_shape(fam), 1)
    added: list[int] = []
    refine = query.add_candidate

    def add_candidate(k: int) -> None:
        added.append(k)
        refine(k)

    monkeypatch.setattr(query, "add_candidate", add_candidate)
    assert confirmed_failure(query, fam, POLICIES["search"]) is None
    assert len(added) >= 1


def test_a_range_lists_and_prints_what_it_holds(tmp_path) -> None:
    listed, span = parse_range("head_dim", "256,64"), parse_range("num_layers", "24..26")
    one = parse_range("mla_every", "4")
    assert [v in listed for v in (64, 128, 256)] == [True, False, True]
    assert [v in span for v in (23, 24, 26, 27)] == [False, True, True, False]
    assert (listed.text(), span.text(), one.text()) == ("64,256", "24..26", "4")
    assert (len(listed), len(span), len(one)) == (2, 3, 1)
    # A replay config lands in folders made for it, one JSON key per line indented by one space.
    path = tmp_path / "a" / "b" / "member.json"
    family(K3_ALONE).write_config(Member(93, 96, 128, 512, 4, 32, "bf16"), path)
    text = path.read_text()
    assert text.startswith('{\n "text_config": {\n  "num_hidden_layers": 93,\n')
    assert json.loads(text) == family(K3_ALONE).config(Member(93, 96, 128, 512, 4, 32, "bf16"))


def test_a_sweep_out_of_time_names_its_budget_600_s_by_default(monkeypatch) -> None:
    """The library's default budget is the CLI's 600 s: the sweep and its query start at 0 s, and
    the clock reads 600.5 s at the first check, so it has run out."""
    import kvproof.spec.sweep as S

    ticks = iter([0.0, 0.0])
    monkeypatch.setattr(S.time, "perf_counter", lambda: next(ticks, 600.5))
    with pytest.raises(S.Undecided, match="time budget of 600 s ran out"):
        sweep(family(K3_ALONE), POLICIES["ceil"])
    fam = family(K3_ALONE)
    ticks = iter([0.0])  # a query of its own: the same default
    query = Query(fam, POLICIES["ceil"], derive_shape(fam), 1)
    with pytest.raises(S.Undecided, match="time budget of 600 s ran out"):
        query.check()


class _Recorded:
    """A z3 solver that notes the parameters set on it."""

    def __init__(self, solver: z3.Solver) -> None:
        self.solver = solver
        self.params: dict[str, int] = {}

    def set(self, name: str, value: int) -> None:
        self.params[name] = value
        self.solver.set(name, value)

    def __getattr__(self, name: str):
        return getattr(self.solver, name)


def test_each_query_hands_z3_what_is_left_of_the_budget_as_its_timeout() -> None:
    fam = family(K3_ALONE)
    query = Query(fam, POLICIES["ceil"], derive_shape(fam), 1, budget=30.0)
    query.solver = _Recorded(query.solver)
    assert query.check() is not None  # K3 at bf16 tp 32 fails under ceil
    assert list(query.solver.params) == ["timeout"] and 0 < query.solver.params["timeout"] <= 30_000


def test_a_sweep_asks_for_any_failing_member_before_the_smallest(monkeypatch) -> None:
    """Minimising costs more than finding: the first query takes any failing member, and only
    once the pointwise prover confirms one does the sweep ask for the smallest."""
    asked: list[str] = []
    check, smallest = Query.check, Query.smallest

    def check_any(self: Query, *extra: object) -> dict[str, int] | None:
        asked.append("any")
        return check(self, *extra)

    def check_smallest(self: Query, floor: dict[str, int] | None) -> dict[str, int] | None:
        asked.append("smallest")
        return smallest(self, floor)

    monkeypatch.setattr(Query, "check", check_any)
    monkeypatch.setattr(Query, "smallest", check_smallest)
    assert sweep(family(K3_ALONE), POLICIES["ceil"]).counterexample == Member(93, 96, 128, 512, 4, 32, "bf16")
    assert asked[:2] == ["any", "smallest"]


def test_a_member_whose_state_groups_hold_one_layer_each_is_swept() -> None:
    """Two layers, MLA every 2nd: layer 2 is MLA, layer 1 the one KDA layer, in one state group of
    one layer. pinned12 fails there as at K3 (exact stride): a sweep that assumed a state group
    of two or more layers would prove it."""
    fam = family({"num_layers": "2", "mla_every": "2"})
    result = sweep(fam, POLICIES["pinned12"])
    assert result.counterexample == Member(2, 96, 128, 512, 2, 1, "fp8")
    assert "exact_stride" in result.failing_properties
    point, _ = confirm(fam, POLICIES["pinned12"], result.counterexample)
    assert point is not None and point.violations["exact_stride"]


def test_a_latent_narrower_than_a_page_value_is_swept_as_the_prover_sees_it() -> None:
    """Rank 32 at bf16: latent 32 + 64 = 96 values against 256 page bytes per value (a page whose
    bytes are a multiple of 16 at any latent). ceil is proved over K3's twelve tp, as the
    pointwise prover finds at each."""
    fam = Family.around(K3, {"kv_lora_rank": parse_range("kv_lora_rank", "32")}, ("bf16",))
    assert derive_shape(fam).page_per_value == {"bf16": 256} and derive_shape(fam).mla_multiple == {"bf16": 16}
    assert sweep(fam, POLICIES["ceil"]).proved
    members = [Member(93, 96, 128, 32, 4, tp, "bf16") for tp in K3.tp_domain]
    points = [confirm(fam, POLICIES["ceil"], m)[0] for m in members]
    assert all(p is not None and p.accepted for p in points)


def test_describe_set_tries_a_modulus_only_while_each_class_holds_three_values() -> None:
    """24 and 27 of 24..29 are the values = 0 (mod 3), but six values give each class mod 3 only
    two: moduli stop at 6 // 3 = 2, so the set is listed. Nine values (24..32) reach mod 3."""
    assert describe_set([24, 27], tuple(range(24, 30))) == "2 of 6: 24, 27"
    assert describe_set([24, 27, 30], tuple(range(24, 33))) == "3 of 9: ≡ 0 (mod 3)"


def test_describe_set_lists_every_residue_of_a_class_pattern() -> None:
    # v mod 4 in {0, 1} over 24..47: not a class mod 2 (25 and 27 differ) nor mod 3 (24 and 27).
    domain = tuple(range(24, 48))
    assert describe_set([v for v in domain if v % 4 in (0, 1)], domain) == "12 of 24: ≡ 0, 1 (mod 4)"


def test_a_member_and_a_family_print_as_name_value_pairs_in_parameter_order() -> None:
    assert Member(93, 96, 128, 512, 4, 32, "bf16").text() == (
        "num_layers=93 kda_heads=96 head_dim=128 kv_lora_rank=512 mla_every=4 tp=32 dtype=bf16")
    assert family({"num_layers": "24..26", "head_dim": "64,128"}).describe() == (
        "num_layers=24..26 kda_heads=96 head_dim=64,128 kv_lora_rank=512 mla_every=4")


def _contract_rounding(monkeypatch: pytest.MonkeyPatch, what: str, to: int) -> None:
    """The sweep's contract with the layout's `what` (state or page bytes) rounded up to a multiple of `to`."""
    import kvproof.spec.sweep as S

    contract = S.recipe_layout

    def rounded(*args: Any) -> Layout:
        layout = contract(*args)
        return replace(layout, **{what: -(-getattr(layout, what) // to) * to})

    monkeypatch.setattr(S, "recipe_layout", rounded)


def test_a_contract_whose_state_is_not_linear_in_the_heads_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoding's state is heads per rank x state_per_head, checked against the contract at
    every head count. K3's KDA head (head_dim 128) holds 67,840 B; rounded up to 4 KiB, one head is
    69,632 B and two are 139,264 B = 2 x 69,632, but three (203,520 B) round to 204,800 B."""
    _contract_rounding(monkeypatch, "state", 4096)
    with pytest.raises(ConfigError, match=r"^state bytes are not linear in heads at head_dim=128, 3 heads per rank "
                                          r"\(204800 != 3 x 69632\); narrow --vary head_dim$"):
        derive_shape(family(K3_ALONE))


def test_a_contract_whose_page_is_not_linear_in_the_rank_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoding's page is page_per_value x (rank + rope), checked against the contract at every
    rank. A contract rounding pages up to 4 KiB breaks that: at rank 256 (fp8) the page is 128 x 320
    = 40,960 B = 10 x 4,096 B, so 128 B per value; at 257 it is 128 x 321 = 41,088 B, rounded up to
    45,056 B, not 128 x 321."""
    _contract_rounding(monkeypatch, "page", 4096)
    fam = Family.around(K3, {"kv_lora_rank": parse_range("kv_lora_rank", "256..257")}, ("fp8",))
    with pytest.raises(ConfigError, match=r"^page bytes are not linear in kv_lora_rank at 257 \(fp8\)$"):
        derive_shape(fam)


def test_a_pointwise_prover_accepting_what_the_encoding_fails_is_an_error_not_a_verdict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """K3 alone under ceil fails only at bf16 tp 32 (test above). A prover answering there as it
    does at fp8 tp 32 (accepted: K_mla = ceil(203,520 / 73,728) = 3) disagrees with the encoding:
    the sweep says so and asks for a report, it does not return PROVED or a counterexample."""
    import kvproof.spec.sweep as S

    pointwise = S.confirm
    monkeypatch.setattr(S, "confirm", lambda fam, policy, m: pointwise(fam, policy, replace(m, dtype="fp8")))
    with pytest.raises(ConfigError) as err:
        sweep(family(K3_ALONE), POLICIES["ceil"])
    assert str(err.value) == ("internal: the sweep's encoding says num_layers=93 kda_heads=96 head_dim=128 "
                              "kv_lora_rank=512 mla_every=4 tp=32 dtype=bf16 fails under ceil, the pointwise "
                              "prover accepts K_mla=3; please report")


def test_a_members_model_is_named_after_the_base_checkpoint() -> None:
    """Messages about a member's model name it kimi-k3-sweep: the base's name, marked as a sweep member."""
    model = family(K3_ALONE).model(Member(93, 96, 128, 512, 4, 32, "bf16"))
    assert model.name == "kimi-k3-sweep"
    with pytest.raises(ConfigError, match=r"^tp=5 does not divide .* of kimi-k3-sweep; valid tp"):
        model.check_tp(5)


# The broad family of the search-policy theorem: every tp and dtype at two head dims.
SEARCH_RANGES = {"num_layers": "24..128", "mla_every": "2..4", "kda_heads": "16..128", "head_dim": "64,128",
                 "kv_lora_rank": "256..1024"}


def _table(fam: Family) -> sweep_table.Verdicts:
    shape = derive_shape(fam)
    table = sweep_table.build(fam, shape.state_per_head, shape.page_per_value, shape.mla_multiple,
                              shape.lin_multiple, lambda: None)
    return sweep_table.Verdicts(fam, table)


def _drawn(fam: Family, count: int, seed: int) -> list[Member]:
    """Every range's ends crossed with each other's ends, then `count` members drawn with a fixed seed."""
    r, rng = fam.ranges, random.Random(seed)
    ends = [(r[p].all()[0], r[p].all()[-1]) for p in PARAMETERS]
    chosen = []
    for i, values in enumerate(itertools.product(*ends)):
        geometry = dict(zip(PARAMETERS, values, strict=True))
        tps = divisors(geometry["kda_heads"])
        chosen.append(Member(**geometry, tp=tps[i % len(tps)], dtype=fam.dtypes[i % len(fam.dtypes)]))
    for _ in range(count):
        geometry = {p: rng.choice(r[p].all()) for p in PARAMETERS}
        chosen.append(Member(**geometry, tp=rng.choice(divisors(geometry["kda_heads"])), dtype=rng.choice(fam.dtypes)))
    return chosen


# Members of the search family that fail (random draws rarely do): the smallest counterexample and
# its neighbours in rank and tp, and two the z3 query found on its way there.
SEARCH_FAILING = [Member(24, 16, 64, 279, 2, 16, "fp8"), Member(123, 128, 64, 295, 2, 128, "fp8"),
                  Member(48, 112, 64, 295, 4, 28, "fp8")]
SEARCH_NEAR = [Member(24, 16, 64, rank, 2, tp, dtype) for rank in (278, 279, 280) for tp in (1, 8, 16)
               for dtype in CACHE_DTYPES]


@pytest.mark.parametrize("ranges", [SEARCH_RANGES, ISSUE_RANGES], ids=["search-family", "issue-family"])
def test_the_table_agrees_with_the_pointwise_prover(ranges: dict[str, str]) -> None:
    """At each range's ends and at members drawn with a fixed seed, the table's 'fails' is the
    pointwise prover's rejection under search, refusals included."""
    fam = family(ranges)
    verdicts = _table(fam)
    wrong = []
    members = _drawn(fam, 120, 22) + (SEARCH_FAILING + SEARCH_NEAR if ranges is SEARCH_RANGES else [])
    for m in members:
        point, _ = confirm(fam, POLICIES["search"], m)
        if verdicts.fails_member(m) != (point is None or not point.accepted):
            wrong.append(m.text())
    assert not wrong
    assert any(verdicts.fails_member(m) for m in members)  # both verdicts are compared


@pytest.mark.parametrize("ranges", [
    {"num_layers": "24..29", "mla_every": "2..6"},  # ratio-1 patterns and a group padding 25%
    K3_ALONE,
    {"num_layers": "90..96", "kv_lora_rank": "500..520", "head_dim": "64,128"},
])
def test_the_table_and_the_z3_query_decide_alike(ranges: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two exact decisions of one family, the table's and the refined z3 query's: the same verdict,
    the same smallest counterexample and the same failing values around it."""
    fam, names = family(ranges), ("num_layers", "mla_every", "head_dim")
    by_table = sweep(fam, POLICIES["search"], names)
    assert by_table.evaluated == sweep_table.points(fam) > 0
    monkeypatch.setattr(sweep_table, "fits", lambda fam: False)
    by_query = sweep(fam, POLICIES["search"], names)
    assert by_query.evaluated == 0
    assert (by_table.proved, by_table.counterexample, by_table.patterns) == (
        by_query.proved, by_query.counterexample, by_query.patterns)


def test_the_search_family_is_decided_at_its_smallest_counterexample() -> None:
    """MLA every 2nd at 24 layers: one state group of 12 KDA layers beside 12 MLA planes. At 16
    heads over tp 16 (one head, 17,536 B of state at head_dim 64) and rank 279 (fp8 page 43,904 B),
    no packing up to 256 is exact within the padding bound."""
    fam = family(SEARCH_RANGES)
    result = sweep(fam, POLICIES["search"])
    assert result.counterexample == Member(24, 16, 64, 279, 2, 16, "fp8")
    assert result.point is not None and not result.point.accepted
    assert result.evaluated == len(range(1, 129)) * 769 * 2 * 2  # every heads per rank 1..128 is reached


def test_a_family_too_large_for_the_table_is_decided_by_the_query() -> None:
    """Rank 60,000 makes an fp8 page of 7,688,192 B: 256 of them squared overflow int64, so the
    table refuses it and the z3 query decides (K3 at tp 3 fails there; the prover confirms it)."""
    fam = Family.around(K3, {"kv_lora_rank": parse_range("kv_lora_rank", "60000")}, ("fp8",))
    assert sweep_table.fits(fam)
    with pytest.raises(OverflowError):
        _table(fam)
    result = sweep(fam, POLICIES["search"])
    assert result.evaluated == 0 and result.counterexample == Member(93, 96, 128, 60000, 4, 3, "fp8")
