## The clustering ANN (Tsai et al. §3–§4): hierarchical 2-means per tile, then each
## cluster's kNN by voting. The algorithm, and the rules that make it the same on every
## device and in NumPy, are written out in clpatch/match/ann_params.py; the NumPy oracle is
## tests/reference/ann.py.
##
## Launch: ann_tiles, global (GROUP * ntx, tile rows of the launch), local (GROUP, 1): one
## work-group per tile, which clusters its tile and then answers the queries of its
## references cluster by cluster (Tsai fuse the two the same way: no tree is stored).
##
## Arguments: img (planar float32 block: frame f, channel c, block row r, column x at
##   ((f * C + c) * rows + r) * cols + x; block row 0 is image row y_lo), rows, cols,
##   y_lo, nframes (T), py, px (the image's top-left position plane), tile, nty, ntx (tile
##   runs of the whole image), ty0 (tile row of work-group row 0), perm, perm2 (scratch,
##   2 × T · (position rows of the launch) · px ints; a tile's run starts at
##   T · ((y0 − sy0) · px + rows_of_tile · x0)), sy0 (first position row of the scratch),
##   ref_row[py] (grid row of a position row, −1 when none), ref_col (grid column of a
##   position column, −1 when none: [px], or [grid rows][px] for a staggered grid),
##   ref_frame, g0, g1 (grid rows answered: [g0, g1)), gx (grid columns), out_pos,
##   out_dist (Matches layout, lib/matches.mako: reference (row g, column j) of output
##   frame out_f0 at ref = (out_f0 · out_rows + out_row0 + g − g0) · gx + j).
##
## Rendered with: patch (P), channels (C), k (K), group (GROUP work-items per tile),
## ballot (partition scans by warp ballot, inline PTX, GROUP a multiple of 32; else
## through local memory — the same integers either way), neighbours (neighbour clusters
## searched), stagger (ref_col per grid row), dim (2: positions (y, x); 3: (t, y, x)),
## leaf, samples, iterations, candidates (bound of one query's candidates).
<%page args="patch, channels, k, group, ballot, neighbours, stagger, dim, leaf, samples, iterations, candidates"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    P, C, K, GROUP = patch, channels, k, group
    D = C * P * P
    LEAF, SAMPLES, ITERS, NEIGH, CAND = leaf, samples, iterations, neighbours, candidates
    STACK = 32
    assert not ballot or GROUP % 32 == 0
    WARPS = GROUP // 32 if ballot else 0
%>
#pragma OPENCL FP_CONTRACT OFF

// A slot holds a patch's code: frame << 14 | (row in tile) << 7 | (column in tile); bit 29
// marks "joins centre 1" during a split, bit 30 the first slot of a cluster.
#define CODE_MASK 0x03ffffff
#define SIDE_BIT 0x20000000
#define LEAF_BIT 0x40000000

// Element offset of the top-left value of the patch with this code.
inline size_t patch_at(const int code, const int y0, const int x0, const int y_lo,
                       const int cols, const size_t plane)
{
    const int f = code >> 14, y = y0 + ((code >> 7) & 127), x = x0 + (code & 127);
    return (size_t)f * ${C} * plane + (size_t)(y - y_lo) * cols + x;
}

// Sum of squared differences of two patches, over (channel, row, column) in order.
inline float dist_pp(__global const float *img, const size_t a, const size_t b,
                     const int cols, const size_t plane)
{
    float acc = 0.0f;
    for (int c = 0; c < ${C}; ++c)
        for (int dy = 0; dy < ${P}; ++dy)
            for (int dx = 0; dx < ${P}; ++dx) {
                const size_t o = c * plane + (size_t)dy * cols + dx;
                const float diff = img[a + o] - img[b + o];
                acc = acc + diff * diff;
            }
    return acc;
}

// Sum of squared differences of a patch and a centre (D values in local memory).
inline float dist_pc(__global const float *img, const size_t a, __local const float *cen,
                     const int cols, const size_t plane)
{
    float acc = 0.0f;
    int d = 0;
    for (int c = 0; c < ${C}; ++c)
        for (int dy = 0; dy < ${P}; ++dy)
            for (int dx = 0; dx < ${P}; ++dx, ++d) {
                const float diff = img[a + c * plane + (size_t)dy * cols + dx] - cen[d];
                acc = acc + diff * diff;
            }
    return acc;
}

