## The last step of the exhaustive kNN for a block of grid rows: the heaps of the search's
## splits (lib/topk.mako) are merged, sorted, their distances re-scored exactly with direct
## sums over the patch (for "l2" and "l1": the offsets engine keeps sliding sums, the GEMM
## engine expanded squares), sorted again by (distance, candidate index), and the first
## K_out are written as Matches (lib/matches.mako). Chamfer distances are sums of small
## integers, exact already: only sorted.
##
## Two kernels do it, with the same result:
##   knn_finish         one work-item per grid point: the splits' heaps are pushed into the
##                      first, which is heap-sorted in place (few entries: small k);
##   knn_finish_sorted  one work-group per grid point: every split's heap is loaded into
##                      local memory and sorted there by a bitonic network, the K smallest
##                      of all placed by their ranks among the sorted heaps, re-scored by
##                      the work-items in parallel and sorted again (rendered when
##                      `sorted_max` > 0: splits * K rounded up to a power of two <=
##                      sorted_max).
##
## Rendered with: patch (P), channels (C), metric, rescore (bool), group (LX), sorted_max (a
## power of two, or 0), sorted_group (SG: knn_finish_sorted's work-items); k is an argument.
<%page args="patch, channels, metric, rescore, group, sorted_max=0, sorted_group=64"/>
<%namespace name="tk" file="/lib/topk.mako"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    P, C, LX, SM, SG = patch, channels, group, sorted_max, sorted_group
    if SM & (SM - 1):
        raise ValueError("sorted_max must be a power of two")
%>
//
// knn_finish. Launch: global (gx rounded up to ${LX}, grid rows of the block), local
// (${LX}, 1); work-item (col, r) finishes grid point (g0 + r, col).
// knn_finish_sorted. Launch: global (${SG} * gx, grid rows of the block), local (${SG}, 1);
// work-group (col, r) finishes grid point (g0 + r, col).
// Arguments (both):
//   qimg, Hq, Wq, rimg, Hr, Wr   the images (planar float), as for the search kernels
//   grid_y, grid_x      top-left row of every grid row, column of every grid column
//   g0, gx              first grid row of the block, grid columns
//   splits, split_stride  heap sets per grid point, slots between two sets
//   K, S, K_out         entries per heap, slots per heap; neighbours written (K_out <= K:
//                       an engine whose values are not exact keeps a margin of candidates,
//                       re-scored here)
//   h                   the block's heaps, the grid point's first at slot ((g - g0) * gx +
//                       col) * S
//   out_pos, out_dist   Matches buffers of out_gy grid rows; grid row g goes to row
//                       g - g0 + out_row0
// knn_clear. Launch: global `count` rounded up to ${LX}, local ${LX}: empties `count` heap
//   slots before a block's search (TOPK_EMPTY each).
//
${tk.functions()}

__kernel __attribute__((reqd_work_group_size(${LX}, 1, 1)))
void knn_clear(__global ulong *restrict h, const int count)
{
    const int e = get_global_id(0);
    if (e < count)
        h[e] = TOPK_EMPTY;
}

#define P ${P}

// The exact distance between the query patch at (qy, qx) and candidate `idx`.
inline float exact_distance(__global const float *restrict qimg, const int Hq, const int Wq,
                            __global const float *restrict rimg, const int Hr, const int Wr,
                            const int qy, const int qx, const int idx)
{
    const int Wc = Wr - P + 1;
    const int cy = idx / Wc, cx = idx - (idx / Wc) * Wc;
    float s = 0.0f;
    for (int i = 0; i < P; ++i)
        for (int c = 0; c < ${C}; ++c)
            for (int j = 0; j < P; ++j) {
                const float t = qimg[(c * Hq + qy + i) * Wq + qx + j]
                                - rimg[(c * Hr + cy + i) * Wr + cx + j];
% if metric == "l2":
                s += t * t;
% else:
                s += fabs(t);
% endif
            }
    return s;
}

## Writes the first K_out of `keys` (ascending) as grid point (out_row0 + r, col), one
## work-item (parallel: the work-group's) for all of them.
<%def name="write(keys, parallel)">\
    const int Wc = Wr - P + 1;
    const int ref = ${mt.ref("out_row0 + r", "col", "gx")};
    for (int e = ${"lid" if parallel else "0"}; e < K_out; e += ${SG if parallel else 1}) {
        const int at = ${mt.entry("ref", "K_out", "e")};
        const ulong key = ${keys}[e];
        const int idx = topk_index(key), cy = idx / Wc;
        ${mt.dist("out_dist", "at")} = topk_dist(key);
        ${mt.pos_y("out_pos", "at", 2)} = cy;
        ${mt.pos_x("out_pos", "at", 2)} = idx - cy * Wc;
    }
</%def>

