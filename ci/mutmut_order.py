"""A pytest plugin for `make mutation`: run a mutant's tests fastest first, module by module.

mutmut stops a mutant's run at its first failing test (`-x`), so the order decides the cost of a
kill. Its fork server (`process_isolation = "forkserver"`, pyproject's [tool.mutmut]) hands the
tests over in the order of a Python set, not by the durations it measured, and a kill then cost
a run through about half of the 150-250 tests a function of spec/encoding.py is mapped to (1.6
mutants a minute on 2 idle cores). Modules stay whole, ordered by their fastest test, so a
module-scoped fixture is built once as in any run. The order changes the cost only, never the
verdict: every handed test still runs until one fails.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

STATS = Path("mutmut-stats.json")  # mutmut runs the tests inside mutants/, where it keeps this


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    try:
        durations: dict[str, float] = json.loads(STATS.read_text())["duration_by_test"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # mutmut's first pass, which measures the durations, or a file being rewritten
    fastest: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        fastest[module] = min(fastest.get(module, math.inf), durations.get(item.nodeid, math.inf))

    def key(item: pytest.Item) -> tuple[float, str, float]:
        module = item.nodeid.split("::")[0]
        return fastest[module], module, durations.get(item.nodeid, math.inf)

    items.sort(key=key)
