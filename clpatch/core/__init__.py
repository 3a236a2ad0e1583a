"""Layer 1: runtime, device profiles, program cache and launches, plan cache, buffers and
memory limits, the checking input conversion, transfers, validation, the tuning store and
the registry of operations. Knows no algorithm."""
