## Noise level estimation (clpatch.denoise.noise_level): the texture strength of every
## patch and a histogram of it, then the statistics of the patches whose texture strength is
## below a threshold (count, sums and sums of products of their mean-removed pixels), summed
## per work-group and then over the work-groups.
##
## Rendered with: patch (P: patch side), texture_group (TG: work-items per work-group of
## nl_texture), texture_rows (TR: patch rows per nl_texture work-item), scatter_group (G:
## work-items per work-group of nl_scatter), tile (TS: an nl_scatter tile is TS x TS patch
## positions), chunk (S: selected patches staged at a time), reduce_group (RG: work-items per
## work-group of nl_reduce), bins (histogram bins per channel).
<%page args="patch, texture_group, texture_rows, scatter_group, tile, chunk, reduce_group, bins"/>
<%
    P, TG, TR, G, TS, S, RG, B = (patch, texture_group, texture_rows, scatter_group, tile,
                                  chunk, reduce_group, bins)
    D = P * P
    NB = -(-(D + 1) // 4)             # 4-wide blocks of the augmented vector (v, 1)
    DA = 4 * NB                       # its length, padded with zeros
    UB = NB * (NB + 1) // 2           # blocks of the upper triangle of (v, 1)(v, 1)^T
    E = 16 * UB                       # statistics per channel
    K = -(-UB // G)                   # blocks per nl_scatter work-item
    TW = TS + P - 1                   # side of a tile's pixel block
    Q = TS * TS                       # patch positions per tile
%>
//
// Layouts. img is planar float, img[(c * H + y) * W + x], C channels. Patches are P x P =
// ${P} x ${P} at every position (y, x), y < PH = H - P + 1, x < PW = W - P + 1, and
// texture[(c * PH + y) * PW + x] is the texture strength of patch (y, x) of channel c.
// A patch's vector v holds its D = ${D} pixels in row-major order minus their mean; its
// augmented vector a = (v, 1, 0, ...) has ${DA} entries (D + 1 rounded up to 4). The
// statistics of a set of patches are the sums of a a^T over the set, in 4 x 4 blocks: block
// (bi, bj), bi <= bj < ${NB}, numbered row by row ((0, 0), (0, 1), ..., (1, 1), ...), holds
// the sums of a[4 bi + r] * a[4 bj + s] at [16 * block + 4 r + s]: E = ${E} floats per
// channel. Entry (D, D) is the number of patches, (k, D) the sum of v[k], (i, j) the sum of
// v[i] v[j].
//
// Histogram bin of a texture strength t >= 0: its float bits shifted right by 20 (8 bins
// per octave, in the order of the values), at most ${B - 1}; bin b holds the values below
// the float whose bits are (b + 1) << 20.

// Every kernel reads the image times `scale` (a power of two, so exactly), which brings
// the largest |value| near 1.
#define IMG(c, y, x) (img[((c) * H + (y)) * W + (x)] * scale)

//
// nl_texture: the texture strength t(y, x) of every patch, the sum of its squared horizontal
// and vertical differences, sum_{i < P, j < P-1} (I[y+i][x+j+1] - I[y+i][x+j])^2 +
// sum_{i < P-1, j < P} (I[y+i+1][x+j] - I[y+i][x+j])^2, summed in that order.
// Launch: global (PW rounded up to ${TG}, ceil(PH / ${TR}), C), local (${TG}, 1, 1); work-item
// (x, r, c) computes patches (y, x) of channel c for y = ${TR} r ... ${TR} r + ${TR - 1} (those
// < PH); its work-group counts them in a local histogram and adds the non-zero bins to hist.
//   img, H, W       the image
//   PH, PW          patch positions per column and per row
//   scale           the factor of every value read
//   texture         out: the texture strength of every patch
//   hist            out: C x ${B} uints, hist[c * ${B} + b] += patches of channel c in bin b;
//                   cleared by the caller
__kernel __attribute__((reqd_work_group_size(${TG}, 1, 1)))
void nl_texture(__global const float *restrict img, const int H, const int W,
                const int PH, const int PW, const float scale, __global float *restrict texture,
                __global uint *restrict hist)
{
    __local uint counts[${B}];
    const int x = get_global_id(0), r = get_global_id(1), c = get_global_id(2);
    const int lid = get_local_id(0);
    for (int b = lid; b < ${B}; b += ${TG})
        counts[b] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (x < PW) {
        for (int y = r * ${TR}; y < min(PH, r * ${TR} + ${TR}); ++y) {
            float t = 0.0f;
            for (int i = 0; i < ${P}; ++i) {
                for (int j = 0; j < ${P - 1}; ++j) {
                    const float d = IMG(c, y + i, x + j + 1) - IMG(c, y + i, x + j);
                    t += d * d;
                }
            }
            for (int i = 0; i < ${P - 1}; ++i) {
                for (int j = 0; j < ${P}; ++j) {
                    const float d = IMG(c, y + i + 1, x + j) - IMG(c, y + i, x + j);
                    t += d * d;
                }
            }
            texture[((long)c * PH + y) * PW + x] = t;
            atomic_inc(counts + min(as_uint(t) >> 20, ${B - 1}u));
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int b = lid; b < ${B}; b += ${TG})
        if (counts[b] != 0u)
            atomic_add(hist + c * ${B} + b, counts[b]);
}

//
// nl_scatter: the statistics of the patches of channel c whose texture strength is below
// thr[c], one partial sum per work-group. Launch: global (${G} NG, 1, C), local (${G}, 1, 1);
// work-group g of channel c takes tiles g, g + NG, g + 2 NG, ... of the ceil(PH / ${TS}) x
// ceil(PW / ${TS}) tiles of ${TS} x ${TS} patch positions (row-major). For each tile it loads
// the tile's ${TW} x ${TW} pixels into local memory, marks the selected patches and their
// means, lists the selected ones in order, and stages their augmented vectors ${S} at a
// time; work-item l owns blocks l + ${G} m (m < ${K}) and adds 4 x 4 products per staged
// patch to a tile sum, which it adds to its running total after the tile (two levels:
// fewer rounding errors than one long sum).
//   img, H, W, PH, PW, scale, texture     as above
//   thr             C floats: a patch of channel c is selected when texture < thr[c]
//   NG              work-groups per channel
//   partial         out: C x NG x E floats, partial[(c * NG + g) * E + e]
__kernel __attribute__((reqd_work_group_size(${G}, 1, 1)))
void nl_scatter(__global const float *restrict img, const int H, const int W,
                const int PH, const int PW, const float scale,
                __global const float *restrict texture,
                __global const float *restrict thr, const int NG,
                __global float *restrict partial)
{
    __local float pix[${TW * TW}];
    __local float mean[${Q}];
    __local int chosen[${Q}];
    __local int list[${Q}];
    __local float staged[${S * DA}];
    __local int selected;
    const int lid = get_local_id(0), g = get_group_id(0), c = get_global_id(2);
    const float limit = thr[c];
    // Offsets in a staged vector of the work-item's blocks' rows and columns (-1: no block).
    int row[${K}], col[${K}];
    float total[${K}][16];
    for (int m = 0; m < ${K}; ++m) {
        int idx = lid + ${G} * m, bi = 0;
        row[m] = -1;
        col[m] = -1;
        if (idx < ${UB}) {
            while (idx >= ${NB} - bi) {
                idx -= ${NB} - bi;
                ++bi;
            }
            row[m] = 4 * bi;
            col[m] = 4 * (bi + idx);
        }
        for (int k = 0; k < 16; ++k)
            total[m][k] = 0.0f;
    }
    // Tile (ty, tx) advances by NG tiles without dividing (and no quotient below has a
    // remainder taken with '%'): Oclgrind cannot check the code a division pair makes.
    const int tiles_x = (PW + ${TS - 1}) / ${TS}, tiles_y = (PH + ${TS - 1}) / ${TS};
    int ty = 0, tx = g;
    while (tx >= tiles_x) {
        tx -= tiles_x;
        ++ty;
    }
    for (; ty < tiles_y; ) {
        const int y0 = ty * ${TS}, x0 = tx * ${TS};
        for (int k = lid; k < ${TW * TW}; k += ${G}) {
            const int ky = k / ${TW};
            const int y = y0 + ky, x = x0 + k - ky * ${TW};
            pix[k] = (y < H && x < W) ? IMG(c, y, x) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = lid; q < ${Q}; q += ${G}) {
            const int qy = q / ${TS}, qx = q - qy * ${TS};
            const int y = y0 + qy, x = x0 + qx;
            int take = 0;
            float s = 0.0f;
            if (y < PH && x < PW && texture[((long)c * PH + y) * PW + x] < limit) {
                take = 1;
                const int base = qy * ${TW} + qx;
                for (int i = 0; i < ${P}; ++i)
                    for (int j = 0; j < ${P}; ++j)
                        s += pix[base + i * ${TW} + j];
            }
            chosen[q] = take;
            mean[q] = s / ${D}.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) {
            int n = 0;
            for (int q = 0; q < ${Q}; ++q)
                if (chosen[q])
                    list[n++] = q;
            selected = n;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int n = selected;
        if (n > 0) {
            float sum[${K}][16];
            for (int m = 0; m < ${K}; ++m)
                for (int k = 0; k < 16; ++k)
                    sum[m][k] = 0.0f;
            for (int s0 = 0; s0 < n; s0 += ${S}) {
                for (int k = lid; k < ${S * DA}; k += ${G}) {
                    const int s = k / ${DA}, i = k - s * ${DA};
                    float value = 0.0f;
                    if (s0 + s < n && i < ${D}) {
                        const int q = list[s0 + s];
                        const int qy = q / ${TS}, iy = i / ${P};
                        value = pix[(qy + iy) * ${TW} + q - qy * ${TS} + i - iy * ${P}] - mean[q];
                    } else if (s0 + s < n && i == ${D}) {
                        value = 1.0f;
                    }
                    staged[k] = value;
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int m = 0; m < ${K}; ++m) {
                    if (row[m] < 0)
                        continue;
                    for (int s = 0; s < ${S}; ++s) {
                        const float4 a = vload4(0, staged + s * ${DA} + row[m]);
                        const float4 b = vload4(0, staged + s * ${DA} + col[m]);
                        sum[m][0] += a.x * b.x;
                        sum[m][1] += a.x * b.y;
                        sum[m][2] += a.x * b.z;
                        sum[m][3] += a.x * b.w;
                        sum[m][4] += a.y * b.x;
                        sum[m][5] += a.y * b.y;
                        sum[m][6] += a.y * b.z;
                        sum[m][7] += a.y * b.w;
                        sum[m][8] += a.z * b.x;
                        sum[m][9] += a.z * b.y;
                        sum[m][10] += a.z * b.z;
                        sum[m][11] += a.z * b.w;
                        sum[m][12] += a.w * b.x;
                        sum[m][13] += a.w * b.y;
                        sum[m][14] += a.w * b.z;
                        sum[m][15] += a.w * b.w;
                    }
                }
                barrier(CLK_LOCAL_MEM_FENCE);   // the next chunk overwrites staged
            }
            for (int m = 0; m < ${K}; ++m)
                for (int k = 0; k < 16; ++k)
                    total[m][k] += sum[m][k];
        }
        tx += NG;
        while (tx >= tiles_x) {
            tx -= tiles_x;
            ++ty;
        }
    }
    for (int m = 0; m < ${K}; ++m) {
        const int block = lid + ${G} * m;
        if (block < ${UB})
            for (int k = 0; k < 16; ++k)
                partial[((long)c * NG + g) * ${E} + 16 * block + k] = total[m][k];
    }
}

//
// nl_reduce: stats[c * E + e] = the sum over g < NG of partial[(c * NG + g) * E + e], in
// the order of g, Kahan-compensated. Launch: global (E rounded up to ${RG}, C), local (${RG}, 1).
//   partial, NG     as nl_scatter wrote them
//   stats           out: C x E floats
__kernel __attribute__((reqd_work_group_size(${RG}, 1, 1)))
void nl_reduce(__global const float *restrict partial, const int NG,
               __global float *restrict stats)
{
    const int e = get_global_id(0), c = get_global_id(1);
    if (e >= ${E})
        return;
    float s = 0.0f, lost = 0.0f;
    for (int g = 0; g < NG; ++g) {
        const float y = partial[((long)c * NG + g) * ${E} + e] - lost;
        const float t = s + y;
        lost = (t - s) - y;
        s = t;
    }
    stats[c * ${E} + e] = s;
}
