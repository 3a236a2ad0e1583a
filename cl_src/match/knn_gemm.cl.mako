## Exhaustive L2 kNN as a matrix product (Tang et al. sec. 4): ||q - r||^2 = ||r||^2 - 2 q.r
## + ||q||^2, and ||q||^2 does not change a query's order, so each query keeps the k
## candidates of smallest ||r||^2 - 2 q.r. A register-tiled product of a block of query rows
## and a block of reference rows gives those values tile by tile; each work-item offers its
## own tile's values to its own heaps (one heap set per work-item column, merged by
## knn_finish.cl.mako), so no query x reference matrix is ever stored.
##
## Rendered with: tile_m (TM), tile_n (TN): queries and references per work-item;
## group_x (WX), group_y (WY): work-group shape; depth (BK): columns per local tile; k (K).
## Also: knn_extract (patches or vectors as matrix rows) and knn_norms (||r||^2 per row).
<%page args="tile_m, tile_n, group_x, group_y, depth, k"/>
<%namespace name="tk" file="/lib/topk.mako"/>\
<%
    TM, TN, WX, WY, BK, K = tile_m, tile_n, group_x, group_y, depth, k
    BM, BN = WY * TM, WX * TN
    WG = WX * WY
    if TM % 4 or TN % 4 or BK % 4:
        raise ValueError("tile_m, tile_n and depth must be multiples of 4")
%>
//
// knn_gemm. Launch: global (WX, ceil(rows / ${BM}) * ${WY}, splits), local (${WX}, ${WY}, 1):
// work-group (0, b, s) owns query rows [b * ${BM}, (b + 1) * ${BM}) and walks every
// splits-th block of ${BN} reference rows of [r_first, nr) starting at block s. Work-item
// (tx, ty) holds the ${TM} x ${TN} products of query rows (i4 * ${WY} + ty) * 4 + v and
// reference rows (j4 * ${WX} + tx) * 4 + v of the block (i4 < ${TM // 4}, j4 < ${TN // 4},
// v < 4), and the heaps of its query rows in heap set (s * ${WX} + tx).
// Arguments:
//   qm, nq       query matrix rows (row-major, `ld` floats a row, ld a multiple of ${BK}; rows
//                beyond nq may hold anything and are not offered)
//   rm           reference matrix rows, the same layout; rnorm[j] = ||rm row j||^2; this
//   r_first, nr  launch takes rows [r_first, nr)
//   ld           row length (the dimension padded with zeros)
//   c_base       candidate index of reference row 0
//   hd, hi       heaps: set h, query row i at (h * nq + i) * K (see lib/topk.mako)
//
// knn_extract. Launch: global (ld rounded up to 16, rows rounded up to 16), local (16, 16).
//   out[row * ld + e] = element e = (c * P + dy) * P + dx of the patch of row `row` of
//   planar image img (C x H x W): query rows are grid points (grid_y[g0 + row / gx],
//   grid_x[row % gx]) when gx > 0, else candidates idx = c_lo + row at (idx / Wc, idx % Wc);
//   elements e >= C * P * P are 0.
// knn_norms. Launch: global (rows rounded up to 64), local (64): norm[j] = sum of squares
//   of row j.
//
${tk.functions()}

#define K ${K}

