## Exhaustive L2 kNN as a matrix product (Tang et al. sec. 4): ||q - r||^2 = ||r||^2 - 2 q.r
## + ||q||^2, and ||q||^2 does not change a query's order, so each query keeps the k
## candidates of smallest ||r||^2 - 2 q.r. A register-tiled product of a block of query rows
## and a block of reference rows gives those values tile by tile; each work-item offers its
## own tile's values to its own heaps (one heap set per work-item column, merged by
## knn_finish.cl.mako), so no query x reference matrix is ever stored. After each block the
## work-items of a query share their heaps' largest keys: a value behind the smallest of
## them cannot be among the k best, so most values are dropped without touching a heap.
##
## Rendered with: tile_m (TM), tile_n (TN): queries and references per work-item;
## group_x (WX), group_y (WY): work-group shape; depth (BK): columns per local tile; k is
## an argument.
## Also: knn_extract (patches or vectors as matrix rows) and knn_norms (||r||^2 per row).
<%page args="tile_m, tile_n, group_x, group_y, depth"/>
<%namespace name="tk" file="/lib/topk.mako"/>\
<%
    TM, TN, WX, WY, BK = tile_m, tile_n, group_x, group_y, depth
    BM, BN = WY * TM, WX * TN
    WG = WX * WY
    if TM % 4 or TN % 4 or BK % 4:
        raise ValueError("tile_m, tile_n and depth must be multiples of 4")
    if 2 * WX * BM > BK * (BM + BN):
        raise ValueError("the shared heap keys do not fit the tiles' local memory")
%>
//
// knn_gemm. Launch: global (WX, ceil(rows / ${BM}) * ${WY}, splits), local (${WX}, ${WY}, 1):
// work-group (0, b, s) owns query rows [b * ${BM}, (b + 1) * ${BM}) and walks every
// splits-th block of ${BN} reference rows of [r_first, nr) starting at block s. Work-item
// (tx, ty) holds the ${TM} x ${TN} products of query rows (i4 * ${WY} + ty) * 4 + v and
// reference rows (j4 * ${WX} + tx) * 4 + v of the block (i4 < ${TM // 4}, j4 < ${TN // 4},
// v < 4), and the heaps of its query rows in heap set (s * ${WX} + tx).
// Arguments:
//   qm, nq, q_stride   query matrix, stored column by column: element (row, e) at
//                e * q_stride + row, q_stride a multiple of ${BM} (rows nq .. q_stride hold
//                zeros, never offered), e < ld (ld a multiple of ${BK}, the dimension padded
//                with zeros)
//   rm, r_stride reference matrix, the same layout (r_stride a multiple of ${BN}); rnorm[j] =
//                ||row j||^2; this launch takes rows [r_first, nr)
//   ld           columns
//   c_base       candidate index of reference row 0
//   K, S         neighbours kept per query, slots per heap
//   h            heaps (lib/topk.mako): set t, query row i at slot (t * nq + i) * S
//
// knn_extract_grid, knn_extract_candidates. Launch: global (stride, ld rounded up to 4),
//   local (64, 4).
//   out[e * stride + row] = element e = (c * P + dy) * P + dx of the patch of row `row` of
//   planar image img (C x H x W), minus centre[c] (the reference's channel means: distances
//   do not change, the products' cancellation does): rows are grid points (grid_y[g0 + row /
//   gx], grid_x[row % gx]) for the first, candidates idx = c_lo + row at (idx / Wc,
//   idx % Wc) for the second;
//   elements e >= C * P * P and rows >= `rows` are 0.
// knn_norms. Launch: global (stride), local (64): norm[j] = sum of squares of row j.
// knn_means. Launch: global (256, C), local (256, 1): mean[c] = the mean of plane c of img
//   (H * W = plane values), rounded to an integer (integer-valued data stay exact).
//
${tk.functions()}