// Value d = (c · P + dy) · P + dx of the patch at a.
inline float value_at(__global const float *img, const size_t a, const int d, const int cols,
                      const size_t plane)
{
    const int c = d / ${P * P}, r = d - c * ${P * P};
    return img[a + c * plane + (size_t)(r / ${P}) * cols + r % ${P}];
}

% if ballot:
// Exclusive prefix count of `flag` over the work-group and the group's total, by warp
// ballots (inline PTX vote + popc) and one local-memory step across the ${WARPS} warp(s).
inline int scan_flags(const int flag, __local int *l_warp, int *total)
{
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    uint mask;
    asm volatile("{ .reg .pred p; setp.ne.u32 p, %1, 0; vote.sync.ballot.b32 %0, p, 0xffffffff; }"
                 : "=r"(mask) : "r"((uint)flag));
    const int below = popcount(mask & ((1u << lane) - 1u));
    if (lane == 0)
        l_warp[warp] = popcount(mask);
    barrier(CLK_LOCAL_MEM_FENCE);
    int before = 0, all = 0;
    for (int w = 0; w < ${WARPS}; ++w) {
        before += w < warp ? l_warp[w] : 0;
        all += l_warp[w];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *total = all;
    return before + below;
}
% else:
// Exclusive prefix count of `flag` over the work-group and the group's total, by a
// Hillis-Steele scan in local memory.
inline int scan_flags(const int flag, __local int *l_scan, int *total)
{
    const int lid = get_local_id(0);
    l_scan[lid] = flag;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < ${GROUP}; off <<= 1) {
        const int v = lid >= off ? l_scan[lid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        l_scan[lid] += v;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int inclusive = l_scan[lid];
    *total = l_scan[${GROUP - 1}];
    barrier(CLK_LOCAL_MEM_FENCE);
    return inclusive - flag;
}
% endif

__kernel __attribute__((reqd_work_group_size(${GROUP}, 1, 1)))
void ann_tiles(__global const float *img, const int rows, const int cols, const int y_lo,
               const int nframes, const int py, const int px, const int tile, const int nty,
               const int ntx, const int ty0, __global int *perm, __global int *perm2,
               const int sy0, __global const int *ref_row, __global const int *ref_col,
               const int ref_frame, const int g0, const int g1, const int gx,
               __global int *out_pos, __global float *out_dist, const int out_rows,
               const int out_row0, const int out_f0)
{
    __local float l_cen[2][${D}];
    __local float l_table[${LEAF}][${CAND}];
    __local float l_sd[${SAMPLES}][2];
    __local float l_n[${SAMPLES}];
    __local int l_sample[${SAMPLES}], l_side[${SAMPLES}], l_prev[${SAMPLES}];
    __local int l_stack[${STACK}][2];
    __local int l_scan[${max(GROUP, 1)}];
    __local int l_cand[${CAND}], l_out[${LEAF}];
    __local int l_lo, l_hi, l_sp, l_done, l_mode, l_second, l_ones, l_a, l_b;

    const int lid = get_local_id(0);
    const int tx = get_group_id(0), ty = ty0 + get_group_id(1);
    const int y0 = ty * tile, y1 = ty == nty - 1 ? py : y0 + tile;
    const int x0 = tx * tile, x1 = tx == ntx - 1 ? px : x0 + tile;
    const int th = y1 - y0, tw = x1 - x0, area = th * tw, M = nframes * area;
    const size_t base = (size_t)nframes * ((size_t)(y0 - sy0) * px + (size_t)th * x0);
    __global int *pm = perm + base;
    __global int *pm2 = perm2 + base;
    const size_t plane = (size_t)rows * cols;

    for (int s = lid; s < M; s += ${GROUP}) {
        const int f = s / area, r = s - f * area, dy = r / tw;
        pm[s] = f << 14 | dy << 7 | (r - dy * tw);
    }
    if (lid == 0) {
        l_lo = 0;
        l_hi = M;
        l_sp = 0;
        l_done = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);

    // ---- clustering: split nodes until every one is a leaf; the work-group goes on with
    // the smaller child and stacks the larger (so the stack stays below log2(M) entries).
    for (;;) {
        const int lo = l_lo, hi = l_hi, m = hi - lo;
        barrier(CLK_LOCAL_MEM_FENCE);
        int m0;
        if (m <= ${LEAF}) {
            if (lid == 0) {
                pm[lo] |= LEAF_BIT;
                if (l_sp == 0) {
                    l_done = 1;
                } else {
                    --l_sp;
                    l_lo = l_stack[l_sp][0];
                    l_hi = l_stack[l_sp][1];
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            if (l_done)
                break;
            continue;
        }
        // 1-3: sub-sample and the two starting centres.
        if (lid < ${SAMPLES})
            l_sample[lid] = pm[lo + (lid * m) / ${SAMPLES}];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < ${SAMPLES})
            l_n[lid] = dist_pp(img, patch_at(l_sample[lid], y0, x0, y_lo, cols, plane),
                               patch_at(l_sample[0], y0, x0, y_lo, cols, plane), cols, plane);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) {
            float total = 0.0f;
            for (int j = 0; j < ${SAMPLES}; ++j)
                total = total + l_n[j];
            l_mode = total == 0.0f;          // 1: split in halves
            float run = 0.0f;                // n_0 + ... + n_j, in order
            int second = -1;
            for (int j = 0; j < ${SAMPLES}; ++j) {
                run = run + l_n[j];
                if (second < 0 && 2.0f * run > total)
                    second = j;
            }
            l_second = max(second, 0);
            l_ones = 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const bool halves_first = l_mode;
        if (!halves_first) {
            const size_t a0 = patch_at(l_sample[0], y0, x0, y_lo, cols, plane);
            const size_t a1 = patch_at(l_sample[l_second], y0, x0, y_lo, cols, plane);
            for (int d = lid; d < ${D}; d += ${GROUP}) {
                l_cen[0][d] = value_at(img, a0, d, cols, plane);
                l_cen[1][d] = value_at(img, a1, d, cols, plane);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            // 4: 2-means on the sub-sample (a repeated assignment changes nothing more).
            for (int it = 0; it < ${ITERS}; ++it) {
                if (lid < 2 * ${SAMPLES}) {
                    const int j = lid >> 1, c = lid & 1;
                    l_sd[j][c] = dist_pc(img, patch_at(l_sample[j], y0, x0, y_lo, cols, plane),
                                         l_cen[c], cols, plane);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                if (lid < ${SAMPLES})
                    l_side[lid] = l_sd[lid][1] < l_sd[lid][0];
                barrier(CLK_LOCAL_MEM_FENCE);
                bool same = it > 0;
                int n1 = 0;
                for (int j = 0; j < ${SAMPLES}; ++j) {
                    same = same && l_side[j] == l_prev[j];
                    n1 += l_side[j];
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                if (same)
                    break;
                if (lid < ${SAMPLES})
                    l_prev[lid] = l_side[lid];
                const int n0 = ${SAMPLES} - n1;
                for (int d = lid; d < ${D}; d += ${GROUP}) {
                    float s0 = 0.0f, s1 = 0.0f;
                    for (int j = 0; j < ${SAMPLES}; ++j) {
                        const float v = value_at(img, patch_at(l_sample[j], y0, x0, y_lo, cols,
                                                               plane), d, cols, plane);
                        if (l_side[j])
                            s1 = s1 + v;
                        else
                            s0 = s0 + v;
                    }
                    if (n0 > 0)
                        l_cen[0][d] = s0 / (float)n0;
                    if (n1 > 0)
                        l_cen[1][d] = s1 / (float)n1;
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            // 5: every patch of the node to its nearer centre (bit SIDE_BIT: centre 1).
            int mine = 0;
            for (int s = lo + lid; s < hi; s += ${GROUP}) {
                const int code = pm[s];
                const size_t a = patch_at(code, y0, x0, y_lo, cols, plane);
                if (dist_pc(img, a, l_cen[1], cols, plane) < dist_pc(img, a, l_cen[0], cols, plane)) {
                    pm[s] = code | SIDE_BIT;
                    ++mine;
                }
            }
            atomic_add(&l_ones, mine);
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        }
        const int ones = l_ones;
        const bool halves = halves_first || ones == 0 || ones == m;
        if (halves) {
            m0 = m / 2;
            if (!halves_first && ones == m) {
                for (int s = lo + lid; s < hi; s += ${GROUP})
                    pm[s] &= ~SIDE_BIT;
            }
        } else {
            // Stable partition into perm2, then back.
            m0 = m - ones;
            int before = 0;
            for (int c0 = lo; c0 < hi; c0 += ${GROUP}) {
                const int s = c0 + lid;
                const int code = s < hi ? pm[s] : 0;
                const int side = (code & SIDE_BIT) != 0;
                int total;
                const int below = scan_flags(side, l_scan, &total);
                if (s < hi) {
                    const int dest = side ? lo + m0 + before + below
                                          : s - before - below;
                    pm2[dest] = code & ~SIDE_BIT;
                }
                before += total;
            }
            barrier(CLK_GLOBAL_MEM_FENCE);
            for (int s = lo + lid; s < hi; s += ${GROUP})
                pm[s] = pm2[s];
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        if (lid == 0) {
            const int m1 = m - m0;
            const bool left_first = m0 <= m1;
            l_stack[l_sp][0] = left_first ? lo + m0 : lo;
            l_stack[l_sp][1] = left_first ? hi : lo + m0;
            ++l_sp;
            l_lo = left_first ? lo : lo + m0;
            l_hi = left_first ? lo + m0 : hi;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    // ---- the clusters in slot order: perm2[L] = first slot of cluster L.
    int nl = 0;
    for (int c0 = 0; c0 < M; c0 += ${GROUP}) {
        const int s = c0 + lid;
        const int first = s < M && (pm[s] & LEAF_BIT) != 0;
        int total;
        const int below = scan_flags(first, l_scan, &total);
        if (first)
            pm2[nl + below] = s;
        nl += total;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);

    // ---- queries, cluster by cluster.
    const bool staggered = ${"true" if stagger else "false"};
    for (int L = 0; L < nl; ++L) {
        if (lid == 0) {
            int a = L, b = L, taken = 1, j = 1;
            bool up = true;
            int count = (L + 1 < nl ? pm2[L + 1] : M) - pm2[L];
            while ((taken < ${1 + NEIGH} || count < ${K}) && taken < nl) {
                const int c = up ? L + j : L - j;
                if (!up)
                    ++j;
                up = !up;
                if (c < 0 || c >= nl)
                    continue;
                if (c > b)
                    b = c;
                else
                    a = c;
                ++taken;
                count = (b + 1 < nl ? pm2[b + 1] : M) - pm2[a];
            }
            l_a = pm2[a];
            l_b = b + 1 < nl ? pm2[b + 1] : M;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int s0 = pm2[L], s1 = L + 1 < nl ? pm2[L + 1] : M;
        const int c0 = l_a, nc = l_b - l_a, nm = s1 - s0;
        for (int c = lid; c < nc; c += ${GROUP})
            l_cand[c] = pm[c0 + c] & CODE_MASK;
        for (int i = lid; i < nm; i += ${GROUP}) {
            const int code = pm[s0 + i] & CODE_MASK;
            const int f = code >> 14, y = y0 + ((code >> 7) & 127), x = x0 + (code & 127);
            int out = -1;
            const int g = ref_row[y];
            if (f == ref_frame && g >= g0 && g < g1) {
                const int j = ref_col[(staggered ? (size_t)g * px : 0) + x];
                if (j >= 0)
                    out = ${mt.ref("out_row0 + g - g0", "j", "gx", "out_f0", "out_rows")};
            }
            l_out[i] = out;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        bool any = false;
        for (int i = 0; i < nm; ++i)
            any = any || l_out[i] >= 0;
        if (!any) {
            barrier(CLK_LOCAL_MEM_FENCE);
            continue;
        }
        for (int idx = lid; idx < nm * nc; idx += ${GROUP}) {
            const int i = idx / nc, c = idx - i * nc;
            if (l_out[i] >= 0)
                l_table[i][c] = dist_pp(img, patch_at(pm[s0 + i] & CODE_MASK, y0, x0, y_lo, cols, plane),
                                        patch_at(l_cand[c], y0, x0, y_lo, cols, plane), cols, plane);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // Voting: candidate c's rank is the number of candidates before it (the patch itself
        // first, then by (distance, slot)).
        for (int idx = lid; idx < nm * nc; idx += ${GROUP}) {
            const int i = idx / nc, c = idx - i * nc;
            const int ref = l_out[i];
            if (ref < 0)
                continue;
            const int me = s0 + i - c0;
            int rank = 0;
            const float dc = l_table[i][c];
            if (c != me) {
                rank = 1;
                for (int o = 0; o < nc; ++o) {
                    const float v = l_table[i][o];
                    rank += o != me && o != c && (v < dc || (v == dc && o < c));
                }
            }
            if (rank < ${K}) {
                const int code = l_cand[c];
                const int e = ${mt.entry("ref", K, "rank")};
                ${mt.dist("out_dist", "e")} = dc;
% if dim == 3:
                ${mt.pos_t("out_pos", "e", 3)} = code >> 14;
% endif
                ${mt.pos_y("out_pos", "e", dim)} = y0 + ((code >> 7) & 127);
                ${mt.pos_x("out_pos", "e", dim)} = x0 + (code & 127);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
