"""A stated family of geometries, for a recipe whose checkpoint is not published (yet).

A recipe usually lands before its checkpoint does. What its maintainer can be told then is for
which geometries the recipe boots and holds the contract: a family, written as the values that
are published (each with its citation) and axes over every other key the recipe reads (each
range with why it stops there). A member is one config.json made of exactly those keys, so no
default of the engine's config class can stand in for a number nobody published: a read of any
other key raises (`configs.HFConfig` under `strict`).

The default run plans a fixed list of members, the same on every run: every value of every axis
at least once, then evenly spaced members of the whole product up to the recipe's cap. The whole
family runs with `verify sweep --engine tokenspeed --recipe R`. Either way the verdict is on the
members planned, never on a checkpoint.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cited:
    """A published value: `key` is a dotted path in config.json (`text_config.num_hidden_layers`)."""

    key: str
    value: Any
    source: str


@dataclass(frozen=True)
class Axis:
    """A key the recipe reads that nothing published fixes: every value the family covers."""

    key: str
    values: tuple[Any, ...]
    why: str  # why the range stops where it does (the recipe refusing bound + 1, or a cited sibling)


@dataclass(frozen=True)
class Family:
    """A recipe's family: the cited values, the axes, and the keys derived from them."""

    name: str
    not_a_verdict_on: str  # the checkpoint this family must never be read as
    cited: tuple[Cited, ...]
    axes: tuple[Axis, ...]
    cap: int  # members the default run plans
    # Keys of the config.json computed from the member's values (a layer list from a count):
    # key -> function of the member's flat values; each is part of the member, as an axis is.
    derived: dict[str, Callable[[dict[str, Any]], Any]] = field(default_factory=dict)
    # Members the recipe's own rules exclude before planning (a head count tp must divide):
    # a predicate on the flat values; excluded members are not members.
    valid: Callable[[dict[str, Any]], bool] = lambda values: True
    # Keys a member lacks by the family's shape, not for want of a number (a flat config has no
    # text_config): key -> why. Reading one is answered as for a checkpoint that lacks it.
    absent: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = [c.key for c in self.cited] + [a.key for a in self.axes] + list(self.derived)
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"family {self.name}: {twice[0]} is given twice")
        if any(not a.values for a in self.axes) or self.cap < 1:
            raise ValueError(f"family {self.name}: every axis needs a value and the cap must be positive")

    def _flat(self, choice: tuple[Any, ...]) -> dict[str, Any]:
        values = {c.key: c.value for c in self.cited}
        values.update(zip((a.key for a in self.axes), choice, strict=True))
        return values

    def _product(self) -> Iterator[tuple[Any, ...]]:
        return itertools.product(*(a.values for a in self.axes))

    def size(self) -> int:
        """Members in the whole family (the product of the axes, less the excluded)."""
        return sum(1 for choice in self._product() if self.valid(self._flat(choice)))

    def members(self, everything: bool = False) -> list[Member]:
        """The default list (capped), or with `everything` the whole family, in product order."""
        valid = [choice for choice in self._product() if self.valid(self._flat(choice))]
        chosen = range(len(valid)) if everything or len(valid) <= self.cap else self._spread(valid)
        return [Member(self, index, self._flat(valid[index])) for index in chosen]

    def _spread(self, valid: list[tuple[Any, ...]]) -> list[int]:
        """Every value of every axis once (the first valid member that has it), then evenly
        spaced members of the product, up to the cap, in product order."""
        picked: set[int] = set()
        for position, axis in enumerate(self.axes):
            for value in axis.values:
                first = next((i for i, choice in enumerate(valid) if choice[position] == value), None)
                if first is not None:
                    picked.add(first)
        step = len(valid) / self.cap
        for k in range(self.cap):
            if len(picked) >= self.cap:
                break
            picked.add(math.floor(k * step))
        return sorted(picked)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "not_a_verdict_on": self.not_a_verdict_on,
                "varied": {a.key: list(a.values) for a in self.axes},
                "why": {a.key: a.why for a in self.axes},
                "derived": sorted(self.derived), "absent": self.absent}

    def citations(self) -> list[dict[str, Any]]:
        return [{"key": c.key, "value": c.value, "source": c.source} for c in self.cited]

    def carried(self, key: str, note: str | None = None) -> Cited:
        """This family's citation of `key`, for another engine's family of the same model that reads the key
        under the same name (`note`: how that engine comes to read it)."""
        found = next(c for c in self.cited if c.key == key)
        return found if note is None else Cited(found.key, found.value, f"{found.source}; {note}")


@dataclass(frozen=True)
class Member:
    """One member: its place in the whole family (product order), and its flat values."""

    family: Family
    index: int
    values: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.family.name}-family-{self.index}"

    def config(self) -> dict[str, Any]:
        """The member's config.json: the cited and varied values, then the derived keys."""
        flat = dict(self.values)
        flat.update({key: derive(self.values) for key, derive in self.family.derived.items()})
        out: dict[str, Any] = {}
        for key, value in flat.items():
            *parents, leaf = key.split(".")
            node = out
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = copy.deepcopy(value)
        return out

    def varied(self) -> dict[str, Any]:
        return {a.key: self.values[a.key] for a in self.family.axes}
