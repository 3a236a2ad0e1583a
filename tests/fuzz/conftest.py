"""Hypothesis profiles of the fuzz tests (see this package's docstring)."""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture]

settings.register_profile("ci", max_examples=12, derandomize=True, deadline=None,
                          suppress_health_check=_SLOW_OK, database=None,
                          print_blob=True)
settings.register_profile("long", max_examples=int(os.environ.get("CLPATCH_FUZZ_EXAMPLES", "300")),
                          deadline=None, suppress_health_check=_SLOW_OK, database=None,
                          print_blob=True)
settings.load_profile("long" if os.environ.get("CLPATCH_FUZZ", "") == "long" else "ci")

# A call that tries to allocate without bound (a huge size passed through) must fail with
# MemoryError here, not take the machine's memory: the long profile caps this process's data
# segment (only it: the cap would hold for the whole test session, and GPU drivers reserve
# large address ranges; the short profile's parameters stay small).
LONG = os.environ.get("CLPATCH_FUZZ", "") == "long"
if LONG and sys.platform.startswith("linux"):
    import resource

    _soft, _hard = resource.getrlimit(resource.RLIMIT_DATA)
    _cap = int(os.environ.get("CLPATCH_FUZZ_MEMORY_GB", "8")) << 30
    if _soft == resource.RLIM_INFINITY or _soft > _cap:
        resource.setrlimit(resource.RLIMIT_DATA, (_cap, _hard))
