"""kvproof: verification suite that gates merges of KV-cache planner changes.

The design keeps its parts as top-level folders (spec/, impl/, kernels/, oracles/, engines/,
cli/, ci/); this package folder holds relative symlinks to them, so `kvproof.<folder>` is a
plain directory package that every static tool (mypy, ruff, import-graph tools) can follow,
and that `python` finds from the repository root without an install. The wheel holds real
files: setuptools copies through the links.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kvproof")
except PackageNotFoundError:  # run from a checkout that was never installed (the GPU check)
    __version__ = "unknown"
