"""The device self-test: every kernel family on tiny inputs, against the NumPy oracles.

`run_selftest(runtime)` runs each family (every windowed search variant with every neighbour
table, the kNN engines, the ANN, the NNF, NL-means with each aggregation, BM3D, CBM3D, the
VBM3D search variants and VBM3D) and returns one `FamilyResult` per family: "pass", "fail"
with how the result differs from the oracle, "error" with what was raised, "crash" when the
process running it died (the families run in child processes by default, several at
once: see `runner`), or
"skip" when the device cannot run it. `clpatch selftest` prints them. The oracles are the ones the test suite
uses (`tests/reference/`, shipped as `clpatch.oracles`); they import nothing from clpatch.

Layer: above `core`, `match` and `denoise` (it runs them), beside `tune`.
"""

from .compare import Family, Unsupported
from .oracles import oracle, oracle_dir
from .runner import (
    FAMILIES,
    MAX_JOBS,
    STATUSES,
    FamilyResult,
    default_jobs,
    family_names,
    run_family,
    run_selftest,
    select_families,
)

__all__ = ["FAMILIES", "MAX_JOBS", "STATUSES", "Family", "FamilyResult", "Unsupported", "default_jobs",
           "family_names",
           "oracle", "oracle_dir", "run_family", "run_selftest", "select_families"]
