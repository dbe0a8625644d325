"""tokenspeed's deepseek_v41 recipe: not planned by kvproof yet (PROFILE None, so NOT VERIFIED)."""

from __future__ import annotations

from pathlib import Path

from kvproof.engines.interface import Mutant
from kvproof.engines.tokenspeed.profile import Profile

PROFILE: Profile | None = None
# Seeded bugs of this recipe (engines/tokenspeed/mutants.py applies them): fault -> (file, text, broken).
EDITS: dict[str, tuple[Path, str, str]] = {}
MUTANTS: tuple[Mutant, ...] = ()
