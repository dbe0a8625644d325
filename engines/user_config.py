"""--config FILE: a user's own config.json, planned as the checkpoint of the one recipe named.

Every engine that takes it reads it here, with the bounds kvproof reads any JSON file with
(kvproof.spec.catalog.read_json: 16 MiB at most, UTF-8, one line for each way it is unreadable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvproof.engines.verdict import EngineError
from kvproof.spec.catalog import ConfigError, read_json


@dataclass(frozen=True)
class UserConfig:
    path: str
    config: dict[str, Any]

    @property
    def name(self) -> str:
        """The checkpoint's name in the run's points: the file's name without its suffix."""
        return Path(self.path).stem


def load(path: str | None, recipes: Sequence[str] | None) -> UserConfig | None:
    """The file at `path`, for the one recipe in `recipes`; None without a path."""
    if path is None:
        return None
    if not recipes or len(recipes) != 1:
        raise EngineError("--config FILE is one checkpoint of one recipe: name that recipe with --recipe R")
    try:
        config = read_json(Path(path), "config")
    except ConfigError as err:
        raise EngineError(f"--config: {err}") from None
    if not isinstance(config, dict):
        raise EngineError(f"--config {path}: a config.json is one JSON object")
    return UserConfig(path, config)
