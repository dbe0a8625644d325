"""The model_config, server_args and HF config objects kvproof hands tokenspeed's recipes.

tokenspeed builds these from transformers and its launch-flag parser, neither of which runs
here. What we pass instead is strict: every attribute is a domain axis of the point being
planned, a fact from the published config.json, a listed constant with its reason, or an
`Unavailable` that raises the moment planning decides anything with it. Reading an attribute we
never set raises too (not AttributeError, so a `getattr(..., default)` cannot quietly hide it).
"""

from __future__ import annotations

from collections.abc import Mapping
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


class HFConfig:
    """A published config.json as transformers exposes it: its keys as attributes (nested
    objects stay dicts, as the recipes expect), AttributeError for a key the file lacks, plus
    the properties tokenspeed's own config class derives (passed in `derived`, each computed
    from the file's keys by the formula of the class that docs/engines/tokenspeed.md cites)."""

    def __init__(self, keys: Mapping[str, Any], derived: Mapping[str, Any] | None = None) -> None:
        self._keys = {**keys, **(derived or {})}

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        try:
            return self._keys[attr]
        except KeyError:
            raise AttributeError(f"config.json has no key {attr!r}") from None

