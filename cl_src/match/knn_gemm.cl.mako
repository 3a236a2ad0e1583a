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
%>
//
// knn_gemm. Launch: global (WX, ceil(rows / ${BM}) * ${WY}, splits), local (${WX}, ${WY}, 1):
// work-group (0, b, s) owns query rows [b * ${BM}, (b + 1) * ${BM}) and walks every
// splits-th block of ${BN} reference rows of [r_first, nr) starting at block s. Work-item (tx, ty) holds the
// ${TM} x ${TN} products of query rows ty + i * ${WY} and reference rows tx + j * ${WX} of the
// block, and the heaps of its query rows in heap set (s * ${WX} + tx).
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
    __local float qs[${BK}][${BM + 1}];     // +1: the transposing stores hit distinct banks
    __local float rs[${BK}][${BN + 1}];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * ${WX} + tx;
    const int q0 = get_group_id(1) * ${BM};
    const int splits = get_num_groups(2), split = get_group_id(2);
    const int set = split * ${WX} + tx;
    float root_d[${TM}];
    int root_i[${TM}];
% for i in range(TM):
    {
        const int q = q0 + ty + ${i * WY};
        root_d[${i}] = q < nq ? hd[(set * nq + q) * K] : INFINITY;
        root_i[${i}] = q < nq ? hi[(set * nq + q) * K] : INT_MAX;
    }
% endfor
    for (int r0 = r_first + split * ${BN}; r0 < nr; r0 += splits * ${BN}) {
        float acc[${TM}][${TN}];
        for (int i = 0; i < ${TM}; ++i)
            for (int j = 0; j < ${TN}; ++j)
                acc[i][j] = 0.0f;
        for (int k0 = 0; k0 < ld; k0 += ${BK}) {
            // Stage the query and reference tiles, transposed: [column][row].
            for (int e = lid; e < ${BM * BK}; e += ${WG}) {
                const int row = e / ${BK}, col = e - row * ${BK};
                const int q = min(q0 + row, nq - 1);
                qs[col][row] = qm[(long)q * ld + k0 + col];
            }
            for (int e = lid; e < ${BN * BK}; e += ${WG}) {
                const int row = e / ${BK}, col = e - row * ${BK};
                const int r = min(r0 + row, nr - 1);
                rs[col][row] = rm[(long)r * ld + k0 + col];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int kk = 0; kk < ${BK}; ++kk) {
                float a[${TM}], b[${TN}];
                for (int i = 0; i < ${TM}; ++i)
                    a[i] = qs[kk][ty + i * ${WY}];
                for (int j = 0; j < ${TN}; ++j)
                    b[j] = rs[kk][tx + j * ${WX}];
                for (int i = 0; i < ${TM}; ++i)
                    for (int j = 0; j < ${TN}; ++j)
                        acc[i][j] = mad(a[i], b[j], acc[i][j]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        // Offer the tile's values to this work-item's heaps.
        for (int j = 0; j < ${TN}; ++j) {
            const int r = r0 + tx + j * ${WX};
            if (r >= nr)
                break;
            const float rn = rnorm[r];
            const int idx = c_base + r;
% for i in range(TM):
            {
                const int q = q0 + ty + ${i * WY};
                const float d = rn - 2.0f * acc[${i}][j];
                if (q < nq && topk_before(d, idx, root_d[${i}], root_i[${i}])) {
                    const long at = ((long)set * nq + q) * K;
                    topk_replace(hd + at, hi + at, K, d, idx);
                    root_d[${i}] = hd[at];
                    root_i[${i}] = hi[at];
                }
            }
% endfor
        }
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
