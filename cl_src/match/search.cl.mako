## Exact windowed patch search (Davy-Ehret 4.1): for every reference patch, the n
## candidates of smallest distance among all patches whose top-left corner lies in the
## window of half-width `radius` around the reference's (and, for video, in frames
## t - tw ... t + tw), clipped to the image. Equal distances resolve by the tie rule of
## lib/nn_table.mako (the smaller candidate offset (dt, dy, dx), lexicographically), so the
## variants, which visit the window in different orders, all give the same matches.
##
## Rendered with: variant ("naive" | "rowband" | "square"), patch (P), n (N), channels (C),
## metric ("l2" | "l1"), table ("ordered" | "unordered"), video (bool), and per variant
## step (S) and width (L) and rows (R) for rowband, tile (T) for square; shift_max (SM) > 0
## for a staggered grid (naive and rowband only): lattice row i's references sit shift[i]
## columns left of the lattice columns (never left of column 0), shift[i] <= SM < S.
## check (bool): the kernel also takes lib/peak_check.mako's arguments (check, word,
## check_count) and folds the input check of the first check_count floats of img (an input
## that needed no conversion; see that file).
<%page args="variant, patch, n, channels, metric, table, video, step=None, width=None, rows=None, tile=None, batch=1, shift_max=0, check=False"/>
<%namespace name="nn" file="/lib/nn_table.mako"/>
<%namespace name="m" file="/lib/metric.mako"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%namespace name="pk" file="/lib/peak_check.mako"/>\
<%
    P, N, C = patch, n, channels
%>
//
// Image layout: planar float, img[((frame * C + channel) * H + row) * W + column], a band
// of H rows (band_y0 is the band's first row in the whole image) holding nf frames
// (frame_base is the first frame's index in the whole video).
//
// Arguments common to every variant:
//   img, nf, H, W     the band, as above
//   radius, tw        spatial half-window (window // 2) and temporal radius
//   ref_f0            first reference frame (band frame index) of this launch; the launch's
//                     third dimension counts reference frames, one work-group layer each
//   frame_base, band_y0   whole-video frame of band frame 0, whole-image row of band row 0
//   out_pos, out_dist     results: out_dist[((f * out_gy + row) * out_gx + col) * N + k],
//                         out_pos the same entries times 2 (y, x) or 3 (t, y, x)
//   out_gy, out_gx        grid rows and columns of the output buffers
//   out_row0, out_col0, out_f0   output grid row, column and frame of this launch's first reference
//
${nn.pack_defines()}
#define IMG(t, c, y, x) img[(((t) * ${C} + (c)) * H + (y)) * W + (x)]

<%def name="common_args()">
    __global const float *restrict img, const int nf, const int H, const int W,
    const int radius, const int tw, const int ref_f0, const int frame_base, const int band_y0,
    __global int *restrict out_pos, __global float *restrict out_dist,
    const int out_gy, const int out_gx, const int out_row0, const int out_col0, const int out_f0
</%def>

## The trackers' half of a batch of K window offsets dy0 ... dy0 + K - 1 (column dx, frame
## tc): the distance of offset k is `dist_expr % k`. Each work-item first marks the offsets
## whose candidate is valid and not above its table's threshold distance (one comparison;
## the insert decides ties at the threshold by the key order), then inserts only those. A
## work-group's lanes run in lockstep on GPUs, so the insert path costs the lanes of a
## warp the largest count among them, instead of one pass per offset where any lane inserts.
<%def name="tracker_batch(dist_expr, patch, K, N, table)">
% if K == 1:
                    {
                        const int cy = ry + dy0, cx = rx + dx;
                        if (cy >= 0 && cy <= H - ${patch} && cx >= 0 && cx <= W - ${patch}) {
                            const float dist = ${dist_expr.replace("%s", "0")};
                            const int code = PACK_OFFSET(tc - t, dy0, dx);
                            ${nn.insert(N, table, "dist", "code")}
                        }
                    }
% else:
                    const int cx = rx + dx;
                    const bool col_ok = cx >= 0 && cx <= W - ${patch};
                    uint pending = 0u;
