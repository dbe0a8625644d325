"""Show that a property test bites: under a seeded fault it must fail with an assertion."""

from __future__ import annotations

from collections.abc import Callable

from kvproof.impl import faults


def fails_under(fault: str, test: Callable[..., object], *args: object) -> None:
    """Run `test` with `fault` active and require an AssertionError (Hypothesis may group several)."""
    with faults.inject(fault):
        try:
            test(*args)
        except AssertionError:
            return
        except ExceptionGroup as group:
            _, others = group.split(AssertionError)
            if others is None:
                return
            raise
    raise AssertionError(f"{getattr(test, '__name__', test)} passed with fault {fault!r} active: it does not bite")
