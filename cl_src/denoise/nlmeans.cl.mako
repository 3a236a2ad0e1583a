## Improved patchwise NL-means (Davy-Ehret 2.1, 4.3): averaging of the n nearest patches
## found by the windowed search, flat-patch trick, bilinear aggregation, normalisation.
##
## Rendered with: patch (P), n (N), channels (C, filtered channels), video (positions hold
## (t, y, x) instead of (y, x)), averaging ("columns": P work-items per patch, Algorithm 4;
## "naive": one work-item per patch, 4.3.2), aggregation ("buffers" | "fixed" | "cas", see
## lib/aggregate.mako), classes (K: the "buffers" scheme keeps K x K accumulation buffers),
## slots (R: patches per work-group of the columns variant), colour (bool: the opponent
## colour transform kernels are included), luma (bool: the forward transform also writes
## the luminance plane alone, for a luminance-only search).
<%page args="patch, n, channels, video, averaging, aggregation, classes=1, slots=1, colour=False, luma=False"/>
<%namespace name="agg" file="/lib/aggregate.mako"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    P, N, C, K, R = patch, n, channels, classes, slots
    DIM = 3 if video else 2
    ACC = {"fixed": "long", "cas": "uint", "buffers": "float"}[aggregation]
%>
${agg.pragmas(aggregation)}
//
// Layouts. The image band is planar float, img[((f * C + c) * H + y) * W + x], holding nf
// frames (frame_base: video frame of band frame 0) and H rows (band_y0: image row of band
// row 0). Search results of a tile: dist[((fr * out_gy + row) * gx + col) * N + k] and pos
// the same entries times ${DIM} (${"t, y, x" if video else "y, x"}, in whole-image coordinates),
// for the tile's reference frames fr, grid rows `row` and grid columns `col`.
// The accumulation buffer holds the tile's reference frames over the band's rows:
// acc[cls * plane + ((fr * C + c) * H + y) * W + x], cls < K * K ("buffers" only).
//
// A launch covers references (tile row i0 + a * si, grid column j0 + b * sj) for a < na,
// b < nb, and tile reference frames fr < nfr (band frame ref_fb + fr). Their patches are
// written to class `fixed_class`, or, when it is negative, to the class of their grid
// indices ((row_index0 + row) mod K, col mod K).
//
// Weights (eq. 4): w = exp(-max(d / (P * P * Cs) - 2 sigma^2, 0) / h^2), d the search's
// sum of squared differences over the patch and its Cs searched channels (norm = 1 / (P * P
// * Cs)), so h and sigma are in image units. Flat-patch trick (eq. 5), per channel: when
// the variance of the n patches' pixels is below beta * sigma^2, their mean is the estimate.
// Aggregation weight of patch pixel (i, j): bw(i) * bw(j), bw(i) = (2 min(i, P-1-i) + 1) / P.
//
${agg.helpers(aggregation)}

#define IMG(t, c, y, x) img[(((t) * ${C} + (c)) * H + (y)) * W + (x)]

<%def name="average_args()">
    __global const float *restrict img, const int nf, const int H, const int W,
    const int frame_base, const int band_y0,
    __global const int *restrict pos, __global const float *restrict dist,
    const int out_gy, const int gx,
    __global const int *restrict ys, __global const int *restrict xs,
    const int i0, const int si, const int na, const int j0, const int sj, const int nb,
    const int nfr, const int ref_fb, const int row_index0, const int fixed_class,
    __global ${ACC} *acc, const int plane,
    const float two_sigma2, const float inv_h2, const float flat_var, const float norm,
    __global const float *restrict scales
</%def>

## Band offsets off[k] of the reference's neighbours' top-left pixels in channel 0. Expects
## fr, ti, gj; defines ref.
<%def name="offsets()">
    const int ref = ${mt.ref("ti", "gj", "gx", frame="fr", gy="out_gy")};
    int off[${N}];
% for k in range(N):
    {
% if video:
        const int tb = ${mt.pos_t("pos", mt.entry("ref", N, k), DIM)} - frame_base;
% else:
        const int tb = ref_fb + fr;
% endif
        const int yb = ${mt.pos_y("pos", mt.entry("ref", N, k), DIM)} - band_y0;
        const int xb = ${mt.pos_x("pos", mt.entry("ref", N, k), DIM)};
        off[${k}] = ((tb * ${C}) * H + yb) * W + xb;
    }
% endfor
</%def>

