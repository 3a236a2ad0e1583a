## Input conversion: any real dtype, any strides, interleaved channels -> planar float, with
## the input's values checked on the way.
## Rendered with: src_type (OpenCL C type name of the source elements, "half" is read
## with vload_half so no fp16 extension is needed), group (work-items per work-group).
<%page args="src_type, group"/>
//
// to_planar: copies a block of `frames` x `rows` x `cols` pixels with `channels` channels
// from a strided source into dst[dst_base + ((f * channels + c) * rows + y) * cols + x] as
// float (dst_base: where the block starts in dst, e.g. a slot of a ring of frames), and
// folds the largest |value| of the block into check[word] (as the bits of a non-negative
// float, whose order as unsigned integers is the order of the floats; NaN compares above
// +inf, so check[word] >= 0x7f800000 means the block held NaN or infinity). Work-item
// (0, 0, 0) clears check[1 - word], the word of the caller's next run, so a run needs no
// clearing launch of its own (on one in-order queue the previous run's read of that word
// comes first). A value whose magnitude is above `limit` (NaN included: its |value| compares
// with nothing) is stored as 0 after being folded into the check: an engine whose kernels
// must never see such values (the kNN's heaps compare distances; NaN breaks their order)
// passes its magnitude limit and reports the input from the check later, without waiting;
// +inf keeps every finite and infinite value and zeroes only NaN.
//
// Launch: global (cols rounded up to a multiple of ${group}, rows, frames), local
// (${group}, 1, 1); each work-item copies all channels of one pixel (no division by the
// channel count: Oclgrind cannot check the code it makes); each work-group reduces its
// maximum in local memory and makes one atomic_max on check[word].
//   src, base            source elements and the element index of pixel (0, 0, 0, channel 0)
//   sf, sy, sx, sc       element strides of frame, row, column and channel (may be 0 or negative)
//   frames, rows, cols, channels   the block's size
//   dst, dst_base        planar float destination and the element index of the block in it
//   check, word          two uints; word (0 or 1) is the current run's, cleared before its
//                        first block
//   limit                largest magnitude stored as it is (see above)
//
% if src_type == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
__kernel __attribute__((reqd_work_group_size(${group}, 1, 1)))
void to_planar(__global const ${src_type} *restrict src, const long base,
               const long sf, const long sy, const long sx, const long sc,
               const int frames, const int rows, const int cols, const int channels,
               __global float *restrict dst, const long dst_base,
               __global uint *restrict check, const int word, const float limit)
{
    __local uint top[${group}];
    const int x = get_global_id(0), y = get_global_id(1), f = get_global_id(2);
    const int lid = get_local_id(0);
    if (x == 0 && y == 0 && f == 0)
        check[1 - word] = 0u;
    uint largest = 0u;
    if (x < cols && y < rows && f < frames) {
        const long pixel = base + f * sf + y * sy + x * sx;
        for (int c = 0; c < channels; ++c) {
            const long at = pixel + c * sc;
% if src_type == "half":
            const float v = vload_half(at, src);
% else:
            const float v = (float)src[at];
% endif
            dst[dst_base + ((long)(f * channels + c) * rows + y) * cols + x] =
                fabs(v) <= limit ? v : 0.0f;
            largest = max(largest, as_uint(fabs(v)));
        }
    }
    top[lid] = largest;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int span = ${group} / 2; span > 0; span >>= 1) {
        if (lid < span)
            top[lid] = max(top[lid], top[lid + span]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && top[0] != 0u)
        atomic_max(check + word, top[0]);
}
