## The search side of the nearest-neighbour field (Oancea et al., Algorithm 1, with bands
## and refinement passes): candidate lists in the reduced space over the k-d tree that
## cl_src/match/nnf_index.cl.mako built (clpatch/match/nnf/plan.py drives the kernels;
## the algorithm is the module doc of clpatch/match/nnf/search.py).
##
##   nnf_contain      every query's candidates from its containing leaf (and the previous,
##                    full, leaf when that leaf holds fewer than M real points: the real
##                    points fill a prefix of the leaves)
##   nnf_exact        the M nearest (reduced space) of the queries of the rows 0, BAND, …
##                    by a traversal with backtracking, of at most VISITS leaves
##   nnf_propagate    one propagation step: queries of rows y = t (mod BAND) search the
##                    leaves holding the patches below their upper neighbour's candidates
##   nnf_refine       half a refinement pass (one colour of a checkerboard): each query is
##                    offered its four neighbours' candidates shifted back by the
##                    neighbour's offset (PatchMatch)
##
## The re-ranking on the full patches and the polish passes are in nnf_rank.cl.mako.
##
## A candidate list: cd/ci[q * M + e], ascending by (reduced distance, point id), empty
## entries (INFINITY, NONE). Floating point: FP_CONTRACT is off, so every product and sum
## is rounded on its own and the NumPy oracle (tests/reference/nnf.py) reproduces the
## lists and the fields bit for bit.
##
## Rendered with: patch (P), channels (C), dims (DR), leaf (LEAF, slots per leaf),
## cand (M, candidates per query), band (BAND), visits (VISITS, leaves a backtracking
## traversal visits at most).
<%page args="patch, channels, dims, leaf, cand, band, visits"/>
<%
    P, C, DR, LEAF, M, BAND, VISITS = patch, channels, dims, leaf, cand, band, visits
%>
#pragma OPENCL FP_CONTRACT OFF

#define P ${P}
#define DR ${DR}
#define LEAF ${LEAF}
#define M ${M}
#define BAND ${BAND}
#define VISITS ${VISITS}
#define NONE INT_MAX

inline bool key_before(const float da, const int ia, const float db, const int ib)
{
    return da < db || (da == db && ia < ib);
}

