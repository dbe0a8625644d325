"""How kvproof plans one tokenspeed recipe: at a published checkpoint, or over a stated family.

Each recipe module of this folder exports its Profile; engine.py keeps the table of them.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from kvproof.engines.families import Family
from kvproof.engines.tokenspeed.configs import member_dicts
from kvproof.engines.verdict import EngineError


@dataclass(frozen=True)
class Profile:
    """A recipe's configs (published files, or a family's members), its domain and its build."""

    models: tuple[str, ...]  # files in engines/tokenspeed/models: the targets, then any draft
    modules: tuple[str, ...]  # what loader.load imports for it
    points: Callable[[dict[str, dict]], list[dict[str, Any]]]  # the domain, from the configs
    build: Callable[[dict[str, types.ModuleType], dict[str, dict], dict[str, Any]], Any]  # the recipe at a point
    limits: str = ""  # what of the recipe's supported domain is not modelled yet
    # The domain as this revision's loaded code asks it (a GPU question that moved), when it
    # depends on the revision; `points` is then the latest release's, and `may_assume` the other
    # assumptions a revision's points may make (for --assume).
    points_at: Callable[[dict[str, dict], dict[str, types.ModuleType]], list[dict[str, Any]]] | None = None
    may_assume: tuple[str, ...] = ()
    drafts: tuple[str, ...] = ()  # which of `models` are draft checkpoints (a user's --config replaces the rest)
    # No published checkpoint: the targets are this family's members (`models` then holds only
    # drafts), and the verdict is on the members planned.
    family: Family | None = None
    # What the verdict states of the family before `limits` (how its members are planned), not at a --config FILE
    family_limits: str = ""


def configs(profile: Profile, everything: bool = False, user: tuple[str, dict] | None = None) -> dict[str, dict]:
    """The configs a recipe plans, by file name: its published files; a family's members (the
    default list, or with `everything` the whole family) in place of targets; or with `user`
    (a name and a config.json) that config in place of the targets, as a checkpoint."""
    drafts = {name: published(name) for name in profile.drafts}
    if user is not None:
        if f"{user[0]}.json" in drafts:
            raise EngineError(f"--config: {user[0]}.json is the name of the draft config kvproof plans beside it; "
                              "rename the file")
        if re.fullmatch(r".+-family-\d+", user[0]):  # its points would carry a member's name, and its findings
            raise EngineError(f"--config: {user[0]}.json is named as a family member, whose baseline entries its "
                              "findings would match; rename the file")
        return {f"{user[0]}.json": user[1], **drafts}
    if profile.family is not None:
        return {f"{m.name}.json": member_dicts(m.config()) for m in profile.family.members(everything)} | drafts
    return {name: published(name) for name in profile.models}


def published(name: str) -> dict:
    """A published config kvproof ships (engines/tokenspeed/models), by file name."""
    return json.loads(resources.files("kvproof.engines.tokenspeed").joinpath("models", name).read_text())


def targets(configs: dict[str, dict], drafts: tuple[str, ...] = ()) -> list[str]:
    """The target configs' file names, in order (the drafts left out)."""
    return [name for name in configs if name not in drafts]
