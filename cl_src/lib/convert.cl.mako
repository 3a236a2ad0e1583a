## Input conversion: any real dtype, any strides, interleaved channels -> planar float.
## Rendered with: src_type (OpenCL C type name of the source elements, "half" is read
## with vload_half so no fp16 extension is needed).
<%page args="src_type"/>
//
// to_planar: copies a block of `frames` x `rows` x `cols` pixels with `channels` channels
// from a strided source into dst[dst_base + ((f * channels + c) * rows + y) * cols + x] as
// float (dst_base: where the block starts in dst, e.g. a slot of a ring of frames).
//
// Launch: global (cols, rows, frames), any local size; each work-item copies all channels
// of one pixel (no division by the channel count: Oclgrind cannot check the code it makes).
//   src, base            source elements and the element index of pixel (0, 0, 0, channel 0)
//   sf, sy, sx, sc       element strides of frame, row, column and channel (may be 0 or negative)
//
% if src_type == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
__kernel void to_planar(__global const ${src_type} *restrict src, const long base,
                        const long sf, const long sy, const long sx, const long sc,
                        const int frames, const int rows, const int cols, const int channels,
                        __global float *restrict dst, const long dst_base)
{
    const int x = get_global_id(0), y = get_global_id(1), f = get_global_id(2);
    if (x >= cols || y >= rows || f >= frames)
        return;
    const long pixel = base + f * sf + y * sy + x * sx;
    for (int c = 0; c < channels; ++c) {
        const long at = pixel + c * sc;
% if src_type == "half":
        const float v = vload_half(at, src);
% else:
        const float v = (float)src[at];
% endif
        dst[dst_base + ((long)(f * channels + c) * rows + y) * cols + x] = v;
    }
}
