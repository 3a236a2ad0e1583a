## The last step of the exhaustive kNN for a block of grid rows: the heaps of the search's
## splits are merged into the first (lib/topk.mako), which is sorted, its distances are re-scored exactly with direct sums over the patch (for "l2" and
## "l1": the offsets engine keeps sliding sums, the GEMM engine expanded squares), sorted
## again by (distance, candidate index), and written as Matches (lib/matches.mako).
## Chamfer distances are sums of small integers, exact already: only sorted.
##
## Rendered with: patch (P), channels (C), metric, rescore (bool), group (LX); k is an
## argument.
<%page args="patch, channels, metric, rescore, group"/>
<%namespace name="tk" file="/lib/topk.mako"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    P, C, LX = patch, channels, group
%>
//
// Launch: global (gx rounded up to ${LX}, grid rows of the block), local (${LX}, 1);
// work-item (col, r) finishes grid point (g0 + r, col).
// Arguments:
//   qimg, Hq, Wq, rimg, Hr, Wr   the images (planar float), as for the search kernels
//   grid_y, grid_x      top-left row of every grid row, column of every grid column
//   g0, gx              first grid row of the block, grid columns
//   K, K_out            entries per heap; neighbours written (K_out <= K: an engine whose
//                       values are not exact keeps a margin of candidates, re-scored here)
//   hd, hi              the block's heaps, K entries per grid point ((g - g0) * gx + col) * K,
//                       `splits` sets of them split_stride entries apart
//   out_pos, out_dist   Matches buffers of out_gy grid rows; grid row g goes to row
//                       g - g0 + out_row0
//   knn_clear (launch: global `count` rounded up to ${LX}, local ${LX}) empties `count`
//   heap entries before a block's search: (INFINITY, INT_MAX) each.
//
${tk.functions()}

__kernel __attribute__((reqd_work_group_size(${LX}, 1, 1)))
void knn_clear(__global float *restrict hd, __global int *restrict hi, const int count)
{
    const int e = get_global_id(0);
    if (e < count) {
        hd[e] = INFINITY;
        hi[e] = INT_MAX;
    }
}

#define P ${P}

__kernel __attribute__((reqd_work_group_size(${LX}, 1, 1)))
void knn_finish(__global const float *restrict qimg, const int Hq, const int Wq,
                __global const float *restrict rimg, const int Hr, const int Wr,
                __global const int *restrict grid_y, __global const int *restrict grid_x,
                const int g0, const int gx, const int splits, const int split_stride,
                const int K, const int K_out,
                __global float *restrict hd,
                __global int *restrict hi, __global int *restrict out_pos,
                __global float *restrict out_dist, const int out_row0)
{
    const int col = get_global_id(0), r = get_global_id(1);
    if (col >= gx)
        return;
    const int heap = (r * gx + col) * K;
    __global float *d = hd + heap;
    __global int *ix = hi + heap;
    const int Wc = Wr - P + 1;
    for (int s = 1; s < splits; ++s) {
        __global const float *od = d + s * split_stride;
        __global const int *oi = ix + s * split_stride;
        for (int e = 0; e < K; ++e)
            if (topk_before(od[e], oi[e], d[0], ix[0]))
                topk_replace(d, ix, K, od[e], oi[e]);
    }
    topk_sort(d, ix, K);
% if rescore:
    const int qy = grid_y[g0 + r], qx = grid_x[col];
    for (int e = 0; e < K; ++e) {
        const int cy = ix[e] / Wc, cx = ix[e] - (ix[e] / Wc) * Wc;
        float s = 0.0f;
        for (int i = 0; i < P; ++i)
            for (int c = 0; c < ${C}; ++c)
                for (int j = 0; j < P; ++j) {
                    const float t = qimg[(c * Hq + qy + i) * Wq + qx + j]
                                    - rimg[(c * Hr + cy + i) * Wr + cx + j];
%   if metric == "l2":
                    s += t * t;
%   else:
                    s += fabs(t);
%   endif
                }
        d[e] = s;
    }
    // Insertion sort by (distance, index): the keys moved by at most rounding.
    for (int e = 1; e < K; ++e) {
        const float kd = d[e];
        const int ki = ix[e];
        int at = e;
        while (at > 0 && topk_before(kd, ki, d[at - 1], ix[at - 1])) {
            d[at] = d[at - 1];
            ix[at] = ix[at - 1];
            --at;
        }
        d[at] = kd;
        ix[at] = ki;
    }
% endif
    const int ref = ${mt.ref("out_row0 + r", "col", "gx")};
    for (int e = 0; e < K_out; ++e) {
        const int at = ${mt.entry("ref", "K_out", "e")};
        const int cy = ix[e] / Wc;
        ${mt.dist("out_dist", "at")} = d[e];
        ${mt.pos_y("out_pos", "at", 2)} = cy;
        ${mt.pos_x("out_pos", "at", 2)} = ix[e] - cy * Wc;
    }
}
