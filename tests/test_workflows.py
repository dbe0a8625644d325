"""The GitHub workflows in .github/workflows: checked as files in the default suite, and run.

The default suite (cheap): both parse, no `run:` script expands an expression (inputs reach
scripts only through `env:`), every `uses:` is pinned to a commit with its version in a comment,
the engine template's default kvproof-ref is a tag of this repository, and the template's pin
check stops a `uses:` commit that is not kvproof-ref.

Marker `workflows` (opt-in, KVPROOF_WORKFLOW_TEST=1; it needs PyPI and about 20 minutes): each
workflow's steps run in order as a runner would, in a fresh venv, with the inputs at their
defaults and the env the workflow sets. A `run:` step runs its script with bash -e, exactly as
written; the actions are done by the test (checkout lays out the workspace, setup-python makes
the fresh venv, cache does nothing, upload-artifact checks that its path exists). What the test
puts in place of the outside world:

- kvproof at kvproof-ref: a copy of this checkout (tracked and untracked files git does not
  ignore) committed in a fresh git repository; `job.workflow_sha` is that commit, as when `uses:`
  names the commit kvproof-ref is;
- the engine's checkout: tokenspeed 0.1.1's sdist unpacked as python/ (the layout of
  tokenspeed's repository), with engines/tokenspeed/baseline.json committed as the engine's
  kvproof-baseline.json;
- TORCH_INDEX_URL: PyPI's index (KVPROOF_WORKFLOW_TORCH_INDEX overrides), since PyTorch's CPU
  index is not reachable from kvproof's machines; the pip configuration there serves the CPU
  build, and the test checks that a CPU build is what got installed;
- the gate's `make gate`: the gate target's prerequisites (the installs) are made as they are,
  then the gate's recipe line (`make -n gate`) runs with `--skip-mutants` and the suite narrowed
  to this file: the seeded bugs and the whole suite take tens of minutes. The proofs and both
  engines against their baselines run whole. A gate without its seeded bugs says DO NOT MERGE
  (exit 1), so the test asserts that exit and that every other part passed;
- the gate's pull-request comment is not posted (no GitHub here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
TEMPLATE = WORKFLOWS / "engine-template.yml"
GATE = WORKFLOWS / "kvproof-gate.yml"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$")
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
RUN_IT = "KVPROOF_WORKFLOW_TEST"
SLOW = pytest.mark.skipif(
    os.environ.get(RUN_IT) != "1",
    reason=f"runs the workflows (about 20 min, needs PyPI): {RUN_IT}=1 .venv/bin/pytest -m workflows "
    "tests/test_workflows.py",
)


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path.name}: not a mapping"
    if True in doc:  # YAML 1.1 reads the key `on` as true
        doc["on"] = doc.pop(True)
    return doc


def _steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in doc["jobs"].values() for step in job.get("steps", [])]


@pytest.mark.parametrize("path", [TEMPLATE, GATE], ids=lambda p: p.name)
def test_workflow_parses(path: Path) -> None:
    doc = _load(path)
    assert doc.get("on") and doc.get("jobs"), f"{path.name}: no trigger or no jobs"
    for name, job in doc["jobs"].items():
        assert job.get("steps"), f"{path.name}: job {name} has no steps"
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), f"{path.name}: a step needs exactly one of run/uses: {step}"


@pytest.mark.parametrize("path", [TEMPLATE, GATE], ids=lambda p: p.name)
def test_no_run_script_expands_an_expression(path: Path) -> None:
    """An input, or any other expression, reaches a script through `env:`: expanded into the
    script's text, a value is code (zizmor's template-injection)."""
    for step in _steps(_load(path)):
        script = step.get("run", "")
        assert "${{" not in script, f"{path.name}: {step.get('name')} expands an expression in its script: {script}"


@pytest.mark.parametrize("path", [TEMPLATE, GATE], ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit(path: Path) -> None:
    uses = [step["uses"] for step in _steps(_load(path)) if "uses" in step]
    assert uses, f"{path.name}: no action"
    for ref in uses:
        assert PINNED.match(ref), f"{path.name}: {ref} is not pinned to a 40-hex commit"
    lines = [m for line in path.read_text().splitlines() if (m := USES_LINE.match(line))]
    assert len(lines) == len(uses)
    for m in lines:
        assert re.match(r"\s+#\s*v\d+(\.\d+)*\s*$", m[2]), f"{path.name}: {m[1]} has no `# vX.Y.Z` comment"


@pytest.mark.parametrize(("shards", "shard", "passed"), [("1", "1", []), ("4", "2", ["--shard", "2/4"])])
def test_the_template_passes_a_shard_only_to_a_matrix_of_several(tmp_path: Path, shards: str, shard: str,
                                                                   passed: list[str]) -> None:
    """The verify step, with `verify` standing in: --shard K/N only when the inputs ask for more than one shard,
    named in the summary's heading, and the command's exit the step's."""
    (step,) = [s for s in _steps(_load(TEMPLATE)) if s.get("name") == "verify engine"]
    assert step["env"]["SHARD"] == "${{ inputs.shard }}" and step["env"]["SHARDS"] == "${{ inputs.shards }}"
    stand_in = 'verify() { printf "%s\\n" "$@" > args; echo "{}"; return 3; }\n'
    env = {**os.environ, "ENGINE": "vllm", "ENGINE_PATH": ".", "BASELINE": "b.json", "SHARD": shard,
           "SHARDS": shards, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary")}
    proc = subprocess.run(["bash", "-e", "-c", stand_in + step["run"]], cwd=tmp_path, env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert (tmp_path / "args").read_text().split() == ["engine", "vllm", "--engine-path", ".", "--baseline", "b.json",
                                                       *passed, "--json"]
    heading = " ".join(["### kvproof: verify engine vllm", *passed, "(exit 3)"])
    assert heading in (tmp_path / "summary").read_text().splitlines()


def _template_inputs() -> dict[str, dict[str, Any]]:
    inputs: dict[str, dict[str, Any]] = _load(TEMPLATE)["on"]["workflow_call"]["inputs"]
    return inputs


def test_template_default_pin_is_a_tag_here() -> None:
    ref = _template_inputs()["kvproof-ref"]["default"]
    assert ref == f"v{VERSION}", f"kvproof-ref defaults to {ref}; pyproject's version is {VERSION}"
    git = subprocess.run(["git", "-C", str(ROOT), "tag", "-l"], capture_output=True, text=True, check=False)
    if git.returncode != 0:
        pytest.skip(f"not a git checkout: {git.stderr.strip()}")
    tags = git.stdout.split()
    if not tags:
        pytest.skip("this clone has no tags (git fetch --tags), so kvproof-ref's tag cannot be looked up")
    assert ref in tags, f"kvproof-ref defaults to {ref}, which is no tag of this repository: {tags}"
    # the tag is the release the template pins: its commit states that version and that pin itself
    tagged = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:pyproject.toml"], capture_output=True,
                            text=True, check=True).stdout
    assert tomllib.loads(tagged)["project"]["version"] == VERSION, f"{ref}'s pyproject.toml states another version"
    template = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{TEMPLATE.relative_to(ROOT)}"],
                              capture_output=True, text=True, check=True).stdout
    pinned = yaml.safe_load(template)
    assert pinned.get("on", pinned.get(True))["workflow_call"]["inputs"]["kvproof-ref"]["default"] == ref


