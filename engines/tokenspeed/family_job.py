"""The work list of a distributed engine sweep, run by pytest-xdist: one test per chunk of members.

`verify sweep --engine tokenspeed --workers N` (or `--tx SPEC`) runs this module with
`pytest -n N` (or `-d --tx SPEC`); it is not part of the test suite (tests/ is). Every worker
collects the same chunks from the job in KVPROOF_FAMILY_JOB (base64 JSON, set in the
environment of local workers and through each --tx spec's env: for remote ones), runs the
engine's recipe at every member of its chunks and returns the failing members through
record_property, which xdist carries back to the controller's JUnit XML. A chunk that raises
fails its test, and the sweep reports an error, never a verdict.
"""

from __future__ import annotations

import base64
import functools
import json
import os
from collections.abc import Callable

import pytest

from kvproof.engines.tokenspeed import loader, mutants, sweep
from kvproof.spec.catalog import load_model
from kvproof.spec.sweep_family import Family, parse_range

JOB_ENV = "KVPROOF_FAMILY_JOB"
DONE_ENV = "KVPROOF_FAMILY_DONE"  # a file each finished chunk appends a line to (progress only)
PROPERTY = "kvproof_chunk"


def encode(job: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(job, sort_keys=True).encode()).decode()


def decode(text: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(text.encode()))


@functools.cache
def runner(text: str) -> sweep.Runner:
    """One Runner per worker process: the engine's modules load once, not once per chunk."""
    job = decode(text)
    source = loader.source_of(job["engine_path"])
    family = Family.around(load_model("kimi-k3"), {p: parse_range(p, t) for p, t in job["vary"].items()},
                           tuple(job["dtypes"]))
    return sweep.Runner(mutants.mutated(source), family)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chunk" in metafunc.fixturenames:
        text = os.environ.get(JOB_ENV)
        if not text:
            raise pytest.UsageError(f"{JOB_ENV} is not set: run this through verify sweep --engine ... --workers N")
        metafunc.parametrize("chunk", range(decode(text)["chunks"]))


def test_chunk(chunk: int, record_property: Callable[[str, object], None]) -> None:
    text = os.environ[JOB_ENV]
    run = runner(text)
    found, tried, refused = sweep.failing(run, sweep.chunk(run.family, chunk, decode(text)["chunks"]))
    rows = [[m.as_dict(), prop, stem] for (prop, stem), failed in found.items() for m in failed]
    record_property(PROPERTY, json.dumps({"tried": tried, "refused": refused, "failing": rows}))
    done = os.environ.get(DONE_ENV)
    if done:  # the controller counts finished chunks here while it waits (a worker on this machine)
        with open(done, "a", encoding="utf-8") as out:
            out.write(f"{chunk}\n")
