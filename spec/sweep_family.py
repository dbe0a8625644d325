"""A family of model geometries around a base checkpoint: the ranges `verify sweep --vary` names.

A member is one geometry (layer count, MLA spacing, KDA heads, head dim, latent rank) plus the
deployment choices the prover already ranges over (tp, cache dtype). The layer pattern is K3's:
MLA layers are every `mla_every`-th layer plus the last (K3: 4, 8, ..., 92 and 93). MLA heads
are tied to the KDA heads, as in K3 (96 and 96), so tp ranges over the divisors of kda_heads.
Everything else (rope dims, conv kernel) is the base checkpoint's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from math import isqrt
from pathlib import Path

from kvproof.spec.catalog import CACHE_DTYPES, ConfigError, ModelGeometry, parse_config

# Order of the smallest counterexample: fewest layers first, then fewest heads, and so on.
PARAMETERS = ("num_layers", "kda_heads", "head_dim", "kv_lora_rank", "mla_every")
# Input bounds: z3 terms stay small and a config written for a member stays loadable.
LIMITS = {"num_layers": 1024, "kda_heads": 4096, "head_dim": 1024, "kv_lora_rank": 65536, "mla_every": 1024}
MAX_VALUES = 4096  # values listed one by one (a,b,c); ranges a..b may be longer


@dataclass(frozen=True)
class Range:
    """Integer values: an interval lo..hi, or an explicit ascending list."""

    lo: int
    hi: int
    values: tuple[int, ...] | None = None

    def all(self) -> tuple[int, ...]:
        return self.values if self.values is not None else tuple(range(self.lo, self.hi + 1))

    def __contains__(self, value: int) -> bool:
        return value in self.values if self.values is not None else self.lo <= value <= self.hi

    def __len__(self) -> int:
        return len(self.values) if self.values is not None else self.hi - self.lo + 1

    def text(self) -> str:
        if self.values is not None:
            return ",".join(map(str, self.values))
        return str(self.lo) if self.lo == self.hi else f"{self.lo}..{self.hi}"


def parse_range(name: str, text: str) -> Range:
    """`a..b`, `a,b,c` or `a`, every value positive and within the parameter's limit."""
    try:
        if ".." in text:
            lo, hi = (int(part) for part in text.split("..", 1))
            found = Range(lo, hi)
            ends = [lo, hi]
        else:
            values = tuple(sorted({int(part) for part in text.split(",")}))
            if len(values) > MAX_VALUES:
                raise ConfigError(f"--vary {name}: at most {MAX_VALUES} listed values; use a range a..b")
            found = Range(values[0], values[-1], values if len(values) > 1 else None)
            ends = list(values)
    except ValueError:
        raise ConfigError(f"--vary {name}={text!r}: expected a..b, a,b,c or a (positive integers)") from None
    if found.lo > found.hi:
        raise ConfigError(f"--vary {name}={text}: empty range (lo > hi)")
    if min(ends) < 1 or max(ends) > LIMITS[name]:
        raise ConfigError(f"--vary {name}={text}: values must be in 1..{LIMITS[name]}")
    return found


@dataclass(frozen=True)
class Member:
    """One geometry of a family at one deployment point."""

    num_layers: int
    kda_heads: int
    head_dim: int
    kv_lora_rank: int
    mla_every: int
    tp: int
    dtype: str

    def key(self) -> tuple:
        return (*(getattr(self, p) for p in PARAMETERS), self.tp, CACHE_DTYPES.index(self.dtype))

    def as_dict(self) -> dict:
        return {p: getattr(self, p) for p in (*PARAMETERS, "tp", "dtype")}

    def text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.as_dict().items())


def mla_layers(num_layers: int, mla_every: int) -> list[int]:
    """Every mla_every-th layer plus the last, 1-based (K3: 4, 8, ..., 92, 93)."""
    return sorted({*range(mla_every, num_layers + 1, mla_every), num_layers})


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


@dataclass(frozen=True)
class Family:
    base: ModelGeometry
    ranges: dict[str, Range]  # every name of PARAMETERS
    dtypes: tuple[str, ...] = CACHE_DTYPES

    @staticmethod
    def around(base: ModelGeometry, vary: dict[str, Range], dtypes: tuple[str, ...] = CACHE_DTYPES) -> Family:
        """The base's own value for every parameter not varied."""
        if not base.hybrid:
            raise ConfigError(f"{base.name} has no KDA layers: a sweep needs a hybrid MLA + KDA base model")
        fixed = {"num_layers": base.num_layers, "kda_heads": base.kda_heads, "head_dim": base.kda_head_dim,
                 "kv_lora_rank": base.kv_lora_rank, "mla_every": base.mla_layers[0]}
        ranges = {p: vary.get(p) or Range(fixed[p], fixed[p]) for p in PARAMETERS}
        if ranges["mla_every"].lo < 2:
            raise ConfigError("--vary mla_every must start at 2 or more: every layer MLA leaves no KDA layer")
        if ranges["num_layers"].lo < 2:
            raise ConfigError("--vary num_layers must start at 2 or more: one layer is MLA and leaves no KDA layer")
        return Family(base, ranges, dtypes)

    def size(self) -> int:
        """Members: every geometry x each tp dividing its heads x each dtype."""
        tps = sum(len(divisors(h)) for h in self.ranges["kda_heads"].all())
        rest = 1
        for p in PARAMETERS:
            if p != "kda_heads":
                rest *= len(self.ranges[p])
        return rest * tps * len(self.dtypes)

    def describe(self) -> str:
        return " ".join(f"{p}={self.ranges[p].text()}" for p in PARAMETERS)

    def config(self, m: Member) -> dict:
        """An HF-style config.json for a member (what `verify plan --config` replays)."""
        full = mla_layers(m.num_layers, m.mla_every)
        return {"text_config": {
            "num_hidden_layers": m.num_layers,
            "num_attention_heads": m.kda_heads,
            "kv_lora_rank": m.kv_lora_rank,
            "qk_rope_head_dim": self.base.qk_rope_head_dim,
            "linear_attn_config": {
                "kda_layers": sorted(set(range(1, m.num_layers + 1)) - set(full)),
                "full_attn_layers": full,
                "num_heads": m.kda_heads,
                "head_dim": m.head_dim,
                "short_conv_kernel_size": self.base.conv_kernel,
            },
        }}

    def model(self, m: Member) -> ModelGeometry:
        return parse_config(self.config(m), f"{self.base.name}-sweep")

    def write_config(self, m: Member, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.config(m), indent=1))
        except OSError as err:
            raise ConfigError(f"cannot write {path}: {err.strerror}") from None