// Offer (d, id) to the ascending list cd/ci of M entries (empty entries: (INFINITY, NONE)).
// A point already listed is not added again (its distance is the same every time: the key
// compares equal), so offering a leaf twice changes nothing.
inline void offer(float *cd, int *ci, const float d, const int id)
{
    if (!key_before(d, id, cd[M - 1], ci[M - 1]))
        return;
    int at = M - 1;
    while (at > 0 && key_before(d, id, cd[at - 1], ci[at - 1]))
        --at;
    if (at > 0 && ci[at - 1] == id)
        return;
    for (int e = M - 1; e > at; --e) {
        cd[e] = cd[e - 1];
        ci[e] = ci[e - 1];
    }
    cd[at] = d;
    ci[at] = id;
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

// Offer every real point of leaf f; returns how many real points it holds.
inline int offer_leaf(const float *v, const int f, __global const float *restrict leaf_pts,
                      __global const int *restrict leaf_pid, const int Nb, float *cd, int *ci)
{
    int real = 0;
    for (int s = 0; s < LEAF; ++s) {
        const int pid = leaf_pid[f * LEAF + s];
        if (pid < Nb) {
            ++real;
            offer(cd, ci, reduced_distance(v, leaf_pts + (long)(f * LEAF + s) * DR), pid);
        }
    }
    return real;
}

// searched[2 q], searched[2 q + 1]: the leaves q's containing-leaf step offered (-1: none).

inline void load_query(__global const float *restrict ra, const int q, float *v)
{
% for k in range(DR):
    v[${k}] = ra[(long)q * DR + ${k}];
% endfor
}

// The leaves a query has searched for certain: its containing-leaf step's, and the leaf of
// each point on its list (a point enters a list only by a whole-leaf offer, and a list only
// improves, so searching such a leaf again would change nothing). Returns how many it wrote.
inline int mark_searched(const int q, __global const int *restrict searched,
                         __global const int *restrict leaf_of, const int *ci, int *seen)
{
    int count = 0;
    seen[count++] = searched[2 * q];
    seen[count++] = searched[2 * q + 1];
    for (int e = 0; e < M; ++e)
        if (ci[e] != NONE)
            seen[count++] = leaf_of[ci[e]];
    return count;
}

// nnf_contain. Launch: global (Na rounded up to any local size), local any.
__kernel void nnf_contain(__global const float *restrict ra, const int Na,
                          __global const int *restrict dims, __global const float *restrict med,
                          const int levels, __global const float *restrict leaf_pts,
                          __global const int *restrict leaf_pid, const int Nb,
                          __global float *restrict cd_out, __global int *restrict ci_out,
                          __global int *restrict searched)
{
    const int q = get_global_id(0);
    if (q >= Na)
        return;
    float v[DR];
    load_query(ra, q, v);
    int h = 1;
    for (int l = 0; l < levels; ++l)
        h = 2 * h + (ra[(long)q * DR + dims[h]] > med[h] ? 1 : 0);
    const int f = h - (1 << levels);
    float cd[M];
    int ci[M];
    for (int e = 0; e < M; ++e) {
        cd[e] = INFINITY;
        ci[e] = NONE;
    }
    const int real = offer_leaf(v, f, leaf_pts, leaf_pid, Nb, cd, ci);
    int second = -1;
    if (real < M && levels > 0) {
        second = f - 1;
        offer_leaf(v, second, leaf_pts, leaf_pid, Nb, cd, ci);
    }
    searched[2 * q] = f;
    searched[2 * q + 1] = second;
    for (int e = 0; e < M; ++e) {
        cd_out[(long)q * M + e] = cd[e];
        ci_out[(long)q * M + e] = ci[e];
    }
}

// nnf_exact. Launch: global (Wac rounded up to any local size, exact rows), local any.
// Work-item (x, b) searches query (b * BAND, x) by a depth-first traversal from the root:
// the nearer child first; a farther child is stacked unless its bound (the squared
// distance to the median plane, or its parent's bound if larger) exceeds the M-th
// distance, and skipped when popped if it does by then; the traversal stops after VISITS
// leaves (exact when it ends before); leaves the containing-leaf step offered are
// skipped (they still count as visited).
__kernel void nnf_exact(__global const float *restrict ra, const int Hac, const int Wac,
                        __global const int *restrict dims, __global const float *restrict med,
                        const int levels, __global const float *restrict leaf_pts,
                        __global const int *restrict leaf_pid, const int Nb,
                        __global float *restrict cd_io, __global int *restrict ci_io,
                        __global const int *restrict searched)
{
    const int x = get_global_id(0), y = get_global_id(1) * BAND;
    if (x >= Wac || y >= Hac)
        return;
    const int q = y * Wac + x;
    float v[DR];
    load_query(ra, q, v);
    float cd[M];
    int ci[M];
    for (int e = 0; e < M; ++e) {
        cd[e] = cd_io[(long)q * M + e];
        ci[e] = ci_io[(long)q * M + e];
    }
    const int s0 = searched[2 * q], s1 = searched[2 * q + 1];
    int stack_h[40];
    float stack_b[40];
    int sp = 0;
    stack_h[sp] = 1;
    stack_b[sp++] = 0.0f;
    int visited = 0;
    while (sp > 0 && visited < VISITS) {
        --sp;
        int h = stack_h[sp];
        const float bound = stack_b[sp];
        if (bound > cd[M - 1])
            continue;
        while (h < (1 << levels)) {
            const float diff = ra[(long)q * DR + dims[h]] - med[h];
            const int near = diff > 0.0f ? 2 * h + 1 : 2 * h;
            const float b2 = fmax(bound, diff * diff);
            if (!(b2 > cd[M - 1])) {
                stack_h[sp] = near ^ 1;
                stack_b[sp++] = b2;
            }
            h = near;
        }
        const int f = h - (1 << levels);
        ++visited;
        if (f != s0 && f != s1)
            offer_leaf(v, f, leaf_pts, leaf_pid, Nb, cd, ci);
    }
    for (int e = 0; e < M; ++e) {
        cd_io[(long)q * M + e] = cd[e];
        ci_io[(long)q * M + e] = ci[e];
    }
}

// nnf_propagate. Launch: global (Wac rounded up to any local size, bands), local any.
// Work-item (x, b) refines query (b * BAND + t, x) from its upper neighbour's candidates:
// the distinct leaves holding the patch one row below each of them, other than the ones
// it searched.
__kernel void nnf_propagate(__global const float *restrict ra, const int Hac, const int Wac,
                            const int t, __global const float *restrict leaf_pts,
                            __global const int *restrict leaf_pid,
                            __global const int *restrict leaf_of, const int Nb,
                            const int Hbc, const int Wbc,
                            __global float *restrict cd_io, __global int *restrict ci_io,
                            __global const int *restrict searched)
{
    const int x = get_global_id(0), y = get_global_id(1) * BAND + t;
    if (x >= Wac || y >= Hac)
        return;
    const int q = y * Wac + x, up = q - Wac;
    float v[DR];
    load_query(ra, q, v);
    float cd[M];
    int ci[M];
    for (int e = 0; e < M; ++e) {
        cd[e] = cd_io[(long)q * M + e];
        ci[e] = ci_io[(long)q * M + e];
    }
    int seen[2 * M + 2];
    int count = mark_searched(q, searched, leaf_of, ci, seen);
    for (int e = 0; e < M; ++e) {
        const int pid = ci_io[(long)up * M + e];
        if (pid == NONE)
            continue;
        const int cy = pid / Wbc;
        if (cy + 1 >= Hbc)
            continue;
        const int g = leaf_of[pid + Wbc];
        bool fresh = true;
        for (int s = 0; s < count; ++s)
            fresh = fresh && seen[s] != g;
        if (!fresh)
            continue;
        seen[count++] = g;
        offer_leaf(v, g, leaf_pts, leaf_pid, Nb, cd, ci);
    }
    for (int e = 0; e < M; ++e) {
        cd_io[(long)q * M + e] = cd[e];
        ci_io[(long)q * M + e] = ci[e];
    }
}

// nnf_refine. Launch: global (ceil(Wac / 2) rounded up to any local size, Hac), local any.
// One half of a refinement pass: work-item (g, y) is query (y, x), x = 2 g + ((y + colour)
// & 1), the queries with x + y = colour (mod 2), whose four neighbours all have the other
// colour and do not change during this launch (so the lists update in place, race-free and
// deterministic). For each neighbour (y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1) and each
// of its candidates (cy, cx), b's patch (cy - dy, cx - dx) (the neighbour's match moved back
// by the neighbour's offset: PatchMatch's propagation) is offered when it lies in b.
__kernel void nnf_refine(__global const float *restrict ra, const int Hac, const int Wac,
                         __global const float *restrict rb, const int Hbc, const int Wbc,
                         const int colour, __global float *restrict cd_io,
                         __global int *restrict ci_io)
{
    const int y = get_global_id(1);
    const int x = 2 * (int)get_global_id(0) + ((y + colour) & 1);
    if (x >= Wac || y >= Hac)
        return;
    const int q = y * Wac + x;
    float v[DR];
    load_query(ra, q, v);
    float cd[M];
    int ci[M];
    for (int e = 0; e < M; ++e) {
        cd[e] = cd_io[(long)q * M + e];
        ci[e] = ci_io[(long)q * M + e];
    }
    for (int n = 0; n < 4; ++n) {
        const int dy = n == 0 ? -1 : (n == 1 ? 1 : 0);
        const int dx = n == 2 ? -1 : (n == 3 ? 1 : 0);
        const int ny = y + dy, nx = x + dx;
        if (ny < 0 || ny >= Hac || nx < 0 || nx >= Wac)
            continue;
        const long nq = (long)ny * Wac + nx;
        for (int e = 0; e < M; ++e) {
            const int pid = ci_io[nq * M + e];
            if (pid == NONE)
                continue;
            const int cy = pid / Wbc;
            const int ty = cy - dy, tx = pid - cy * Wbc - dx;
            if (ty < 0 || ty >= Hbc || tx < 0 || tx >= Wbc)
                continue;
            const int t = ty * Wbc + tx;
            offer(cd, ci, reduced_distance(v, rb + (long)t * DR), t);
        }
    }
    for (int e = 0; e < M; ++e) {
        cd_io[(long)q * M + e] = cd[e];
        ci_io[(long)q * M + e] = ci[e];
    }
}