## Weight of neighbour k (eq. 4), k a number or an int expression. Expects ref.
<%def name="weight(k)" buffered="True">exp(-fmax(${mt.dist("dist", mt.entry("ref", N, k))} * norm - two_sigma2, 0.0f) * inv_h2)</%def>

## The neighbours' weights w[k] (each read by `take(k)`) and 1 / their sum, inv_wsum.
<%def name="weights(take)">
    float w[${N}];
    float wsum = 0.0f;
% for k in range(N):
    w[${k}] = ${take(k)};
    wsum += w[${k}];
% endfor
    const float inv_wsum = 1.0f / wsum;
</%def>

## Adds column j's pixels (rows 0..P-1) of every neighbour, minus shift[c], to s1[c], s2[c].
<%def name="column_sums(j)">
    for (int i = 0; i < ${P}; ++i) {
% for k in range(N):
% for c in range(C):
        {
            const float v = img[off[${k}] + ${c} * H * W + i * W + ${j}] - shift[${c}];
            s1[${c}] += v;
            s2[${c}] += v * v;
        }
% endfor
% endfor
    }
</%def>

## Estimates row i, column j of the patch and aggregates it. Expects mean[c], flat[c],
## w, off, inv_wsum, bw_j, acc_at (accumulator index of the patch's top-left, channel 0).
<%def name="estimate_pixel(i, j)">
        {
            const float bwij = bw_i * bw_j;
% for c in range(C):
            {
                float e = 0.0f;
% for k in range(N):
                e += w[${k}] * img[off[${k}] + ${c} * H * W + (${i}) * W + (${j})];
% endfor
                const float value = flat[${c}] ? mean[${c}] : e * inv_wsum;
                ${agg.add(aggregation, "acc", f"acc_at + {c} * H * W + ({i}) * W + ({j})", "bwij * value")}
            }
% endfor
        }
</%def>

## Class of the reference and accumulator index of its top-left pixel, channel 0.
<%def name="acc_index()">
% if K > 1:
    const int cls = fixed_class >= 0 ? fixed_class
                  : ((row_index0 + ti) % ${K}) * ${K} + (gj % ${K});
% else:
    const int cls = 0;
% endif
    const int acc_at = cls * plane + ((fr * ${C}) * H + (ry - band_y0)) * W + rx;
</%def>

<%def name="flat_test(count)">
    float mean[${C}];
    bool flat[${C}];
% for c in range(C):
    {
        const float m = s1[${c}] * ${repr(1.0 / count)}f;
        const float var = s2[${c}] * ${repr(1.0 / count)}f - m * m;
        mean[${c}] = m + shift[${c}];
        flat[${c}] = var < flat_var;
    }
% endfor
</%def>

% if averaging == "columns":
//
// Optimised averaging (Algorithm 4): P work-items per patch, one per patch column, so a
// patch row is read and written by consecutive work-items. R patches per work-group.
// Launch: global (P, R * ceil(nb / R), na * nfr), local (P, R, 1). Local memory: each
// patch's column sums (part) and its neighbours' weights (lw).
//
__kernel __attribute__((reqd_work_group_size(${P}, ${R}, 1)))
void nlm_average(${average_args()})
{
% if aggregation == "fixed":
    const float scale = scales[0];      // the fixed-point scale (nlm_scale)
% endif
    __local float part[${R}][${P}][${2 * C}];
    __local float lw[${R}][${N}];
    const int j = get_local_id(0);
    const int slot = get_local_id(1);
    const int b = get_group_id(1) * ${R} + slot;
    const int z = get_global_id(2);
    const int fr = z / na;
    const int a = z - fr * na;
    const bool active = b < nb;
    const int ti = i0 + a * si;
    const int gj = j0 + (active ? b : 0) * sj;
    const int ry = ys[ti], rx = xs[gj];

    float s1[${C}], s2[${C}], shift[${C}];
% for c in range(C):
    s1[${c}] = 0.0f;
    s2[${c}] = 0.0f;
% endfor
    ${offsets()}
    // The weights: work-item j computes those of neighbours j, j + P, ... (each exp() once
    // per patch, not P times; first, so that their loads overlap the column sums') and they
    // cross the barrier in local memory. Not in registers: Intel's CPU compiler (OpenCL
    // runtime 2026.22) gives every work-item of the group the last row's copy of a value of
    // exp() kept across a barrier (the bug of intel/llvm#23220), which NVIDIA's and PoCL's
    // do not.
    for (int k = j; k < ${N}; k += ${P})
        lw[slot][k] = ${weight("k")};
    if (active) {
        // Sums are taken relative to the reference's top-left pixel: the variance of
        // values far from zero then keeps its precision.
% for c in range(C):
        shift[${c}] = IMG(ref_fb + fr, ${c}, ry - band_y0, rx);
% endfor
        ${column_sums("j")}
    } else {
% for c in range(C):
        shift[${c}] = 0.0f;
% endfor
    }
% for c in range(C):
    part[slot][j][${c}] = s1[${c}];
    part[slot][j][${C + c}] = s2[${c}];
% endfor
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!active)
        return;
    ${weights(lambda k: f"lw[slot][{k}]")}
    // Every work-item of the patch sums the partial sums in the same order.
