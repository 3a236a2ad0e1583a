## One plane of a VapourSynth clip's frames from a filter's float32 result
## (clpatch/vapoursynth/transfer.py): the output side of the VapourSynth filters.
## Rendered with: out_type (OpenCL C type of the clip's samples: uchar, ushort, float; a
## half clip's samples are stored as ushort bits through vstore_half), store ("integer":
## rounded to the nearest, ties to even, and clamped to [0, peak], as NumPy's
## clip(rint(x), 0, peak); "half": stored as half; "float": stored as it is).
<%page args="out_type, store"/>
//
// to_plane. Launch: global (pixels of the plane in every frame), any local size; one
// work-item per pixel.
//   res, res_first   the result from element res_first on, `channels` (1 or 3) interleaved
//                    values per pixel
//   channels         1 or 3
//   m, scale, offset the plane's value is (m.x r0 + m.y r1 + m.z r2) / scale + offset
//                    (a YUV plane from the opponent colour space; identity rows for RGB)
//   peak             the largest code of an integer format
//   out, out_first   the plane from element out_first on, in the clip's sample type
#pragma OPENCL FP_CONTRACT OFF

__kernel void to_plane(__global const float *res, const ulong res_first, const int channels,
                       const float4 m, const float scale, const float offset,
                       const float peak, __global ${out_type} *out, const ulong out_first)
{
    const size_t i = get_global_id(0);
    __global const float *p = res + res_first + i * channels;
    float v = m.x * p[0];
    if (channels == 3)
        v += m.y * p[1] + m.z * p[2];
    v = v / scale + offset;
% if store == "integer":
    out[out_first + i] = (${out_type})clamp(rint(v), 0.0f, peak);
% elif store == "half":
    vstore_half(v, out_first + i, (__global half *)out);
% else:
    out[out_first + i] = v;
% endif
}