__kernel __attribute__((reqd_work_group_size(${WX}, ${WY}, 1)))
void knn_gemm(__global const float *restrict qm, const int nq, const int q_stride,
              __global const float *restrict rm, const int r_first, const int nr,
              const int r_stride, __global const float *restrict rnorm, const int ld,
              const int c_base, const int K, const int S, __global ulong *restrict h)
{
    // Tiles [column][row]: a work-item reads 4 consecutive rows of a column as one float4.
    __local float4 tiles[${BK * (BM + BN) // 4}];
    __local float4 *qs4 = tiles, *rs4 = tiles + ${BK * BM // 4};
    // Between blocks the tiles' memory holds every heap's largest key, [column tx][row].
    __local float *share_d = (__local float *)tiles;
    __local int *share_i = (__local int *)tiles + ${WX * BM};
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * ${WX} + tx;
    const int q0 = get_group_id(1) * ${BM};
    const int splits = get_num_groups(2), split = get_group_id(2);
    const int set = split * ${WX} + tx;
    // Query rows of this work-item: (i4 * WY + ty) * 4 + v; reference rows (j4 * WX + tx) * 4 + v.
    // root: this work-item's heaps' largest keys; bound: the smallest of the largest keys
    // of the heaps of the same query in this work-group (a candidate behind it is behind
    // k others of that heap, so it cannot be among the k best).
    float root_d[${TM}], bound_d[${TM}];
    int root_i[${TM}], bound_i[${TM}];
% for i4 in range(TM // 4):
%   for v in range(4):
    {
        const int q = q0 + (${i4 * WY} + ty) * 4 + ${v};
        const ulong root = q < nq ? h[((long)set * nq + q) * S + TOPK_BASE] : TOPK_EMPTY;
        root_d[${i4 * 4 + v}] = topk_dist(root);
        root_i[${i4 * 4 + v}] = topk_index(root);
        bound_d[${i4 * 4 + v}] = root_d[${i4 * 4 + v}];
        bound_i[${i4 * 4 + v}] = root_i[${i4 * 4 + v}];
    }
%   endfor
% endfor
    for (int r0 = r_first + split * ${BN}; r0 < nr; r0 += splits * ${BN}) {
        float acc[${TM}][${TN}];
        for (int i = 0; i < ${TM}; ++i)
            for (int j = 0; j < ${TN}; ++j)
                acc[i][j] = 0.0f;
        for (int k0 = 0; k0 < ld; k0 += ${BK}) {
            // Stage the tiles: the matrices are stored column by column, so 4 consecutive
            // rows of one column are one aligned float4, read and stored as is.
            for (int e = lid; e < ${BM * BK // 4}; e += ${WG}) {
                const int kq = e / ${BM // 4}, r4 = e - kq * ${BM // 4};
                qs4[e] = vload4(0, qm + (long)(k0 + kq) * q_stride + q0 + 4 * r4);
            }
            for (int e = lid; e < ${BN * BK // 4}; e += ${WG}) {
                const int kq = e / ${BN // 4}, r4 = e - kq * ${BN // 4};
                rs4[e] = vload4(0, rm + (long)(k0 + kq) * r_stride + r0 + 4 * r4);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int kk = 0; kk < ${BK}; ++kk) {
% for i4 in range(TM // 4):
                const float4 a${i4} = qs4[kk * ${BM // 4} + ${i4 * WY} + ty];
% endfor
% for j4 in range(TN // 4):
                const float4 b${j4} = rs4[kk * ${BN // 4} + ${j4 * WX} + tx];
% endfor
% for i4 in range(TM // 4):
%   for vi, ci in enumerate("xyzw"):
%     for j4 in range(TN // 4):
%       for vj, cj in enumerate("xyzw"):
                acc[${i4 * 4 + vi}][${j4 * 4 + vj}] = mad(a${i4}.${ci}, b${j4}.${cj}, acc[${i4 * 4 + vi}][${j4 * 4 + vj}]);
%       endfor
%     endfor
%   endfor
% endfor
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        // Offer the tile's values to this work-item's heaps.
% for j4 in range(TN // 4):
%   for vj in range(4):
        {
            const int r = r0 + (${j4 * WX} + tx) * 4 + ${vj};
            const float rn = r < nr ? rnorm[r] : INFINITY;
            const int idx = c_base + r;
%     for i4 in range(TM // 4):
%       for vi in range(4):
            {
                const int q = q0 + (${i4 * WY} + ty) * 4 + ${vi};
                const float d = rn - 2.0f * acc[${i4 * 4 + vi}][${j4 * 4 + vj}];
                if (r < nr && q < nq && topk_before(d, idx, bound_d[${i4 * 4 + vi}], bound_i[${i4 * 4 + vi}])) {
                    const ulong root = topk_replace(h + ((long)set * nq + q) * S, K,
                                                    topk_key(d, idx));
                    root_d[${i4 * 4 + vi}] = topk_dist(root);
                    root_i[${i4 * 4 + vi}] = topk_index(root);
                    if (topk_before(root_d[${i4 * 4 + vi}], root_i[${i4 * 4 + vi}], bound_d[${i4 * 4 + vi}], bound_i[${i4 * 4 + vi}])) {
                        bound_d[${i4 * 4 + vi}] = root_d[${i4 * 4 + vi}];
                        bound_i[${i4 * 4 + vi}] = root_i[${i4 * 4 + vi}];
                    }
                }
            }
%       endfor
%     endfor
        }
%   endfor
% endfor
        // Share the heaps' largest keys: each query's bound becomes the smallest of them.
% for i4 in range(TM // 4):
%   for v in range(4):
        share_d[tx * ${BM} + (${i4 * WY} + ty) * 4 + ${v}] = root_d[${i4 * 4 + v}];
        share_i[tx * ${BM} + (${i4 * WY} + ty) * 4 + ${v}] = root_i[${i4 * 4 + v}];
%   endfor
% endfor
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int t = 0; t < ${WX}; ++t) {
% for i4 in range(TM // 4):
%   for v in range(4):
            {
                const float od = share_d[t * ${BM} + (${i4 * WY} + ty) * 4 + ${v}];
                const int oi = share_i[t * ${BM} + (${i4 * WY} + ty) * 4 + ${v}];
                if (topk_before(od, oi, bound_d[${i4 * 4 + v}], bound_i[${i4 * 4 + v}])) {
                    bound_d[${i4 * 4 + v}] = od;
                    bound_i[${i4 * 4 + v}] = oi;
                }
            }
%   endfor
% endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

<%def name="extract(name, rows_are)">
__kernel __attribute__((reqd_work_group_size(64, 4, 1)))
void ${name}(__global const float *restrict img, const int C, const int H, const int W,
             const int P, __global const float *restrict centre,
             __global const int *restrict grid_y, __global const int *restrict grid_x,
             const int g0, const int gx, const int Wc, const int c_lo, const int rows,
             const int ld, const int stride, __global float *restrict out)
{
    const int row = get_global_id(0), e = get_global_id(1);
    if (e >= ld)
        return;
    float v = 0.0f;
    if (e < C * P * P && row < rows) {
% if rows_are == "grid":
        const int gr = row / gx;
        const int y = grid_y[g0 + gr], x = grid_x[row - gr * gx];
% else:
        const int idx = c_lo + row;
        const int y = idx / Wc, x = idx - (idx / Wc) * Wc;
% endif
        const int c = e / (P * P), rest = e - c * P * P;
        const int dy = rest / P, dx = rest - dy * P;
        v = img[((long)c * H + y + dy) * W + x + dx] - centre[c];
    }
    out[(long)e * stride + row] = v;
}
</%def>
${extract("knn_extract_grid", "grid")}
${extract("knn_extract_candidates", "candidates")}

__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void knn_norms(__global const float *restrict m, const int ld, const int stride,
               __global float *restrict norm)
{
    const int j = get_global_id(0);
    float s = 0.0f;
    for (int e = 0; e < ld; ++e) {
        const float v = m[(long)e * stride + j];
        s = mad(v, v, s);
    }
    norm[j] = s;
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void knn_means(__global const float *restrict img, const int plane,
               __global float *restrict mean)
{
    __local float part[256];
    const int t = get_local_id(0), c = get_global_id(1);
    float s = 0.0f;
    for (long e = t; e < plane; e += 256)
        s += img[(long)c * plane + e];
    part[t] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int span = 128; span > 0; span >>= 1) {
        if (t < span)
            part[t] += part[t + span];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0)
        mean[c] = rint(part[0] / (float)plane);   // integers stay integers: exact
}