def _step(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (step,) = [s for s in _steps(doc) if s.get("name") == name]
    return step


PIN_CHECK = "Check that kvproof-ref is the release uses calls"


@pytest.mark.parametrize(("called_from", "called_at", "code"), [
    ("owner/kvproof", "HEAD", 0),  # uses: named the commit of kvproof-ref
    ("owner/kvproof", "0" * 40, 1),  # uses: named another release
    ("owner/engine", "0" * 40, 0),  # copied into the engine: the workflow's commit is the engine's
    ("", "", 0),  # no job.workflow_* context: nothing to compare
])
def test_template_pin_check(tmp_path: Path, called_from: str, called_at: str, code: int) -> None:
    src = tmp_path / ".kvproof"
    src.mkdir()
    (src / "pyproject.toml").write_text('[project]\nname = "kvproof"\n')
    git = ["git", "-C", str(src), "-c", "user.name=kvproof", "-c", "user.email=kvproof@localhost"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "ref"]):
        subprocess.run([*git, *argv], check=True, capture_output=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KVPROOF_SRC": ".kvproof", "KVPROOF_REF": "v0",
           "CALLED_FROM": called_from, "CALLED_AT": head if called_at == "HEAD" else called_at,
           "CALLER": "owner/engine"}
    script = _step(_load(TEMPLATE), PIN_CHECK)["run"]
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if code:
        assert "::error::kvproof-ref v0 is commit" in proc.stdout