% for c in range(C):
    s1[${c}] = 0.0f;
    s2[${c}] = 0.0f;
% endfor
    for (int q = 0; q < ${P}; ++q) {
% for c in range(C):
        s1[${c}] += part[slot][q][${c}];
        s2[${c}] += part[slot][q][${C + c}];
% endfor
    }
    ${flat_test(N * P * P)}
    ${acc_index()}
    const float bw_j = (float)(2 * min(j, ${P - 1} - j) + 1) * ${repr(1.0 / P)}f;
    for (int i = 0; i < ${P}; ++i) {
        const float bw_i = (float)(2 * min(i, ${P - 1} - i) + 1) * ${repr(1.0 / P)}f;
        ${estimate_pixel("i", "j")}
    }
}

% else:
//
// Naive averaging (4.3.2): one work-item per patch, row after row.
// Launch: global (ceil(nb / G) * G, na, nfr), local (G, 1, 1).
//
__kernel void nlm_average(${average_args()})
{
% if aggregation == "fixed":
    const float scale = scales[0];      // the fixed-point scale (nlm_scale)
% endif
    const int b = get_global_id(0);
    const int a = get_global_id(1);
    const int fr = get_global_id(2);
    if (b >= nb || a >= na || fr >= nfr)
        return;
    const int ti = i0 + a * si;
    const int gj = j0 + b * sj;
    const int ry = ys[ti], rx = xs[gj];

    float s1[${C}], s2[${C}], shift[${C}];
% for c in range(C):
    s1[${c}] = 0.0f;
    s2[${c}] = 0.0f;
    shift[${c}] = IMG(ref_fb + fr, ${c}, ry - band_y0, rx);
% endfor
    ${offsets()}
    ${weights(weight)}
    for (int j = 0; j < ${P}; ++j) {
        ${column_sums("j")}
    }
    ${flat_test(N * P * P)}
    ${acc_index()}
    for (int i = 0; i < ${P}; ++i) {
        const float bw_i = (float)(2 * min(i, ${P - 1} - i) + 1) * ${repr(1.0 / P)}f;
        for (int j = 0; j < ${P}; ++j) {
            const float bw_j = (float)(2 * min(j, ${P - 1} - j) + 1) * ${repr(1.0 / P)}f;
            ${estimate_pixel("i", "j")}
        }
    }
}
% endif

//
// Normalisation: out = (sum over classes of acc) / (dy[y] * dx[x]), dy and dx the sums of
// the bilinear weights of the grid rows and columns covering each image row and column
// (every reference is aggregated with the same weights, so the total weight of a pixel is
// known in advance and separable). Then back from the opponent colour space (colour).
// Launch: global (W, rows, nfr) over band rows y_first ... y_first + rows - 1; writes the
// interleaved float output out[((out_f0 + fr) * out_rows + out_y0 + y) * W + x) * C + c].
// scales[1] is 1 / the fixed-point scale (read for "fixed" only; nlm_scale). With `zero`
// (a launch that reads every element of acc) it leaves acc zeroed for the next run, which
// then needs no nlm_clear.
//
__kernel void nlm_finalize(__global ${ACC} *restrict acc, const int plane, const int H,
                           const int W, const int band_y0, const int y_first, const int rows,
                           const int nfr, __global const float *restrict dy,
                           __global const float *restrict dx,
                           __global const float *restrict scales,
                           __global float *restrict out, const int out_rows, const int out_y0,
                           const int out_f0, const int zero)
{
    const int x = get_global_id(0), r = get_global_id(1), fr = get_global_id(2);
    if (x >= W || r >= rows || fr >= nfr)
        return;
    const int y = y_first + r;
% if aggregation == "fixed":
    const float inv_scale = scales[1];
% endif
    const float inv_den = 1.0f / (dy[band_y0 + y] * dx[x]);
    float v[${C}];
% for c in range(C):
    {
        const int at = ((fr * ${C} + ${c}) * H + y) * W + x;
        float s = ${agg.load(aggregation, "acc", "at")};
% for cls in range(1, K * K):
        s += ${agg.load(aggregation, "acc", f"at + {cls} * plane")};
% endfor
        v[${c}] = s * inv_den;
        if (zero) {
% for cls in range(K * K):
            acc[at + ${cls} * plane] = 0;
% endfor
        }
    }
% endfor
% if colour:
    {
        // Inverse of the orthonormal opponent transform below.
        const float y3 = v[0] * 0.57735026918962576f;
        const float u2 = v[1] * 0.70710678118654752f;
        const float v6 = v[2] * 0.40824829046386302f;
        v[0] = y3 + u2 + v6;
        v[1] = y3 - 2.0f * v6;
        v[2] = y3 - u2 + v6;
    }
% endif
    const long o = (((long)(out_f0 + fr) * out_rows + out_y0 + r) * W + x) * ${C};
% for c in range(C):
    out[o + ${c}] = v[${c}];
% endfor
}

