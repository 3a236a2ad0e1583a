## The collaborative filter of BM3D / CBM3D and VBM3D (Davy-Ehret 2.2, 4.4): the fused filter
## kernel of Algorithm 6, the accumulation normalisation, and the CBM3D opponent colour
## transform. BM3D renders it for images, VBM3D with video=True (rings of frame slots).
##
## Rendered with: patch (P), n (N: largest group, a power of 2 <= 32), channels (C: 1, or 3
## for CBM3D), stage (1: hard thresholding, 2: Wiener with the basic estimate as oracle),
## transform_2d, transform_1d (names of clpatch.denoise.transforms), beta (Kaiser window),
## aggregation ("fixed" | "cas", see lib/aggregate.mako), video (positions hold (t, y, x)),
## colour (bool: the opponent colour kernels are included), stagger (per-reference columns),
## exact_variance (images, Haar along the group: each 3-D coefficient is shrunk against its
## exact noise variance for the group's patch positions, see bm3d_filter). The profile gives
## the local-memory padding x of the transposes (bank_padding: NVIDIA 1, AMD 2, Intel 4).
<%page args="patch, n, channels, stage, transform_2d, transform_1d, beta, aggregation, video=False, colour=False, stagger=False, exact_variance=False"/>
<%namespace name="agg" file="/lib/aggregate.mako"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%namespace name="gv" file="/lib/group_variance.mako"/>\
<%!
    import math
    from clpatch.denoise import clgen as gen
    from clpatch.denoise.transforms import transform_pair, kaiser_window