# --- running the workflows -------------------------------------------------------------------


def _copy_checkout(dest: Path) -> None:
    """This checkout's files as a clone would have them: tracked and untracked-but-not-ignored
    files of the work tree, symlinks kept (kvproof/ is made of them)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout
    for rel in sorted(set(listed.split("\0")) - {""}):
        src, target = ROOT / rel, dest / rel
        if not src.is_symlink() and not src.is_file():
            continue  # deleted in the work tree
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)


def _commit(repo: Path) -> str:
    git = ["git", "-C", str(repo), "-c", "user.name=kvproof", "-c", "user.email=kvproof@localhost"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "checkout"]):
        subprocess.run([*git, *argv], check=True, capture_output=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


class Runner:
    """One job of a workflow, its steps run in order in `workspace` (GITHUB_WORKSPACE)."""

    def __init__(self, tmp: Path, contexts: dict[str, Any], actions: dict[str, Callable[[dict[str, str]], None]],
                 replaced: dict[str, Callable[[dict[str, str]], None]], not_run: dict[str, str]) -> None:
        self.tmp, self.workspace = tmp, tmp / "workspace"
        self.workspace.mkdir(parents=True)
        self.contexts, self.actions, self.replaced, self.not_run = contexts, actions, replaced, not_run
        self.venv = tmp / "runner-python"
        self.output, self.summary = tmp / "github_output", tmp / "step_summary"
        self.log = tmp / "steps.log"
        self.ran: list[str] = []

    def value(self, expression: str) -> str:
        """`a.b.c`, a 'literal', or `x || y` (the first non-empty)."""
        result = ""
        for term in (t.strip() for t in expression.split("||")):
            if term.startswith("'") and term.endswith("'"):
                result = term[1:-1]
            else:
                node: Any = self.contexts
                for part in term.split("."):
                    assert isinstance(node, dict) and part in node, f"the test has no value for {term}"
                    node = node[part]
                result = str(node)
            if result:
                return result
        return result

    def expand(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: self.value(m[1]), str(text))

    def condition(self, text: str | None) -> bool:
        """`always()` and `x == 'literal'` joined by &&; a failed step fails the test at once, so
        always() and success() are both true here."""
        holds = True
        for term in (t.strip() for t in EXPRESSION.sub(r"\1", text or "").split("&&")):
            if term in ("", "always()", "success()"):
                continue
            m = re.fullmatch(r"([\w.-]+)\s*==\s*'([^']*)'", term)
            assert m, f"the test cannot evaluate the condition {term!r}"
            holds = holds and self.value(m[1]) == m[2]
        return holds

    def env(self, job_env: dict[str, str], step: dict[str, Any]) -> dict[str, str]:
        own = (ROOT / ".venv").resolve()  # the venv running this test is no part of the runner
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
                if p and not Path(p).resolve().is_relative_to(own)]
        if (self.venv / "bin").is_dir():
            path.insert(0, str(self.venv / "bin"))
        dropped = ("VIRTUAL_ENV", "PYTHONPATH", RUN_IT, "KVPROOF_WORKFLOW_TORCH_INDEX", "MAKEFLAGS", "MAKELEVEL")
        base = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("PYTEST_", "GITHUB_"))}
        return base | {"PATH": os.pathsep.join(path), "CI": "true", "GITHUB_ACTIONS": "true",
                       "GITHUB_WORKSPACE": str(self.workspace), "GITHUB_OUTPUT": str(self.output),
                       "GITHUB_STEP_SUMMARY": str(self.summary), "RUNNER_TEMP": str(self.tmp)} \
            | job_env | {k: self.expand(v) for k, v in step.get("env", {}).items()}

    def shell(self, script: str, env: dict[str, str], what: str) -> subprocess.CompletedProcess[str]:
        with self.log.open("a") as log:
            log.write(f"\n=== {what}\n{script}\n")
        proc = subprocess.run(["bash", "-e", "-c", script], cwd=self.workspace, env=env, capture_output=True,
                              text=True, timeout=3600, check=False)
        with self.log.open("a") as log:
            log.write(proc.stdout + proc.stderr)
        return proc

    def job(self, doc: dict[str, Any], overrides: dict[str, str]) -> None:
        (job,) = doc["jobs"].values()
        job_env = {k: self.expand(v) for k, v in job.get("env", {}).items()} | overrides
        for step in job["steps"]:
            name = step.get("name") or step["uses"].partition("@")[0]
            if not self.condition(step.get("if")):
                continue
            if name in self.not_run:
                self.ran.append(f"{name} (not run: {self.not_run[name]})")
                continue
            env = self.env(job_env, step)
            if "uses" in step:
                action = step["uses"].partition("@")[0]
                assert action in self.actions, f"the test does not stand in for {action}"
                self.actions[action]({k: self.expand(v) for k, v in step.get("with", {}).items()})
            elif name in self.replaced:
                self.replaced[name](env)
            else:
                proc = self.shell(step["run"], env, name)
                assert proc.returncode == 0, (f"step {name!r} exited {proc.returncode}:\n"
                                              f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
            self.ran.append(name)

    def setup_python(self, given: dict[str, str]) -> None:
        assert given["python-version"] == f"{sys.version_info.major}.{sys.version_info.minor}", given
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)

    def upload(self, given: dict[str, str]) -> None:
        assert (self.workspace / given["path"]).exists(), f"upload-artifact {given['name']}: no {given['path']}"

    def torch_is_cpu(self, python: Path) -> None:
        proc = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0 and proc.stdout.strip().endswith("+cpu"), proc.stdout + proc.stderr


def _torch_index() -> dict[str, str]:
    return {"TORCH_INDEX_URL": os.environ.get("KVPROOF_WORKFLOW_TORCH_INDEX", "https://pypi.org/simple")}


def _pip_download_tokenspeed(dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    "tokenspeed==0.1.1", "-d", str(dest)], check=True, capture_output=True, timeout=600)
    (sdist,) = dest.glob("tokenspeed-0.1.1.tar.gz")
    return sdist


@pytest.mark.workflows
@SLOW
def test_engine_template_runs_on_tokenspeed(tmp_path: Path) -> None:
    doc = _load(TEMPLATE)
    declared = _template_inputs()
    required = {k for k, v in declared.items() if v.get("required")}
    assert required == {"engine"}, required
    inputs = {k: str(v.get("default", "")) for k, v in declared.items()} | {"engine": "tokenspeed"}

    kvproof_at_ref = tmp_path / "kvproof-at-ref"
    _copy_checkout(kvproof_at_ref)
    commit = _commit(kvproof_at_ref)
    engine = tmp_path / "engine"
    (engine / "python").mkdir(parents=True)
    sdist = _pip_download_tokenspeed(tmp_path / "sdist")
    shutil.unpack_archive(sdist, tmp_path / "sdist")
    shutil.copytree(tmp_path / "sdist" / "tokenspeed-0.1.1", engine / "python", dirs_exist_ok=True)
    shutil.copy2(ROOT / "engines" / "tokenspeed" / "baseline.json", engine / inputs["baseline"])
    _commit(engine)

    contexts = {"inputs": inputs,
                "github": {"repository": "engine-owner/tokenspeed", "event_name": "pull_request"},
                "job": {"workflow_repository": "kvproof-owner/kvproof", "workflow_sha": commit}}
    runner: Runner

    def checkout(given: dict[str, str]) -> None:
        if "repository" not in given:  # the engine's own pull request
            shutil.copytree(engine, runner.workspace, symlinks=True, dirs_exist_ok=True)
            return
        assert given["repository"] == "kvproof-owner/kvproof" and given["ref"] == inputs["kvproof-ref"], given
        shutil.copytree(kvproof_at_ref, runner.workspace / given["path"], symlinks=True)

    runner = Runner(tmp_path / "runner", contexts, {}, {}, {})
    runner.actions.update({"actions/checkout": checkout, "actions/setup-python": runner.setup_python,
                           "actions/upload-artifact": runner.upload})
    runner.job(doc, _torch_index())

    python = runner.venv / "bin" / "python"
    runner.torch_is_cpu(python)
    installed = subprocess.run([str(python), "-m", "pip", "show", "tokenspeed"], capture_output=True, check=False)
    assert installed.returncode != 0, "tokenspeed got installed: the run must plan the checkout"
    report = json.loads((runner.workspace / "kvproof-engine.json").read_text())
    assert report["new_findings"] == [] and report["baselined"], report
    assert report["version"] == "0.1.1" and str(runner.workspace.resolve()) in report["source"], report["source"]
    assert "### kvproof: verify engine tokenspeed (exit 0)" in runner.summary.read_text()


@pytest.mark.workflows
@SLOW
def test_gate_workflow_runs(tmp_path: Path) -> None:
    doc = _load(GATE)
    runner: Runner
    source = tmp_path / "kvproof"
    _copy_checkout(source)
    commit = _commit(source)
    contexts = {"github": {"repository": "kvproof-owner/kvproof", "event_name": "pull_request", "sha": commit,
                           "token": "none", "event": {"pull_request": {"number": "1"}}}}

    def checkout(given: dict[str, str]) -> None:
        assert "repository" not in given, given
        shutil.copytree(source, runner.workspace, symlinks=True, dirs_exist_ok=True)

    def make_gate(env: dict[str, str]) -> None:
        """`make gate`: its prerequisites as they are, then its recipe narrowed."""
        makefile = (runner.workspace / "Makefile").read_text()
        (prerequisites,) = re.findall(r"^gate:(.*)$", makefile, re.M)
        # make expands the prerequisites' variables ($(VENV)/.test) in a rule of its own.
        shown = runner.shell(f"printf 'kvproof-show:\\n\\t@echo %s\\n' '{prerequisites.strip()}' "
                             "| make -s -f Makefile -f - kvproof-show", env, "gate's prerequisites")
        assert shown.returncode == 0 and shown.stdout.strip(), shown.stderr
        made = runner.shell(f"make {shown.stdout.strip()}", env, "make gate's prerequisites")
        assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-4000:]
        dry = runner.shell("make -n gate", env, "make -n gate")
        assert dry.returncode == 0, dry.stderr
        (recipe,) = [line for line in dry.stdout.splitlines() if "kvproof.ci.gate" in line]
        gate = runner.shell(f"{recipe} --skip-mutants -- tests/test_workflows.py", env, "the gate, narrowed")
        summary = json.loads((runner.workspace / "reports" / "summary.json").read_text())
        assert gate.returncode == 1, f"the gate without seeded bugs exited {gate.returncode}:\n{gate.stdout[-4000:]}"
        failed = [p["model"] for p in summary["prove"] if not p["proved"]]
        assert not failed, f"not proved: {failed}"
        assert [(e["engine"], e["passed"]) for e in summary["engines"]] == [("tokenspeed", True), ("vllm", True),
                                                                           ("sglang", True)], \
            [(e["engine"], e["exit"], e["error"][-500:]) for e in summary["engines"]]
        assert summary["tests"]["passed"] and summary["tests"]["tests"] > 0, summary["tests"]
        assert summary["mutants"]["error"] == "skipped with --skip-mutants", summary["mutants"]

    runner = Runner(tmp_path / "runner", contexts, {}, {"Gate": make_gate},
                    {"Comment the summary on the pull request": "posts to GitHub, which this machine cannot reach"})
    runner.actions.update({"actions/checkout": checkout, "actions/setup-python": runner.setup_python,
                           "actions/cache": lambda given: None, "actions/upload-artifact": runner.upload})
    assert _step(doc, "Gate")["run"].strip() == "make gate"
    runner.job(doc, _torch_index())
    runner.torch_is_cpu(runner.workspace / ".venv" / "bin" / "python")
    assert (runner.workspace / "reports" / "summary.md").is_file()
