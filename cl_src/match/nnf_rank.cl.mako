## The full-patch side of the nearest-neighbour field: the re-ranking of every query's
## reduced-space candidates (cl_src/match/nnf_search.cl.mako built the lists) and the
## polish passes that follow it (clpatch/match/nnf/plan.py drives the kernels; the
## algorithm is the module doc of clpatch/match/nnf/search.py).
##
##   nnf_rerank   exact full-patch distances of the candidates, sorted; the k best out
##   nnf_expand   for a query whose k-th full distance exceeds SLACK times its M-th
##                reduced distance (its list cannot vouch for it: a point outside it may
##                be nearer on the full patches), the EXPAND nearest (reduced space) other
##                points of the leaves holding its first EXPAND_LEAVES distinct candidates'
##                leaves and of a traversal of the tree of at most EXPAND_VISITS leaves
##                are re-ranked too, nearest first, while their reduced distance is below
##                the k-th full distance
##   nnf_polish   half a polish pass (one colour of a checkerboard): a query whose k-th
##                full distance exceeds SLACK times its M-th reduced distance (the list
##                cannot vouch for it) is offered its four neighbours' first matches shifted back by
##                the neighbour's offset, on full distances (PatchMatch's propagation)
##
## The field lives in the Matches layout (lib/matches.mako: ref = y * Wac + x, n = K,
## positions (y, x)) from the re-ranking on: the polish passes update it in place.
## Floating point: FP_CONTRACT is off and every full distance is the sum over c, i, jj in
## that order of (a - b)^2, each step rounded, as the NumPy oracle (tests/reference/nnf.py)
## sums it.
##
## Rendered with: patch (P), channels (C), cand (M, candidates per query), dims (DR),
## leaf (LEAF, slots per leaf), expand (EXPAND), expand_leaves (EXPAND_LEAVES), slack
## (SLACK, a float32 value: the test multiplies the M-th reduced distance by it),
## expand_visits (leaves the expansion's traversal visits; 0: none).
<%page args="patch, channels, cand, dims, leaf, expand, expand_leaves, slack, expand_visits"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    P, C, M, DR, LEAF = patch, channels, cand, dims, leaf
%>
#pragma OPENCL FP_CONTRACT OFF

#define P ${P}
#define M ${M}
#define DR ${DR}
#define LEAF ${LEAF}
#define EXPAND ${expand}
#define EXPAND_LEAVES ${expand_leaves}
#define NONE INT_MAX
#define SLACK ${repr(float(slack))}f

inline bool key_before(const float da, const int ia, const float db, const int ib)
{
    return da < db || (da == db && ia < ib);
}

// Offer (d, id) to the ascending list cd/ci of its first n (<= M) entries (empty entries:
// (INFINITY, NONE)); a point already listed is not added again (same key every time).
inline void offer_n(float *cd, int *ci, const int n, const float d, const int id)
{
    if (!key_before(d, id, cd[n - 1], ci[n - 1]))
        return;
    int at = n - 1;
    while (at > 0 && key_before(d, id, cd[at - 1], ci[at - 1]))
        --at;
    if (at > 0 && ci[at - 1] == id)
        return;
    for (int e = n - 1; e > at; --e) {
        cd[e] = cd[e - 1];
        ci[e] = ci[e - 1];
    }
    cd[at] = d;
    ci[at] = id;
}

// The full distance of a's patch (y, x) to b's patch (cy, cx): the sum over c, i, jj of
// (a - b)^2, each step rounded. It stops early, returning the partial sum, once that
// exceeds `limit` (the sum only grows, so the full one would exceed it too).
inline float full_distance(__global const float *restrict aimg, const int Ha, const int Wa,
                           const int y, const int x, __global const float *restrict bimg,
                           const int Hb, const int Wb, const int cy, const int cx,
                           const float limit)
{
    float acc = 0.0f;
    for (int c = 0; c < ${C}; ++c)
        for (int i = 0; i < P; ++i) {
            __global const float *ra_ = aimg + ((long)c * Ha + y + i) * Wa + x;
            __global const float *rb_ = bimg + ((long)c * Hb + cy + i) * Wb + cx;
            for (int jj = 0; jj < P; ++jj) {
                const float t = ra_[jj] - rb_[jj];
                acc = acc + t * t;
            }
            if (acc > limit)
                return acc;
        }
    return acc;
}

