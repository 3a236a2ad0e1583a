"""Layer 4: explain, autotune and bench; engines register with `clpatch.core.registry`, so
nothing here imports an engine to know it."""
