"""Integer terms that render as SMT-LIB text and evaluate on a witness.

z3's Python operators cost tens of microseconds each, more than the solver spends on the
linear queries the prover asks; building a property's formula as text and handing it to z3 in
one parse keeps `verify prove` near a second. The predicates in spec/properties.py are written
with plain operators, so they build these terms exactly as they compute on ints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import z3

Env = Mapping[str, int]
ANSWERS_KEPT = 4096  # answers a solver keeps before it forgets them all: memory stays bounded


class Term:
    __slots__ = ("text", "value")

    def __init__(self, text: str, value: Callable[[Env], Any]) -> None:
        self.text = text
        self.value = value  # the term's value once the variables are known

    @staticmethod
    def var(name: str) -> Term:
        return Term(name, lambda env: env[name])

    def _op(self, op: str, fn: Callable[[Any, Any], Any], other: Any, swap: bool = False) -> Term:
        a, b = (lift(other), self) if swap else (self, lift(other))
        return Term(f"({op} {a.text} {b.text})", lambda env: fn(a.value(env), b.value(env)))

    def __add__(self, o: Any) -> Term:
        return self._op("+", lambda a, b: a + b, o)

    def __radd__(self, o: Any) -> Term:
        return self._op("+", lambda a, b: a + b, o, True)

    def __sub__(self, o: Any) -> Term:
        return self._op("-", lambda a, b: a - b, o)

    def __rsub__(self, o: Any) -> Term:
        return self._op("-", lambda a, b: a - b, o, True)

    def __mul__(self, o: Any) -> Term:
        return self._op("*", lambda a, b: a * b, o)

    def __rmul__(self, o: Any) -> Term:
        return self._op("*", lambda a, b: a * b, o, True)

    def __truediv__(self, o: Any) -> Term:
        """Floor division by a positive divisor (SMT-LIB `div` agrees with Python's // there)."""
        return self._op("div", lambda a, b: a // b, o)

    def __mod__(self, o: Any) -> Term:
        return self._op("mod", lambda a, b: a % b, o)

    def __lt__(self, o: Any) -> Term:
        return self._op("<", lambda a, b: a < b, o)

    def __le__(self, o: Any) -> Term:
        return self._op("<=", lambda a, b: a <= b, o)

    def __gt__(self, o: Any) -> Term:
        return self._op(">", lambda a, b: a > b, o)

    def __ge__(self, o: Any) -> Term:
        return self._op(">=", lambda a, b: a >= b, o)

    def __eq__(self, o: Any) -> Term:  # type: ignore[override]
        return self._op("=", lambda a, b: a == b, o)

    def __ne__(self, o: Any) -> Term:  # type: ignore[override]
        return self._op("distinct", lambda a, b: a != b, o)

    __hash__ = None  # type: ignore[assignment]


def lift(x: Any) -> Term:
    if isinstance(x, Term):
        return x
    if isinstance(x, bool):
        return Term("true" if x else "false", lambda env: x)
    return Term(str(x) if x >= 0 else f"(- {-x})", lambda env: x)


def all_of(*xs: Any) -> Term:
    ts = [lift(x) for x in xs]
    return Term(f"(and {' '.join(t.text for t in ts)})", lambda env: all(t.value(env) for t in ts))


def any_of(*xs: Any) -> Term:
    ts = [lift(x) for x in xs]
    return Term(f"(or {' '.join(t.text for t in ts)})", lambda env: any(t.value(env) for t in ts))


def negate(x: Any) -> Term:
    t = lift(x)
    return Term(f"(not {t.text})", lambda env: not t.value(env))


class Solver:
    """One long-lived z3 solver over integer variables (a fresh z3 solver costs more than the
    queries themselves); each query is a push, one parse, a check and a pop."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.decls = {name: z3.Int(name) for name in names}
        self._solver = z3.SimpleSolver()
        # query text -> its answer: an engine's distinct plans at different points often pose the very
        # same queries (docs/benchmarks.md)
        self._answers: dict[str, dict[str, int] | None] = {}

    def witness(self, *formulas: Term) -> dict[str, int] | None:
        """Values of the variables that satisfy every formula, or None when none do."""
        text = "".join(f"(assert {f.text})" for f in formulas)
        if text not in self._answers:
            if len(self._answers) >= ANSWERS_KEPT:
                self._answers.clear()
            self._answers[text] = self._solve(text)
        answer = self._answers[text]
        return None if answer is None else dict(answer)

    def _solve(self, text: str) -> dict[str, int] | None:
        self._solver.push()
        try:
            self._solver.add(z3.parse_smt2_string(text, decls=self.decls))
            if self._solver.check() != z3.sat:
                return None
            model = self._solver.model()
            return {n: model.eval(v, model_completion=True).as_long() for n, v in self.decls.items()}
        finally:
            self._solver.pop()
