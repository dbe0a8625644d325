"""The solver's answers are the solver's, whether asked once or again, and kept within a bound."""

from __future__ import annotations

import pytest

from kvproof.spec import smt
from kvproof.spec.smt import Solver, Term


def test_an_answer_asked_again_is_the_same_and_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    solver = Solver(("N",))
    n = Term.var("N")
    solved: list[str] = []
    solve = solver._solve

    def counted(text: str) -> dict[str, int] | None:
        solved.append(text)
        return solve(text)

    monkeypatch.setattr(solver, "_solve", counted)
    first = solver.witness(n >= 3, n <= 3)
    assert first == {"N": 3}
    assert first is not None
    first["N"] = 99  # a caller's change does not reach the kept answer
    assert solver.witness(n >= 3, n <= 3) == {"N": 3}
    assert solver.witness(n >= 4, n <= 3) is None
    assert solver.witness(n >= 4, n <= 3) is None
    assert len(solved) == 2  # each text solved once


def test_kept_answers_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smt, "ANSWERS_KEPT", 3)
    solver = Solver(("N",))
    n = Term.var("N")
    for k in range(10):
        assert solver.witness(n == k) == {"N": k}
        assert len(solver._answers) <= 3
