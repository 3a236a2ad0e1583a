## Exhaustive patch kNN by offsets (L2 and L1): for one offset (dy, dx) between the query
## image and the reference, the distances of all query patches to the candidates at that
## offset are box sums of one difference image D(y, x) = sum over channels of
## (Q(y, x) - R(y + dy, x + dx))^2 (|.| for L1), so each (query, candidate) pair costs a few
## additions whatever the patch size. A work-group owns a TY x TX tile of query positions,
## keeps the tile's query pixels in local memory, and walks every offset that reaches a
## valid candidate for some position of the tile, G x OBX offsets (consecutive dy, dx) at a
## time:
##   A  column sums  c[o][r][x] = sum_{j<P} D(r + j, x), one work-item per (dx, column) for
##      the G dy (a reference pixel it loads serves G offsets), sliding down the TY rows;
##   B  box sums     b[o][r][x] = sum_{i<P} c[o][r][x + i], one work-item per (offset, row,
##      segment of the row), sliding along it;
##   C  each work-item (one query position) offers the pass's G x OBX distances to its heap.
## Distances here are sliding sums (exact for integer-valued images, within float32 rounding
## otherwise): knn_finish.cl.mako re-scores the k kept candidates with direct sums.
##
## Rendered with: patch (P), channels (C), metric ("l2" | "l1"), tile_x (TX), tile_y (TY),
## offsets (OBX: consecutive dx per pass), dys (G: consecutive dy per pass). The number of
## neighbours k is an argument (one program serves every k).
<%page args="patch, channels, metric, tile_x, tile_y, offsets, dys=1"/>
<%namespace name="tk" file="/lib/topk.mako"/>\
<%
    P, C, TX, TY, OBX, G = patch, channels, tile_x, tile_y, offsets, dys
    OB = OBX * G             # offsets per pass: G consecutive dy times OBX consecutive dx
    CW = TX + P - 1          # columns of the tile's pixel block
    RH = TY + P - 1          # rows of the tile's pixel block
    WG = TX * TY
    SEG = 2 if OB * TY * 2 <= WG else 1    # stage B: segments per row
    SL = TX // SEG                          # box sums per segment
%>
//
// Launch: global (tiles_x * ${TX}, tiles_y * ${TY}, splits), local (${TX}, ${TY}, 1);
// work-item (lx, ly) of tile (bx, by) is the query position (qy0 + by * ${TY} + ly,
// bx * ${TX} + lx). The tile's offsets dy, in groups of ${G}, are shared among `splits`
// work-groups (layer s takes every splits-th group), each with its own heaps (split_stride
// entries apart), so small images still fill a large GPU; knn_finish.cl.mako merges them.
// A work-group visits its groups nearest dy = 0 first: on a self-search the best candidates
// come early, the heaps' thresholds fall fast and later candidates rarely enter.
// Arguments:
//   qimg, Hq, Wq        query image, planar float qimg[(c * Hq + y) * Wq + x]
//   rimg, Hr, Wr        reference image, the same layout (may be qimg)
//   grid_row, grid_col  per query position row / column: its grid index, or -1 off the grid
//   qy0                 first query position row of this launch (tiles_y tiles below it)
//   g0, g1, gx          grid rows [g0, g1) of the heaps' block (positions on other grid
//                       rows are computed, not offered), grid columns
//   dy_lo, dy_hi        offsets dy of this launch (a piece of the full range)
//   split_stride        heap entries between two splits' heap sets
//   K                   neighbours kept per query
//   hd, hi              heaps, K entries per grid point ((grid row - g0) * gx + grid col) * K
//                       (+ s * split_stride for split s), see lib/topk.mako; candidate
//                       index = cy * (Wr - P + 1) + cx
//
${tk.functions()}

#define P ${P}