%>
<%
    P, N, C = patch, n, channels
    X = int(profile.bank_padding)
    ZG = min(N, 8)                    # patches per slice: thread (z, y) holds column y of patch z
    G = ZG * P                        # work-items per work-group (64 for 8x8 patches)
    R = N // ZG                       # slices: a work-item holds R columns (then R rows)
    M = -(-(P * P) // G)              # pixels per work-item in the stack phase
    PAPER = P == 8 and ZG == 8 and X in (1, 2, 4, 8)   # Algorithm 10's conflict-free layout
    SLICE_A = P * (ZG * P + X)        # Algorithm 9, one slice
    SLICE_S = ZG * P * P if PAPER else ZG * (P * P + 1)
    SL = max(SLICE_A, SLICE_S)
    DIM = 3 if video else 2
    ENTRY = mt.entry("ref", N, "j")  # result j of reference ref (lib/matches.mako)
    ACC = {"fixed": "long", "cas": "uint"}[aggregation]
    F2, I2 = transform_pair(transform_2d, P)
    sizes = [1 << e for e in range(int(math.log2(N)) + 1)]
    # kaiser_window(P) is the outer product w w^T (w >= 0): its diagonal is w^2.
    w1d = [float(v) for v in (kaiser_window(P, beta).diagonal() ** 0.5)]
    EPS = 2.0 ** -10                  # floor of the Wiener energy (see bm3d.py)
    POW2G = 1 << (G - 1).bit_length()
    EXACT = exact_variance
    assert not EXACT or (transform_1d == "haar" and not video)
%>
${agg.pragmas(aggregation)}
//
// Layouts. The image band is planar float, img[((f * C + c) * H + y) * W + x] with nf frames
// and H rows (band_y0: image row of band row 0).
% if video:
// Video: the band is a ring of nf frame slots; video frame t lives in slot
// (t - frame_base) % nf (t >= frame_base), and the reference frame of launch frame fr is
// video frame ref_fb + fr.
% else:
// The reference frame of launch frame fr is band frame ref_fb + fr.
% endif
// Search results: dist[ref * N + j] and pos[(ref * N + j) * ${DIM}] (${"t, y, x" if video else "y, x"}, whole
// image coordinates), ref = (fr * out_gy + row) * gx + col for reference frame fr.
// The accumulator interleaves numerator and denominator over the band:
// acc[2 * i] and acc[2 * i + 1] for band element i = ((f * C + c) * H + y) * W + x.
//
// Work-group layout (${G} work-items, Algorithm 6): work-item (z, y) = (lid / ${P}, lid % ${P})
// first holds column y of patches z + ${ZG} r (r < ${R}), then, after Algorithm 9, row y of
// the same patches, then, after Algorithm 10, the ${N} values of the group along the stack
// for ${M} pixel(s) of the patch. Patches beyond the group size k are zeros (Davy-Ehret
// 4.4.2), so every transpose moves whole slices of ${ZG} patches.
//
${agg.helpers(aggregation)}

% if aggregation == "fixed":
#define ADD_NUM(i, v) acc_add(acc + (i), (v), scale_num)
#define ADD_DEN(i, v) acc_add(acc + (i), (v), scale_den)
#define LOAD_NUM(i) ((float)acc[i] * inv_num)
#define LOAD_DEN(i) ((float)acc[i] * inv_den)
% else:
#define ADD_NUM(i, v) acc_add(acc + (i), (v))
#define ADD_DEN(i, v) acc_add(acc + (i), (v))
#define LOAD_NUM(i) as_float(acc[i])
#define LOAD_DEN(i) as_float(acc[i])
% endif

__constant float kaiser1d[${P}] = {${", ".join(gen.literal(v) for v in w1d)}};

## Algorithm 9: column y of patch z <-> row y of patch z, for every slice of `arr`.
<%def name="transpose_rows(arr)">
    barrier(CLK_LOCAL_MEM_FENCE);
% for r in range(R):
% for k in range(P):
    lds[${r * SL} + ${ZG * P + X} * y + ${P} * z + ${k}] = ${arr}[${r}][${k}];
% endfor
% endfor
    barrier(CLK_LOCAL_MEM_FENCE);
% for r in range(R):
% for k in range(P):
    ${arr}[${r}][${k}] = lds[${r * SL} + ${(ZG * P + X) * k} + ${P} * z + y];
% endfor
% endfor
</%def>

## Algorithm 10 (forward: `rows` -> `stack`; inverse: `stack` -> `rows`): row y of patch z
## <-> the group's values along the stack for this work-item's pixel(s).
<%def name="rows_to_stack(rows, stack, inverse)">
    barrier(CLK_LOCAL_MEM_FENCE);
% for r in range(R):
% if PAPER:
% for h in range(8 // X):
% for j in range(X):
<% addr = f"{r * SL} + 64 * z + ((8 * z * {X} + {8 * h * X} + y * {X} + {j}) & 63)" %>\
% if not inverse:
    lds[${addr}] = ${rows}[${r}][${h * X + j}];
% endif
% endfor
% endfor
% else:
% for b in range(P):
% if not inverse:
    lds[${r * SL} + z * ${P * P + 1} + y * ${P} + ${b}] = ${rows}[${r}][${b}];
% endif
% endfor
% endif
% endfor
% if inverse:
% for r in range(R):
% for k in range(ZG):
% if PAPER:
    lds[${r * SL + 64 * k} + ((${8 * k * X} + lid) & 63)] = ${stack}[0][${ZG * r + k}];
% else:
% for mi in range(M):
    if (lid + ${G * mi} < ${P * P})
        lds[${r * SL + k * (P * P + 1)} + lid + ${G * mi}] = ${stack}[${mi}][${ZG * r + k}];
% endfor
% endif
% endfor
% endfor
% endif
    barrier(CLK_LOCAL_MEM_FENCE);
% if not inverse:
% for r in range(R):
% for k in range(ZG):
% if PAPER:
    ${stack}[0][${ZG * r + k}] = lds[${r * SL + 64 * k} + ((${8 * k * X} + lid) & 63)];
% else:
% for mi in range(M):
    ${stack}[${mi}][${ZG * r + k}] = lid + ${G * mi} < ${P * P} ? lds[${r * SL + k * (P * P + 1)} + lid + ${G * mi}] : 0.0f;
% endfor
% endif
% endfor
% endfor
% else:
% for r in range(R):
% if PAPER:
% for h in range(8 // X):
% for j in range(X):
    ${rows}[${r}][${h * X + j}] = lds[${r * SL} + 64 * z + ((8 * z * ${X} + ${8 * h * X} + y * ${X} + ${j}) & 63)];
% endfor
% endfor
% else:
% for b in range(P):
    ${rows}[${r}][${b}] = lds[${r * SL} + z * ${P * P + 1} + y * ${P} + ${b}];
% endfor
% endif
% endfor
% endif
</%def>

## The 2-D transform's 1-D pass (matrix `mat`) on every slice of `arr`.
<%def name="pass_2d(arr, mat)">
% for r in range(R):
    ${gen.transform_in_place(mat, [f"{arr}[{r}][{k}]" for k in range(P)], "t")}
% endfor
</%def>

## The 1-D transform of size k along the stack, on every pixel of `stack` (k is uniform
## over the work-group).
<%def name="pass_1d(stack, inverse)">
% for s in sizes:
% if s > 1:
    ${"if" if s == 2 else "else if"} (k == ${s}) {
% for mi in range(M):
<% vals = [f"{stack}[{mi}][{j}]" for j in range(s)] %>\
% if transform_1d == "hadamard":
        ${gen.hadamard_in_place(vals, "h")}
% else:
<% f1, i1 = transform_pair(transform_1d, s) %>\
        ${gen.transform_in_place(i1 if inverse else f1, vals, "t")}
% endif
% endfor
    }
% endif
% endfor
</%def>

## Sum of `value` over the work-group, into `total` (all work-items).
<%def name="group_sum(value, total)">
    barrier(CLK_LOCAL_MEM_FENCE);
    red[lid] = ${value};
    barrier(CLK_LOCAL_MEM_FENCE);
% for s in [POW2G >> e for e in range(1, POW2G.bit_length())]:
% if s < G:
    if (lid < ${s} && lid + ${s} < ${G})
        red[lid] += red[lid + ${s}];
    barrier(CLK_LOCAL_MEM_FENCE);
% endif
% endfor
    const float ${total} = red[0];
</%def>

% if EXACT:
${gv.helpers(P, F2)}
% endif
//
// Filters the group of one reference patch and aggregates it (Algorithm 6).
// Launch: global (${G}, gx_launch, nrows * nfr), local (${G}, 1, 1): group (1) is grid column
// col_first + get_group_id(1), group (2) grid row row_first + (id % nrows) of reference frame
// id / nrows (band frame ref_fb + that).
// The group: the reference itself, then the search's results in ascending distance without
// it; its size k is the largest power of 2 <= min(N, number of results with distance <= tau)
// (the reference counts even when ties pushed it out of the results).
// Stage 1: hard thresholding of the 3-D spectrum at thr_c = lambda * sigma_c, the 3-D DC
// always kept (so the group's mean survives any sigma), weight 1 / kept. Stage 2: Wiener
// shrinkage w = B^2 / (B^2 + s_c) with B the spectrum of the same group cut from `basic` and
// s_c = mu2 * sigma_c^2, w = 1 on the 3-D DC, weight 1 / (s_c * max(sum w^2, ${EPS})).
% if EXACT:
// Exact variances (Makinen, Azzari and Foi 2020): coefficient (c, a, b) of the group has
// noise variance sigma_c^2 v, v = sum_i sum_j T[c][i] T[c][j] r_a(dy_ij) r_b(dx_ij) (T: the
// Haar transform along the group; patches that overlap share noise), computed bottom-up
// over the Haar tree (clgen.haar_variances). Stage 1 keeps c^2 > thr_c^2 v and weighs
// 1 / (sum of v kept); stage 2 takes w = B^2 / (B^2 + s_c v) and the energy sum w^2 v.
% endif
% if stagger:
// Staggered grid: xs holds every reference's column, gx per entry of ys.
% endif
// Every filtered pixel is added to the accumulator with weight * Kaiser window.
//
__kernel __attribute__((reqd_work_group_size(${G}, 1, 1)))
void bm3d_filter(__global const float *restrict img,
% if stage == 2:
                 __global const float *restrict basic,
% endif
                 const int nf, const int H, const int W, const int frame_base, const int band_y0,
                 __global const int *restrict pos, __global const float *restrict dist,
                 const int out_gy, const int gx, __global const int *restrict ys,
                 __global const int *restrict xs, const int row_first, const int nrows,
                 const int col_first, const int ref_fb, __global ${ACC} *acc,
% if video:
                 const int acc_nf,
% endif
                 const float tau,
                 const float s0, const float s1, const float s2,
                 const float scale_num, const float scale_den)
{
    __local float lds[${R * SL}];
    __local float red[${G}];
    const int lid = get_local_id(0);
    const int z = lid / ${P};
    const int y = lid - z * ${P};
    const int gj = col_first + get_group_id(1);
    const int zz = get_group_id(2);
    const int fr = zz / nrows;
    const int ti = row_first + (zz - fr * nrows);
    const int ref = ${mt.ref("ti", "gj", "gx", frame="fr", gy="out_gy")};
    const int rt = ref_fb + fr;
% if video:
    const int rslot = (rt - frame_base) % nf;
% else:
    const int rslot = rt;
% endif
% if stagger:
    const int ry = ys[ti], rx = xs[ti * gx + gj];
% else:
    const int ry = ys[ti], rx = xs[gj];
% endif
    const float sig[3] = {s0, s1, s2};

    // Where the reference is among the results (${N}: absent), and the group size k. The
    // first match is kept by min(): the equivalent "if (self && where == N) where = j" makes
    // the vectoriser of Intel's CPU compiler (OpenCL runtime 2026.22) crash on this kernel.
    int where = ${N};
    int similar = 0;
    for (int j = 0; j < ${N}; ++j) {
        similar += ${mt.dist("dist", ENTRY)} <= tau;
% if video:
        const bool self = ${mt.pos_t("pos", ENTRY, DIM)} == rt
                          && ${mt.pos_y("pos", ENTRY, DIM)} == ry && ${mt.pos_x("pos", ENTRY, DIM)} == rx;
% else:
        const bool self = ${mt.pos_y("pos", ENTRY, DIM)} == ry && ${mt.pos_x("pos", ENTRY, DIM)} == rx;
% endif
        if (self)
            where = min(where, j);
    }
    if (where == ${N})
        similar += 1;
    similar = min(similar, ${N});
    int k = 1;
    while (2 * k <= similar)
        k *= 2;

% if EXACT:
    // ---- the noise variance v (units of sigma^2) of this work-item's coefficients
    float vr[${M}][${N}];
    ${gv.variances("vr", P, N, G, M, X if PAPER else 0, sizes, ENTRY, DIM)}
% endif
    // Band offsets of column y, row 0, channel 0 of this work-item's patches (-1: not in
    // the group)${"; video: aoff, the same in the accumulator's ring of acc_nf slots" if video else ""}.
    int off[${R}];
% if video:
    int aoff[${R}];
% endif
% for r in range(R):
    {
        const int m = z + ${ZG * r};
        if (m >= k) {
            off[${r}] = -1;
        } else if (m == 0) {
            off[${r}] = ((rslot * ${C}) * H + ry - band_y0) * W + rx + y;
% if video:
            aoff[${r}] = ((((rt - frame_base) % acc_nf) * ${C}) * H + ry - band_y0) * W + rx + y;
% endif
        } else {
            const int j = m - 1 + (m - 1 >= where ? 1 : 0);
% if video:
            const int tb = (${mt.pos_t("pos", ENTRY, DIM)} - frame_base) % nf;
            const int yb = ${mt.pos_y("pos", ENTRY, DIM)} - band_y0;
            const int xb = ${mt.pos_x("pos", ENTRY, DIM)};
% else:
            const int tb = rt;
            const int yb = ${mt.pos_y("pos", ENTRY, DIM)} - band_y0;
            const int xb = ${mt.pos_x("pos", ENTRY, DIM)};
% endif
            off[${r}] = ((tb * ${C}) * H + yb) * W + xb + y;
% if video:
            aoff[${r}] = ((((${mt.pos_t("pos", ENTRY, DIM)} - frame_base) % acc_nf) * ${C}) * H + yb) * W + xb + y;
% endif
        }
    }
% endfor

    float A[${R}][${P}];
    float S[${M}][${N}];
% if stage == 2:
    float O[${R}][${P}];
    float Q[${M}][${N}];
% endif
% for c in range(C):
    {
        // ---- channel ${c}: gather the group (work-item (z, y): column y of its patches)
% for r in range(R):
% for kk in range(P):
        A[${r}][${kk}] = off[${r}] >= 0 ? img[off[${r}] + ${c} * H * W + ${kk} * W] : 0.0f;
% if stage == 2:
        O[${r}][${kk}] = off[${r}] >= 0 ? basic[off[${r}] + ${c} * H * W + ${kk} * W] : 0.0f;
% endif
% endfor
% endfor
        // ---- 3-D transform: columns, Algorithm 9, rows, Algorithm 10, stack
        ${pass_2d("A", F2)}
        ${transpose_rows("A")}
        ${pass_2d("A", F2)}
        ${rows_to_stack("A", "S", False)}
        ${pass_1d("S", False)}
% if stage == 2:
        ${pass_2d("O", F2)}
        ${transpose_rows("O")}
        ${pass_2d("O", F2)}
        ${rows_to_stack("O", "Q", False)}
        ${pass_1d("Q", False)}
% endif
        // ---- shrinkage
        float part = 0.0f;
% for mi in range(M):
% for j in range(N):
<%
    if EXACT:
        above = f"S[{mi}][{j}] * S[{mi}][{j}] > sig[{c}] * sig[{c}] * vr[{mi}][{j}]"
        counted, noise, energy = f"vr[{mi}][{j}]", f"sig[{c}] * vr[{mi}][{j}]", f"w * w * vr[{mi}][{j}]"
    else:
        above = f"fabs(S[{mi}][{j}]) > sig[{c}]"
        counted, noise, energy = "1.0f", f"sig[{c}]", "w * w"
%>\
% if stage == 1:
        {
% if mi == 0 and j == 0:
            // Work-item 0 holds the 3-D DC (pixel 0 of the spectrum, stack entry 0): always kept.
            const bool keep = lid == 0 || ${above};
% else:
            const bool keep = ${above};
% endif
            S[${mi}][${j}] = keep ? S[${mi}][${j}] : 0.0f;
            part += keep ? ${counted} : 0.0f;
        }
% else:
        {
            const float b2 = Q[${mi}][${j}] * Q[${mi}][${j}];
% if mi == 0 and j == 0:
            // The 3-D DC (work-item 0) passes unshrunk (w = 1).
            const float w = lid == 0 ? 1.0f : b2 / (b2 + ${noise});
% else:
            const float w = b2 / (b2 + ${noise});
% endif
            S[${mi}][${j}] *= w;
            part += ${energy};
        }
% endif
% endfor
% endfor
% if not PAPER:
        // Pixels beyond the patch (work-items without one) hold zeros: nothing to count.
% endif
        ${group_sum("part", "total")}
% if stage == 1:
        const float weight = total > 0.0f ? 1.0f / total : 1.0f;
% else:
        const float weight = 1.0f / (sig[${c}] * fmax(total, ${gen.literal(EPS)}));
% endif
        // ---- inverse 3-D transform
        ${pass_1d("S", True)}
        ${rows_to_stack("A", "S", True)}
        ${pass_2d("A", I2)}
        ${transpose_rows("A")}
        ${pass_2d("A", I2)}
        // ---- aggregation: weight * Kaiser window
        const float wy = weight * kaiser1d[y];
% for r in range(R):
        if (off[${r}] >= 0) {
% for kk in range(P):
            {
                const int at = 2 * (${"aoff" if video else "off"}[${r}] + ${c} * H * W + ${kk} * W);
                const float wk = wy * kaiser1d[${kk}];
                ADD_NUM(at, wk * A[${r}][${kk}]);
                ADD_DEN(at + 1, wk);
            }
% endfor
        }
% endfor
    }
% endfor
}

//
// Normalisation: value = numerator / denominator over band rows y_first ... y_first + rows - 1
// of band frames f_first ... f_first + nfo - 1. Launch: global (W, rows, nfo).
// bm3d_finalize_planar writes the working space (opponent colours) planar:
// out[((fo * C + c) * out_rows + out_y0 + r) * W + x];
// bm3d_finalize writes the result interleaved, back in RGB for colour:
// out[(((out_f0 + fo) * out_rows + out_y0 + r) * W + x) * C + c].
//
<%def name="normalise()">
    const int x = get_global_id(0), r = get_global_id(1), fo = get_global_id(2);
    if (x >= W || r >= rows || fo >= nfo)
        return;
    float v[${C}];
% for c in range(C):
    {
        const int at = 2 * ((((f_first + fo) * ${C} + ${c}) * H + y_first + r) * W + x);
        v[${c}] = LOAD_NUM(at) / LOAD_DEN(at + 1);
    }
% endfor
</%def>

__kernel void bm3d_finalize_planar(__global const ${ACC} *restrict acc, const int H, const int W,
                                   const int f_first, const int nfo, const int y_first,
                                   const int rows, const float inv_num, const float inv_den,
                                   __global float *restrict out, const int out_rows,
                                   const int out_y0)
{
    ${normalise()}
% for c in range(C):
    out[((fo * ${C} + ${c}) * out_rows + out_y0 + r) * W + x] = v[${c}];
% endfor
}

__kernel void bm3d_finalize(__global const ${ACC} *restrict acc, const int H, const int W,
                            const int f_first, const int nfo, const int y_first, const int rows,
                            const float inv_num, const float inv_den, __global float *restrict out,
                            const int out_rows, const int out_y0, const int out_f0)
{
    ${normalise()}
% if colour:
    {
        // Inverse of the CBM3D opponent transform below.
        const float Y = v[0], U = v[1], V = v[2];
        v[0] = Y + U + V * ${gen.literal(2.0 / 3.0)};
        v[1] = Y - V * ${gen.literal(4.0 / 3.0)};
        v[2] = Y - U + V * ${gen.literal(2.0 / 3.0)};
    }
% endif
    const long o = (((long)(out_f0 + fo) * out_rows + out_y0 + r) * W + x) * ${C};
% for c in range(C):
    out[o + ${c}] = v[${c}];
% endfor
}

//
// Zeroes acc[first ... first + count - 1]. A kernel, not a fill: Oclgrind's
// uninitialised-memory checker does not see fills.
//
__kernel void bm3d_clear(__global ${ACC} *acc, const int first, const int count)
{
    const int i = get_global_id(0);
    if (i < count)
        acc[first + i] = 0;
}

% if colour:
//
// CBM3D's opponent colour transform (Dabov et al., ICIP 2007), in place on the planar band
// (C = 3): Y = (R + G + B) / 3, U = (R - B) / 2, V = (R - 2G + B) / 4. With `lum`, Y is
// also written alone to lum[(f * H + y) * W + x]. Frames f0 ... f0 + nf - 1 of the band.
// Launch: global (W, H, nf).
//
__kernel void bm3d_to_opponent(__global float *restrict img, const int f0, const int nf,
                               const int H, const int W, __global float *restrict lum,
                               const int write_lum)
{
    const int x = get_global_id(0), y = get_global_id(1), f = f0 + get_global_id(2);
    if (x >= W || y >= H || f >= f0 + nf)
        return;
    const int at = (f * 3 * H + y) * W + x;
    const float r = img[at], g = img[at + H * W], b = img[at + 2 * H * W];
    const float Y = (r + g + b) * ${gen.literal(1.0 / 3.0)};
    img[at] = Y;
    img[at + H * W] = (r - b) * 0.5f;
    img[at + 2 * H * W] = (r - 2.0f * g + b) * 0.25f;
    if (write_lum)
        lum[(f * H + y) * W + x] = Y;
}
% endif
