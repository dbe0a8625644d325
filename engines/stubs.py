"""What an adapter hands its engine in place of what it does not have, shared by every adapter.

An adapter plans with the engine's own code on a CPU, so some of what that code reaches for (a
GPU package, a launch flag's parser, a layer's constructor) is not there. What kvproof puts in
its place never answers with an invented value: `Unavailable` stands for a value and raises
`StubUsed` the moment planning decides anything with it, and an adapter's other stand-ins raise
`StubUsed` themselves. A plan that touched one is not the engine's: `verify engine` reports the
adapter as incomplete (exit 2), never a verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class StubUsed(RuntimeError):
    """Planning touched something kvproof replaced or does not model: the adapter, not the engine, is
    incomplete."""


class Unavailable:
    """A value kvproof does not have: a name imported from a replaced module, or a config value
    that planning must not need. Naming its attributes and arithmetic on it are allowed (modules
    build tables at import time; dataclasses store and combine launch values) and give another
    Unavailable; every decision on one (a call, a truth value, a comparison, iteration, indexing,
    a length, use as a number or a string) raises StubUsed naming where it came from. Only
    identity tests (`x is None`) and isinstance checks cannot be intercepted: they see an object."""

    __slots__ = ("_where", "_why")

    def __init__(self, where: str, why: str) -> None:
        object.__setattr__(self, "_where", where)
        object.__setattr__(self, "_why", why)

    def _used(self, how: str) -> StubUsed:
        return StubUsed(f"planning used {self._where}{how}, which kvproof does not have ({self._why})")

    def _derived(self, how: str) -> Unavailable:
        return Unavailable(f"{self._where}{how}", self._why)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self._derived(f".{attr}")

    def __setattr__(self, attr: str, value: object) -> None:
        raise self._used(f".{attr} = ...")

    def __call__(self, *args: object, **kwargs: object) -> Any:
        raise self._used("(...)")

    def __bool__(self) -> bool:
        raise self._used(" as a truth value")

    def __iter__(self) -> Any:
        raise self._used(" as an iterable")

    def __index__(self) -> int:
        raise self._used(" as a number")

    __int__ = __float__ = __index__

    def __len__(self) -> int:
        raise self._used(" as a length")

    def __getitem__(self, key: object) -> Any:
        raise self._used("[...]")

    __contains__ = __getitem__

    def __str__(self) -> str:
        raise self._used(" as a string")

    def __format__(self, spec: str) -> str:
        raise self._used(" in a format")

    def __round__(self, digits: object = None) -> Any:
        raise self._used(" rounded")

    def __eq__(self, other: object) -> bool:
        raise self._used(" in a comparison")

    __lt__ = __le__ = __gt__ = __ge__ = __ne__ = __eq__
    __hash__ = object.__hash__

    def _arith(self, other: object) -> Unavailable:
        return self._derived(" (in arithmetic)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __pow__ = __rpow__ = _arith
    __floordiv__ = __rfloordiv__ = __truediv__ = __rtruediv__ = __mod__ = __rmod__ = _arith
    __divmod__ = __rdivmod__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _arith
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _arith

    def _unary(self) -> Unavailable:
        return self._derived(" (in arithmetic)")

    __neg__ = __pos__ = __abs__ = __invert__ = _unary

    def __repr__(self) -> str:
        return f"<unavailable {self._where}>"


def root_of(name: str, roots: Iterable[str]) -> str | None:
    """The root in `roots` that the dotted module name `name` is or lies under, if any."""
    return next((root for root in roots if name == root or name.startswith(root + ".")), None)
