"""`verify sweep --engine tokenspeed`: a family of geometries through the engine's own recipe.

There is no formula to prove, only the engine's code to run at each member; the verdict says how
many members ran and whether that was all of them (enumerated) or a search, never PROVED.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvproof.ci.cli import UsageError
from kvproof.engines.verdict import EngineError
from kvproof.spec.sweep_family import PARAMETERS, Family, Member

ENGINE_MODEL = "kimi-k3"  # the family the engine's kimi_k3 recipe plans (engines/tokenspeed/sweep.py)


def refuse_contract_flags(args: argparse.Namespace) -> None:
    """Flags that steer our contract's prover mean nothing to the engine's recipe: say so."""
    if args.config or args.model != ENGINE_MODEL:
        raise UsageError(f"--engine tokenspeed sweeps its kimi_k3 recipe around {ENGINE_MODEL}'s published "
                         "config: drop --model/--config")
    for flag, given in (("--policy", args.policy), ("--pattern", args.pattern), ("--out", args.out)):
        if given:
            raise UsageError(f"{flag} is for our contract's sweep; the engine's recipe chooses its own packing "
                             "and every cause's pattern is reported")
    if args.examples < 1:
        raise UsageError("--examples must be at least 1")


def replay(family: Family, m: Member) -> str:
    """The one-geometry family holding the member (every tp of its heads, its dtype)."""
    vary = " ".join(f"{p}={getattr(m, p)}" for p in PARAMETERS)
    return f"verify sweep --engine tokenspeed --vary {vary} --dtype {m.dtype}"


def run(args: argparse.Namespace, family: Family) -> int:
    """After refuse_contract_flags(args), which runs before the family is built."""
    from kvproof.engines.tokenspeed import sweep  # needs torch: the engine's recipes import it

    try:
        result = sweep.verify(args.engine_path, family, args.examples)
    except EngineError as err:
        raise UsageError(str(err)) from None
    verdict = result.verdict()
    if args.json:
        doc: dict[str, Any] = {
            "engine": result.engine, "family": {p: family.ranges[p].text() for p in PARAMETERS},
            "dtypes": list(family.dtypes), "domain_size": result.members, "tried": result.tried,
            "enumerated": result.enumerated, "verdict": verdict, "seconds": result.seconds,
            "causes": [{**c.as_dict(), "replay": replay(family, c.member)} for c in result.causes],
        }
        print(json.dumps(doc, indent=1))
    else:
        how = "enumerated: every member" if result.enumerated else \
            f"searched by hypothesis ({args.examples} examples), failures shrunk"
        lines = [f"{result.engine}: kimi_k3 recipe over {family.describe()}  dtype {', '.join(family.dtypes)}",
                 f"domain: {result.members:,} members; {how}", ""]
        for i, c in enumerate(result.causes, 1):
            seen = f"{c.count:,} of {result.members:,} members" if result.enumerated else \
                "found by the search, then minimised"
            lines += [f"cause {i}: {c.property}  ({seen})",
                      f"  smallest  {c.member.text()}",
                      f"  why       {c.message}",
                      f"  replay    {replay(family, c.member)}"]
            lines += [f"  pattern   {name} (others as above): {text}" for name, text in c.patterns.items()
                      if len(family.ranges[name].all()) > 1]
        lines.append(f"verdict: {verdict} in {result.seconds:.1f} s")
        print("\n".join(lines))
    return 1 if result.causes else 0
