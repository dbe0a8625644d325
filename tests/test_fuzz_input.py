"""No input exhausts memory: `verify plan --config` and `verify check` on fuzzed config.json and
plan documents, each run as its own process under a 2 GiB address-space cap.

A bad document must end as exit 2 with exactly one line on stderr; anything else ends in 0 or 1
with nothing on stderr. A MemoryError (the cap reached) or any traceback fails. Each example is
a fresh interpreter (about a second), so the examples are few; the explicit ones are the sizes
that grew the process until the kernel killed it before sizes were bounded.
"""

from __future__ import annotations

import copy
import json
import resource
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvproof.cli.main import main

CAP = 2 * 2**30
FUZZ = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvproof.cli.main", *args], capture_output=True, text=True,
                          timeout=120, preexec_fn=_cap_memory, check=False)


def _assert_clean_exit(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode in (0, 1, 2), (run.returncode, run.stderr[-2000:])
    assert "MemoryError" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]
    if run.returncode == 2:
        (line,) = run.stderr.splitlines()
        assert line.startswith("verify ")
    else:
        assert run.stderr == ""


# Sizes around every bound and far past it, and values of the wrong kind.
SIZES = st.sampled_from([0, -1, 1, 2, 3, 4, 64, 1024, 4096, 4097, 65_536, 65_537, 2**31, 2**63, 10**30])
VALUES = st.one_of(SIZES, st.integers(-3, 300), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.none(), st.text(max_size=4), st.lists(st.integers(-2, 100), max_size=20))
CONFIG_KEYS = ["num_hidden_layers", "num_attention_heads", "kv_lora_rank", "qk_rope_head_dim",
               "linear_attn_config.num_heads", "linear_attn_config.head_dim",
               "linear_attn_config.short_conv_kernel_size", "linear_attn_config.kda_layers",
               "linear_attn_config.full_attn_layers", "linear_attn_config"]


def _k3() -> dict:
    return json.loads(resources.files("kvproof.spec").joinpath("models", "kimi-k3.json").read_text())


def _set(doc: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = doc["text_config"]
    for key in parents:
        node = node[key]
    node[last] = value


@given(changes=st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), VALUES), min_size=1, max_size=4),
       tp=st.sampled_from(["1", "8", "96"]))
@example(changes=[("num_hidden_layers", 2**31)], tp="8")
@example(changes=[("num_hidden_layers", 10**30), ("linear_attn_config", None)], tp="1")
@FUZZ
def test_fuzzed_config_is_a_verdict_or_one_line(tmp_path: Path, changes: list[tuple[str, Any]], tp: str) -> None:
    doc = _k3()
    for key, value in changes:
        if "." in key and not isinstance(doc["text_config"].get("linear_attn_config"), dict):
            continue
        _set(doc, key, value)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    _assert_clean_exit(_verify("plan", "--config", str(path), "--tp", tp))


@pytest.fixture(scope="module")
def k3_plan(tmp_path_factory: pytest.TempPathFactory) -> dict:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    main(["plan", "--tp", "8", "--emit-plan", str(path), "--parents", "2"])
    return json.loads(path.read_text())


LONGEST = 20_000  # items in one list of a fuzzed plan (the schema allows 4,096 planes, 16,384 fields)
PLAN_KEYS = ["num_parents", "parent_bytes", "alignment", "max_padding", "arena_bytes", "planes", "groups", "fields",
             "planes.bytes", "planes.arena_offset", "planes.alignment", "groups.packing", "groups.page_count",
             "fields.shape", "fields.offset", "fields.stride", "fields.dtype", "fields.plane"]


@st.composite
def plan_changes(draw: st.DrawFn) -> list[tuple[str, int, Any]]:
    """(key, list index, value); `repeat` multiplies a list instead of setting a value."""
    return draw(st.lists(st.tuples(st.sampled_from(PLAN_KEYS), st.integers(0, 30),
                                   st.one_of(VALUES, st.just("repeat"))), min_size=1, max_size=4))


def _apply(plan: dict, changes: list[tuple[str, int, Any]]) -> dict:
    plan = copy.deepcopy(plan)
    for key, index, value in changes:
        outer, _, inner = key.partition(".")
        if value == "repeat" and isinstance(plan.get(outer), list):
            # just past the schema's list bounds, never more: the document is built in this process
            plan[outer] = plan[outer] * min(index * 100 + 2, LONGEST // max(1, len(plan[outer])))
        elif not inner:
            plan[outer] = value
        elif isinstance(plan.get(outer), list) and plan[outer] and isinstance(plan[outer][0], dict):
            plan[outer][index % len(plan[outer])][inner] = value
    return plan


@given(changes=plan_changes())
@example(changes=[("num_parents", 0, 10**30), ("fields", 0, "repeat")])
@FUZZ
def test_fuzzed_plan_is_a_verdict_or_one_line(tmp_path: Path, k3_plan: dict,
                                              changes: list[tuple[str, int, Any]]) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_apply(k3_plan, changes)))
    _assert_clean_exit(_verify("check", str(path)))
