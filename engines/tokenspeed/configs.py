"""The model_config, server_args and HF config objects kvproof hands tokenspeed's recipes.

tokenspeed builds these from transformers and its launch-flag parser, neither of which runs
here. What we pass instead is strict: every attribute is a domain axis of the point being
planned, a fact from the published config.json, a listed constant with its reason, or an
`Unavailable` that raises the moment planning decides anything with it. Reading an attribute we
never set raises too (not AttributeError, so a `getattr(..., default)` cannot quietly hide it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvproof.engines.stubs import StubUsed


class Strict:
    """An object with exactly the attributes given; any other read raises StubUsed."""

    def __init__(self, name: str, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        values = object.__getattribute__(self, "_values")
        if attr not in values:
            raise StubUsed(f"planning read {object.__getattribute__(self, '_name')}.{attr}, "
                           "which kvproof does not set")
        return values[attr]

    def __setattr__(self, attr: str, value: object) -> None:
        raise StubUsed(f"planning wrote {object.__getattribute__(self, '_name')}.{attr}")


@dataclass
class Strictness:
    """The family whose member is being planned, if one is: its configs have exactly the cited
    and varied keys, so a read of any other is an invented number in the making, not a key the
    checkpoint lacks (where transformers' class would answer its default)."""

    family: str | None = None
    absent: frozenset[str] = frozenset()  # keys the family lacks by its shape (Family.absent)

    def lacks(self, key: str) -> bool:
        """Whether a read of `key`, which the config lacks, must raise rather than default."""
        return self.family is not None and key not in self.absent


STRICT = Strictness()


def _missing(key: str) -> StubUsed:
    return StubUsed(f"planning read config key {key!r}, which the {STRICT.family} family neither cites nor "
                    "varies; make it an axis or cite its value")


class MemberDict(dict[str, Any]):
    """A nested object of a family member's config.json: reading a key it lacks raises, by
    `[key]` or by `.get(key, default)`, while a member is being planned."""

    def __missing__(self, key: str) -> Any:
        if STRICT.lacks(key):
            raise _missing(key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self and STRICT.lacks(key):
            raise _missing(key)
        return super().get(key, default)


def member_dicts(value: Any) -> Any:
    """A member's config.json with every nested object a MemberDict."""
    if isinstance(value, dict):
        return MemberDict({k: member_dicts(v) for k, v in value.items()})
    if isinstance(value, list):
        return [member_dicts(v) for v in value]
    return value


class HFConfig:
    """A published config.json as transformers exposes it: its keys as attributes (nested
    objects stay dicts, as the recipes expect), AttributeError for a key the file lacks, plus
    the properties tokenspeed's own config class derives (passed in `derived`, each computed
    from the file's keys by the formula of the class that docs/engines/tokenspeed.md cites).
    While a family member is planned (STRICT), a key the member lacks raises StubUsed instead."""

    def __init__(self, keys: Mapping[str, Any], derived: Mapping[str, Any] | None = None) -> None:
        self._keys = {**keys, **(derived or {})}

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        try:
            return self._keys[attr]
        except KeyError:
            if STRICT.lacks(attr):
                raise _missing(attr) from None
            raise AttributeError(f"config.json has no key {attr!r}") from None