//
// The fixed-point scale of a run, on the device, so that the host need not read the
// image's peak before averaging: the power of two 2^min(40, floor(log2(2^62 / bound))),
// bound = max(peak * bound_factor, 1e-30) (bound_factor = K^2, times sqrt(3) for colour:
// every pixel's sum then stays within int64), with peak = `given` unless it is negative,
// else the float in check word `word` (the conversion kernels' largest |value| of this run,
// lib/convert.cl.mako). The floor is exact, read off the bits: bound (a normal float, at
// least 1e-30) is m 2^e with m in [0.5, 1), e its biased exponent - 126, so log2(2^62 /
// bound) lies in (62 - e, 63 - e], reaching 63 - e only when m = 0.5 (mantissa bits 0).
// The exponent x lies in [-67, 40], so 2^x and 2^-x are built as normal floats. A NaN
// peak makes bound 1e-30 (fmax), an infinite one the scale 2^-67: such runs are refused
// after the kernels. Writes scales[0] = 2^x, scales[1] = 2^-x.
// Launch: global (1), local any.
//
__kernel void nlm_scale(__global const uint *restrict check, const int word, const float given,
                        const float bound_factor, __global float *restrict scales)
{
    if (get_global_id(0) != 0)
        return;
    const float peak = given < 0.0f ? as_float(check[word]) : given;
    const float bound = fmax(peak * bound_factor, 1e-30f);
    const uint bits = as_uint(bound);
    const int e = (int)((bits >> 23) & 0xffu) - 126;
    const int x = min(40, 62 - e + ((bits & 0x7fffffu) == 0u ? 1 : 0));
    scales[0] = as_float((uint)(127 + x) << 23);
    scales[1] = as_float((uint)(127 - x) << 23);
}

//
// Zeroes the accumulation buffer (count elements). A kernel rather than a fill command:
// Oclgrind's uninitialised-memory checker does not see fills.
//
__kernel void nlm_clear(__global ${ACC} *acc, const int count)
{
    const int i = get_global_id(0);
    if (i < count)
        acc[i] = 0;
}

% if colour:
//
// Orthonormal opponent colour transform, in place on the planar band (C = 3):
//   Y = (R + G + B) / sqrt(3),  U = (R - B) / sqrt(2),  V = (R - 2G + B) / sqrt(6).
// Orthonormal, so white noise of deviation sigma stays white with deviation sigma in
// every channel. With `luma`, Y is also written alone to lum[(f * H + y) * W + x].
// Launch: global (W, H, nf).
//
__kernel void nlm_to_opponent(__global float *restrict img, const int nf, const int H,
                              const int W, __global float *restrict lum)
{
    const int x = get_global_id(0), y = get_global_id(1), f = get_global_id(2);
    if (x >= W || y >= H || f >= nf)
        return;
    const float r = IMG(f, 0, y, x), g = IMG(f, 1, y, x), b = IMG(f, 2, y, x);
    const float Y = (r + g + b) * 0.57735026918962576f;
    IMG(f, 0, y, x) = Y;
    IMG(f, 1, y, x) = (r - b) * 0.70710678118654752f;
    IMG(f, 2, y, x) = (r - 2.0f * g + b) * 0.40824829046386302f;
% if luma:
    lum[(f * H + y) * W + x] = Y;
% endif
}
% endif
