## The index side of the nearest-neighbour field (Oancea et al., Algorithm 1): the reduced
## points and the k-d tree over b's (clpatch/match/nnf/plan.py drives the kernels; the
## algorithm is the module doc of clpatch/match/nnf/search.py; cl_src/match/nnf_search.cl.mako
## searches the tree).
##
##   nnf_sample       the PCA model's sampled patches of an image, as vectors (the host
##                    fits the model on them: a device image is not downloaded whole)
##   nnf_project      patches of an image -> their DR principal components (extraction and
##                    projection fused: no patch matrix is stored)
##   nnf_bounds       per-dimension min / max of b's reduced points (the root's box)
##   nnf_root         the root's split dimension
##   nnf_keys         sort keys of one tree level: (value on the node's split dimension,
##                    position), with the point ids as values
##   nnf_sort_block, nnf_sort_step, nnf_sort_step2, nnf_sort_merge
##                    bitonic sort of (key, value) pairs in aligned power-of-two segments
##   nnf_medians      one level's medians, its children's boxes and split dimensions
##   nnf_leaves       the leaves' points (reduced coordinates, ids) and each point's leaf
##
## Floating point: FP_CONTRACT is off, so every product and sum is rounded on its own and
## the NumPy oracle (tests/reference/nnf.py) reproduces the reduced coordinates and the
## tree bit for bit.
##
## Rendered with: patch (P), channels (C), dims (DR), leaf (LEAF, slots per leaf),
## sort_block (SB, power of two).
<%page args="patch, channels, dims, leaf, sort_block"/>
<%
    P, C, DR, LEAF, SB = patch, channels, dims, leaf, sort_block
%>
#pragma OPENCL FP_CONTRACT OFF

#define P ${P}
#define DR ${DR}
#define LEAF ${LEAF}
#define SB ${SB}
#define NONE INT_MAX

