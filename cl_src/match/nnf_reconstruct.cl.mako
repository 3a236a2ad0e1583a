## The voting reconstruction of image a from the patches of image b its nearest-neighbour
## field matched (Oancea et al. Fig. 1; clpatch.reconstruct).
##
## Rendered with: patch (P), channels (C).
<%page args="patch, channels"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    P, C = patch, channels
%>
#define P ${P}

// nnf_reconstruct. Launch: global (Wa rounded up to any local size, Ha), local any. Pixel
// (y, x) of a, every channel: the mean over the query patches covering it (top-left
// (y - i, x - j), i, j in [0, P), inside a's positions) of the pixel at offset (i, j) of
// their matched patch (pos[(q * K) * 2], the first neighbour) in b (planar float).
// out is planar float like the images.
__kernel void nnf_reconstruct(__global const int *restrict pos, const int K, const int Ha,
                              const int Wa, __global const float *restrict bimg, const int Hb,
                              const int Wb, __global float *restrict out)
{
    const int x = get_global_id(0), y = get_global_id(1);
    if (x >= Wa || y >= Ha)
        return;
    const int Hac = Ha - P + 1, Wac = Wa - P + 1;
    float acc[${C}];
    for (int c = 0; c < ${C}; ++c)
        acc[c] = 0.0f;
    int n = 0;
    for (int i = 0; i < P; ++i) {
        const int qy = y - i;
        if (qy < 0 || qy >= Hac)
            continue;
        for (int j = 0; j < P; ++j) {
            const int qx = x - j;
            if (qx < 0 || qx >= Wac)
                continue;
            const int at = ${mt.first(mt.ref("qy", "qx", "Wac"), "K")};    // rank 0
            const int by = ${mt.pos_y("pos", "at", 2)} + i, bx = ${mt.pos_x("pos", "at", 2)} + j;
            for (int c = 0; c < ${C}; ++c)
                acc[c] += bimg[((long)c * Hb + by) * Wb + bx];
            ++n;
        }
    }
    for (int c = 0; c < ${C}; ++c)
        out[((long)c * Ha + y) * Wa + x] = acc[c] / (float)n;
}
