## The exact noise variances of a BM3D group's 3-D coefficients (Makinen, Azzari and Foi,
## IEEE TIP 2020; clpatch.denoise.bm3d's module doc): white noise of variance 1, patches of
## the group that overlap share noise, so coefficient (c, a, b) has variance
## v = sum_i sum_j T[c][i] T[c][j] r_a(dy_ij) r_b(dx_ij), T the Haar transform along the group,
## r_a(d) = sum_u F[a][u] F[a][u + d] the lag products of 2-D transform row a. Evaluated per
## group bottom-up over the Haar tree (clpatch.denoise.clgen.haar_variances): each pair of
## members counts once, at the node where the two part.
##
## helpers(P, F2): the lag table and node_sum, at file scope.
## variances(out, P, N, G, M, paper_x, sizes, entry, dim): inside the collaborative filter
##   kernel (after lid, k, where, ry, rx are set; pos holds the search results): fills
##   float out[M][N] with v for this work-item's M pixels (pixel lid + G m of the patch,
##   or Algorithm 10's layout for bank padding paper_x > 0) and every stack entry (1 beyond
##   the group and the patch). Uses local memory and barriers: every work-item must reach it.
<%namespace name="mt" file="/lib/matches.mako"/>\
<%!
    import numpy as np
    from clpatch.denoise import clgen as gen
%>

<%def name="helpers(P, F2)">
<% LAGS = gen.lag_products(F2) %>\
// r_a(d) = sum_u F[a][u] F[a][u + d] at LAGS[a * ${P + 1} + d], d = |lag| < ${P}, and 0 at d = ${P}
// (patches that far apart do not overlap): the covariance of 2-D coefficient row a of two
// patches d rows (or columns) apart, under white noise of variance 1.
__constant float LAGS[${P * (P + 1)}] = {${", ".join(gen.literal(v) for v in np.hstack([LAGS, np.zeros((P, 1))]).ravel())}};

// Covariance of 2-D coefficient (a, b) summed over `count` member pairs from pairs[start]
// on (each packed dy | dx << 8, with |lags| clamped to ${P}): r_a(dy) r_b(dx). ra, rb: rows
// a and b of the lag table.
inline float node_sum(__local const int *pairs, __local const float *ra,
                      __local const float *rb, const int start, const int count)
{
    float x = 0.0f;
    for (int t = start; t < start + count; ++t) {
        const int pk = pairs[t];
        x += ra[pk & 255] * rb[pk >> 8];
    }
    return x;
}

</%def>

<%def name="variances(out, P, N, G, M, paper_x, sizes, entry, dim)">
<% ENTRY, DIM = entry, dim %>\
    // The member pairs (i < j) in the Haar tree's order: node (h, b) of a group of k
    // (the pairs i in [2hb, 2hb + h), j in [2hb + h, 2hb + 2h), i then j ascending) from
    // k (h - 1) / 2 + b h^2 on, h = the highest bit of i ^ j.
    __local int gyx[${2 * N}];
    __local int pairs[${max(1, N * (N - 1) // 2)}];
    __local float rtab[${P * (P + 1)}];
    for (int i = lid; i < ${P * (P + 1)}; i += ${G})
        rtab[i] = LAGS[i];
    for (int m = lid; m < k; m += ${G}) {
        int my = ry, mx = rx;
        if (m > 0) {
            const int j = m - 1 + (m - 1 >= where ? 1 : 0);
            my = ${mt.pos_y("pos", ENTRY, DIM)};
            mx = ${mt.pos_x("pos", ENTRY, DIM)};
        }
        gyx[2 * m] = my;
        gyx[2 * m + 1] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < k; i += ${G}) {
        for (int j = i + 1; j < k; ++j) {
            int level = 0;              // the highest bit of i ^ j
            while ((i ^ j) >> (level + 1))
                ++level;
            const int h = 1 << level, lo = (i >> (level + 1)) << (level + 1);
            const int at = ((k * (h - 1)) >> 1) + (lo >> (level + 1)) * h * h + (i - lo) * h
                           + (j - lo - h);
            const int dy = min((int)abs(gyx[2 * j] - gyx[2 * i]), ${P});
            const int dx = min((int)abs(gyx[2 * j + 1] - gyx[2 * i + 1]), ${P});
            pairs[at] = dy | dx << 8;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
% for mi in range(M):
    {
% if paper_x:
        // Pixel (a, b) of this work-item in Algorithm 10's layout: a = (lid / x) % 8,
        // b = (lid / 8x) x + lid % x, in shifts and masks (x is a power of 2; a division
        // and a remainder of one value compile to code Oclgrind cannot run).
        const int va = (lid >> ${paper_x.bit_length() - 1}) & 7;
        const int vb = ((lid >> ${paper_x.bit_length() + 2}) << ${paper_x.bit_length() - 1}) | (lid & ${paper_x - 1});
        const bool valid = true;
% else:
        const int q = lid + ${G * mi};
        const bool valid = q < ${P * P};
        const int va = valid ? q / ${P} : 0, vb = valid ? q - (q / ${P}) * ${P} : 0;
% endif
        __local const float *ra = rtab + va * ${P + 1};
        __local const float *rb = rtab + vb * ${P + 1};
        const float single = ra[0] * rb[0];
% for j in range(N):
        ${out}[${mi}][${j}] = 1.0f;
% endfor
        if (!valid) {
        } else if (k == 1) {
            ${out}[${mi}][0] = single;
% for s in sizes[1:]:
        } else if (k == ${s}) {
            ${gen.haar_variances(s, "single", [f"{out}[{mi}][{c}]" for c in range(s)], lambda lo, h: f"node_sum(pairs, ra, rb, {s * (h - 1) // 2 + (lo // (2 * h)) * h * h}, {h * h})")}
% endfor
        }
    }
% endfor

</%def>