inline uint orderable(const float f)
{
    const uint u = as_uint(f + 0.0f);          // -0 -> +0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The first dimension of largest spread ub - lb (IEEE >: NaN never wins).
inline int widest(__global const float *restrict lo, __global const float *restrict hi)
{
    int dim = 0;
    float best = hi[0] - lo[0];
    for (int k = 1; k < DR; ++k) {
        const float s = hi[k] - lo[k];
        if (s > best) {
            best = s;
            dim = k;
        }
    }
    return dim;
}

// ---------------------------------------------------------------------------------------
// nnf_sample. Launch: global (count * C * P * P rounded up to any local size), local any.
// Work-item g copies element j = (c * P + i) * P + jj of sample s (g = s * C * P * P + j):
// pixel (y + i, x + jj) of channel c of the image's patch picks[s] (patch index
// y * (W - P + 1) + x), to out[(first + s) * C * P * P + j].
__kernel void nnf_sample(__global const float *restrict img, const int H, const int W,
                         __global const int *restrict picks, const int count, const int first,
                         __global float *restrict out)
{
    const int D = ${C} * P * P;
    const int g = get_global_id(0);
    if (g >= count * D)
        return;
    const int s = g / D, j = g - (g / D) * D;
    const int c = j / (P * P), i = (j / P) % P, jj = j % P;
    const int Wc = W - P + 1;
    const int q = picks[s];
    const int y = q / Wc, x = q - (q / Wc) * Wc;
    out[(long)(first + s) * D + j] = img[((long)c * H + y + i) * W + x + jj];
}

// nnf_project. Launch: global (count rounded up to any local size), local any.
// Work-item i projects patch first + i of an image: img planar float img[(c * H + y) * W + x],
// patch index = y * (W - P + 1) + x; out[patch * DR + k] = sum_j (pixel_j - mean[j]) *
// basis[j * DR + k], j = (c * P + i) * P + jj in order.
__kernel void nnf_project(__global const float *restrict img, const int H, const int W,
                          __global const float *restrict mean,
                          __global const float *restrict basis, const int first,
                          const int count, __global float *restrict out)
{
    const int g = get_global_id(0);
    if (g >= count)
        return;
    const int q = first + g;
    const int Wc = W - P + 1;
    const int y = q / Wc, x = q - (q / Wc) * Wc;
% for k in range(DR):
    float acc${k} = 0.0f;
% endfor
    int j = 0;
    for (int c = 0; c < ${C}; ++c)
        for (int i = 0; i < P; ++i) {
            __global const float *row = img + ((long)c * H + y + i) * W + x;
            for (int jj = 0; jj < P; ++jj, ++j) {
                const float t = row[jj] - mean[j];
                __global const float *b = basis + j * DR;
% for k in range(DR):
                acc${k} = acc${k} + t * b[${k}];
% endfor
            }
        }
% for k in range(DR):
    out[(long)q * DR + ${k}] = acc${k};
% endfor
}

// ---------------------------------------------------------------------------------------
// nnf_bounds. Launch: global (256, DR), local (256, 1). Group k writes lo[DR + k] and
// hi[DR + k] (heap node 1) = min and max of r[p * DR + k] over the Nb points.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void nnf_bounds(__global const float *restrict r, const int Nb, __global float *restrict lo,
                __global float *restrict hi)
{
    __local float smin[256], smax[256];
    const int lid = get_local_id(0), k = get_global_id(1);
    float a = INFINITY, b = -INFINITY;
    for (int p = lid; p < Nb; p += 256) {
        const float v = r[(long)p * DR + k];
        a = fmin(a, v);
        b = fmax(b, v);
    }
    smin[lid] = a;
    smax[lid] = b;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 128; s > 0; s >>= 1) {
        if (lid < s) {
            smin[lid] = fmin(smin[lid], smin[lid + s]);
            smax[lid] = fmax(smax[lid], smax[lid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        lo[DR + k] = smin[0];
        hi[DR + k] = smax[0];
    }
}

// nnf_root. Launch: global (1), local (1). dims[1] = the root's split dimension.
__kernel void nnf_root(__global const float *restrict lo, __global const float *restrict hi,
                       __global int *restrict dims)
{
    dims[1] = widest(lo + DR, hi + DR);
}

// ---------------------------------------------------------------------------------------
// nnf_keys. Launch: global (N_pad), local any dividing it. Level l: node of position pos is
// h = 2^l + (pos >> seg_log2); keys[pos] = (orderable(value of order[pos] on dims[h]) << 32)
// | pos (padding, id >= Nb: +inf), so a sort keeps equal values in their current order. At
// level 0 the order starts as the identity: order[pos] = pos is written here.
__kernel void nnf_keys(__global const float *restrict r, const int Nb,
                       __global const int *restrict dims, const int level,
                       const int seg_log2, __global int *restrict order,
                       __global ulong *restrict keys)
{
    const int pos = get_global_id(0);
    const int h = (1 << level) + (pos >> seg_log2);
    const int pid = level == 0 ? pos : order[pos];
    if (level == 0)
        order[pos] = pos;
    const float v = pid < Nb ? r[(long)pid * DR + dims[h]] : INFINITY;
    keys[pos] = ((ulong)orderable(v) << 32) | (uint)pos;
}

// ---------------------------------------------------------------------------------------
// Bitonic sort, ascending, of (keys, vals) in aligned segments of 2^seg_log2 pairs, all
// keys distinct. A phase of size m (a power of two, up to the segment) first compares
// i with i ^ (m - 1) ("flip"), then i with i ^ s for s = m/4 ... 1.
//   nnf_sort_block: launch global (N_pad / 2), local (SB / 2); group g sorts the block of
//     SB pairs (or of 2^block_log2 < SB pairs, several per group) completely, in local
//     memory: all phases up to the block.
//   nnf_sort_step: launch global (N_pad / 2), local any; one compare-exchange step of phase
//     m = 2^m_log2 (flip when s_log2 < 0, else stride 2^s_log2), across global memory.
//   nnf_sort_step2: two consecutive strides of a phase in one pass (below).
//   nnf_sort_merge: launch global (N_pad / 2), local (SB / 2); the strides SB/2 ... 1 of a
//     phase in local memory, each group on its block of SB pairs.
inline void exchange(__local ulong *k, __local int *v, const int a, const int b)
{
    const ulong ka = k[a], kb = k[b];
    if (kb < ka) {
        k[a] = kb;
        k[b] = ka;
        const int t = v[a];
        v[a] = v[b];
        v[b] = t;
    }
}

__kernel __attribute__((reqd_work_group_size(SB / 2, 1, 1)))
void nnf_sort_block(__global ulong *restrict keys, __global int *restrict vals,
                    const int block_log2)
{
    __local ulong lk[SB];
    __local int lv[SB];
    const int lid = get_local_id(0);
    const long base = (long)get_group_id(0) * SB;
    for (int e = lid; e < SB; e += SB / 2) {
        lk[e] = keys[base + e];
        lv[e] = vals[base + e];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int m = 2; m <= (1 << block_log2); m <<= 1) {
        {   // flip: pair e = (lower index i, i ^ (m - 1))
            const int hm = m >> 1;
            const int d = lid / hm;     // not lid % hm: LLVM turns a div/rem pair into
            const int i = d * m + (lid - d * hm);   // freeze, which Oclgrind cannot run
            exchange(lk, lv, i, i ^ (m - 1));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = m >> 2; s > 0; s >>= 1) {
            const int d = lid / s;
            const int i = d * 2 * s + (lid - d * s);
            exchange(lk, lv, i, i + s);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    for (int e = lid; e < SB; e += SB / 2) {
        keys[base + e] = lk[e];
        vals[base + e] = lv[e];
    }
}

__kernel void nnf_sort_step(__global ulong *restrict keys, __global int *restrict vals,
                            const int m_log2, const int s_log2)
{
    const long t = get_global_id(0);
    long a, b;
    if (s_log2 < 0) {
        const long hm = 1L << (m_log2 - 1);
        a = (t >> (m_log2 - 1)) * (hm << 1) + (t & (hm - 1));
        b = a ^ ((1L << m_log2) - 1);
    } else {
        const long s = 1L << s_log2;
        a = (t >> s_log2) * (s << 1) + (t & (s - 1));
        b = a + s;
    }
    const ulong ka = keys[a], kb = keys[b];
    if (kb < ka) {
        keys[a] = kb;
        keys[b] = ka;
        const int v = vals[a];
        vals[a] = vals[b];
        vals[b] = v;
    }
}

// nnf_sort_step2: launch global (N_pad / 4), local any; the strides 2^s_log2 and then
// 2^(s_log2 - 1) of a phase in one pass, each work-item on four pairs' elements.
inline void exchange_global(__global ulong *keys, __global int *vals, const long a,
                            const long b)
{
    const ulong ka = keys[a], kb = keys[b];
    if (kb < ka) {
        keys[a] = kb;
        keys[b] = ka;
        const int v = vals[a];
        vals[a] = vals[b];
        vals[b] = v;
    }
}

__kernel void nnf_sort_step2(__global ulong *restrict keys, __global int *restrict vals,
                             const int s_log2)
{
    const long t = get_global_id(0);
    const long s = 1L << s_log2, h = s >> 1;
    // t's bits below s_log2 - 1 stay; bits s_log2 - 1 and s_log2 of the element are 0.
    const long base = ((t >> (s_log2 - 1)) << (s_log2 + 1)) + (t & (h - 1));
    exchange_global(keys, vals, base, base + s);
    exchange_global(keys, vals, base + h, base + s + h);
    exchange_global(keys, vals, base, base + h);
    exchange_global(keys, vals, base + s, base + s + h);
}

__kernel __attribute__((reqd_work_group_size(SB / 2, 1, 1)))
void nnf_sort_merge(__global ulong *restrict keys, __global int *restrict vals)
{
    __local ulong lk[SB];
    __local int lv[SB];
    const int lid = get_local_id(0);
    const long base = (long)get_group_id(0) * SB;
    for (int e = lid; e < SB; e += SB / 2) {
        lk[e] = keys[base + e];
        lv[e] = vals[base + e];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = SB / 2; s > 0; s >>= 1) {
        const int d = lid / s;
        const int i = d * 2 * s + (lid - d * s);
        exchange(lk, lv, i, i + s);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int e = lid; e < SB; e += SB / 2) {
        keys[base + e] = lk[e];
        vals[base + e] = lv[e];
    }
}

// ---------------------------------------------------------------------------------------
// nnf_medians. Launch: global (2^level rounded up to any local size), local any. Node
// h = 2^level + n owns positions [n S, (n + 1) S), S = 2^seg_log2, sorted on dims[h]:
// med[h] = the value of the point at n S + S/2 - 1 (the left half's last); when the level
// is not the last (children = 1), the children's boxes (lo/hi[h' * DR + k]) and split
// dimensions.
__kernel void nnf_medians(__global const float *restrict r, const int Nb,
                          __global const int *restrict order, const int level,
                          const int seg_log2, const int children,
                          __global int *restrict dims, __global float *restrict med,
                          __global float *restrict lo, __global float *restrict hi)
{
    const int n = get_global_id(0);
    if (n >= (1 << level))
        return;
    const int h = (1 << level) + n;
    const int dim = dims[h];
    const int pid = order[((long)n << seg_log2) + (1 << (seg_log2 - 1)) - 1];
    const float m = pid < Nb ? r[(long)pid * DR + dim] : INFINITY;
    med[h] = m;
    if (!children)
        return;
    for (int c = 0; c < 2; ++c) {
        const int child = 2 * h + c;
        for (int k = 0; k < DR; ++k) {
            lo[child * DR + k] = (c == 1 && k == dim) ? m : lo[h * DR + k];
            hi[child * DR + k] = (c == 0 && k == dim) ? m : hi[h * DR + k];
        }
        dims[child] = widest(lo + child * DR, hi + child * DR);
    }
}

// nnf_leaves. Launch: global (N_pad), local any. Position pos of the sorted order: leaf
// pos / LEAF; leaf_pts[pos * DR + k] its point's coordinates (padding: +inf), leaf_pid[pos]
// its id; leaf_of[id] = pos / LEAF for real points.
__kernel void nnf_leaves(__global const float *restrict r, const int Nb,
                         __global const int *restrict order, __global float *restrict leaf_pts,
                         __global int *restrict leaf_pid, __global int *restrict leaf_of)
{
    const int pos = get_global_id(0);
    const int pid = order[pos];
    leaf_pid[pos] = pid < Nb ? pid : NONE;
    for (int k = 0; k < DR; ++k)
        leaf_pts[(long)pos * DR + k] = pid < Nb ? r[(long)pid * DR + k] : INFINITY;
    if (pid < Nb)
        leaf_of[pid] = pos / LEAF;
}