__kernel __attribute__((reqd_work_group_size(${TX}, ${TY}, 1)))
void knn_offsets(__global const float *restrict qimg, const int Hq, const int Wq,
                 __global const float *restrict rimg, const int Hr, const int Wr,
                 __global const int *restrict grid_row, __global const int *restrict grid_col,
                 const int qy0, const int g0, const int g1, const int gx, const int dy_lo,
                 const int dy_hi, const int split_stride, const int K,
                 __global float *restrict hd, __global int *restrict hi)
{
    __local float qt[${C * RH * CW}];
    __local float cs[${OB * TY * CW}];
    __local float bs[${OB * TY * TX}];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int lid = ly * ${TX} + lx;
    const int bx0 = get_group_id(0) * ${TX};
    const int by0 = qy0 + get_group_id(1) * ${TY};
    const int Hc = Hr - P + 1, Wc = Wr - P + 1;        // candidate positions
    const int Hp = Hq - P + 1, Wp = Wq - P + 1;        // query positions
    const int plane = Hr * Wr;

    // The tile's query pixels (clamped at the image's edges: positions beyond them are
    // computed but never offered).
    for (int e = lid; e < ${C * RH * CW}; e += ${WG}) {
        const int c = e / ${RH * CW}, rest = e - c * ${RH * CW};
        const int r = rest / ${CW}, x = rest - r * ${CW};
        const int y = min(by0 + r, Hq - 1), xx = min(bx0 + x, Wq - 1);
        qt[e] = qimg[(c * Hq + y) * Wq + xx];
    }

    // This work-item's query and heap.
    const int qy = by0 + ly, qx = bx0 + lx;
    int heap = -1;
    if (qy < Hp && qx < Wp) {
        const int gr = grid_row[qy], gc = grid_col[qx];
        if (gr >= g0 && gr < g1 && gc >= 0)
            heap = ((gr - g0) * gx + gc) * K + get_group_id(2) * split_stride;
    }
    float root_d = INFINITY;
    int root_i = INT_MAX;
    if (heap >= 0) {
        root_d = hd[heap];
        root_i = hi[heap];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Offsets that reach a candidate from some position of the tile.
    const int y_hi = min(by0 + ${TY - 1}, Hp - 1), x_hi = min(bx0 + ${TX - 1}, Wp - 1);
    const int dy0 = max(dy_lo, -y_hi), dy1 = min(dy_hi, Hc - by0);
    const int dx0 = -x_hi, dx1 = Wc - bx0;
    // This split's offsets: groups of ${G} consecutive dy, every splits-th group of
    // [dy0, dy1), visited from the group nearest dy = 0 outwards (every split meets the
    // near offsets first).
    const int splits = get_num_groups(2), split = get_group_id(2);
    const int groups = (max(dy1 - dy0, 0) + ${G - 1}) / ${G};
    const int centre = clamp(-dy0 / ${G}, 0, max(groups - 1, 0));
    for (int t = 0; t < 2 * groups; ++t) {
        const int gi = centre + ((t & 1) ? (t + 1) / 2 : -(t / 2));
        if (gi < 0 || gi >= groups || gi % splits != split)
            continue;
        const int dyb = dy0 + gi * ${G};        // offsets dyb ... dyb + ${G - 1} (< dy1 used)
        for (int dxb = dx0; dxb < dx1; dxb += ${OBX}) {
            // A: column sums of ${G} dy x ${OBX} dx offsets; a work-item takes one dx and
            // one column for all ${G} dy, so each pixel it loads serves ${G} offsets.
            for (int item = lid; item < ${OBX * CW}; item += ${WG}) {
                const int ox = item / ${CW}, x = item - ox * ${CW};
                __global const float *rcol = rimg + clamp(bx0 + x + dxb + ox, 0, Wr - 1);
                __local const float *qcol = qt + x;
                // Rows of the candidate block: clamped only where it leaves the image.
                const int ry0 = by0 + dyb;
                const bool inside = ry0 >= 0 && ry0 + ${RH + G - 1} <= Hr;
% for g in range(G):
%   for c in range(C):
                float q${g}_${c} = 0.0f;
%   endfor
% endfor
% for g in range(G):
                float ${", ".join("col%d_%d" % (g, r) for r in range(RH))};
% endfor
% for i in range(RH + G - 1):
                {
                    __global const float *rp = rcol + (inside ? ry0 + ${i} : clamp(ry0 + ${i}, 0, Hr - 1)) * Wr;
%   for c in range(C):
                    const float r${c} = rp[${c} * plane];
%   endfor
%   for g in reversed(range(1, G)):
%     for c in range(C):
                    q${g}_${c} = q${g - 1}_${c};
%     endfor
%   endfor
%   if i < RH:
%     for c in range(C):
                    q0_${c} = qcol[${c * RH * CW + i * CW}];
%     endfor
%   endif
%   for g in range(G):
%     if 0 <= i - g < RH:
                    col${g}_${i - g} = 0.0f;
%       for c in range(C):
                    {
                        const float t = q${g}_${c} - r${c};
%         if metric == "l2":
                        col${g}_${i - g} = mad(t, t, col${g}_${i - g});
%         else:
                        col${g}_${i - g} += fabs(t);
%         endif
                    }
%       endfor
%     endif
%   endfor
                }
% endfor
% for g in range(G):
                {
                    __local float *out = cs + (${g * OBX} + ox) * ${TY * CW} + x;
                    float run = ${" + ".join("col%d_%d" % (g, j) for j in range(P))};
                    out[0] = run;
%   for r in range(1, TY):
                    run += col${g}_${r + P - 1} - col${g}_${r - 1};
                    out[${r * CW}] = run;
%   endfor
                }
% endfor
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            // B: box sums, sliding along ${SEG} segment(s) of each row.
            for (int item = lid; item < ${OB * TY * SEG}; item += ${WG}) {
                const int o = item / ${TY * SEG}, rest = item - o * ${TY * SEG};
                const int r = rest / ${SEG}, x0 = (rest - r * ${SEG}) * ${SL};
                __local const float *row = cs + (o * ${TY} + r) * ${CW};
                float run = 0.0f;
                for (int i = 0; i < P; ++i)
                    run += row[x0 + i];
                __local float *out = bs + (o * ${TY} + r) * ${TX};
                out[x0] = run;
                for (int x = x0 + 1; x < x0 + ${SL}; ++x) {
                    run += row[x + P - 1] - row[x - 1];
                    out[x] = run;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            // C: offer the pass's candidates to this position's heap.
            if (heap >= 0) {
                for (int g = 0; g < ${G}; ++g) {
                    const int cy = qy + dyb + g;
                    if (dyb + g >= dy1 || cy < 0 || cy >= Hc)
                        continue;
                    for (int ox = 0; ox < ${OBX}; ++ox) {
                        const int cx = qx + dxb + ox;
                        if (cx < 0 || cx >= Wc)
                            continue;
                        const float d = bs[((g * ${OBX} + ox) * ${TY} + ly) * ${TX} + lx];
                        const int idx = cy * Wc + cx;
                        if (topk_before(d, idx, root_d, root_i)) {
                            topk_replace(hd + heap, hi + heap, K, d, idx);
                            root_d = hd[heap];
                            root_i = hi[heap];
                        }
                    }
                }
            }
        }
    }
}
