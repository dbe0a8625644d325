"""The commit of an engine checkout given as `--engine-path`."""

from __future__ import annotations

import subprocess
from pathlib import Path


def commit_at(root: Path, short: bool = False) -> str | None:
    """The commit of the git work tree that tracks `root`; None for a folder no repository tracks
    (an unpacked package, also one unpacked inside another repository's ignored folder, such as
    `make compat`'s reports/compat/)."""
    head = ["rev-parse", "--short", "HEAD"] if short else ["rev-parse", "HEAD"]
    try:
        tracked = subprocess.run(["git", "-C", str(root), "ls-files", "--", "."], capture_output=True, text=True,
                                 timeout=10, check=False)
        out = subprocess.run(["git", "-C", str(root), *head], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if tracked.returncode != 0 or not tracked.stdout.strip() or out.returncode != 0:
        return None
    return out.stdout.strip() or None
