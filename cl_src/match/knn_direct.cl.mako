## Exhaustive patch kNN by direct distances, for any metric: "l2", "l1", "chamfer" (Tang
## et al. eq. 4, one way: for each pixel of the query patch Q, the smallest L-infinity
## offset to a pixel of the candidate R with an equal label, or 2 (P - 1) when R has none,
## summed over Q's pixels; a label is the pixel's value, all channels equal) and
## "chamfer_sym" (Q -> R plus R -> Q). Every work-item owns one query patch (kept in private
## memory) and its heap; the work-items of a work-group walk the same candidates in the
## same order, so each candidate patch is read once per work-group (uniform loads) into
## private memory. A candidate is dropped as soon as its partial sum exceeds the heap's
## largest distance (every term is >= 0).
##
## Rendered with: patch (P), channels (C), metric, group (LX); k is an argument.
<%page args="patch, channels, metric, group"/>
<%namespace name="tk" file="/lib/topk.mako"/>\
<%
    P, C, LX = patch, channels, group
    PP = P * P
%>
//
// Launch: global (grid columns rounded up to ${LX}, grid rows of the launch, splits),
// local (${LX}, 1, 1); work-item (x, r, s) is grid point (g_first + r, x); split s takes
// the s-th part of the launch's candidates into its own heaps (split_stride slots
// apart; knn_finish.cl.mako merges them).
// Arguments:
//   qimg, Hq, Wq        query image, planar float qimg[(c * Hq + y) * Wq + x]
//   rimg, Hr, Wr        reference image, the same layout (may be qimg)
//   grid_y, grid_x      top-left row of every grid row, column of every grid column
//   g_first, g0, gx     first grid row of the launch, first grid row of the heaps' block,
//                       grid columns
//   c_lo, c_hi          candidate indices of this launch (index = cy * (Wr - P + 1) + cx)
//   split_stride        heap slots between two splits' heap sets
//   K, S                neighbours kept per query, slots per heap
//   h                   heaps (lib/topk.mako), the grid point's at slot ((grid row - g0) *
//                       gx + col) * S + s * split_stride
//
${tk.functions()}

#define P ${P}

__kernel __attribute__((reqd_work_group_size(${LX}, 1, 1)))
void knn_direct(__global const float *restrict qimg, const int Hq, const int Wq,
                __global const float *restrict rimg, const int Hr, const int Wr,
                __global const int *restrict grid_y, __global const int *restrict grid_x,
                const int g_first, const int g0, const int gx, const int c_lo, const int c_hi,
                const int split_stride, const int K, const int S,
                __global ulong *restrict h)
{
    const int col = get_global_id(0), g = g_first + get_global_id(1);
    const bool mine = col < gx;
    const int qy = grid_y[g], qx = grid_x[min(col, gx - 1)];
    const int heap = ((g - g0) * gx + col) * S + get_group_id(2) * split_stride;
    float q[${PP * C}];
    for (int c = 0; c < ${C}; ++c)
        for (int i = 0; i < P; ++i)
            for (int j = 0; j < P; ++j)
                q[(c * P + i) * P + j] = qimg[(c * Hq + qy + i) * Wq + qx + j];
    float root_d = INFINITY;
    int root_i = INT_MAX;
    if (mine) {
        const ulong root = h[heap + TOPK_BASE];
        root_d = topk_dist(root);
        root_i = topk_index(root);
    }
    const int Wc = Wr - P + 1;
    const int part = (c_hi - c_lo + get_num_groups(2) - 1) / get_num_groups(2);
    const int first = c_lo + get_group_id(2) * part, end = min(c_hi, first + part);
    for (int idx = first; idx < end; ++idx) {
        const int cy = idx / Wc, cx = idx - cy * Wc;
        float r[${PP * C}];
        for (int c = 0; c < ${C}; ++c)
            for (int i = 0; i < P; ++i)
                for (int j = 0; j < P; ++j)
                    r[(c * P + i) * P + j] = rimg[(c * Hr + cy + i) * Wr + cx + j];
        if (!mine)
            continue;
        float d = 0.0f;
% if metric in ("l2", "l1"):
        for (int i = 0; i < P && d <= root_d; ++i) {
            for (int c = 0; c < ${C}; ++c) {
                for (int j = 0; j < P; ++j) {
                    const float t = q[(c * P + i) * P + j] - r[(c * P + i) * P + j];
%   if metric == "l2":
                    d += t * t;
%   else:
                    d += fabs(t);
%   endif
                }
            }
        }
% else:
%   if metric == "chamfer_sym":
        float back[${PP}];
        for (int e = 0; e < ${PP}; ++e)
            back[e] = ${2 * (P - 1)}.0f;
%   endif
        for (int i = 0; i < P && d <= root_d; ++i) {
            for (int j = 0; j < P; ++j) {
                float best = ${2 * (P - 1)}.0f;
                for (int y = 0; y < P; ++y) {
                    for (int x = 0; x < P; ++x) {
                        bool same = true;
                        for (int c = 0; c < ${C}; ++c)
                            same = same && q[(c * P + i) * P + j] == r[(c * P + y) * P + x];
                        const float off = (float)max(abs(i - y), abs(j - x));
                        best = same ? fmin(best, off) : best;
%   if metric == "chamfer_sym":
                        back[y * P + x] = same ? fmin(back[y * P + x], off) : back[y * P + x];
%   endif
                    }
                }
                d += best;
            }
        }
%   if metric == "chamfer_sym":
        if (d <= root_d)
            for (int e = 0; e < ${PP}; ++e)
                d += back[e];
%   endif
% endif
        if (topk_before(d, idx, root_d, root_i)) {
            const ulong root = topk_replace(h + heap, K, topk_key(d, idx));
            root_d = topk_dist(root);
            root_i = topk_index(root);
        }
    }
}
