"""kvproof's launch rules against tokenspeed's own parallel resolution (mapping.py, loaded alone).

On random launches the rules that the resolution enforces must reject exactly the launches it
rejects; the rules it does not enforce are findings, each shown on a launch it accepts.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from launch_cases import BREAKS

from kvproof.cli.main import main
from kvproof.engines.tokenspeed.launch_flags import parse_launch
from kvproof.spec.catalog import load_model
from kvproof.spec.launch import RULES, Assumptions, Launch, violated

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tokenspeed") is None,
                                reason="tokenspeed is not installed (pip install --no-deps tokenspeed==0.1.1)")

K3 = load_model("kimi-k3")


def _engine():
    from kvproof.engines.tokenspeed import parallel

    return parallel


@st.composite
def launches(draw) -> Launch:
    size = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16])
    maybe = st.none() | size
    return Launch(tp=draw(maybe), dp=draw(maybe), pp=draw(st.sampled_from([1, 2, 3])), world=draw(maybe),
                  dense_tp=draw(maybe), ep=draw(size), moe_tp=draw(maybe), dcp=draw(st.sampled_from([1, 2, 3])),
                  nnodes=draw(st.none() | st.sampled_from([1, 2, 3])), enable_ep=draw(st.booleans()),
                  dist_init_addr=True, dtype="bf16")


@given(launches())
def test_resolution_rules_reject_exactly_what_the_engine_rejects(launch):
    engine = _engine()
    ours = [r.name for r in violated(launch, K3, Assumptions(True)) if r.name in engine.ENFORCED_BY_RESOLUTION]
    theirs = engine.engine_verdict(launch)
    assert bool(ours) == (theirs is not None), (launch, ours, theirs)


@pytest.mark.parametrize("rule", sorted(r.name for r in RULES if r.engine_enforces.by == "nowhere"))
def test_rules_the_engine_does_not_enforce_are_findings(rule):
    """Each of these launches breaks one rule, and tokenspeed's resolution accepts it."""
    assert _engine().engine_verdict(parse_launch(list(BREAKS[rule][1])).launch) is None


def test_cli_reports_the_dense_tp_finding(capsys):
    _, launch = BREAKS["dense_tp_is_attention_tp"]
    code = main(["config", "--model", "kimi-k3", "--engine", "tokenspeed", "--json", "--", *launch])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert out["engine"] == {"engine": "tokenspeed", "rejects": None, "agrees": True,
                             "not_enforced": ["dense_tp_is_attention_tp"], "ours_enforced_by_resolution": []}


@pytest.mark.parametrize("rule", ["pp_without_attention_dp", "dist_init_addr", "cache_contract"])
def test_rules_the_engine_enforces_elsewhere_are_no_findings(capsys, rule):
    """ServerArgs, PortArgs.init_new and the planner's boot check enforce these outside the loaded
    resolution: a launch breaking one is no finding against tokenspeed."""
    options, launch = BREAKS[rule]
    assert main(["config", "--model", "kimi-k3", "--engine", "tokenspeed", "--json", *options, "--", *launch]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [v["rule"] for v in out["violations"]] == [rule] and out["engine"]["not_enforced"] == []


def test_mapping_flags_not_modelled_are_refused(capsys):
    """tokenspeed's Mapping rejects nprocs_per_node 3 and lm_head_tp_size 2 here: the launch must
    not come back accepted as if those flags were absent."""
    argv = ["config", "--model", "kimi-k3", "--engine", "tokenspeed", "--", "--tp", "8", "--nprocs-per-node", "3",
            "--lm-head-tp-size", "2"]
    assert main(argv) == 2
    assert "do not model" in capsys.readouterr().err


def test_cli_shows_the_engines_own_rejection(capsys):
    _, launch = BREAKS["moe_tp_or_ep"]
    assert main(["config", "--model", "kimi-k3", "--engine", "tokenspeed", "--json", "--", *launch]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["engine"]["rejects"] == "ValueError: MoE TP and EP cannot be both > 1" and out["engine"]["agrees"]


def test_packages_above_mapping_are_not_initialised():
    """mapping.py loads with tokenspeed.runtime.distributed's __init__ never run: nothing it would
    define (it imports the communication stack) exists."""
    _engine().load_mapping()
    package = sys.modules["tokenspeed.runtime.distributed"]
    assert package.__doc__ == "kvproof: package __init__ skipped"
    with pytest.raises(AttributeError, match="CommManager"):
        _ = package.CommManager
