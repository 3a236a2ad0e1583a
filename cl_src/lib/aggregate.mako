## Aggregation of weighted patch estimates into accumulation buffers (Davy-Ehret 4.3.4-4.3.5).
##
## Three strategies, one per `kind`:
##   "buffers"  no atomics: the caller guarantees that no two work-items of a launch write
##              the same element (references of one class never overlap), so a plain
##              read-add-write is exact; launches of one queue follow each other.
##   "fixed"    64-bit integer atomics on fixed-point values (value * scale, rounded to
##              nearest): integer addition is associative, so the result does not depend
##              on the order of the additions and is the same bit for bit on every run.
##   "cas"      float addition emulated with 32-bit compare-and-swap (Algorithm 5): any
##              OpenCL 1.2 device, but the order of additions, hence the last bits, vary.

<%def name="pragmas(kind)">
% if kind == "fixed":
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
% endif
</%def>

<%def name="helpers(kind)">
% if kind == "cas":
// Algorithm 5: float add emulated with compare-and-swap on the value's bits. The first
// guess of the current value is 0 (the cleared buffer) instead of a plain read, which
// would race with other work-items' swaps; a wrong guess costs one more iteration.
inline void acc_add(volatile __global uint *at, const float value)
{
    uint current = 0u;
    uint expected;
    do {
        expected = current;
        current = atomic_cmpxchg(at, expected, as_uint(as_float(expected) + value));
    } while (current != expected);
}
% elif kind == "fixed":
inline void acc_add(volatile __global long *at, const float value, const float scale)
{
    atom_add(at, convert_long_rte(value * scale));
}
% else:
inline void acc_add(__global float *at, const float value)
{
    *at += value;
}
% endif
</%def>

## Statement adding `value` to element `index` of buffer `acc`.
<%def name="add(kind, acc, index, value)">
% if kind == "fixed":
acc_add(${acc} + (${index}), ${value}, scale);
% else:
acc_add(${acc} + (${index}), ${value});
% endif
</%def>

## Expression reading element `index` of `acc` as a float.
<%def name="load(kind, acc, index)">
% if kind == "fixed":
((float)${acc}[${index}] * inv_scale)
% elif kind == "cas":
as_float(${acc}[${index}])
% else:
${acc}[${index}]
% endif
</%def>