__kernel __attribute__((reqd_work_group_size(${LX}, 1, 1)))
void knn_finish(__global const float *restrict qimg, const int Hq, const int Wq,
                __global const float *restrict rimg, const int Hr, const int Wr,
                __global const int *restrict grid_y, __global const int *restrict grid_x,
                const int g0, const int gx, const int splits, const int split_stride,
                const int K, const int S, const int K_out, __global ulong *restrict h,
                __global int *restrict out_pos, __global float *restrict out_dist,
                const int out_row0)
{
    const int col = get_global_id(0), r = get_global_id(1);
    if (col >= gx)
        return;
    __global ulong *heap = h + (r * gx + col) * S;
    for (int s = 1; s < splits; ++s) {
        __global const ulong *other = heap + s * split_stride + TOPK_BASE;
        for (int e = 0; e < K; ++e)
            if (other[e] < heap[TOPK_BASE])
                topk_replace(heap, K, other[e]);
    }
    topk_sort(heap, K);
    __global ulong *keys = heap + TOPK_BASE;
% if rescore:
    const int qy = grid_y[g0 + r], qx = grid_x[col];
    for (int e = 0; e < K; ++e) {
        const int idx = topk_index(keys[e]);
        keys[e] = topk_key(exact_distance(qimg, Hq, Wq, rimg, Hr, Wr, qy, qx, idx), idx);
    }
    // Insertion sort: the keys moved by at most rounding.
    for (int e = 1; e < K; ++e) {
        const ulong key = keys[e];
        int at = e;
        while (at > 0 && key < keys[at - 1]) {
            keys[at] = keys[at - 1];
            --at;
        }
        keys[at] = key;
    }
% endif
${write("keys", False)}
}
% if SM:

// Sorts each block of `block` keys (a power of two) of the n keys of `keys` ascending: a
// bitonic network, ${SG} work-items each taking compare-exchanges i, i + ${SG}, ... of a step.
void sort_blocks(__local ulong *keys, const int n, const int block)
{
    const int lid = get_local_id(0);
    for (int size = 2; size <= block; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = lid; t < n / 2; t += ${SG}) {
                const int a = 2 * t - (t & (stride - 1)), b = a + stride;
                const bool up = size == block || (a & size) == 0;
                const ulong ka = keys[a], kb = keys[b];
                if ((ka > kb) == up) {
                    keys[a] = kb;
                    keys[b] = ka;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}

// The number of the first `count` keys of the ascending `keys` that are before `key`.
inline int keys_before(__local const ulong *keys, const int count, const ulong key)
{
    int lo = 0, hi = count;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

__kernel __attribute__((reqd_work_group_size(${SG}, 1, 1)))
void knn_finish_sorted(__global const float *restrict qimg, const int Hq, const int Wq,
                       __global const float *restrict rimg, const int Hr, const int Wr,
                       __global const int *restrict grid_y, __global const int *restrict grid_x,
                       const int g0, const int gx, const int splits, const int split_stride,
                       const int K, const int S, const int K_out, __global ulong *restrict h,
                       __global int *restrict out_pos, __global float *restrict out_dist,
                       const int out_row0)
{
    // Every split's heap as a block of KP keys (K rounded up to a power of two), each block
    // sorted; the K smallest of all go to `best` at their ranks.
    __local ulong keys[${SM}];
    __local ulong best[${SM}];
    const int col = get_group_id(0), r = get_global_id(1), lid = get_local_id(0);
    __global const ulong *heap = h + (r * gx + col) * S + TOPK_BASE;
    int KP = 1;
    while (KP < K)
        KP <<= 1;
    const int n = splits * KP;
    for (int e = lid; e < n; e += ${SG}) {
        const int s = e / KP, i = e - s * KP;
        keys[e] = i < K ? heap[s * split_stride + i] : TOPK_EMPTY;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    sort_blocks(keys, n, KP);
    // A key's rank: its place in its block plus the keys before it in the other blocks
    // (keys of different splits differ; the empty ones rank from K on, past every real
    // key, as the splits hold K real keys at least).
    for (int e = lid; e < n; e += ${SG}) {
        const int s = e / KP, i = e - s * KP;
        if (i >= K)
            continue;
        const ulong key = keys[e];
        int rank = i;
        for (int o = 0; o < splits && rank < K; ++o)
            if (o != s)
                rank += keys_before(keys + o * KP, K, key);
        if (rank < K)
            best[rank] = key;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
% if rescore:
    // The K smallest re-scored (entries K ... KP emptied), sorted again.
    const int qy = grid_y[g0 + r], qx = grid_x[col];
    for (int e = lid; e < KP; e += ${SG}) {
        if (e < K) {
            const int idx = topk_index(best[e]);
            best[e] = topk_key(exact_distance(qimg, Hq, Wq, rimg, Hr, Wr, qy, qx, idx), idx);
        } else {
            best[e] = TOPK_EMPTY;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    sort_blocks(best, KP, KP);
% endif
${write("best", True)}
}
% endif
