## Device ceilings for benchmark floors: arithmetic rate and memory bandwidth, measured
## with the same OpenCL driver the kernels use (not datasheet figures).
<%page args="chains, iterations"/>
//
// fma_rate: each work-item runs ${chains} independent multiply-add chains of ${iterations}
// steps (2 floating-point operations each) and stores one value so nothing is optimised away.
// Launch: global (any), local (any).
//
__kernel void fma_rate(__global float *out, const float a, const float b)
{
    const int gid = get_global_id(0);
% for c in range(chains):
    float x${c} = (float)gid * 1e-7f + ${c}.0f;
% endfor
    for (int i = 0; i < ${iterations}; ++i) {
% for c in range(chains):
        x${c} = fma(x${c}, a, b);
% endfor
    }
    out[gid] = ${" + ".join("x%d" % c for c in range(chains))};
}

//
// copy: dst = src in float4 units; bytes moved = 2 * 16 * count.
// Launch: global (count), local (any).
//
__kernel void copy(__global const float4 *restrict src, __global float4 *restrict dst)
{
    const int i = get_global_id(0);
    dst[i] = src[i];
}