% for k in range(K):
                    {
                        const int cy = ry + dy0 + ${k};
                        const bool ok = col_ok && dy0 + ${k} <= dy_hi && cy >= 0 && cy <= H - ${patch};
                        pending |= (ok && ${dist_expr.replace("%s", str(k))} <= ${nn.threshold(N, table)}) ? ${1 << k}u : 0u;
                    }
% endfor
                    while (pending != 0u) {
                        const uint low = pending & (0u - pending);
                        const int k = 31 - clz(low);
                        pending ^= low;
                        const float dist = ${dist_expr.replace("%s", "k")};
                        const int code = PACK_OFFSET(tc - t, dy0 + k, dx);
                        ${nn.insert(N, table, "dist", "code")}
                    }
% endif
</%def>

% if variant == "naive":
//
// Naive search (Davy-Ehret 4.1.2). One work-item per reference patch; work-items of a
// work-group take neighbouring references of one grid row so their reads share cache lines.
// Also used for the grid's last row and column when those are off the structured lattice.
//
// Launch: global (nx, ny, frames) rounded up to the local size, local (any, 1, 1).
//   ys, xs   band rows / columns of the references (ny and nx of them)
//
__kernel void search_naive(${common_args()},
    __global const int *restrict ys, __global const int *restrict xs, const int ny, const int nx${pk.args() if check else ""})
{
% if check:
${pk.fold("img")}
% endif
% if shift_max:
    // Staggered grid: xs holds every reference's column, ny rows of nx.
% endif
    const int j = get_global_id(0);
    const int i = get_global_id(1);
    const int f = get_global_id(2);
    if (i >= ny || j >= nx)
        return;
    const int t = ref_f0 + f;
    const int ry = ys[i];
% if shift_max:
    const int rx = xs[i * nx + j];
% else:
    const int rx = xs[j];
% endif
    ${nn.declare(N, table)}
    const int t_lo = max(0, t - tw), t_hi = min(nf - 1, t + tw);
    const int y_lo = max(0, ry - radius), y_hi = min(H - ${P}, ry + radius);
    const int x_lo = max(0, rx - radius), x_hi = min(W - ${P}, rx + radius);
    for (int tc = t_lo; tc <= t_hi; ++tc) {
        for (int cy = y_lo; cy <= y_hi; ++cy) {
            for (int cx = x_lo; cx <= x_hi; ++cx) {
                float dist = 0.0f;
                for (int c = 0; c < ${C}; ++c)
                    for (int a = 0; a < ${P}; ++a)
                        for (int b = 0; b < ${P}; ++b)
                            ${m.accumulate(metric, "dist", "IMG(t, c, ry + a, rx + b)", "IMG(tc, c, cy + a, cx + b)")}
                const int code = PACK_OFFSET(tc - t, cy - ry, cx - rx);
                ${nn.insert(N, table, "dist", "code")}
            }
        }
    }
    ${nn.finish(N, table)}
    const int first = ${mt.first(mt.ref("out_row0 + i", "out_col0 + j", "out_gx", frame="out_f0 + f", gy="out_gy"), N)};
    ${nn.write(N, video, "first", "t", "ry", "rx")}
}

% elif variant == "rowband":
<%
    S, L, R, K, SM = step, width, rows, batch, shift_max
    M = (L - P - SM) // S + 1     # lattice columns per work-group
    LU = (M - 1) * S + P + SM     # work-items whose column sums are read
    HC = (R - 1) * S + P          # rows of one work-item's column
    assert M >= 1 and R * M <= L and 0 <= SM < S, (L, P, S, R, SM)