// Squared distance in reduced space, dimensions in order, each step rounded.
inline float reduced_distance(const float *v, __global const float *restrict r)
{
    float acc = 0.0f;
% for k in range(DR):
    { const float t = v[${k}] - r[${k}]; acc = acc + t * t; }
% endfor
    return acc;
}

// Read grid point (y, x)'s K matches back as (distance, point id) lists.
inline void read_matches(float *cd, int *ci, const int K, const int y, const int x,
                         const int Wac, const int Wbc, __global const int *restrict out_pos,
                         __global const float *restrict out_dist)
{
    const int ref = ${mt.ref("y", "x", "Wac")};
    for (int e = 0; e < K; ++e) {
        const int at = ${mt.entry("ref", "K", "e")};
        const int py = ${mt.pos_y("out_pos", "at", 2)};
        cd[e] = ${mt.dist("out_dist", "at")};
        ci[e] = py < 0 ? NONE : py * Wbc + ${mt.pos_x("out_pos", "at", 2)};
    }
}

// Write the first K entries of (cd, ci) as grid point (y, x)'s matches.
inline void write_matches(const float *cd, const int *ci, const int K, const int y,
                          const int x, const int Wac, const int Wbc,
                          __global int *restrict out_pos, __global float *restrict out_dist)
{
    const int ref = ${mt.ref("y", "x", "Wac")};
    for (int e = 0; e < K; ++e) {
        const int at = ${mt.entry("ref", "K", "e")};
        const int pid = ci[e];
        const int cy = pid / Wbc;       // one division, outside the selects: a division
        ${mt.pos_y("out_pos", "at", 2)} = pid == NONE ? -1 : cy;    // under a select becomes
        ${mt.pos_x("out_pos", "at", 2)} = pid == NONE ? -1 : pid - cy * Wbc;   // freeze, which
        ${mt.dist("out_dist", "at")} = cd[e];                       // Oclgrind cannot run
    }
}

// nnf_rerank. Launch: global (Wac rounded up to any local size, rows of the launch), local
// any. Query (row0 + r, x): the exact distance of each candidate, sorted by (distance, id);
// the first K written as the Matches of grid point (y, x).
__kernel void nnf_rerank(__global const float *restrict aimg, const int Ha, const int Wa,
                         __global const float *restrict bimg, const int Hb, const int Wb,
                         const int row0, const int Hac, const int Wac,
                         __global const int *restrict ci_in, const int K,
                         __global int *restrict out_pos, __global float *restrict out_dist)
{
    const int x = get_global_id(0), y = row0 + get_global_id(1);
    if (x >= Wac || y >= Hac)
        return;
    const int q = y * Wac + x;
    const int Wbc = Wb - P + 1;
    float cd[M];
    int ci[M];
    for (int e = 0; e < M; ++e) {
        cd[e] = INFINITY;
        ci[e] = NONE;
    }
    for (int e = 0; e < M; ++e) {
        const int pid = ci_in[(long)q * M + e];
        if (pid == NONE)
            continue;
        const int cy = pid / Wbc, cx = pid - (pid / Wbc) * Wbc;
        offer_n(cd, ci, M, full_distance(aimg, Ha, Wa, y, x, bimg, Hb, Wb, cy, cx, INFINITY),
                pid);
    }
    write_matches(cd, ci, K, y, x, Wac, Wbc, out_pos, out_dist);
}

