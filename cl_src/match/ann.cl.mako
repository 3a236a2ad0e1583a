## The clustering ANN (Tsai et al. §3–§4): hierarchical clustering per tile, each node cut
## at the median along the principal direction of a sub-sample (power iterations on the
## samples' Gram matrix), then each cluster's kNN by voting. Balanced splits
## make the tree's shape depend on the tile's patch count alone, so the clustering kernel
## goes through it one depth at a time and splits several nodes of a depth at once (the
## role of Tsai's task queue): a 225-patch tile takes 3 rounds (7 splits, 8 clusters). The algorithm, and the rules that make it the same on every
## device and in NumPy, are written out in clpatch/match/ann/params.py; the NumPy oracle is
## tests/reference/ann.py.
##
## Launches: ann_cluster, one work-group per tile (group (i, j) of a launch of R tile
## rows: tile column ntx − 1 − i of tile row ty0 + R − 1 − j, the larger tiles first),
## global (GROUP * ntx, R), local (GROUP, 1), clusters its tile (the slots of perm in
## cluster order, the first slot of each cluster marked; perm2[L] = first slot of cluster
## L, counts[tile] = the number of clusters); then ann_query, global (QGROUP * units,
## same rows), local (QGROUP, 1), one work-group per unit (a tile and a run of its
## clusters: see run, parts and parts_last), answers the unit's references cluster by
## cluster. No tree is stored (Tsai fuse the two steps; two kernels let each keep its own
## registers and work-group size).
##
## Arguments: img (planar float32 block: frame f, channel c, block row r, column x at
##   ((f * C + c) * rows + r) * cols + x; block row 0 is image row y_lo), rows, cols,
##   y_lo, nframes (T), py, px (the image's top-left position plane), tile, nty, ntx (tile
##   runs of the whole image), ty0 (tile row of work-group row 0), perm, perm2 (scratch,
##   2 × T · (position rows of the launch) · px ints; a tile's run starts at
##   T · ((y0 − sy0) · px + rows_of_tile · x0)), sy0 (first position row of the scratch),
##   org_y, org_x (the tiling's origin on each axis: run i ≥ 1 starts at org + i · tile,
##   run 0 at 0; clpatch/match/ann/params.py), ref_row[py] (grid row of a position row, −1
##   when none), ref_col (grid column of a position column, −1 when none: [px], or
##   [grid rows][px] for a staggered grid),
##   centre_y[py], centre_x[px] (with choose: per position row / column, twice its distance
##   from its tile's centre in this tiling in bits 0–15 and in the other tiling above),
##   counts (one int per tile of the launch: (tile row - ty0) * ntx + tile column),
##   ref_frame, g0, g1 (grid rows answered: [g0, g1)), gx (grid columns), out_pos,
##   out_dist (Matches layout, lib/matches.mako: reference (row g, column j) of output
##   frame out_f0 at ref = (out_f0 · out_rows + out_row0 + g − g0) · gx + j), run
##   (clusters per unit), parts, parts_last (units per tile of the columns before the last
##   and of the last column: bits 0–7 for the tile rows above the last, 8–15 for the last
##   row; work-group column u of a row is unit u − (ntx − 1) · parts of the last column
##   from u = (ntx − 1) · parts on; groups past the row's units return at once).
##
## Rendered with: patch (P), channels (C), k (K), group and qgroup (GROUP, QGROUP: the
## two kernels' work-items per tile, multiples of 32; the query answers one cluster per
## warp of 32 work-items at a time), ballot (inline PTX: partition scans by warp ballot, power
## iterations and an image's symmetric distance tables by warp shuffles; else through local
## memory — the same numbers either way), neighbours (neighbour clusters
## searched), stagger (ref_col per grid row), dim (2: positions (y, x); 3: (t, y, x)),
## leaf, samples, power (power iterations), candidates (bound of one query's candidates), block (0: the
## patches are read from global memory; else the floats of local memory that hold a
## tile's pixels, all frames and channels: every tile's block is copied there first, and
## its slots and cluster starts too), brows, bpitch (the block's rows and row pitch per
## frame and channel: those of the largest tile, so that a patch value's offset is a
## constant), slots (most slots of a tile), area (most positions
## of a tile in one frame), nodes (NB: the nodes of one depth of the tree that the
## clustering splits at once, each with its samples' mean, Gram matrix and direction in
## local memory), dense (every
## position of the image is a reference: a cluster of more than 16 patches whose
## candidates are its own patches computes each distance of its table once), rank_select
## (nodes of more patches find their median by selecting it digit by digit: step 6), rvote
## (a query's vote in registers, its results kept in the members' table rows: for at most
## 32 candidates), choose (0: every reference of the tile is answered; 1 or 2: the first or
## second of two tilings, which answers the references that lie nearer their tile's centre
## in it than in the other (max of the two axes' centre distances), the first where equal).
<%page args="patch, channels, k, group, qgroup, ballot, neighbours, stagger, dim, leaf, samples, power, candidates, block, brows, bpitch, slots, area, nodes, dense, rank_select, rvote, choose"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    P, C, K, GROUP, QGROUP = patch, channels, k, group, qgroup
    D = C * P * P
    LEAF, SAMPLES, POWER, NEIGH, CAND = leaf, samples, power, neighbours, candidates
    INV_S = repr(1.0 / samples)               # exact: SAMPLES is a power of two
    NB = nodes                  # nodes of one depth split at once
    DP = 1 << (D - 1).bit_length()          # D rounded up to a power of two
    LOG_DP, LOG_S = DP.bit_length() - 1, SAMPLES.bit_length() - 1
    assert GROUP % 32 == 0 and QGROUP % 32 == 0 and LEAF == 32 and NB >= 1
    assert SAMPLES == 1 << LOG_S and SAMPLES >= 4
    WARPS = GROUP // 32
    QWARPS = QGROUP // 32       # clusters answered at once in the query
    PITCH = CAND | 1            # table row stride: odd, so the rows of a warp hit 32 banks
    REG = D <= 64               # a member's own patch held in registers
    RVOTE = rvote               # the vote in registers, results in the member's table row
    assert not RVOTE or CAND <= 32
    # The Gram matrix's blocks of 1 x 4 entries on or above the diagonal blocks of 4 x 4
    GRAM = [(i, j) for i in range(SAMPLES) for j in range(i // 4 * 4, SAMPLES, 4)]
    PER, PER_SHIFT = len(GRAM), 21
    PER_MUL = -(-(1 << PER_SHIFT) // PER)
    assert all((q * PER_MUL) >> PER_SHIFT == q // PER for q in range(NB * PER))
    assert not RVOTE or 2 * K <= PITCH
    SRC = "__local const float" if block else "__global const float"
    IDX = "int" if block else "size_t"
    SB = max(1, slots.bit_length())        # bits of a slot's offset in its node
    RANK_DIGITS = -(-(32 + SB) // 4)        # 4-bit digits of a (key, slot) rank code
%>
#pragma OPENCL FP_CONTRACT OFF

// A slot holds a patch's code: frame << 14 | (row in tile) << 7 | (column in tile); bit 29
// marks "joins centre 1" during a split, bit 30 the first slot of a cluster.
#define ORDERED(x) (isnan(x) ? INFINITY : (x))   // NaN as +inf: a total order
#define CODE_MASK 0x03ffffff
#define SIDE_BIT 0x20000000
#define LEAF_BIT 0x40000000

// SPLIT[n] = 32 / n work-items per member of a cluster of n; INVERSE[s] = ceil(2^16 / s), so
// that (l * INVERSE[s]) >> 16 = l / s for every lane l < 32.
__constant int SPLIT[33] = {${", ".join(str(32 // max(n, 1)) for n in range(33))}};
__constant int INVERSE[33] = {${", ".join(str(-(-65536 // max(n, 1))) for n in range(33))}};

// The Gram matrix's blocks computed, i << 8 | j (step 3).
__constant int GRAM_BLOCK[${PER}] = {${", ".join(str(i << 8 | j) for i, j in GRAM)}};

// Pixels are read from `src` (${"a tile's block in local memory" if block else "the planar input"}):
// channel c, row r, column x of a frame at f * fstride + c * plane + r * pitch + x.
typedef struct {
    ${SRC} *src;
    ${IDX} fstride, plane, origin;
    int pitch;
} Pixels;

% if block:
// Offset of value (channel c, row dy, column dx) of a patch from its first value: constants
// of the block's layout.
#define VOFF(c, dy, dx) ((c) * ${brows * bpitch} + (dy) * ${bpitch} + (dx))
% else:
#define VOFF(c, dy, dx) ((c) * pix.plane + (dy) * (size_t)pix.pitch + (dx))
% endif

// Offset in `px.src` of the top-left value of the patch with this code.
inline ${IDX} patch_at(const Pixels px, const int code)
{
    return px.origin + (code >> 14) * px.fstride + ((code >> 7) & 127) * (${IDX})px.pitch
           + (code & 127);
}

// (The kernels divide no integer by a non-power of two: Oclgrind cannot check the code such
// divisions compile to. Offsets of a patch's values come from a table, indices from loops.)

% if ballot:
// Value `v` of work-item `src` of this warp (inline PTX shuffle; every work-item of the
// warp takes part).
inline float shuffle(const float v, const int src)
{
    uint r;
    asm("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(v)), "r"(src));
    return as_float(r);
}

// Value `v` of the work-item whose lane is this one's XOR `mask` (inline PTX butterfly).
inline float shuffle_xor(const float v, const int mask)
{
    uint r;
    asm("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(v)), "r"(mask));
    return as_float(r);
}

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

<%def name="args()">__global const float *img, const int rows, const int cols, const int y_lo,
               const int nframes, const int py, const int px, const int tile, const int nty,
               const int ntx, const int ty0, __global int *perm, __global int *perm2,
               __global int *counts, const int sy0, const int org_y, const int org_x</%def>

## The tile of this work-group (tile column `column`, tile row ty0 + `launch_row`: C
## expressions), its scratch and its pixels (copied to local memory when `block`); `group`
## work-items.
<%def name="tile_prologue(group, column, launch_row)">
const int lid = get_local_id(0);
    const int tx = ${column}, ty = ty0 + ${launch_row};
    const int y0 = ty == 0 ? 0 : org_y + ty * tile;
    const int y1 = ty == nty - 1 ? py : org_y + (ty + 1) * tile;
    const int x0 = tx == 0 ? 0 : org_x + tx * tile;
    const int x1 = tx == ntx - 1 ? px : org_x + (tx + 1) * tile;
    const int th = y1 - y0, tw = x1 - x0, area = th * tw, M = nframes * area;
    const size_t base = (size_t)nframes * ((size_t)(y0 - sy0) * px + (size_t)th * x0);
    __global int *pm = perm + base;
    __global int *pm2 = perm2 + base;

% if block:
    // The tile's pixels, every frame and channel: rows y0 ... y1 + P - 2, columns x0 ...
    // x1 + P - 2, at rows of ${bpitch} floats, ${brows} rows per frame and channel.
    // Warp w copies rows w, w + ${group // 32}, ..., its work-items the columns (independent
    // loads: a few rounds of memory latency, not one per row).
    const int bw = tw + ${patch - 1}, bh = th + ${patch - 1};
    for (int fc = 0; fc < nframes * ${channels}; ++fc)
        for (int yy = lid >> 5; yy < bh; yy += ${group // 32})
            for (int xx = lid & 31; xx < bw; xx += 32)
                l_img[(fc * ${brows} + yy) * ${bpitch} + xx] =
                    img[((size_t)fc * rows + (y0 + yy - y_lo)) * cols + x0 + xx];
    const Pixels pix = {l_img, ${channels * brows * bpitch}, ${brows * bpitch}, 0, ${bpitch}};
% else:
    const size_t plane = (size_t)rows * cols;
    const Pixels pix = {img, ${channels} * plane, plane, (size_t)(y0 - y_lo) * cols + x0, cols};
% endif

</%def>

// Slots [*lo, *hi) of node i at depth `level` of a tile of M slots (the root [0, M), a node
// of m slots having children of m / 2 and m - m / 2: the tree's shape depends on M alone),
// and whether every node above it is split (else it lies inside a leaf: no such node).
inline int tree_node(const int i, const int level, const int M, int *lo, int *hi)
{
    int a = 0, b = M, valid = 1;
    for (int l = level - 1; l >= 0; --l) {
        const int mid = a + ((b - a) >> 1);
        valid &= b - a > ${LEAF};
        if ((i >> l) & 1)
            a = mid;
        else
            b = mid;
    }
    *lo = a;
    *hi = b;
    return valid;
}

// The order of a split's (key, slot) pairs as one integer: the key's order-preserving bits
// (the float's, -0 taken as +0; keys are never NaN) above the slot's offset in its node.
inline ulong rank_code(const int key_bits, const int offset)
{
    const uint u = as_float(key_bits) == 0.0f ? 0u : (uint)key_bits;
    const uint o = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((ulong)o << ${SB}) | (uint)offset;
}

// The node of the batch (0 ... ${NB - 1}) being split that holds slot s, or -1.
inline int node_of(const int s, __local const int *l_lo, __local const int *l_hi,
                   __local const int *l_split)
{
    int found = -1;
    for (int b = 0; b < ${NB}; ++b)
        found = l_split[b] && s >= l_lo[b] && s < l_hi[b] ? b : found;
    return found;
}

__kernel __attribute__((reqd_work_group_size(${GROUP}, 1, 1)))
void ann_cluster(${args()})
{
% if block:
    __local float l_img[${block}];
% endif
    // Per node of a batch: the samples' mean and the direction, the samples' Gram matrix,
    // the power iteration's vectors, samples, slots, and flags.
    __local float l_cen[${NB}][2][${D}];
    __local ${IDX} l_off[${D}];
    __local float l_g[${NB}][${SAMPLES}][${SAMPLES + 1}];
    __local float l_v[${NB}][${SAMPLES}], l_w[${NB}][${SAMPLES}];
    __local int l_sample[${NB}][${SAMPLES}];
    __local int l_lo[${NB}], l_hi[${NB}], l_split[${NB}], l_halves[${NB}], l_rbase[${NB}];
    // The median's selection: per node, a digit histogram, the rank code chosen so far and
    // the rank still to find among the codes that start with it.
    __local int l_hist[${NB}][16], l_need[${NB}], l_shift[1];
    __local ulong l_sel[${NB}];
    __local int l_scan[${GROUP}];
% if block:
    // The tile's slots live in local memory while it is clustered (no global round trip
    // per step of a split); they go to perm / perm2 at the end for the query.
    __local int l_pm[${slots}], l_pm2[${slots}];
#define PM l_pm
#define PM2 l_pm2
% else:
#define PM pm
#define PM2 pm2
% endif

    // The tiles in reverse order: the last row's and column's (larger: they absorb the
    // remainder) start first, so that the launch does not wait for them at its end
    // (H100, 512x512, tile 15: 0.256 -> 0.212 ms).
    const int launch_row = get_num_groups(1) - 1 - get_group_id(1);
    ${tile_prologue(GROUP, "ntx - 1 - (int)get_group_id(0)", "launch_row")}
    for (int q = 0, f = 0, dy = 0; q < nframes * th; ++q) {
        for (int dx = lid; dx < tw; dx += ${GROUP})
            PM[q * tw + dx] = f << 14 | dy << 7 | dx;
        if (++dy == th) {
            dy = 0;
            ++f;
        }
    }
    // Offset of value d = (c · P + dy) · P + dx of a patch from its first value.
    for (int c = 0; c < ${C}; ++c)
        for (int dy = 0; dy < ${P}; ++dy)
            for (int dx = lid; dx < ${P}; dx += ${GROUP})
                l_off[(c * ${P} + dy) * ${P} + dx] = c * pix.plane + dy * (${IDX})pix.pitch + dx;
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);

    // ---- clustering, one depth of the tree at a time (every node of a depth has
    // floor or ceil of M / 2^depth slots), ${NB} node(s) of it at once: a batch's nodes
    // are consecutive, so its slots are one run [r0, r1).
    for (int level = 0; ; ++level) {
        const int count = 1 << level;
        if (((M + count - 1) >> level) <= ${LEAF}) {
            // The last depth: every node there is a leaf.
            for (int i = lid; i < count; i += ${GROUP}) {
                int lo, hi;
                if (tree_node(i, level, M, &lo, &hi))
                    PM[lo] |= LEAF_BIT;
            }
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            break;
        }
        for (int i0 = 0; i0 < count; i0 += ${NB}) {
            if (lid < ${NB}) {
                int lo = M, hi = M, split = 0${', rbase = 0' if ballot else ''};
                if (i0 + lid < count) {
                    const int valid = tree_node(i0 + lid, level, M, &lo, &hi);
                    split = valid && hi - lo > ${LEAF};
                    if (valid && !split)
                        PM[lo] |= LEAF_BIT;
                }
% if ballot:
                // The right children's slots of the batch's split nodes before this one
                // (here, so that the power iterations need no step of their own before
                // them; the portable path sums them from local memory after the barrier,
                // as PoCL miscompiles this loop).
                for (int o = 0; o < lid && i0 + o < count; ++o) {
                    int a, b;
                    if (tree_node(i0 + o, level, M, &a, &b) && b - a > ${LEAF})
                        rbase += (b - a) - ((b - a) >> 1);
                }
                l_rbase[lid] = rbase;
% endif
                l_lo[lid] = lo;
                l_hi[lid] = hi;
                l_split[lid] = split;
            }
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            // (r0, r1: read from local memory at each use, as PoCL may lose private values
            // kept across several barriers.)
#define r0 l_lo[0]
#define r1 l_hi[${NB - 1}]
            // 1: the sub-samples.
            for (int q = lid; q < ${NB * SAMPLES}; q += ${GROUP}) {
                const int b = q >> ${LOG_S}, j = q & ${SAMPLES - 1};
                if (l_split[b]) {
                    const int lo = l_lo[b], m = l_hi[b] - lo;
                    l_sample[b][j] = PM[lo + (int)(((uint)j * (uint)m) >> ${LOG_S})];
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            // 2: the samples' mean (a sum in j order times 1 / ${SAMPLES}, exact), in centre 0.
            for (int q = lid; q < ${NB * DP}; q += ${GROUP}) {
                const int b = q >> ${LOG_DP}, d = q & ${DP - 1};
                if (d < ${D} && l_split[b]) {
                    const ${IDX} od = l_off[d];
                    float sum = 0.0f;
                    for (int j = 0; j < ${SAMPLES}; ++j)
                        sum = sum + pix.src[patch_at(pix, l_sample[b][j]) + od];
                    l_cen[b][0][d] = sum * ${INV_S}f;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            // 3: the Gram matrix of the centred samples: work-item (b, i, j / 4) computes
            // G(i, j ... j + 3), each a sum in d order, for the ${PER} blocks on or above the
            // diagonal blocks; one above them also writes G(j ... j + 3, i) (the same
            // products in the same order: the same number). q = b * ${PER} + r, b = q / ${PER}
            // by a multiplication; GRAM_BLOCK[r] = i << 8 | j. Offsets of the values are
            // constants.
            for (int q = lid; q < ${NB * PER}; q += ${GROUP}) {
                const int b = (int)(((uint)q * ${PER_MUL}u) >> ${PER_SHIFT});
                const int ij = GRAM_BLOCK[q - b * ${PER}], i = ij >> 8, j = ij & 255;
                if (l_split[b]) {
                    const ${IDX} pi = patch_at(pix, l_sample[b][i]),
                                 p0 = patch_at(pix, l_sample[b][j]),
                                 p1 = patch_at(pix, l_sample[b][j + 1]),
                                 p2 = patch_at(pix, l_sample[b][j + 2]),
                                 p3 = patch_at(pix, l_sample[b][j + 3]);
                    __local const float *mean = l_cen[b][0];
                    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
                    int d = 0;
                    for (int c = 0; c < ${C}; ++c)
                        for (int dy = 0; dy < ${P}; ++dy)
                            #pragma unroll
                            for (int dx = 0; dx < ${P}; ++dx) {
                                const ${IDX} o = VOFF(c, dy, dx);
                                const float m = mean[d++];
                                const float zi = pix.src[pi + o] - m;
                                a0 = a0 + zi * (pix.src[p0 + o] - m);
                                a1 = a1 + zi * (pix.src[p1 + o] - m);
                                a2 = a2 + zi * (pix.src[p2 + o] - m);
                                a3 = a3 + zi * (pix.src[p3 + o] - m);
                            }
                    l_g[b][i][j] = a0;
                    l_g[b][i][j + 1] = a1;
                    l_g[b][i][j + 2] = a2;
                    l_g[b][i][j + 3] = a3;
                    if (j > (i | 3)) {
                        l_g[b][j][i] = a0;
                        l_g[b][j + 1][i] = a1;
                        l_g[b][j + 2][i] = a2;
                        l_g[b][j + 3][i] = a3;
                    }
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
% if not ballot:
            // Halves when the trace is 0 (the samples are all equal); the power iteration
            // starts from the diagonal; the right children's slots before each node.
            if (lid < ${NB}) {
                const int b = lid;
                int rbase = 0;
                for (int o = 0; o < b; ++o)
                    rbase += l_split[o] ? (l_hi[o] - l_lo[o]) - ((l_hi[o] - l_lo[o]) >> 1) : 0;
                l_rbase[b] = rbase;
                if (l_split[b]) {
                    float trace = 0.0f;
                    for (int j = 0; j < ${SAMPLES}; ++j) {
                        trace = trace + l_g[b][j][j];
                        l_v[b][j] = l_g[b][j][j];
                    }
                    l_halves[b] = trace == 0.0f;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
% endif
            // 4: power iterations w = G v, v = w scaled by a power of two (exact) so that
            // max |v| lies in [0.5, 1).
% if ballot:
            // With warp shuffles (NVIDIA): the ${SAMPLES} work-items of a node are lanes of one
            // warp; work-item i keeps v_i and row i of G in registers and gets v_j from lane
            // j, the maximum by a butterfly: no barrier between iterations (the same sums in
            // the same order; a maximum is exact in any order). Every lane of these warps
            // takes part; only split nodes' vectors are written. The node halves when the
            // trace is 0 (the samples are all equal), that is when no diagonal entry is
            // other than 0 (they are sums of squares: the same test in any order); the
            // iteration starts from the diagonal.
            if (lid < ${-(-(NB * SAMPLES) // 32) * 32}) {
                const int b = min(lid >> ${LOG_S}, ${NB - 1}), i = lid & ${SAMPLES - 1};
                const int first = (lid & 31) & ~${SAMPLES - 1};
                float g[${SAMPLES}];
                for (int j = 0; j < ${SAMPLES}; ++j)
                    g[j] = l_g[b][i][j];
                float v = l_g[b][i][i];
                float other = v != 0.0f ? 1.0f : 0.0f;        // (NaN: other than 0)
% for m in (1, 2, 4, 8, 16)[:LOG_S]:
                other = fmax(other, shuffle_xor(other, ${m}));
% endfor
                if (lid < ${NB * SAMPLES} && i == 0 && l_split[b])
                    l_halves[b] = other == 0.0f;
                for (int it = 0; it < ${POWER}; ++it) {
                    float w = 0.0f;
                    for (int j = 0; j < ${SAMPLES}; ++j)
                        w = w + g[j] * shuffle(v, first + j);
                    float top = fabs(w);
% for m in (1, 2, 4, 8, 16)[:LOG_S]:
                    top = fmax(top, shuffle_xor(top, ${m}));
% endfor
                    if (top > 0.0f && top < INFINITY)
                        v = ldexp(w, -(ilogb(top) + 1));
                }
                if (lid < ${NB * SAMPLES} && l_split[b] && other != 0.0f)
                    l_v[b][i] = v;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
% else:
            // (Unrolled: PoCL 5 lost private values in a loop holding these barriers.)
% for it in range(POWER):
            for (int q = lid; q < ${NB * SAMPLES}; q += ${GROUP}) {
                const int b = q >> ${LOG_S}, i = q & ${SAMPLES - 1};
                if (l_split[b] && !l_halves[b]) {
                    float w = 0.0f;
                    for (int j = 0; j < ${SAMPLES}; ++j)
                        w = w + l_g[b][i][j] * l_v[b][j];
                    l_w[b][i] = w;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int q = lid; q < ${NB * SAMPLES}; q += ${GROUP}) {
                const int b = q >> ${LOG_S}, i = q & ${SAMPLES - 1};
                if (l_split[b] && !l_halves[b]) {
                    float top = 0.0f;
                    for (int j = 0; j < ${SAMPLES}; ++j)
                        top = fmax(top, fabs(l_w[b][j]));
                    // top = f · 2^e, 0.5 <= f < 1: e = ilogb(top) + 1 (frexp's exponent)
                    if (top > 0.0f && top < INFINITY)
                        l_v[b][i] = ldexp(l_w[b][i], -(ilogb(top) + 1));
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
% endfor
% endif
            // 5: the direction u = sum over j of v_j times the centred sample j (in centre 1),
            // then every patch's key, the sum of its values times u in the order of d, to PM2.
            for (int q = lid; q < ${NB * DP}; q += ${GROUP}) {
                const int b = q >> ${LOG_DP}, d = q & ${DP - 1};
                if (d < ${D} && l_split[b] && !l_halves[b]) {
                    const float mean = l_cen[b][0][d];
                    const ${IDX} od = l_off[d];
                    float u = 0.0f;
                    for (int j = 0; j < ${SAMPLES}; ++j)
                        u = u + l_v[b][j] * (pix.src[patch_at(pix, l_sample[b][j]) + od] - mean);
                    l_cen[b][1][d] = u;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int s = r0 + lid; s < r1; s += ${GROUP}) {
                const int b = node_of(s, l_lo, l_hi, l_split);
                if (b >= 0 && !l_halves[b]) {
                    const ${IDX} a = patch_at(pix, PM[s]);
                    __local const float *u = l_cen[b][1];
                    float key = 0.0f;
                    int d = 0;
                    for (int c = 0; c < ${C}; ++c)
                        for (int dy = 0; dy < ${P}; ++dy)
                            #pragma unroll
                            for (int dx = 0; dx < ${P}; ++dx)
                                key = key + pix.src[a + VOFF(c, dy, dx)] * u[d++];
                    // NaN (from a NaN or infinite pixel: the run then fails its value check)
                    // would leave (key, slot) without an order, the ranks without a median
                    // and the partition writing past its node: 0 keeps the order total.
                    PM2[s] = as_int(isnan(key) ? 0.0f : key);
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            // 6: a patch's rank is the number of its node's patches before it by (key,
            // slot) (by slot alone for halves); the m / 2 first go left (SIDE_BIT: right).
            // Nodes of up to ${rank_select} patches count each rank directly (O(m^2)). Larger
            // ones select the node's code of rank m / 2 (rank_code: the same order) exactly,
            // ${RANK_DIGITS} digits of 4 bits from the top, each from a histogram of the codes
            // that start with the digits chosen so far; a patch is right when its code is
            // not below it. (Direct counting took 100 of the 160 ms of a 16-frame 1.4 MP
            // burst on the H100; the selection's barriers cost more below a few hundred.)
            // The batch's nodes have one size (floor or ceil of M / 2^depth): node 0's
            // decides for all, the same on every work-item.
            if (l_hi[0] - l_lo[0] > ${rank_select}) {
                // (The digit's shift lives in local memory and is read after each barrier: PoCL
                // lost a private loop counter kept across this loop's barriers.)
                if (lid < ${NB}) {
                    l_sel[lid] = 0;
                    l_need[lid] = (l_hi[lid] - l_lo[lid]) >> 1;
                }
                if (lid == 0)
                    l_shift[0] = ${4 * (RANK_DIGITS - 1)};
                barrier(CLK_LOCAL_MEM_FENCE);
                while (l_shift[0] >= 0) {
                    for (int q = lid; q < ${NB * 16}; q += ${GROUP})
                        l_hist[q >> 4][q & 15] = 0;
                    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
                    for (int s = r0 + lid; s < r1; s += ${GROUP}) {
                        const int b = node_of(s, l_lo, l_hi, l_split);
                        if (b >= 0 && !l_halves[b]) {
                            const int shift = l_shift[0];
                            const ulong code = rank_code(PM2[s], s - l_lo[b]);
                            // (the top digit's prefix is empty: both sides are 0)
                            if ((code >> (shift + 4)) == (l_sel[b] >> (shift + 4)))
                                atomic_inc(&l_hist[b][(int)(code >> shift) & 15]);
                        }
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                    if (lid < ${NB} && l_split[lid] && !l_halves[lid]) {
                        int need = l_need[lid], d = 0;
                        for (int e = 0; e < 15; ++e) {
                            const int h = l_hist[lid][e], take = d == e && need >= h;
                            need -= take ? h : 0;
                            d += take;
                        }
                        l_need[lid] = need;
                        l_sel[lid] |= (ulong)d << l_shift[0];
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                    // Done early once no node needs more of its chosen digit's codes
                    // (need 0): the code of rank m / 2 is then that digit's smallest, and
                    // comparing with the digits chosen so far (the rest 0) splits alike.
                    if (lid == 0) {
                        int open = 0;
                        for (int b = 0; b < ${NB}; ++b)
                            open |= l_split[b] && !l_halves[b] && l_need[b] > 0;
                        l_shift[0] = open ? l_shift[0] - 4 : -1;
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
                for (int s = r0 + lid; s < r1; s += ${GROUP}) {
                    const int b = node_of(s, l_lo, l_hi, l_split);
                    if (b >= 0) {
                        const int lo = l_lo[b], hi = l_hi[b];
                        if (l_halves[b] ? s - lo >= (hi - lo) >> 1
                                        : rank_code(PM2[s], s - lo) >= l_sel[b])
                            PM[s] |= SIDE_BIT;
                    }
                }
            } else {
                for (int s = r0 + lid; s < r1; s += ${GROUP}) {
                    const int b = node_of(s, l_lo, l_hi, l_split);
                    if (b >= 0) {
                        const int lo = l_lo[b], hi = l_hi[b];
                        int rank = s - lo;
                        if (!l_halves[b]) {
                            const float key = as_float(PM2[s]);
                            rank = 0;
                            for (int j = lo; j < hi; ++j) {
                                const float kj = as_float(PM2[j]);
                                rank += (kj < key) | ((kj == key) & (j < s));
                            }
                        }
                        if (rank >= (hi - lo) >> 1)
                            PM[s] |= SIDE_BIT;
                    }
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            // Stable partition of every node into PM2 (a scan over the batch's run), then
            // back.
            int before = 0;
            for (int c0 = r0; c0 < r1; c0 += ${GROUP}) {
                const int s = c0 + lid;
                const int b = s < r1 ? node_of(s, l_lo, l_hi, l_split) : -1;
                const int code = b >= 0 ? PM[s] : 0;
                const int side = (code & SIDE_BIT) != 0;
                int total;
                const int below = scan_flags(side, l_scan, &total);
                if (b >= 0) {
                    const int rights = before + below - l_rbase[b];   // in the node, before s
                    PM2[side ? l_lo[b] + ((l_hi[b] - l_lo[b]) >> 1) + rights : s - rights] =
                        code & ~SIDE_BIT;
                }
                before += total;
            }
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            for (int s = r0 + lid; s < r1; s += ${GROUP})
                if (node_of(s, l_lo, l_hi, l_split) >= 0)
                    PM[s] = PM2[s];
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
#undef r0
#undef r1
        }
    }

    // ---- the clusters in slot order: perm2[L] = first slot of cluster L.
    int nl = 0;
    for (int c0 = 0; c0 < M; c0 += ${GROUP}) {
        const int s = c0 + lid;
        const int first = s < M && (PM[s] & LEAF_BIT) != 0;
        int total;
        const int below = scan_flags(first, l_scan, &total);
        if (first)
            PM2[nl + below] = s;
        nl += total;
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
% if block:
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lid; s < M; s += ${GROUP}) {
        pm[s] = l_pm[s];
        if (s < nl)
            pm2[s] = l_pm2[s];
    }
% endif
    if (lid == 0)
        counts[(size_t)launch_row * ntx + tx] = nl;
#undef PM
#undef PM2
}

## The patch at offset `me` of the pixels, value d = (c · P + dy) · P + dx in own[d].
<%def name="load_own(me)">\
            float own[${D}];
            {
                int d = 0;
                for (int c = 0; c < ${C}; ++c)
                    for (int dy = 0; dy < ${P}; ++dy)
                        for (int dx = 0; dx < ${P}; ++dx, ++d)
                            own[d] = pix.src[${me} + VOFF(c, dy, dx)];
            }
</%def>\

__kernel __attribute__((reqd_work_group_size(${QGROUP}, 1, 1)))
void ann_query(${args()}, __global const int *ref_row, __global const int *ref_col,
               __global const int *centre_y, __global const int *centre_x,
               const int ref_frame, const int g0, const int g1, const int gx,
               __global int *out_pos, __global float *out_dist, const int out_rows,
               const int out_row0, const int out_f0, const int run, const int parts,
               const int parts_last)
{
    // This work-group's unit of work: a tile column and a run of `run` of its clusters
    // (the last run: to the tile's last cluster). A tile of many clusters is answered by
    // several work-groups, so that it does not keep the launch waiting after the others
    // are done: a tile of the columns before the last by `parts` of them (from the bytes
    // of `parts` and `parts_last`: bits 0-7 the tile rows above the last, 8-15 the last
    // tile row), one of the last column by `parts_last` (from the group's index alone,
    // not from memory: the compiler then knows the tile is the work-group's).
    const int shift = ty0 + (int)get_group_id(1) == nty - 1 ? 8 : 0;
    const int pa = (parts >> shift) & 255, pb = (parts_last >> shift) & 255;
    const int unit = get_group_id(0), before = (ntx - 1) * pa;
    const int column = unit < before ? unit / pa : ntx - 1;
    const int part = unit < before ? unit - column * pa : unit - before;
    const int nparts = unit < before ? pa : pb;
    if (part >= nparts)
        return;                         // (the whole work-group: no barrier is skipped)
% if block:
    __local float l_img[${block}];
    __local int l_code[${slots}], l_start[${slots}];
% endif
    __local float l_table[${QWARPS}][${LEAF * PITCH}];
% if RVOTE:
    // Member m's results: distances at row m of its warp's table, columns 0 ... ${K - 1},
    // slot codes (as float bits) at columns ${K} ... ${2 * K - 1}.
#define RES_D(w, m, r) l_table[w][(m) * ${PITCH} + (r)]
#define RES_C(w, m, r) l_table[w][(m) * ${PITCH} + ${K} + (r)]
% else:
    __local float l_res_d[${QWARPS}][${LEAF * K}];
    __local int l_res_c[${QWARPS}][${LEAF * K}];
#define RES_D(w, m, r) l_res_d[w][(m) * ${K} + (r)]
#define RES_C(w, m, r) l_res_c[w][(m) * ${K} + (r)]
% endif
    __local int l_mref[${QWARPS}][${LEAF}];
    __local int l_info[${QWARPS}][5];
% if not dense:
    __local int l_rm[${QWARPS}][${LEAF}];     // the members that are references, packed
% endif
    __local int l_ref[${area}];

    ${tile_prologue(QGROUP, "column", "get_group_id(1)")}
    const int nl = counts[(size_t)get_group_id(1) * ntx + tx];
    const int first = part * run, end = part == nparts - 1 ? nl : min(nl, first + run);
% if block:
    for (int s = lid; s < M; s += ${QGROUP}) {
        l_code[s] = pm[s] & CODE_MASK;
        if (s < nl)
            l_start[s] = pm2[s];
    }
#define CODE(s) l_code[s]
#define START(L) ((L) < nl ? l_start[L] : M)
% else:
#define CODE(s) (pm[s] & CODE_MASK)
#define START(L) ((L) < nl ? pm2[L] : M)
% endif
    // Output index of each position of the tile in the reference frame (-1: no reference).
    const bool staggered = ${"true" if stagger else "false"};
    for (int dy = lid >> 5; dy < th; dy += ${QGROUP // 32})
    for (int dx = lid & 31; dx < tw; dx += 32) {
        const int r = dy * tw + dx, y = y0 + dy, x = x0 + dx;
        const int g = ref_row[y];
        int out = -1;
        if (g >= g0 && g < g1) {
            const int j = ref_col[(staggered ? (size_t)g * px : 0) + x];
% if choose:
            // One of two tilings (here the ${"first" if choose == 1 else "second"}): the reference is this
            // one's where it lies nearer its tile's centre than in the other${", or as near" if choose == 1 else ""}.
            const int cy = centre_y[y], cx = centre_x[x];
            const int mine = max(cy & 0xffff, cx & 0xffff), other = max(cy >> 16, cx >> 16);
            if (j >= 0 && mine ${"<=" if choose == 1 else "<"} other)
% else:
            if (j >= 0)
% endif
                out = ${mt.ref("out_row0 + g - g0", "j", "gx", "out_f0", "out_rows")};
        }
        l_ref[r] = out;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // ---- queries: each warp answers one cluster per round. Dense: each of the nm members
    // gets S = 32 / nm work-items; else the nr members that are references (few, on a grid
    // of step > 1) are packed and get S = 32 / nr each. Item (i, s) computes and ranks the
    // candidates s, s + S, ... of member i.
    const int warp = lid >> 5, lane = lid & 31;
    __local float *table = l_table[warp];
    for (int L0 = first; L0 < end; L0 += ${QWARPS}) {
        const int L = L0 + warp;
        int s0 = 0, nm = 0, c0 = 0, nc = 0;
        if (L < end) {
            // The candidates: the cluster, then its neighbours L+1, L-1, L+2, ... (those
            // inside the tile) while fewer than ${1 + NEIGH} clusters or ${K} patches are taken.
            int a = L, b = L, taken = 1, j = 1;
            bool up = true;
            s0 = START(L);
            nm = START(L + 1) - s0;
            int count = nm;
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
                count = START(b + 1) - START(a);
            }
            c0 = START(a);
            nc = count;
        }
        if (lane == 0) {
            l_info[warp][0] = s0;
            l_info[warp][1] = nm;
            l_info[warp][2] = c0;
            l_info[warp][3] = nc;
        }
% if dense:
        const int S = SPLIT[nm], i = (lane * INVERSE[S]) >> 16, sub = lane - i * S;
        int ref = -1, mcode = 0;
        if (i < nm) {
            mcode = CODE(s0 + i);
            const int dy = (mcode >> 7) & 127, dx = mcode & 127;
            ref = (mcode >> 14) == ref_frame ? l_ref[dy * tw + dx] : -1;
        }
        if (i < nm && sub == 0)
            l_mref[warp][i] = ref;
% else:
        // Member `lane`'s output index, then the references packed in member order.
        if (lane < nm) {
            const int code = CODE(s0 + lane);
            l_mref[warp][lane] = (code >> 14) == ref_frame
                ? l_ref[((code >> 7) & 127) * tw + (code & 127)] : -1;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        nm = l_info[warp][1];
        if (lane < nm && l_mref[warp][lane] >= 0) {
            int at = 0;
            for (int m = 0; m < lane; ++m)
                at += l_mref[warp][m] >= 0;
            l_rm[warp][at] = lane;
        }
        if (lane == 0) {
            int count = 0;
            for (int m = 0; m < nm; ++m)
                count += l_mref[warp][m] >= 0;
            l_info[warp][4] = count;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        s0 = l_info[warp][0];
        nm = l_info[warp][1];
        c0 = l_info[warp][2];
        nc = l_info[warp][3];
        const int nr = l_info[warp][4];
        const int S = SPLIT[nr], r = (lane * INVERSE[S]) >> 16, sub = lane - r * S;
        const int i = r < nr ? l_rm[warp][r] : 0;
        const int ref = r < nr ? l_mref[warp][i] : -1;
        const int mcode = r < nr ? CODE(s0 + i) : 0;
% endif
        __local float *row = table + i * ${PITCH};
        // The table of a cluster searched alone, one work-item per member, is symmetric
        // (the same products, summed in the same order): member i computes the distances
        // to members i + t (mod nm), t = 0 ... nm / 2 (t = nm / 2 for i < nm / 2 only when
        // nm is even), which gives each pair once, and writes both entries.
        const int sym = ${"nc == nm && S == 1" if dense else "0"};
% if ballot and REG and dense:
        // With warp shuffles (NVIDIA): member i holds its own patch in registers and gets
        // member j's values from work-item j, so no patch is read from local memory while
        // the table is built (the same values, the same sums). The condition is the same on
        // the warp's 32 work-items; all of them take part (i >= nm: member 0's patch,
        // results not written).
        if (sym) {
            const int mine = i < nm ? i : 0;
            const ${IDX} me = patch_at(pix, CODE(c0 + mine));
${load_own("me")}            const int hn = nm >> 1, pairs = (nm & 1) || i < hn ? hn + 1 : hn;
            const bool member = i < nm;
            for (int t = 0; t <= hn; t += 2) {
                const int j1 = mine + t - (mine + t >= nm ? nm : 0);
                const int j2 = mine + t + 1 - (mine + t + 1 >= nm ? nm : 0);
                float acc1 = 0.0f, acc2 = 0.0f;
                for (int d = 0; d < ${D}; ++d) {
                    const float e1 = own[d] - shuffle(own[d], j1);
                    const float e2 = own[d] - shuffle(own[d], j2);
                    acc1 = fma(e1, e1, acc1);
                    acc2 = fma(e2, e2, acc2);
                }
                if (member && t < pairs) {
                    row[j1] = acc1;
                    table[j1 * ${PITCH} + i] = acc1;
                }
                if (member && t + 1 < pairs) {
                    row[j2] = acc2;
                    table[j2 * ${PITCH} + i] = acc2;
                }
            }
        } else
% endif
        if (sym ? i < nm : ref >= 0) {
            const ${IDX} me = patch_at(pix, mcode);
% if REG:
${load_own("me")}#define OWN(d, o) own[d]
% else:
#define OWN(d, o) pix.src[me + (o)]
% endif
            const int hn = nm >> 1, pairs = (nm & 1) || i < hn ? hn + 1 : hn;
            // Two candidates at a time: two independent sums, each in the order of d (a
            // fused multiply-add per value: exact on integer-valued images).
            if (sym)
            for (int t = 0; t < pairs; t += 2) {
                const int t2 = min(t + 1, pairs - 1);
                const int j1 = i + t - (i + t >= nm ? nm : 0), j2 = i + t2 - (i + t2 >= nm ? nm : 0);
                const ${IDX} b1 = patch_at(pix, CODE(c0 + j1)), b2 = patch_at(pix, CODE(c0 + j2));
                float acc1 = 0.0f, acc2 = 0.0f;
                int d = 0;
                for (int ch = 0; ch < ${C}; ++ch)
                    for (int dy = 0; dy < ${P}; ++dy)
                        for (int dx = 0; dx < ${P}; ++dx, ++d) {
                            const ${IDX} o = VOFF(ch, dy, dx);
                            const float e1 = OWN(d, o) - pix.src[b1 + o];
                            const float e2 = OWN(d, o) - pix.src[b2 + o];
                            acc1 = fma(e1, e1, acc1);
                            acc2 = fma(e2, e2, acc2);
                        }
                row[j1] = acc1;
                table[j1 * ${PITCH} + i] = acc1;
                if (t + 1 < pairs) {
                    row[j2] = acc2;
                    table[j2 * ${PITCH} + i] = acc2;
                }
            }
            else
            for (int c = sub; c < nc; c += 2 * S) {
                const int c2 = min(c + S, nc - 1);
                const ${IDX} b1 = patch_at(pix, CODE(c0 + c)), b2 = patch_at(pix, CODE(c0 + c2));
                float acc1 = 0.0f, acc2 = 0.0f;
                int d = 0;
                for (int ch = 0; ch < ${C}; ++ch)
                    for (int dy = 0; dy < ${P}; ++dy)
                        for (int dx = 0; dx < ${P}; ++dx, ++d) {
                            const ${IDX} o = VOFF(ch, dy, dx);
                            const float e1 = OWN(d, o) - pix.src[b1 + o];
                            const float e2 = OWN(d, o) - pix.src[b2 + o];
                            acc1 = fma(e1, e1, acc1);
                            acc2 = fma(e2, e2, acc2);
                        }
                row[c] = acc1;
                if (c + S < nc)
                    row[c2] = acc2;
            }
#undef OWN
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // (After each barrier the work-item's cluster and member are read back from local
        // memory: PoCL 5 otherwise loses these per-warp values across two barriers. The
        // local id is made an int before it is shifted: Intel's CPU compiler (OpenCL
        // runtime 2026.22) vectorises "get_local_id(0) >> 5", a size_t shifted then
        // narrowed, as if it were the local id itself, and l_info[warp] reads past the
        // array.)
        {
        const int warp = (int)get_local_id(0) >> 5, lane = (int)get_local_id(0) & 31;
        const int s0 = l_info[warp][0], nm = l_info[warp][1];
        const int c0 = l_info[warp][2], nc = l_info[warp][3];
% if dense:
        const int S = SPLIT[nm], i = (lane * INVERSE[S]) >> 16, sub = lane - i * S;
        const int ref = i < nm ? l_mref[warp][i] : -1;
% else:
        const int nr = l_info[warp][4];
        const int S = SPLIT[nr], r = (lane * INVERSE[S]) >> 16, sub = lane - r * S;
        const int i = r < nr ? l_rm[warp][r] : 0;
        const int ref = r < nr ? l_mref[warp][i] : -1;
% endif
        __local float *row = l_table[warp] + i * ${PITCH};
        // Voting: candidate c's rank is the number of candidates before it (the patch itself
        // first, then by (distance, slot)). A NaN distance (a NaN or infinite pixel: the
        // run then fails its value check) counts as +inf, so the ranks stay a permutation
        // and every result entry is written.
% if RVOTE:
        // At most ${CAND} candidates: the first work-item of each member holds its row in
        // registers and compares each pair (o, c), o < c, once, counting for both (o is
        // before c when its distance is not larger; two counts of 16 bits per register).
        // Entries past nc are +inf and come after every candidate, so they count for none.
        // The same ranks as counting each one's row. The results then overwrite the row,
        // which no other work-item reads.
        if (ref >= 0 && sub == 0) {
            const int me = s0 + i - c0;
            const float dme = ORDERED(row[me]);
            float dv[${CAND}];
            int rk[${(CAND + 1) // 2}];
% for o in range(CAND):
            dv[${o}] = ${o} < nc ? ORDERED(row[${o}]) : INFINITY;
% endfor
% for o in range((CAND + 1) // 2):
            rk[${o}] = 0;
% endfor
<%
    def half(x):
        return f"rk[{x // 2}]", ("" if x % 2 == 0 else " << 16")
    def vote(o, c):
        (rc, sc), (ro, so) = half(c), half(o)
        return f"{{ const int a = dv[{o}] <= dv[{c}]; {rc} += a{sc}; {ro} += (1 - a){so}; }}"
%>
% for c in range(1, CAND):
            ${" ".join(vote(o, c) for o in range(c))}
% endfor
% for c in range(CAND):
            if (${c} < nc) {
                const int rank = ${c} == me ? 0
                    : ((rk[${c // 2}] >> ${16 * (c % 2)}) & 0xffff) + 1
                      - ((dme < dv[${c}]) | ((dme == dv[${c}]) & (me < ${c})));
                if (rank < ${K}) {
                    RES_D(warp, i, rank) = dv[${c}];
                    RES_C(warp, i, rank) = as_float(CODE(c0 + ${c}));
                }
            }
% endfor
        }
% else:
        if (ref >= 0) {
            const int me = s0 + i - c0;
            const float dme = ORDERED(row[me]);
            for (int c = sub; c < nc; c += S) {
                int rank = 0;
                const float dc = ORDERED(row[c]);
                if (c != me) {
                    // The count includes the patch itself by value: take that out, count
                    // it first.
                    for (int o = 0; o < nc; ++o) {
                        const float v = ORDERED(row[o]);
                        rank += (v < dc) | ((v == dc) & (o < c));
                    }
                    rank += 1 - ((dme < dc) | ((dme == dc) & (me < c)));
                }
                if (rank < ${K}) {
                    RES_D(warp, i, rank) = dc;
                    RES_C(warp, i, rank) = CODE(c0 + c);
                }
            }
        }
% endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        {
        const int warp = (int)get_local_id(0) >> 5, lane = (int)get_local_id(0) & 31;
        // Each reference's ${K} results leave together (whole memory segments per store
        // instruction, not one segment per result).
% if dense:
        const int nm = l_info[warp][1];
        for (int e = lane; e < nm * ${K}; e += 32) {
            const int m = e / ${K}, r = e - m * ${K};
% else:
        const int nr = l_info[warp][4];
        for (int e = lane; e < nr * ${K}; e += 32) {
            const int q = e / ${K}, r = e - q * ${K}, m = l_rm[warp][q];
% endif
            const int out = l_mref[warp][m];
            if (out >= 0) {
                const int code = ${"as_int(RES_C(warp, m, r))" if RVOTE else "RES_C(warp, m, r)"};
                const int f = ${mt.entry("out", K, "r")};
                ${mt.dist("out_dist", "f")} = RES_D(warp, m, r);
% if dim == 3:
                ${mt.pos_t("out_pos", "f", 3)} = code >> 14;
% endif
                ${mt.pos_y("out_pos", "f", dim)} = y0 + ((code >> 7) & 127);
                ${mt.pos_x("out_pos", "f", dim)} = x0 + (code & 127);
            }
        }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#undef CODE
#undef START
#undef RES_D
#undef RES_C
}
