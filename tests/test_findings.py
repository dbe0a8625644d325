"""The findings pages (docs/findings/*.md) hold their numbers to the engines' code.

Each finding on a page has a fenced block this test runs:

    ```replay
    verify engine tokenspeed --recipe kimi_k3 --tp 32 --dtype bfloat16 --drafts 0 --json
    exit = 1
    recipes[0].points[0].property = boots
    recipes[0].points[0].message ~ padding fraction 0.512059
    max(recipes[*].points[tp=32].packing.full_attention) = 2
    ```

The first line is the command (`verify ... --json`), run in-process through kvproof.cli.main.main;
a `$NAME` word in it is the environment variable NAME (a checkout only the reader has; the block
is skipped where it is unset). Every other line is `PATH OP VALUE`, held against the printed JSON:
- PATH: keys (`recipes[0].packing.full_attention`, `packing["v4.swa_kv"]` for a key with a dot),
  list indices, `[*]` for every element of a list, `[KEY=VALUE]` for the elements whose KEY (or
  list index) prints as VALUE (a filter after `[*]` or another filter narrows those). Once `[*]` or
  a filter is used, PATH names several values; each must match, and naming none fails. `exit` is
  the command's exit status. `len(PATH)`, `max(PATH)` and `min(PATH)` reduce what PATH names.
- OP: `=` equal: a number at the precision it is written (0.512 matches 0.512059, an integer
  exactly), null, true and false as JSON, anything else as a string; `<=` a number at most VALUE
  (at its precision); `~` the string contains VALUE.

Blocks that run the same command share one run. A `replay-python` block is for a finding no
`verify` command reaches: Python code, a line `---`, then `raises`, `message` and `at` (the file
and line the exception came from) held as above. It runs in its own interpreter, started when
the first replay runs. A `replay slow` block (a whole engine against its baseline: minutes) runs
only with KVPROOF_FINDINGS_FULL=1.

Every page, and every `##` section of it, needs a replay block: a finding cannot be added
without numbers the test holds it to.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvproof.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs" / "findings").glob("*.md"))
FENCE = re.compile(r"^```(replay(?:-python| slow)?)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
EXPECT = re.compile(r"^(?P<path>\S.*?) (?P<op>=|~|<=) (?P<value>.*)$")
SEGMENT = re.compile(r'\.?([A-Za-z_][\w-]*)|\["([^"]+)"\]|\[(\*|-?\d+|[^\]=]+=[^\]]*)\]')
REDUCE = re.compile(r"^(len|max|min)\((.*)\)$")
ENGINE_NEEDS = {"tokenspeed": ("tokenspeed", "torch"), "vllm": ("vllm",)}


@dataclass(frozen=True)
class Replay:
    page: str
    line: int  # the block's first line in the page (1-based)
    kind: str  # replay | replay-python | replay slow
    command: str  # the verify command line, or the Python code
    expect: tuple[tuple[str, str, str], ...]  # (path, op, value)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def parse_page(path: Path) -> list[Replay]:
    text = path.read_text(encoding="utf-8")
    replays = []
    for match in FENCE.finditer(text):
        kind, body = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 2
        lines = body.splitlines()
        if kind == "replay-python":
            if "---" not in lines:
                raise ValueError(f"{path.name}:{line}: a replay-python block needs a '---' line before its values")
            cut = lines.index("---")
            command, rest = "\n".join(lines[:cut]), lines[cut + 1:]
        else:
            command, rest = lines[0].strip(), lines[1:]
        expect = []
        for i, raw in enumerate(rest):
            if not raw.strip():
                continue
            m = EXPECT.match(raw.strip())
            if m is None:
                raise ValueError(f"{path.name}:{line}: line {i + 2} is not 'PATH = VALUE', <= or ~: {raw!r}")
            expect.append((m["path"], m["op"], m["value"].strip()))
        if not expect:
            raise ValueError(f"{path.name}:{line}: a replay block with no expected value checks nothing")
        replays.append(Replay(path.name, line, kind, command, tuple(expect)))
    return replays


REPLAYS = [r for page in PAGES for r in parse_page(page)]


def resolve(doc: Any, path: str) -> tuple[list[Any], bool]:
    """The values PATH names in doc, and whether it may name several."""
    nodes, many, at = [doc], False, 0
    chosen = False  # the last step chose elements ([*] or a filter): a next filter narrows them
    while at < len(path):
        m = SEGMENT.match(path, at)
        if m is None or m.end() == at:
            raise AssertionError(f"bad path {path!r} at {path[at:]!r}")
        at = m.end()
        key, index = m.group(1) or m.group(2), m.group(3)
        if key is not None:
            try:
                nodes = [node[key] for node in nodes]
            except (KeyError, TypeError):
                raise AssertionError(f"{path}: no key {key!r} in {_short(nodes)}") from None
            chosen = False
        elif index == "*":
            nodes, many, chosen = [e for node in nodes for e in node], True, True
        elif "=" in index:
            field, want = index.split("=", 1)
            ref: int | str = int(field) if re.fullmatch(r"-?\d+", field) else field
            pool = nodes if chosen else [e for node in nodes for e in node]
            nodes, many, chosen = [e for e in pool if _text(_get(e, ref)) == want], True, True
        else:
            try:
                nodes = [node[int(index)] for node in nodes]
            except (IndexError, KeyError, TypeError):
                raise AssertionError(f"{path}: no element [{index}] in {_short(nodes)}") from None
            chosen = False
    return nodes, many


def _get(element: Any, ref: int | str) -> Any:
    try:
        return element[ref]
    except (KeyError, IndexError, TypeError):
        return None


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) or value is None else str(value)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) < 300 else text[:300] + "…"


def evaluate(doc: dict[str, Any], path: str) -> tuple[list[Any], bool]:
    reduced = REDUCE.match(path)
    if reduced is None:
        return resolve(doc, path)
    how, inner = reduced.groups()
    nodes, many = resolve(doc, inner)
    values = nodes if many else nodes[0]
    if how == "len":
        return [len(values)], False
    if not values:
        raise AssertionError(f"{path}: {inner} names no value")
    return [max(values) if how == "max" else min(values)], False


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def matches(actual: Any, op: str, written: str) -> bool:
    if op == "~":
        return isinstance(actual, str) and written in actual
    if op == "<=":
        places = len(written.split(".")[1]) if "." in written else 0
        return _number(actual) and round(actual, places) <= float(written)
    if re.fullmatch(r"-?\d[\d_]*", written):
        return _number(actual) and actual == int(written)
    if re.fullmatch(r"-?\d[\d_]*\.\d+", written):
        places = len(written.split(".")[1])
        return _number(actual) and round(actual, places) == float(written)
    if written in ("null", "true", "false"):
        return actual is json.loads(written)
    if len(written) >= 2 and written[0] == written[-1] == '"':
        written = written[1:-1]
    return actual == written


def check(doc: dict[str, Any], replay: Replay) -> list[str]:
    """Every expectation that fails, in words."""
    failed = []
    for path, op, written in replay.expect:
        try:
            values, many = evaluate(doc, path)
        except AssertionError as err:
            failed.append(str(err))
            continue
        if many and not values:
            failed.append(f"{path} {op} {written}: the path names no value")
        for value in values:
            if not matches(value, op, written):
                failed.append(f"{path} {op} {written}: the command gives {_short(value)}")
    return failed


def _needs(replay: Replay) -> None:
    """Skip where the engine a replay plans with is not installed (as tests/test_engine_* do)."""
    if replay.kind == "replay-python":
        engines = [e for e in ENGINE_NEEDS if re.search(rf"^\s*(from|import) {e}\b", replay.command, re.M)]
    else:
        words = replay.command.split()
        engines = words[2:3] if words[1:2] == ["engine"] else []
    for module in (m for e in engines for m in ENGINE_NEEDS.get(e, ())):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: `make test` installs the engines")


RAN: dict[str, dict[str, Any]] = {}  # command -> its JSON: blocks quoting one run share it


def run_verify(replay: Replay, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    if replay.command in RAN:
        return RAN[replay.command]
    argv = shlex.split(replay.command)
    for i, word in enumerate(argv):  # $NAME: a path only the reader's machine has (a checkout)
        if word.startswith("$"):
            if not os.environ.get(word[1:]):
                pytest.skip(f"{word[1:]} is not set: the page says what it names")
            argv[i] = os.environ[word[1:]]
    assert argv[0] == "verify" and "--json" in argv, f"{replay.id}: a replay is `verify ... --json`"
    capsys.readouterr()
    code = main(argv[1:])
    out, err = capsys.readouterr()
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"{replay.id}: `{replay.command}` printed no JSON (exit {code}): {err.strip()[-500:]}")
    doc["exit"] = code
    RAN[replay.command] = doc
    return doc


# A replay-python block runs in a fresh interpreter: it imports the engine under this machine's
# own platform (vLLM binds it at import), which must not leak into the in-process planning of the
# verify replays. The wrapper prints what the code raised as one JSON line.
WRAPPER = """
import json, pathlib, sys, traceback
try:
    exec(compile(sys.argv[2], sys.argv[1], "exec"), {"__name__": "__replay__"})
