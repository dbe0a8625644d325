"""`make mutation`: mutation testing of impl/ and spec/ with mutmut, scored per file.

A mutant that survives is a behaviour no test pins (docs/testing.md). mutmut (pinned in
ci/mutation-requirements.txt, configured in pyproject's [tool.mutmut]) runs the selected tests
once, records which tests call each function, and runs only those against that function's
mutants; this script picks the modules and the sample, bounds the wall time, and scores each
file from mutmut's results in mutants/ (kept between runs; never committed).

    python -m kvproof.ci.mutation [impl/capacity.py ...] [--sample 1..10] [--budget-min 60] [--json]
    python -m kvproof.ci.mutation --resume [...]          # only what an earlier run left unscored
    python -m kvproof.ci.mutation --report-only [...]     # score what an earlier run left in mutants/

--sample N keeps the mutants whose number ends in 1..N (about N/10 of each function's mutants;
mutant 1 of every function always), so a run fits its budget on 2 cores. When the budget runs
out mutmut is stopped and what it did not reach is reported as unchecked, never as killed.
--resume hands mutmut, by name, only the sampled mutants an earlier run left unchecked or
survived (known equivalents aside): mutmut reruns every mutant a run names, so a second run
over a pattern would redo the first.
Exit: 0 every checked mutant killed or a known equivalent, 1 other survivors, 2 bad input or a
mutmut run that failed before scoring (its clean test run, say).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("impl", "spec")
SKIPPED = ("impl/faults.py",)  # the switchboard of `verify mutants`: seeded bugs, not behaviour

# Survivors read and judged equivalent: no input can tell them from the original (with the
# plan schema as it is; a schema change can make one live again, and then it is a survivor).
_Z3_NAME = "a z3 variable renamed: still distinct from every other, and read back by reference, not by name"
_LIN_CAP = ("a larger K_lin cap: it only sets the bit width, K_lin's value is fixed by its defining constraints "
            "(max(1, fill // state)), so a wider range holds the same value")
_MIN_ITEMS = "every minItems in the plan schema is 1, answered by the 'is empty' line before this one"
EQUIVALENT: dict[str, str] = {
    "kvproof.spec.schema.x__inline__mutmut_21": "< vs <= differs only for a $ref sharing all three notes "
                                                "with its definition; the schema has none",
    "kvproof.spec.schema.x__message__mutmut_41": "default of .get('properties'): every object with "
                                                 "additionalProperties false lists its properties",
    "kvproof.spec.schema.x__message__mutmut_43": "same default, dropped: never used for the same reason",
    **{f"kvproof.spec.schema.x__message__mutmut_{n}": _MIN_ITEMS for n in (78, 79, 80, 85, 87, 88, 90, 91, 92)},
    "kvproof.spec.policy.x__k_lin__mutmut_11": "fill == state: both disjuncts then give K_lin = 1",
    "kvproof.spec.schema.x__show__mutmut_2": ">= 64 vs > 64 bits: every bound is +-2^64 or small, so no "
                                             "64-bit value is ever out of range",
    "kvproof.impl.export.x_plan_document__mutmut_1": "the default is only tested for being a str ('the plan's "
                                                     "own bound'): 'XXplanXX' is one too",
    "kvproof.spec.sweep.x__multiple__mutmut_1": "and vs or picks other fields, but every field's stride alignment "
                                                "is 16 and every itemsize divides 16: the lcm is 16 either way",
    **{f"kvproof.spec.sweep.xǁEncodingǁbuild__mutmut_{n}": _Z3_NAME for n in (21, 81, 281)},
    **{f"kvproof.spec.sweep.xǁEncodingǁbuild__mutmut_{n}": _LIN_CAP for n in (271, 301)},
    "kvproof.spec.sweep.xǁEncodingǁaccepted__mutmut_51": "fill = u x K_lin x q - rest puts rest at -fill mod "
                                                         "(u x K_lin), 0 exactly when fill mod it is; only "
                                                         "rest == 0 is read",
    "kvproof.spec.sweep.xǁEncodingǁaccepted__mutmut_101": "K_mla <= 2^31 - 1 dropped: K_mla's bits keep it "
                                                          "below 2^21 + unroll even at the LIMITS' extremes "
                                                          "(caps k 2,073,967 at 4,096 heads of dim 1,024, rank 1)",
    "kvproof.spec.sweep.xǁEncodingǁaccepted__mutmut_111": "parent is n x fill exactly, so the MLA group pads 0: "
                                                          "within the bound at packing 1 or 2",
    "kvproof.spec.sweep.xǁEncodingǁaccepted__mutmut_131": "the largest state group's bound is implied by the "
                                                          "smallest's (smax >= smin: more raw bytes, same "
                                                          "parent), so weakening it changes nothing",
    "kvproof.spec.sweep.xǁQueryǁfails_at__mutmut_31": "z3 lowercases parameter names: 'TIMEOUT' sets the timeout",
    "kvproof.spec.sweep.xǁQueryǁadd_candidate__mutmut_1": "facts[None:] re-adds facts already asserted: a "
                                                          "conjunction repeated changes no verdict",
    "kvproof.spec.sweep_family.x_parse_range__mutmut_11": "split('..', 2): a second '..' is the same ValueError "
                                                          "(too many values, or int('2..3')), the same message",
    "kvproof.spec.contract.x_recipe_layout__mutmut_82": "state sized for a model with no KDA layer too: parse_config "
                                                        "leaves its kda_heads and kda_head_dim 0, so its state "
                                                        "fields hold 0 bytes and state is 0 either way",
    "kvproof.spec.encoding.x_page_id_limit__mutmut_31": "count - 1 is N x K in every Facts (page_count is checked "
                                                        "to be 1 + N x K, or built so), so that disjunct repeats "
                                                        "page_ids_fit; weakening it changes nothing",
    "kvproof.spec.catalog.x_parse_config__mutmut_151": "num_heads capped at MAX_DIM, not MAX_HEADS: both are 65,536",
    "kvproof.impl.packer.x_pack__mutmut_51": "a <= b adds the pairs (a, a), which derive_packings leaves "
                                             "as they are: lcm(b, b) = b, so K_a x b is already aligned",
    # The second tenth (mutants numbered ...2; --sample 2 scores them with the first).
    "kvproof.impl.export.x_plan_document__mutmut_2": "the default is only tested for being a str ('the plan's "
                                                     "own bound'): 'PLAN' is one too",
    "kvproof.impl.recipe.x_kda_fields__mutmut_12": "conv_state's stride alignment 1: a plane's alignment is an "
                                                   "lcm over its fields, and the layer's recurrent_state, always "
                                                   "beside it in that plane and group, brings K x 16",
    "kvproof.impl.recipe.x_pack_k__mutmut_12": "K_lin 1, not 0, where state is 0: only a model with no KDA "
                                               "layer has state 0, and its one group is full_attention (a "
                                               "second only under the seeded fault draft_own_group)",
    "kvproof.spec.encoding.x_in_bounds__mutmut_12": "the arena check's key only dedupes checks: a 1-tuple, which "
                                                    "no other key (3, 6 or 7 items) can equal",
    "kvproof.spec.facts.xǁAffineǁterm__mutmut_2": "0 x N + fixed, a Term where it was an int: every caller lifts "
                                                  "what term() gives into a Term (lift, _val), the same value",
    "kvproof.spec.plan_reader.x_affine_facts__mutmut_102": "2 x parent_bytes is even and BYTES_MAX (2^63 - 1) "
                                                           "odd: > and >= never differ",
    "kvproof.spec.synth.x_encode__mutmut_2": "z3.Int(None) is '<null>', distinct from every other variable, and "
                                             "K_lin is read back by reference, not by name",
    "kvproof.spec.sweep.x_describe_set__mutmut_42": "strict=None turns the check off, and zip(bad, [*bad[1:], "
                                                    "None]) has two sides of len(bad) items: it never fired",
    "kvproof.spec.sweep.x__multiple__mutmut_2": "the two field sets swapped: on the unit layout's slot.0 the "
                                                "latent and the state fields all have stride alignment 16 and "
                                                "itemsizes 1, 2 or 4: the lcm is 16 either way",
    "kvproof.spec.sweep.xǁEncodingǁbuild__mutmut_22": _Z3_NAME,
    "kvproof.spec.sweep.xǁEncodingǁbuild__mutmut_32": "member() without var makes z3.Int('mla_every'), the "
                                                      "Small's own variable: z3 names a constant by name and sort",
    "kvproof.spec.sweep.xǁEncodingǁbuild__mutmut_132": "z3.Int(None) is '<null>', distinct from every other "
                                                       "variable of the query, and used by reference",
    "kvproof.spec.sweep.xǁEncodingǁbuild__mutmut_282": _Z3_NAME,
    "kvproof.spec.sweep.xǁEncodingǁbuild__mutmut_302": _LIN_CAP,
    "kvproof.spec.sweep.xǁEncodingǁ_caps__mutmut_32": "K_mla's cap one larger: 12 or 13 plus unroll 1, 4 or 8 "
                                                      "take the same 4 or 5 bits (a Small's only bound), and the "
                                                      "K_lin cap it scales only widens K_lin's bits",
    "kvproof.spec.sweep.xǁEncodingǁaccepted__mutmut_62": "page_ok always holds: a page is 128 tokens x latent x "
                                                         "itemsize, a multiple of 128, and the latent field's "
                                                         "lcm(itemsize, stride alignment) is 16",
    "kvproof.spec.sweep.xǁEncodingǁaccepted__mutmut_102": "K_lin <= 2^31 - 1 dropped: K_lin = K_mla x page // "
                                                          "state is below 256 x 33,554,432 / 12 < 7.2 x 10^8 at "
                                                          "the LIMITS' extremes (K_mla <= 256 or ceil's "
                                                          "K_lin <= 1 + page / state; state >= 12 B)",
    "kvproof.spec.sweep.xǁQueryǁsmallest__mutmut_42": "mid = (low + high) / 2: z3 reads var <= mid as var <= "
                                                      "floor(mid), and low then runs ahead of the integer "
                                                      "bisection's by less than 1: the same queries, the same end",
}

# Mutants whose tests abort the process (-6, SIGABRT), read and judged a kill: the abort is the
# mutant's own doing, and it fails CI as an assertion does. Any other abort stays suspicious.
ABORTS: dict[str, str] = {
    "kvproof.spec.smt.xǁSolverǁwitness__mutmut_1": "text = None: z3's SMT-LIB parser is handed None and aborts",
}

# mutmut's exit codes per mutant (mutmut/stats.py), folded into what a score needs.
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
           36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", 37: "killed",
           None: "unchecked"}


def _status(name: str, code: int | None) -> str:
    return "killed" if code == -6 and name in ABORTS else _STATUS.get(code, "suspicious")


@dataclass(frozen=True)
class FileScore:
    """One module's mutants in the sample: killed (or timed out) over those checked that are not
    known equivalents (a mutant no test can kill says nothing about the tests)."""

    module: str
    mutants: int
    killed: int
    timeout: int
    survived: list[str]
    no_tests: list[str]
    equivalent: list[str]
    unchecked: int

    @property
    def score(self) -> float | None:
        live = self.killed + self.timeout + len(self.survived) + len(self.no_tests)
        return (self.killed + self.timeout) / live if live else None


def modules(names: list[str]) -> list[str]:
    """The modules to mutate: the ones named, or all of impl/ and spec/ but SKIPPED."""
    every = sorted(f"{p}/{f.name}" for p in PACKAGES for f in (ROOT / p).glob("*.py")
                   if f.name != "__init__.py" and f"{p}/{f.name}" not in SKIPPED)
    unknown = [n for n in names if n not in every]
    if unknown:
        raise SystemExit(f"error: unknown module {unknown[0]}; choose from {', '.join(every)}")
    return names or every


def patterns(mods: list[str], sample: int) -> list[str]:
    """mutmut name globs: kvproof.impl.packer.* for a module, narrowed to numbers ending 1..N."""
    tail = "*" if sample == 10 else f"*__mutmut_*[1-{sample}]"
    return [f"kvproof.{m[:-3].replace('/', '.')}.{tail}" for m in mods]


def in_sample(name: str, sample: int) -> bool:
    return sample == 10 or name[-1] in "123456789"[:sample]


def score(module: str, sample: int, results: Path = ROOT / "mutants") -> FileScore:
    meta = results / "kvproof" / f"{module}.meta"
    if not meta.exists():
        raise SystemExit(f"error: no mutmut results for {module}; run `make mutation` first")
    try:
        codes = json.loads(meta.read_text())["exit_code_by_key"]
    except (ValueError, KeyError):
        raise SystemExit(f"error: {meta} is cut off (a budget stop while mutmut wrote it); run again") from None
    picked = {k: _status(k, v) for k, v in codes.items() if in_sample(k, sample)}
    count = Counter(picked.values())
    alive = sorted(k for k, s in picked.items() if s in ("survived", "suspicious", "skipped", "no tests"))
    return FileScore(module, len(picked), count["killed"], count["timeout"],
                     [k for k in alive if picked[k] != "no tests" and k not in EQUIVALENT],
                     [k for k in alive if picked[k] == "no tests" and k not in EQUIVALENT],
                     [k for k in alive if k in EQUIVALENT], count["unchecked"])


def unscored(mods: list[str], sample: int) -> list[str]:
    """The names --resume hands mutmut: each sampled mutant not yet killed, timed out or known equivalent."""
    results = ROOT / "mutants"
    names = [n for m in mods for s in [score(m, sample, results)] for n in s.survived + s.no_tests]
    for m in mods:
        codes = json.loads((results / "kvproof" / f"{m}.meta").read_text())["exit_code_by_key"]
        names += [k for k, v in codes.items() if v is None and in_sample(k, sample)]
    return sorted(names)


def sync_unmutated() -> None:
    """Refresh mutants/ with every file of impl/ and spec/ that mutmut does not mutate.

    mutmut copies the packages into mutants/ once and from then on rewrites only the modules it
    mutates; a data file (spec/plan.schema.json) or an unmutated module (impl/faults.py) changed
    since would be tested as it was.
    """
    copy = ROOT / "mutants" / "kvproof"
    if not copy.is_dir():
        return  # the first run: mutmut copies everything itself
    for package in PACKAGES:
        for source in (ROOT / package).rglob("*"):
            rel = source.relative_to(ROOT)
            mutated = source.suffix == ".py" and source.name != "__init__.py" and rel.as_posix() not in SKIPPED
            if source.is_dir() or mutated or "__pycache__" in rel.parts:
                continue
            target = copy / rel
            if not target.exists() or target.read_bytes() != source.read_bytes():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


def run_mutmut(names: list[str], budget_s: float, children: int) -> None:
    """Run mutmut over the sample; past the budget kill it and its workers (results so far stay).

    mutmut saves each mutant's result as it lands. At the budget its main process dies first:
    a worker stopped by a signal exits 0, and mutmut would record that mutant as a survivor.
    It runs in a session of its own so that its forked workers can be found and killed with it.
    """
    # A fresh map of tests to functions each run (a few minutes): mutmut keeps the map of a test id
    # it has seen, so an edited test, or a parametrized case that moved, would be run against
    # the functions its old version called.
    (ROOT / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    sync_unmutated()
    mutmut = Path(sys.executable).parent / "mutmut"  # its script: `python -m mutmut` re-imports itself
    cmd = [str(mutmut), "run", "--max-children", str(children), *names]
    env = os.environ | {"HYPOTHESIS_PROFILE": "mutants"}  # a kill, not a minimal example: no shrinking
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        with contextlib.suppress(ProcessLookupError):  # no worker was running
            os.killpg(proc.pid, signal.SIGKILL)
        print(f"budget of {budget_s / 60:g} min spent: mutmut stopped; the rest is unchecked", file=sys.stderr)
        return
    if code:  # its clean run failed, or it could not map tests to functions: no score means anything
        raise SystemExit(f"error: mutmut exited {code} before scoring (its output above says why)")


def table(scores: list[FileScore]) -> str:
    lines = ["| file | mutants in sample | killed | timeout | survived | no tests | equivalent | unchecked | score |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in scores:
        pct = "-" if s.score is None else f"{100 * s.score:.1f}%"
        lines.append(f"| {s.module} | {s.mutants} | {s.killed} | {s.timeout} | {len(s.survived)} | "
                     f"{len(s.no_tests)} | {len(s.equivalent)} | {s.unchecked} | {pct} |")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SystemExit(f"error: {message}")  # one line, not argparse's usage block


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("modules", nargs="*", help="e.g. impl/capacity.py (default: all of impl/ and spec/)")
    ap.add_argument("--sample", type=int, default=10, choices=range(1, 11), metavar="1..10")
    ap.add_argument("--budget-min", type=float, default=60.0)
    ap.add_argument("--max-children", type=int, default=2)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--resume", action="store_true", help="run only the sampled mutants left unscored")
    ap.add_argument("--json", action="store_true")
    try:
        args = ap.parse_args(argv)
        mods = modules(args.modules)
        if args.budget_min <= 0 or args.max_children <= 0:
            raise SystemExit("error: --budget-min and --max-children must be positive")
        if not args.report_only:
            try:
                import mutmut  # noqa: F401
            except ImportError:
                raise SystemExit("error: mutmut is missing; pip install -r ci/mutation-requirements.txt") from None
            names = unscored(mods, args.sample) if args.resume else patterns(mods, args.sample)
            if names:
                run_mutmut(names, 60 * args.budget_min, args.max_children)
        scores = [score(m, args.sample) for m in mods]
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            return 2
        return 2 if stop.code else 0
    unexplained = [n for s in scores for n in s.survived + s.no_tests]
    if args.json:
        print(json.dumps({"sample": args.sample, "files": [asdict(s) | {"score": s.score} for s in scores],
                          "unexplained_survivors": unexplained}, indent=2))
    else:
        print(table(scores))
        for name in unexplained:
            print(f"survivor: {name}  (python -m mutmut show {name})")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