%>
//
// Convolution (Davy-Ehret 4.1.3, rows = 1) and column (4.1.5, rows = k + 1) searches.
// A work-group of ${L} work-items spans ${LU} consecutive image columns and ${R} lattice
// rows of references (${M} lattice columns per row). For each window offset every
// work-item sums, over its image column, the per-pixel distance terms of the ${R}
// reference rows (column height ${HC}); the sums go to local memory, and one work-item per
// reference adds ${P} neighbouring column sums to get the patch distance. Offsets are taken
// ${K} at a time (one barrier per ${K} offsets). The candidate column slides down by one row
// per offset, so it costs one load per offset and channel.
//
// The grid's last column and last row (the border, x = W - ${P} and y = H - ${P}) are searched
// here too, so that no launch is left to a kernel that searches each window serially.
//
// Launch: global (ceil(nx / ${M}) * ${L}, ceil(ny / ${R}) + (border_y >= 0), frames), local (${L}, 1, 1).
//   oy       band row of the first lattice row (lattice rows are oy + i * ${S}, i < ny)
//   ny, nx   lattice rows and grid columns: columns j < nx - 1 are at j * ${S}, column
//            nx - 1 at W - ${P} (at or within ${S} columns right of column nx - 2's)
//   border_y band row of a last reference row after the ny lattice rows (the grid's border
//            row, off the lattice), searched by an extra row of work-groups; < 0: none
% if SM:
//   shifts   per reference row of the launch (ny, plus the border row): its references
//            but the last are at max(0, j * ${S} - shifts[i]) (a staggered grid). The
//            work-group's column sums start ${SM} columns left of its first lattice column
//            to reach them all.
% endif
//
// Patch distance from ${P} neighbouring column sums.
inline float column_sum(__local const float *sums)
{
    float d = 0.0f;
    for (int b = 0; b < ${P}; ++b)
        d += sums[b];
    return d;
}

__kernel __attribute__((reqd_work_group_size(${L}, 1, 1)))
void search_rowband(${common_args()},
    const int oy, const int ny, const int nx, const int border_y${", __global const int *restrict shifts" if SM else ""}${pk.args() if check else ""})
{
% if check:
${pk.fold("img")}
% endif
    // Double-buffered: batch k writes part[k & 1], so one barrier per batch suffices.
    __local float part[2][${K}][${R}][${L}];
    const int lid = get_local_id(0);
    const int j0 = get_group_id(0) * ${M};
    // The extra row of work-groups searches the border row: one reference row at border_y.
    const bool border = get_group_id(1) * ${R} >= ny;
    const int i0 = border ? ny : get_group_id(1) * ${R};
    const int rows_here = border ? 1 : min(ny - i0, ${R});
    const int f = get_group_id(2);
    const int t = ref_f0 + f;
    // A work-group holding only the border column starts at it.
    const int x0 = min(j0 * ${S}, W - ${P});
    const int ry0 = border ? border_y : oy + i0 * ${S};
% if SM:
    const int col = clamp(x0 - ${SM} + lid, 0, W - 1);
% else:
    const int col = min(x0 + lid, W - 1);
% endif

    // The reference this work-item tracks, if any.
    // (tj from tr by a multiply, not '%': Oclgrind cannot check the code a div/rem pair makes.)
    const int tr = lid / ${M};
    const int tj = lid - tr * ${M};
    const bool tracker = lid < ${R * M} && tr < rows_here && j0 + tj < nx;
% if SM:
    const int shift = tracker ? shifts[i0 + tr] : 0;
% else:
    const int shift = 0;
% endif
    const int ry = ry0 + tr * ${S};
    const int rx = j0 + tj == nx - 1 ? W - ${P} : max(0, x0 + tj * ${S} - shift);
    const int sum0 = rx - x0 + ${SM};   // its first column sum

    // Reference column. Reads are clamped into the band: clamped values only ever meet
    // candidates that no tracker accepts.
    float refc[${C}][${HC}];
    for (int c = 0; c < ${C}; ++c)
        for (int a = 0; a < ${HC}; ++a)
            refc[c][a] = IMG(t, c, min(ry0 + a, H - 1), col);

    ${nn.declare(N, table)}

    // Offsets for which at least one reference of the work-group has a valid candidate.
    const int ry_last = ry0 + (rows_here - 1) * ${S};
    const int dy_lo = max(-radius, -ry_last), dy_hi = min(radius, H - ${P} - ry0);
% if SM:
    const int dx_lo = max(-radius, -(x0 + (min(nx - j0, ${M}) - 1) * ${S})), dx_hi = min(radius, W - ${P} - max(0, x0 - ${SM}));
% else:
    const int dx_lo = max(-radius, -(x0 + (min(nx - j0, ${M}) - 1) * ${S})), dx_hi = min(radius, W - ${P} - x0);
% endif
    const int t_lo = max(0, t - tw), t_hi = min(nf - 1, t + tw);
    int buf = 0;
    for (int tc = t_lo; tc <= t_hi; ++tc) {
        for (int dx = dx_lo; dx <= dx_hi; ++dx) {
            const int cc = clamp(col + dx, 0, W - 1);
            float cand[${C}][${HC}];
            for (int c = 0; c < ${C}; ++c) {
                cand[c][0] = 0.0f;
                for (int a = 1; a < ${HC}; ++a)
                    cand[c][a] = IMG(tc, c, clamp(ry0 + dy_lo - 1 + a, 0, H - 1), cc);
            }
            for (int dy0 = dy_lo; dy0 <= dy_hi; dy0 += ${K}) {
% for k in range(K):
                {
                    const int new_row = clamp(ry0 + dy0 + ${k + HC - 1}, 0, H - 1);
                    for (int c = 0; c < ${C}; ++c) {
                        for (int a = 0; a < ${HC - 1}; ++a)
                            cand[c][a] = cand[c][a + 1];
                        cand[c][${HC - 1}] = IMG(tc, c, new_row, cc);
                    }
% for r in range(R):
                    {
                        float s = 0.0f;
                        for (int c = 0; c < ${C}; ++c)
                            for (int a = 0; a < ${P}; ++a)
                                ${m.accumulate(metric, "s", "refc[c][%d + a]" % (r * S), "cand[c][%d + a]" % (r * S))}
                        part[buf][${k}][${r}][lid] = s;
                    }
% endfor
                }
% endfor
                barrier(CLK_LOCAL_MEM_FENCE);
                if (tracker) {
${tracker_batch("column_sum(&part[buf][%s][tr][sum0])", P, K, N, table)}
                }
                buf ^= 1;
            }
        }
    }
    if (tracker) {
        ${nn.finish(N, table)}
        const int first = ${mt.first(mt.ref("out_row0 + i0 + tr", "out_col0 + j0 + tj", "out_gx", frame="out_f0 + f", gy="out_gy"), N)};
        ${nn.write(N, video, "first", "t", "ry", "rx")}
    }
}