except Exception as err:
    frame = traceback.extract_tb(err.__traceback__)[-1]
    where = pathlib.Path(frame.filename).as_posix().split("site-packages/")[-1]
    print(json.dumps({"raises": type(err).__name__, "message": str(err), "at": f"{where}:{frame.lineno}"}))
else:
    print(json.dumps({"raises": None, "message": None, "at": None}))
"""


def start_python(replay: Replay) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRAPPER, replay.id, replay.command], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def python_jobs(request: pytest.FixtureRequest) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The selected replay-python blocks, started at once so they run beside the verify replays on
    the second core. Under pytest-xdist every worker lists every test, so there each block starts
    only when its own test runs."""
    # only a parametrized pytest.Function has a callspec; its parameters are typed object
    params = [item.callspec.params for item in request.session.items
              if isinstance(item, pytest.Function) and getattr(item, "callspec", None)]
    chosen = {p["replay"].id for p in params if "replay" in p and isinstance(p["replay"], Replay)}
    if hasattr(request.config, "workerinput"):  # an xdist worker
        chosen = set()
    jobs = {r.id: start_python(r) for r in REPLAYS if r.kind == "replay-python" and r.id in chosen}
    yield jobs
    for job in jobs.values():
        job.kill()
        job.wait()


def run_python(replay: Replay, jobs: dict[str, subprocess.Popen[str]]) -> dict[str, Any]:
    job = jobs.get(replay.id) or start_python(replay)
    out, err = job.communicate(timeout=600)
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        pytest.fail(f"{replay.id}: the Python replay printed no result (exit {job.returncode}): {err.strip()[-500:]}")