__kernel __attribute__((reqd_work_group_size(${WX}, ${WY}, 1)))
void knn_gemm(__global const float *restrict qm, const int nq,
              __global const float *restrict rm, const int r_first, const int nr,
              __global const float *restrict rnorm, const int ld, const int c_base,
              __global float *restrict hd, __global int *restrict hi)
{
    // Tiles transposed, [column][row]: a work-item reads 4 consecutive rows as one float4.
    __local float4 qs4[${BK * BM // 4}];
    __local float4 rs4[${BK * BN // 4}];
    __local float *qs = (__local float *)qs4;
    __local float *rs = (__local float *)rs4;
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * ${WX} + tx;
    const int q0 = get_group_id(1) * ${BM};
    const int splits = get_num_groups(2), split = get_group_id(2);
    const int set = split * ${WX} + tx;
    // Query rows of this work-item: (i4 * WY + ty) * 4 + v; reference rows (j4 * WX + tx) * 4 + v.
    float root_d[${TM}];
    int root_i[${TM}];
% for i4 in range(TM // 4):
%   for v in range(4):
    {
        const int q = q0 + (${i4 * WY} + ty) * 4 + ${v};
        root_d[${i4 * 4 + v}] = q < nq ? hd[((long)set * nq + q) * K] : INFINITY;
        root_i[${i4 * 4 + v}] = q < nq ? hi[((long)set * nq + q) * K] : INT_MAX;
    }
%   endfor
% endfor
    for (int r0 = r_first + split * ${BN}; r0 < nr; r0 += splits * ${BN}) {
        float acc[${TM}][${TN}];
        for (int i = 0; i < ${TM}; ++i)
            for (int j = 0; j < ${TN}; ++j)
                acc[i][j] = 0.0f;
        for (int k0 = 0; k0 < ld; k0 += ${BK}) {
            // Stage the tiles: work-item e reads 4 columns of one row (consecutive work-items,
            // consecutive rows: the transposing stores hit distinct banks).
            for (int e = lid; e < ${BM * BK // 4}; e += ${WG}) {
                const int row = e % ${BM}, c4 = e / ${BM};
                const int q = min(q0 + row, nq - 1);
                const float4 v = vload4(0, qm + (long)q * ld + k0 + 4 * c4);
                qs[(4 * c4) * ${BM} + row] = v.x;
                qs[(4 * c4 + 1) * ${BM} + row] = v.y;
                qs[(4 * c4 + 2) * ${BM} + row] = v.z;
                qs[(4 * c4 + 3) * ${BM} + row] = v.w;
            }
            for (int e = lid; e < ${BN * BK // 4}; e += ${WG}) {
                const int row = e % ${BN}, c4 = e / ${BN};
                const int r = min(r0 + row, nr - 1);
                const float4 v = vload4(0, rm + (long)r * ld + k0 + 4 * c4);
                rs[(4 * c4) * ${BN} + row] = v.x;
                rs[(4 * c4 + 1) * ${BN} + row] = v.y;
                rs[(4 * c4 + 2) * ${BN} + row] = v.z;
                rs[(4 * c4 + 3) * ${BN} + row] = v.w;
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
                if (r < nr && q < nq && topk_before(d, idx, root_d[${i4 * 4 + vi}], root_i[${i4 * 4 + vi}])) {
                    const long at = ((long)set * nq + q) * K;
                    topk_replace(hd + at, hi + at, K, d, idx);
                    root_d[${i4 * 4 + vi}] = hd[at];
                    root_i[${i4 * 4 + vi}] = hi[at];
                }
            }
%       endfor
%     endfor
        }
%   endfor
% endfor
    }
}

__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void knn_extract(__global const float *restrict img, const int C, const int H, const int W,
                 const int P, __global const int *restrict grid_y,
                 __global const int *restrict grid_x, const int g0, const int gx,
                 const int Wc, const int c_lo, const int rows, const int ld,
                 __global float *restrict out)
{
    const int e = get_global_id(0), row = get_global_id(1);
    if (e >= ld || row >= rows)
        return;
    float v = 0.0f;
    if (e < C * P * P) {
        int y, x;
        if (gx > 0) {
            y = grid_y[g0 + row / gx];
            x = grid_x[row % gx];
        } else {
            const int idx = c_lo + row;
            y = idx / Wc;
            x = idx - y * Wc;
        }
        const int c = e / (P * P), rest = e - c * P * P;
        const int dy = rest / P, dx = rest - dy * P;
        v = img[((long)c * H + y + dy) * W + x + dx];
    }
    out[(long)row * ld + e] = v;
}

__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void knn_norms(__global const float *restrict m, const int rows, const int ld,
               __global float *restrict norm)
{
    const int j = get_global_id(0);
    if (j >= rows)
        return;
    float s = 0.0f;
    for (int e = 0; e < ld; ++e) {
        const float v = m[(long)j * ld + e];
        s = mad(v, v, s);
    }
    norm[j] = s;
}