// nnf_polish. Launch: global (ceil(Wac / 2) rounded up to any local size, Hac), local any.
// Work-item (g, y) is query (y, x), x = 2 g + ((y + colour) & 1): the queries with
// x + y = colour (mod 2), whose four neighbours all have the other colour and do not change
// during this launch. A query is polished when its K-th full distance exceeds SLACK times
// the M-th reduced distance of its candidate list (cd_red: the list's worst, INFINITY when
// the list is short): then a point outside the list may be nearer on the full patches. It
// is offered, for each neighbour (y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1) and its
// first match (cy, cx), b's patch (cy - dy, cx - dx) when that lies in b.
__kernel void nnf_polish(__global const float *restrict aimg, const int Ha, const int Wa,
                         __global const float *restrict bimg, const int Hb, const int Wb,
                         const int Hac, const int Wac, const int colour,
                         __global const float *restrict cd_red, const int K,
                         __global int *restrict out_pos, __global float *restrict out_dist)
{
    const int y = get_global_id(1);
    const int x = 2 * (int)get_global_id(0) + ((y + colour) & 1);
    if (x >= Wac || y >= Hac)
        return;
    const int q = y * Wac + x;
    const int Hbc = Hb - P + 1, Wbc = Wb - P + 1;
    float cd[M];
    int ci[M];
    read_matches(cd, ci, K, y, x, Wac, Wbc, out_pos, out_dist);
    if (ci[K - 1] == NONE || !(cd[K - 1] > SLACK * cd_red[(long)q * M + M - 1]))
        return;
    for (int n = 0; n < 4; ++n) {
        const int dy = n == 0 ? -1 : (n == 1 ? 1 : 0);
        const int dx = n == 2 ? -1 : (n == 3 ? 1 : 0);
        const int ny = y + dy, nx = x + dx;
        if (ny < 0 || ny >= Hac || nx < 0 || nx >= Wac)
            continue;
        const int first = ${mt.entry(mt.ref("ny", "nx", "Wac"), "K", 0)};
        const int cy = ${mt.pos_y("out_pos", "first", 2)};
        if (cy < 0)
            continue;
        const int ty = cy - dy, tx = ${mt.pos_x("out_pos", "first", 2)} - dx;
        if (ty < 0 || ty >= Hbc || tx < 0 || tx >= Wbc)
            continue;
        offer_n(cd, ci, K, full_distance(aimg, Ha, Wa, y, x, bimg, Hb, Wb, ty, tx, cd[K - 1]),
                ty * Wbc + tx);
    }
    write_matches(cd, ci, K, y, x, Wac, Wbc, out_pos, out_dist);
}

// Offer to the ascending extra list ed/ei (EXPAND entries) the real points of leaf f that
// are not on the query's list `listed` and whose reduced distance is below `limit` (the
// others would not be re-ranked: leaving them out changes no entry below it).
inline void offer_extra(const float *v, const int f, const int *listed, const int Nb,
                        __global const float *restrict leaf_pts,
                        __global const int *restrict leaf_pid, const float limit, float *ed,
                        int *ei)
{
    for (int s = 0; s < LEAF; ++s) {
        const int pid = leaf_pid[f * LEAF + s];
        bool other = pid < Nb;
        for (int l = 0; l < M; ++l)
            other = other && listed[l] != pid;
        if (!other)
            continue;
        const float d = reduced_distance(v, leaf_pts + (long)(f * LEAF + s) * DR);
        if (!(d < limit) || !key_before(d, pid, ed[EXPAND - 1], ei[EXPAND - 1]))
            continue;
        int at = EXPAND - 1;
        while (at > 0 && key_before(d, pid, ed[at - 1], ei[at - 1])) {
            ed[at] = ed[at - 1];
            ei[at] = ei[at - 1];
            --at;
        }
        ed[at] = d;
        ei[at] = pid;
    }
}

