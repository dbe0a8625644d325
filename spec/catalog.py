"""Model geometries read from Hugging Face style config.json files.

Only the numbers that size a KV cache are kept: which layers are full attention (MLA latent
cache) and which are KDA linear attention (recurrent state), the head counts the engine shards
over tensor parallelism, and the per-head dimensions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from math import gcd, isqrt
from pathlib import Path
from typing import Any

BUILTIN_MODELS = ("kimi-k3", "kimi-linear-48b-a3b", "deepseek-v3")
CACHE_DTYPES = ("fp8", "bf16")

# Upper bounds on every config size that drives a loop or an allocation, checked before either.
# Real models stay far below them (DeepSeek-V3: 61 layers, 128 heads, kv_lora_rank 512; Kimi-K3:
# 93 layers, 96 heads, head_dim 128, kernel 4); sweeps reach 1,024 layers and 4,096 heads.
MAX_LAYERS = 4096
MAX_HEADS = 65_536
MAX_DIM = 65_536  # kv_lora_rank, qk_rope_head_dim, head_dim
MAX_CONV_KERNEL = 1024
# A config.json or plan document is a few kilobytes (Kimi-K3's emitted plan: about 30 kB); a
# larger file is refused before it is read, so parsing it cannot exhaust memory.
MAX_JSON_BYTES = 16 * 2**20


class ConfigError(ValueError):
    """Bad model input. The message is one line and names the offending key."""


@dataclass(frozen=True)
class ModelGeometry:
    name: str
    num_layers: int
    mla_layers: tuple[int, ...]  # 1-based, ascending
    kda_layers: tuple[int, ...]  # 1-based, ascending
    mla_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    kda_heads: int = 0
    kda_head_dim: int = 0
    conv_kernel: int = 0

    @property
    def latent_dim(self) -> int:
        """Values per token in the MLA latent cache (576 for kv_lora_rank 512 + rope 64)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def hybrid(self) -> bool:
        return bool(self.kda_layers)

    @cached_property
    def tp_domain(self) -> tuple[int, ...]:
        """Every attention tp the engine accepts: the divisors of all sharded head counts."""
        heads = self.mla_heads if not self.hybrid else gcd(self.mla_heads, self.kda_heads)
        small = [d for d in range(1, isqrt(heads) + 1) if heads % d == 0]
        return tuple(sorted({*small, *(heads // d for d in small)}))

    def check_tp(self, tp: int) -> None:
        if tp not in self.tp_domain:
            sharded = "num_attention_heads" + (" and linear_attn_config.num_heads" if self.hybrid else "")
            raise ConfigError(
                f"tp={tp} does not divide {sharded} of {self.name}; valid tp: "
                + ", ".join(map(str, self.tp_domain))
            )


def load_model(name: str | None = None, config: str | Path | None = None) -> ModelGeometry:
    """A built-in model by name, or any config.json by path (the path wins, and names the model)."""
    if config is not None:
        path = Path(config)
        return parse_config(read_json(path, "config"), path.stem)
    if name not in BUILTIN_MODELS:
        raise ConfigError(f"unknown model {name!r}; built in: {', '.join(BUILTIN_MODELS)} (or pass --config FILE)")
    text = resources.files("kvproof.spec").joinpath("models", f"{name}.json").read_text()
    return parse_config(_parse_json(text, name), name)


def read_json(path: Path, what: str) -> Any:
    """A JSON file given on the command line; every way it can be unreadable is one line."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"cannot read {what} {path}: {err.strerror}") from None
    if len(data) > MAX_JSON_BYTES:
        raise ConfigError(f"{what} {path} is larger than {MAX_JSON_BYTES // 2**20} MiB: not a {what} file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path} is not UTF-8 text") from None
    return _parse_json(text, str(path))


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where}: not valid JSON ({err.msg}: line {err.lineno}, column {err.colno})") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's int_max_str_digits)
        raise ConfigError(f"{where}: not valid JSON (a number too long to read)") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid JSON (nested too deeply)") from None


def _int(cfg: dict, key: str, where: str = "", limit: int = MAX_DIM) -> int:
    """A positive integer key, at most `limit` (the bound keeps every loop and shape it drives finite)."""
    name = where + key
    if key not in cfg:
        raise ConfigError(f"config is missing key {name!r}")
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config key {name!r} must be an integer, got {type(value).__name__}")
    if value <= 0:
        raise ConfigError(f"config key {name!r} must be positive, got {value}")
    if value > limit:
        shown = f"{value:,}" if value.bit_length() <= 64 else f"an integer of {value.bit_length():,} bits"
        raise ConfigError(f"config key {name!r} must be at most {limit:,}, got {shown}")
    return value


def _layers(cfg: dict, key: str, num_layers: int, where: str) -> tuple[int, ...]:
    name = where + key
    if key not in cfg:
        raise ConfigError(f"config is missing key {name!r}")
    value = cfg[key]
    if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in value):
        raise ConfigError(f"config key {name!r} must be a list of 1-based layer numbers")
    if len(value) > num_layers:
        raise ConfigError(f"config key {name!r} lists {len(value):,} layers, more than num_hidden_layers {num_layers}")
    if len(set(value)) != len(value):
        dup = next(x for x in value if value.count(x) > 1)
        raise ConfigError(f"config key {name!r} lists layer {dup} twice")
    bad = [x for x in value if not 1 <= x <= num_layers]
    if bad:
        raise ConfigError(f"config key {name!r}: layer {bad[0]} out of range 1..{num_layers} (num_hidden_layers)")
    return tuple(sorted(value))


def _conv_kernel(lin: dict, where: str) -> int:
    kernel = _int(lin, "short_conv_kernel_size", where, MAX_CONV_KERNEL)
    if kernel < 2:
        # The conv state keeps the last kernel - 1 inputs: a kernel of 1 keeps nothing to page.
        raise ConfigError(f"config key '{where}short_conv_kernel_size' must be at least 2, got {kernel}")
    return kernel


def parse_config(raw: Any, name: str) -> ModelGeometry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: config must be a JSON object")
    cfg = raw.get("text_config", raw)
    if not isinstance(cfg, dict):
        raise ConfigError("config key 'text_config' must be an object")
    num_layers = _int(cfg, "num_hidden_layers", limit=MAX_LAYERS)
    common: dict[str, Any] = {
        "name": name,
        "num_layers": num_layers,
        "mla_heads": _int(cfg, "num_attention_heads", limit=MAX_HEADS),
        "kv_lora_rank": _int(cfg, "kv_lora_rank"),
        "qk_rope_head_dim": _int(cfg, "qk_rope_head_dim"),
    }
    lin = cfg.get("linear_attn_config")
    if lin is None:
        return ModelGeometry(mla_layers=tuple(range(1, num_layers + 1)), kda_layers=(), **common)
    if not isinstance(lin, dict):
        raise ConfigError("config key 'linear_attn_config' must be an object")
    where = "linear_attn_config."
    kda = _layers(lin, "kda_layers", num_layers, where)
    full = _layers(lin, "full_attn_layers", num_layers, where)
    expected = sorted(set(range(1, num_layers + 1)) - set(kda))
    if list(full) != expected:
        both = sorted(set(full) & set(kda))
        missing = sorted(set(expected) - set(full))
        detail = f"layer {both[0]} is in both lists" if both else f"layer {missing[0]} is in neither list"
        raise ConfigError(f"config key '{where}full_attn_layers' must be the complement of kda_layers: {detail}")
    if not full:
        raise ConfigError(f"config key '{where}full_attn_layers' is empty: a hybrid model needs MLA layers")
    return ModelGeometry(
        mla_layers=full,
        kda_layers=kda,
        kda_heads=_int(lin, "num_heads", where, MAX_HEADS),
        kda_head_dim=_int(lin, "head_dim", where),
        conv_kernel=_conv_kernel(lin, where),
        **common,
    )
