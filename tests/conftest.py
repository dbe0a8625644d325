"""Shared test setup: Triton's CPU interpreter where there is no GPU, and hypothesis profiles.

TRITON_INTERPRET must be set before any kernel module is imported, so it is set here, at
collection, before the tests import kvproof.kernels.
"""

from __future__ import annotations

import os
import shutil

if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# The interpreter's tl.dot is a NumPy matmul of small tiles: threaded OpenBLAS spins on them and
# runs 10-100x slower than one thread, worse still with one pytest-xdist worker per core.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase


def _database():
    """Where counterexamples are shared: KVPROOF_HYPOTHESIS_DB names a directory, or
    redis://host:port for many CI workers (needs the hypothesis[redis] extra)."""
    where = os.environ.get("KVPROOF_HYPOTHESIS_DB")
    if not where:
        return DirectoryBasedExampleDatabase(".hypothesis/examples")
    if where.startswith("redis://"):
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase

        return RedisExampleDatabase(redis.Redis.from_url(where))
    return DirectoryBasedExampleDatabase(where)


_common = dict(database=_database(), suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.register_profile("ci", max_examples=60, print_blob=True, **_common)
settings.register_profile("nightly", max_examples=1000, **_common)
settings.register_profile("dev", max_examples=20, **_common)
# `verify mutants` needs a kill, not a minimal counterexample: no shrinking.
settings.register_profile(
    "mutants", max_examples=60, phases=(Phase.explicit, Phase.reuse, Phase.generate), **_common
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