// nnf_expand. Launch: global (Wac rounded up to any local size, Hac), local any. Query
// (y, x), when its K-th full distance exceeds SLACK times the M-th reduced distance of its
// list (ci_red/cd_red): the distinct leaves of its list's points, in list order, the first
// EXPAND_LEAVES of them, then (EXPAND_VISITS > 0) a traversal of the tree from the root as
// nnf_exact's (nearer child first, bounded by the smaller of the extra list's worst and
// the K-th full distance, at most EXPAND_VISITS leaves, the leaves already scanned
// counted but not scanned again); their real points not on the list, the EXPAND smallest
// by (reduced distance, id); of these, nearest first while the reduced distance is below
// the current K-th full distance, each offered on its full distance.
__kernel void nnf_expand(__global const float *restrict aimg, const int Ha, const int Wa,
                         __global const float *restrict bimg, const int Hb, const int Wb,
                         const int Hac, const int Wac, __global const float *restrict ra,
                         __global const int *restrict dims, __global const float *restrict med,
                         const int levels, __global const float *restrict leaf_pts,
                         __global const int *restrict leaf_pid,
                         __global const int *restrict leaf_of,
                         __global const float *restrict cd_red,
                         __global const int *restrict ci_red, const int K,
                         __global int *restrict out_pos, __global float *restrict out_dist)
{
    const int x = get_global_id(0), y = get_global_id(1);
    if (x >= Wac || y >= Hac)
        return;
    const int q = y * Wac + x;
    const int Wbc = Wb - P + 1, Nb = (Hb - P + 1) * Wbc;
    float cd[M];
    int ci[M];
    read_matches(cd, ci, K, y, x, Wac, Wbc, out_pos, out_dist);
    if (ci[K - 1] == NONE || !(cd[K - 1] > SLACK * cd_red[(long)q * M + M - 1]))
        return;
    int listed[M];
    for (int e = 0; e < M; ++e)
        listed[e] = ci_red[(long)q * M + e];
    float v[DR];
% for k in range(DR):
    v[${k}] = ra[(long)q * DR + ${k}];
% endfor
    float ed[EXPAND];
    int ei[EXPAND];
    for (int e = 0; e < EXPAND; ++e) {
        ed[e] = INFINITY;
        ei[e] = NONE;
    }
    int leaves[EXPAND_LEAVES];
    int count = 0;
    for (int e = 0; e < M && count < EXPAND_LEAVES; ++e) {
        if (listed[e] == NONE)
            continue;
        const int f = leaf_of[listed[e]];
        bool fresh = true;
        for (int s = 0; s < count; ++s)
            fresh = fresh && leaves[s] != f;
        if (!fresh)
            continue;
        leaves[count++] = f;
        offer_extra(v, f, listed, Nb, leaf_pts, leaf_pid, cd[K - 1], ed, ei);
    }
% if expand_visits:
    const float limit = cd[K - 1];
    int stack_h[40];
    float stack_b[40];
    int sp = 0;
    stack_h[sp] = 1;
    stack_b[sp++] = 0.0f;
    int visited = 0;
    while (sp > 0 && visited < ${expand_visits}) {
        --sp;
        int h = stack_h[sp];
        const float bound = stack_b[sp];
        if (bound > fmin(ed[EXPAND - 1], limit))
            continue;
        while (h < (1 << levels)) {
            const float diff = v[dims[h]] - med[h];
            const int near = diff > 0.0f ? 2 * h + 1 : 2 * h;
            const float b2 = fmax(bound, diff * diff);
            if (!(b2 > fmin(ed[EXPAND - 1], limit))) {
                stack_h[sp] = near ^ 1;
                stack_b[sp++] = b2;
            }
            h = near;
        }
        const int f = h - (1 << levels);
        ++visited;
        bool fresh = true;
        for (int s = 0; s < count; ++s)
            fresh = fresh && leaves[s] != f;
        if (fresh)
            offer_extra(v, f, listed, Nb, leaf_pts, leaf_pid, limit, ed, ei);
    }
% endif
    for (int e = 0; e < EXPAND && ei[e] != NONE && ed[e] < cd[K - 1]; ++e) {
        const int cy = ei[e] / Wbc, cx = ei[e] - (ei[e] / Wbc) * Wbc;
        offer_n(cd, ci, K, full_distance(aimg, Ha, Wa, y, x, bimg, Hb, Wb, cy, cx, cd[K - 1]),
                ei[e]);
    }
    write_matches(cd, ci, K, y, x, Wac, Wbc, out_pos, out_dist);
}
