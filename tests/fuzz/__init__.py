"""Property-based fuzzing of every public function with `hypothesis`.

Every call made here must either return a result that satisfies the function's documented
invariants (shape, dtype, finite values, positions inside the image, distances ascending
and >= 0) or raise ValueError/TypeError whose message names one of the function's
arguments (DeviceResourceError is accepted too). Any other exception, or a call running
past the per-call time limit, fails the test.

Profiles (chosen by the CLPATCH_FUZZ environment variable):

- ``ci`` (default): few examples per function, derandomised (fixed seed: every run tries
  the same inputs), and the parameters that key OpenCL program builds (patch size, n, k,
  window, channels, ...) restricted to a handful of configurations, so a run with warm
  program caches takes a few minutes at most on a small CPU.
- ``long`` (``CLPATCH_FUZZ=long``): many random examples (CLPATCH_FUZZ_EXAMPLES, default
  300 per function), every parameter drawn over its whole range, so many new programs
  are built: run it by hand, e.g.
  ``CLPATCH_FUZZ=long .venv/bin/python -m pytest -q tests/fuzz -x``.

Each example is either valid (real dtypes, finite values, every parameter in range: it must
run, or be refused only for a documented reason such as an image smaller than the patch)
or hostile (each parameter out of range or of the wrong type with probability 1/3, any
array). Image shapes range over 0–70 per axis (small sides far more often), including 1×N
and N×1 and a wrong number of dimensions; dtypes over every NumPy kind (bool, integers,
floats, complex, object) and nested lists; values sometimes hold one NaN, inf or 1e30;
layouts over C/Fortran order, strided, transposed and reversed views, device arrays and
reversed views of transposed device arrays; channel axes over every position.

Guards: each call runs under a SIGALRM time limit (harness.CALL_LIMIT, a hang fails the
test), and the process's data segment is capped (CLPATCH_FUZZ_MEMORY_GB, default 8) so an
unbounded allocation fails with MemoryError instead of exhausting the machine.
`--hypothesis-show-statistics` shows, per function, how examples ended (ran/refused, and
which argument each error named). test_fuzz_regressions.py keeps the defects found.
"""