def sections(text: str) -> dict[str, str]:
    """Each `## ` heading of a page and its text up to the next, headings inside fences aside."""
    found: dict[str, str] = {}
    title, fenced = None, False
    for line in text.splitlines(keepends=True):
        fenced ^= line.startswith("```")
        if line.startswith("## ") and not fenced:
            title = line[3:].strip()
            found[title] = ""
        elif title is not None:
            found[title] += line
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_section_has_a_replay(page: Path) -> None:
    assert parse_page(page), f"{page.name}: no replay block; every finding needs one (see tests/test_findings.py)"
    bare = [title for title, body in sections(page.read_text(encoding="utf-8")).items() if not FENCE.search(body)]
    assert not bare, f"{page.name}: sections without a replay block: {bare}"


def test_both_engines_have_pages() -> None:
    assert {p.name for p in PAGES} >= {"tokenspeed-0.1.1.md", "vllm-0.33.0.md"}


@pytest.mark.parametrize("replay", REPLAYS, ids=[r.id for r in REPLAYS])
def test_replay(replay: Replay, capsys: pytest.CaptureFixture[str],
                python_jobs: dict[str, subprocess.Popen[str]]) -> None:
    if replay.kind == "replay slow" and os.environ.get("KVPROOF_FINDINGS_FULL") != "1":
        pytest.skip("a whole engine's run (minutes): KVPROOF_FINDINGS_FULL=1 runs it")
    _needs(replay)
    doc = run_python(replay, python_jobs) if replay.kind == "replay-python" else run_verify(replay, capsys)
    failed = check(doc, replay)
    assert not failed, (f"{replay.id}: the finding's numbers changed; rerun `{replay.command.splitlines()[0]}` "
                        "and update the page:\n  " + "\n  ".join(failed))


def test_expectation_language() -> None:
    doc = {"exit": 3, "keys": [["vllm", "tp_block_size"], ["vllm", "padding_bound"], ["vllm", "tp_block_size"]],
           "recipes": [{"points": [{"tp": 1, "pad": 0.512059, "v": "ok", "packing": {"a.b": 2}},
                                   {"tp": 2, "pad": 0.2, "v": "ok", "packing": {"a.b": 2}}]}]}
    right = Replay("x.md", 1, "replay", "verify", (
        ("exit", "=", "3"), ("recipes[0].points[tp=1].pad", "=", "0.512"), ("recipes[*].points[*].v", "=", "ok"),
        ("max(recipes[0].points[*].pad)", "=", "0.51"), ("len(keys[1=tp_block_size])", "=", "2"),
        ("len(keys[1=tp_block_size][0=vllm])", "=", "2"), ("keys[0][1]", "~", "block"),
        ("min(recipes[0].points[*].tp)", "=", "1"), ("recipes[0].points[*].pad", "<=", "0.512"),
        ('recipes[0].points[v=ok][tp=2].packing["a.b"]', "=", "2")))
    assert check(doc, right) == []
    wrong = Replay("x.md", 1, "replay", "verify", (
        ("exit", "=", "1"), ("recipes[0].points[tp=3].pad", "=", "0.5"), ("recipes[0].points[0].pad", "=", "0.513"),
        ("recipes[0].points[0].v", "=", "bad"), ("recipes[0].nope", "=", "1"),
        ("recipes[0].points[*].pad", "<=", "0.2"), ("recipes[0].points[0].tp", "=", "1.5")))
    assert len(check(doc, wrong)) == 7


def test_a_section_without_a_replay_is_named() -> None:
    page = ("# T\n\n## one\n\n```replay\nverify x --json\nexit = 0\n```\n\n"
            "## two\n\ntext only\n\n```sh\n## not a heading\n```\n")
    bare = [title for title, body in sections(page).items() if not FENCE.search(body)]
    assert bare == ["two"]