% elif variant == "square":
<%
    T, K = tile, batch
    assert P == 8 and T >= 2 and not shift_max, (P, T, shift_max)
    assert K == 1 or K % 4 == 0, K
%>
//
// Square search for 8x8 patches on a step-4 grid (Davy-Ehret 4.1.4). A ${T}x${T} work-group
// covers ${T}x${T} lattice points; each work-item computes, per window offset, the distance
// of the 4x4 top-left quarter of its reference patch, and the ${T - 1}x${T - 1} work-items
// that track a reference add the quarters of their right, lower and lower-right
// neighbours. Offsets are taken ${K} at a time (one barrier per ${K} offsets); along a
// column of offsets the candidate quarter slides down one row per offset, so each offset
// loads one row of 4 pixels per channel (held in a ring of 4 rows${", no register moves" if K > 1 else ""}).
//
// Launch: global (ceil(nx / ${T - 1}) * ${T}, ceil(ny / ${T - 1}) * ${T}, frames), local (${T}, ${T}, 1).
//   oy       band row of the first lattice row (lattice rows are oy + 4 i, i < ny)
//   ny, nx   lattice rows and columns (lattice columns are 4 j, j < nx)
//
__kernel __attribute__((reqd_work_group_size(${T}, ${T}, 1)))
void search_square(${common_args()},
    const int oy, const int ny, const int nx${pk.args() if check else ""})
{
% if check:
${pk.fold("img")}
% endif
    // Double-buffered: batch k writes part[k & 1], so one barrier per batch suffices.
    __local float part[2][${K}][${T}][${T}];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int gj0 = get_group_id(0) * ${T - 1}, gi0 = get_group_id(1) * ${T - 1};
    const int gj = gj0 + lx, gi = gi0 + ly;
    const int f = get_group_id(2);
    const int t = ref_f0 + f;
    const int ry = oy + gi * 4, rx = gj * 4;
    const bool tracker = lx < ${T - 1} && ly < ${T - 1} && gi < ny && gj < nx;

    // Reference quarter, clamped into the band (clamped values only ever meet candidates
    // that no tracker accepts).
    float rq[${C}][4][4];
    for (int c = 0; c < ${C}; ++c)
        for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b)
                rq[c][a][b] = IMG(t, c, min(ry + a, H - 1), min(rx + b, W - 1));

    ${nn.declare(N, table)}

    // Offsets for which at least one tracker of the work-group has a valid candidate.
    const int ry_first = oy + gi0 * 4, rx_first = gj0 * 4;
    const int ry_last = oy + (min(ny - gi0, ${T - 1}) - 1 + gi0) * 4;
    const int rx_last = (min(nx - gj0, ${T - 1}) - 1 + gj0) * 4;
    const int dy_lo = max(-radius, -ry_last), dy_hi = min(radius, H - 8 - ry_first);
    const int dx_lo = max(-radius, -rx_last), dx_hi = min(radius, W - 8 - rx_first);
    const int t_lo = max(0, t - tw), t_hi = min(nf - 1, t + tw);
    int buf = 0;
    for (int tc = t_lo; tc <= t_hi; ++tc) {
        for (int dx = dx_lo; dx <= dx_hi; ++dx) {
            int cols[4];
            for (int b = 0; b < 4; ++b)
                cols[b] = clamp(rx + dx + b, 0, W - 1);
            // Ring of candidate rows: row m (offset dy_lo + m) lives in slot m % 4.
            float cq[${C}][4][4];
            for (int c = 0; c < ${C}; ++c) {
                for (int b = 0; b < 4; ++b)
                    cq[c][${3 if K > 1 else 0}][b] = 0.0f;
                for (int a = 0; a < 3; ++a) {
                    const int row = clamp(ry + dy_lo + a, 0, H - 1);
                    for (int b = 0; b < 4; ++b)
                        cq[c][a${" + 1" if K == 1 else ""}][b] = IMG(tc, c, row, cols[b]);
                }
            }
            for (int dy0 = dy_lo; dy0 <= dy_hi; dy0 += ${K}) {
% for k in range(K):
                {
                    const int new_row = clamp(ry + dy0 + ${k + 3}, 0, H - 1);
                    float s = 0.0f;
                    for (int c = 0; c < ${C}; ++c) {
% if K == 1:
                        for (int a = 0; a < 3; ++a)
                            for (int b = 0; b < 4; ++b)
                                cq[c][a][b] = cq[c][a + 1][b];
                        for (int b = 0; b < 4; ++b)
                            cq[c][3][b] = IMG(tc, c, new_row, cols[b]);
                        for (int a = 0; a < 4; ++a)
                            for (int b = 0; b < 4; ++b)
                                ${m.accumulate(metric, "s", "rq[c][a][b]", "cq[c][a][b]")}
% else:
                        for (int b = 0; b < 4; ++b)
                            cq[c][${(k + 3) % 4}][b] = IMG(tc, c, new_row, cols[b]);
% for a in range(4):
                        for (int b = 0; b < 4; ++b)
                            ${m.accumulate(metric, "s", "rq[c][%d][b]" % a, "cq[c][%d][b]" % ((k + a) % 4))}
% endfor
% endif
                    }
                    part[buf][${k}][ly][lx] = s;
                }
% endfor
                barrier(CLK_LOCAL_MEM_FENCE);
                if (tracker) {
${tracker_batch("(part[buf][%s][ly][lx] + part[buf][%s][ly][lx + 1] + part[buf][%s][ly + 1][lx] + part[buf][%s][ly + 1][lx + 1])", 8, K, N, table)}
                }
                buf ^= 1;
            }
        }
    }
    if (tracker) {
        ${nn.finish(N, table)}
        const int first = ${mt.first(mt.ref("out_row0 + gi", "out_col0 + gj", "out_gx", frame="out_f0 + f", gy="out_gy"), N)};
        ${nn.write(N, video, "first", "t", "ry", "rx")}
    }
}
% else:
<% raise ValueError("unknown search variant %r" % (variant,)) %>
% endif
