## VBM3D's predictive video patch search (Davy-Ehret 4.2; Dabov et al. 2007).
##
## For a reference patch at (t_ref, ry, rx): in frame t_ref, every valid position within
## half-width W1 // 2 of the reference; in every other frame f (going outward from t_ref,
## forwards up to t_hi, then backwards down to t_lo), the union of the windows of half-width
## W2 // 2 centred on the Q positions kept in the frame next to f on the way from t_ref.
## Each frame keeps its Q best candidates; the result is the N best of all kept candidates.
## Candidates are ordered by the key (d, t, y, x), compared lexicographically, so that every
## variant and the NumPy oracle (tests/reference/vbm3d.py) make the same choices, ties
## included. d is the sum of squared differences over the P x P patch on channel 0.
##
## Rendered with: variant ("naive": one work-item per reference, 4.2.2; "window": LANES
## work-items per reference, one column of each search window each, 4.2.3; "patch": P
## work-items per reference, one column of each patch each, whose partial distances are
## summed with warp shuffles where the profile has them, else through local memory, 4.2.4),
## patch (P), n (N), q (Q), window_ref (W1), window_pred (W2), channels (C: slots hold C
## planes, the search reads plane 0), lanes (work-items per reference: 1, LANES or P) and
## group (references per work-group), both from clpatch.denoise.vbm3d_params.search_layout.
<%page args="variant, patch, n, q, window_ref, window_pred, channels, lanes, group"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    P, N, Q, C = patch, n, q, channels
    H1, H2 = window_ref // 2, window_pred // 2
    D1, D2 = 2 * H1 + 1, 2 * H2 + 1
    LANES = RPG_WINDOW = RPG_PATCH = None
    if variant == "window":
        LANES, RPG_WINDOW = lanes, group
        assert LANES >= max(D1, D2)
    elif variant == "patch":
        RPG_PATCH = group
        assert lanes == P
    # Warp shuffles need whole references inside a warp: P a power of 2 up to 32.
    SHFL = profile.subgroup_ops == "ptx" and P in (2, 4, 8, 16, 32)
    NC1, NC2 = D1 * D1, Q * D2 * D2                      # candidate slots of a frame
%>
//
// Layout: a ring of nf frame slots, planar float: video frame t, plane c, pixel (y, x) is
// img[(((t - frame_base) % nf * ${C} + c) * H + y) * W + x]. Launch: one reference frame
// t_ref; frames t_lo ... t_hi (clipped to the video and the temporal radius) are searched.
// References: rows ys[0 .. gy), columns xs[0 .. gx); results of reference (i, j) at
// out_dist[(i * gx + j) * ${N} + k] and out_pos[((i * gx + j) * ${N} + k) * 3 + (0, 1, 2)] =
// (t, y, x), ascending by key; missing entries are (-1, -1, -1) with distance +inf.
//
#define SLOT(t) (((t) - frame_base) % nf)
#define GUIDE(t) (img + (size_t)SLOT(t) * ${C} * H * W)
#define NONE_KEY 0x7fffffff

// True when (y, x) lies in the window (half-width h) of one of the first k centres: the
// candidate was already considered there.
inline bool seen_before(const int k, const int y, const int x, const int *cy, const int *cx,
                        const int h)
{
    bool seen = false;
    for (int j = 0; j < k; ++j)
        seen = seen || (abs(y - cy[j]) <= h && abs(x - cx[j]) <= h);
    return seen;
}

// (d1, t1, y1, x1) < (d2, t2, y2, x2), lexicographically.
inline bool key_less(const float d1, const int t1, const int y1, const int x1,
                     const float d2, const int t2, const int y2, const int x2)
{
    if (d1 != d2)
        return d1 < d2;
    if (t1 != t2)
        return t1 < t2;
    if (y1 != y2)
        return y1 < y2;
    return x1 < x2;
}

<%def name="list_decl(name, size)">
    float ${name}_d[${size}];
    int ${name}_t[${size}], ${name}_y[${size}], ${name}_x[${size}];
    ${list_clear(name, size)}
</%def>

<%def name="list_clear(name, size)">
    for (int i_ = 0; i_ < ${size}; ++i_) {
        ${name}_d[i_] = INFINITY;
        ${name}_t[i_] = NONE_KEY;
        ${name}_y[i_] = NONE_KEY;
        ${name}_x[i_] = NONE_KEY;
    }
</%def>

## Inserts (d, t, y, x) into the sorted list `name` of `size` entries (dropped when it is
## not better than the last entry).
<%def name="list_insert(name, size, d, t, y, x)">
    if (key_less(${d}, ${t}, ${y}, ${x}, ${name}_d[${size - 1}], ${name}_t[${size - 1}],
                 ${name}_y[${size - 1}], ${name}_x[${size - 1}])) {
        int i_ = ${size - 1};
        while (i_ > 0 && key_less(${d}, ${t}, ${y}, ${x}, ${name}_d[i_ - 1], ${name}_t[i_ - 1],
                                  ${name}_y[i_ - 1], ${name}_x[i_ - 1])) {
            ${name}_d[i_] = ${name}_d[i_ - 1];
            ${name}_t[i_] = ${name}_t[i_ - 1];
            ${name}_y[i_] = ${name}_y[i_ - 1];
            ${name}_x[i_] = ${name}_x[i_ - 1];
            --i_;
        }
        ${name}_d[i_] = ${d};
        ${name}_t[i_] = ${t};
        ${name}_y[i_] = ${y};
        ${name}_x[i_] = ${x};
    }
</%def>

## Writes the result list `name` of reference `ref`.
<%def name="write_results(name)">
    for (int k = 0; k < ${N}; ++k) {
        const bool some = ${name}_d[k] < INFINITY;
        ${mt.dist("out_dist", mt.entry("ref", N, "k"))} = ${name}_d[k];
        ${mt.pos_t("out_pos", mt.entry("ref", N, "k"), 3)} = some ? ${name}_t[k] : -1;
        ${mt.pos_y("out_pos", mt.entry("ref", N, "k"), 3)} = some ? ${name}_y[k] : -1;
        ${mt.pos_x("out_pos", mt.entry("ref", N, "k"), 3)} = some ? ${name}_x[k] : -1;
    }
</%def>

## Moves the candidate counters (ck, cdy, cdx) to the next offset, row by row.
<%def name="advance()">
    if (++cdx > h) {
        cdx = -h;
        if (++cdy > h) {
            cdy = -h;
            ++ck;
        }
    }
</%def>

<%def name="args()">
    __global const float *restrict img, const int nf, const int H, const int W,
    const int frame_base, const int t_ref, const int t_lo, const int t_hi,
    __global const int *restrict ys, __global const int *restrict xs, const int gy, const int gx,
    __global int *restrict out_pos, __global float *restrict out_dist
</%def>

## The frames in search order: t_ref, t_ref + 1 ... t_hi, then t_ref - 1 ... t_lo. Inside,
## `t` is the frame, `back` whether it is on the backward pass, `first` whether t == t_ref,
## `h` the half-window; the backward pass starts from the reference frame's kept positions.
<%def name="frame_loop()">
    for (int step_ = 0; step_ <= (t_hi - t_ref) + (t_ref - t_lo); ++step_) {
        const bool first = step_ == 0;
        const bool back = step_ > t_hi - t_ref;
        const int t = back ? t_ref - (step_ - (t_hi - t_ref)) : t_ref + step_;
        const int h = first ? ${H1} : ${H2};
        if (back && t == t_ref - 1) {
            // The backward pass starts again from the reference frame's kept positions.
            for (int j = 0; j < ns; ++j) {
                cy[j] = sy[j];
                cx[j] = sx[j];
            }
            nc = ns;
        }
</%def>

## The reference patch into private memory (naive and window variants).
<%def name="load_patch()">
    float patch[${P * P}];
    {
        __global const float *g = GUIDE(t_ref) + ry * W + rx;
        for (int r = 0; r < ${P}; ++r)
            for (int k = 0; k < ${P}; ++k)
                patch[r * ${P} + k] = g[r * W + k];
    }
</%def>

<%def name="centres_decl()">
    // Centres of the next frame's windows (nc), and the reference frame's kept positions
    // (ns); entries beyond the counts are zeros, never used as centres.
    int cy[${Q}], cx[${Q}], sy[${Q}], sx[${Q}];
    for (int j = 0; j < ${Q}; ++j)
        cy[j] = cx[j] = sy[j] = sx[j] = 0;
    int nc = 1, ns = 0;
    cy[0] = ry;
    cx[0] = rx;
</%def>

## After a frame: its kept list `fr` joins the overall list and gives the next centres.
<%def name="keep_frame()">
        nc = 0;
        for (int j = 0; j < ${Q}; ++j)
            if (fr_d[j] < INFINITY) {
                ${list_insert("best", N, "fr_d[j]", "t", "fr_y[j]", "fr_x[j]")}
                cy[nc] = fr_y[j];
                cx[nc] = fr_x[j];
                ++nc;
            }
        ${keep_reference_frame()}
</%def>

<%def name="keep_reference_frame()">
        if (first) {
            for (int j = 0; j < nc; ++j) {
                sy[j] = cy[j];
                sx[j] = cx[j];
            }
            ns = nc;
        }
</%def>

% if variant != "patch":
// Sum of squared differences between a private patch and the candidate at c.
inline float patch_distance(const float *ref, __global const float *c, const int W)
{
    float s = 0.0f;
    for (int r = 0; r < ${P}; ++r)
        for (int k = 0; k < ${P}; ++k) {
            const float d = ref[r * ${P} + k] - c[r * W + k];
            s = fma(d, d, s);
        }
    return s;
}
% endif

% if variant == "naive":
// ---- 4.2.2: one work-item per reference.
__kernel void vbm3d_search(${args()})
{
    const int gj = get_global_id(0), gi = get_global_id(1);
    if (gj >= gx || gi >= gy)
        return;
    const int ref = ${mt.ref("gi", "gj", "gx")};
    const int ry = ys[gi], rx = xs[gj];
    ${load_patch()}
    ${list_decl("best", N)}
    ${list_decl("fr", Q)}
    ${centres_decl()}
    ${frame_loop()}
        ${list_clear("fr", Q)}
        __global const float *g = GUIDE(t);
        for (int k = 0; k < nc; ++k)
            for (int dy = -h; dy <= h; ++dy) {
                const int y = cy[k] + dy;
                if (y < 0 || y > H - ${P})
                    continue;
                for (int dx = -h; dx <= h; ++dx) {
                    const int x = cx[k] + dx;
                    if (x < 0 || x > W - ${P} || seen_before(k, y, x, cy, cx, h))
                        continue;
                    const float d = patch_distance(patch, g + y * W + x, W);
                    ${list_insert("fr", Q, "d", "t", "y", "x")}
                }
            }
        ${keep_frame()}
    }
    ${write_results("best")}
}

% elif variant == "window":
// ---- 4.2.3: ${LANES} work-items per reference; lane l searches column dx = l - h of every
// window of the frame (lanes beyond the window's width idle), keeping its own ${Q} best;
// lane 0 merges the lanes' lists through local memory, keeps the frame's ${Q} best and the
// overall ${N} best, and publishes the next frame's centres. ${RPG_WINDOW} reference(s) per
// work-group.
__kernel __attribute__((reqd_work_group_size(${LANES}, ${RPG_WINDOW}, 1)))
void vbm3d_search(${args()})
{
    __local float l_d[${RPG_WINDOW}][${LANES * Q}];
    __local int l_y[${RPG_WINDOW}][${LANES * Q}], l_x[${RPG_WINDOW}][${LANES * Q}];
    __local int l_cy[${RPG_WINDOW}][${Q}], l_cx[${RPG_WINDOW}][${Q}], l_nc[${RPG_WINDOW}];
    const int lane = get_local_id(0), me = get_local_id(1);
    const int gj = get_global_id(1), gi = get_global_id(2);
    const bool live = gj < gx;
    const int ref = ${mt.ref("gi", "gj", "gx")};
    const int ry = ys[gi], rx = xs[live ? gj : gx - 1];
    ${load_patch()}
    ${list_decl("best", N)}
    ${list_decl("fr", Q)}
    ${centres_decl()}
    ${frame_loop()}
        ${list_clear("fr", Q)}
        const int dx = lane - h;
        if (dx <= h) {
            __global const float *g = GUIDE(t);
            for (int k = 0; k < nc; ++k) {
                const int x = cx[k] + dx;
                if (x < 0 || x > W - ${P})
                    continue;
                for (int dy = -h; dy <= h; ++dy) {
                    const int y = cy[k] + dy;
                    if (y < 0 || y > H - ${P} || seen_before(k, y, x, cy, cx, h))
                        continue;
                    const float d = patch_distance(patch, g + y * W + x, W);
                    ${list_insert("fr", Q, "d", "t", "y", "x")}
                }
            }
        }
        for (int j = 0; j < ${Q}; ++j) {
            l_d[me][lane * ${Q} + j] = fr_d[j];
            l_y[me][lane * ${Q} + j] = fr_y[j];
            l_x[me][lane * ${Q} + j] = fr_x[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lane == 0) {
            ${list_clear("fr", Q)}
            for (int j = 0; j < ${LANES * Q}; ++j) {
                const float d = l_d[me][j];
                if (d < INFINITY) {
                    const int y = l_y[me][j], x = l_x[me][j];
                    ${list_insert("fr", Q, "d", "t", "y", "x")}
                }
            }
            int m = 0;
            for (int j = 0; j < ${Q}; ++j)
                if (fr_d[j] < INFINITY) {
                    ${list_insert("best", N, "fr_d[j]", "t", "fr_y[j]", "fr_x[j]")}
                    l_cy[me][m] = fr_y[j];
                    l_cx[me][m] = fr_x[j];
                    ++m;
                }
            l_nc[me] = m;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        nc = l_nc[me];
        for (int j = 0; j < nc; ++j) {
            cy[j] = l_cy[me][j];
            cx[j] = l_cx[me][j];
        }
        ${keep_reference_frame()}
    }
    if (live && lane == 0) {
        ${write_results("best")}
    }
}

% elif variant == "patch":
// ---- 4.2.4: ${P} work-items per reference, lane l holds column l of the reference patch and
// computes the partial distance of column l for every candidate; the partials are summed
// ${"with butterfly warp shuffles (inline PTX shfl.sync.bfly)" if SHFL else "through local memory, " + str(P) + " candidates per round"}.
// Every lane then holds the same distances and keeps identical lists, so no lane waits for
// another between frames. Candidates are enumerated uniformly (every slot of every window,
// invalid ones masked) so that all lanes of a work-group run the same iterations.
// ${RPG_PATCH} reference(s) per work-group.
% if SHFL:
inline float lane_sum(float v)
{
% for m in [1 << e for e in range((P - 1).bit_length())]:
    {
        uint o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, ${m}, 0x1f, 0xffffffff;" : "=r"(o) : "r"(as_uint(v)));
        v += as_float(o);
    }
% endfor
    return v;
}
% endif

__kernel __attribute__((reqd_work_group_size(${P}, ${RPG_PATCH}, 1)))
void vbm3d_search(${args()})
{
% if not SHFL:
    __local float l_part[${RPG_PATCH}][${P}][${P + 1}];
    __local float l_sum[${RPG_PATCH}][${P}];
% endif
    const int lane = get_local_id(0), me = get_local_id(1);
    const int gj = get_global_id(1), gi = get_global_id(2);
    const bool live = gj < gx;
    const int ref = ${mt.ref("gi", "gj", "gx")};
    const int ry = ys[gi], rx = xs[live ? gj : gx - 1];
    float col[${P}];
    {
        __global const float *g = GUIDE(t_ref) + ry * W + rx + lane;
        for (int r = 0; r < ${P}; ++r)
            col[r] = g[r * W];
    }
    ${list_decl("best", N)}
    ${list_decl("fr", Q)}
    ${centres_decl()}
    ${frame_loop()}
        ${list_clear("fr", Q)}
        __global const float *g = GUIDE(t);
        const int count = first ? ${NC1} : ${NC2};
        // Candidate c is offset (cdy, cdx) of window ck, enumerated row by row; the counters
        // advance without divisions (Oclgrind cannot check the code divisions compile to).
        int ck = 0, cdy = -h, cdx = -h;
% if SHFL:
        for (int c = 0; c < count; ++c) {
            const int y = cy[ck] + cdy, x = cx[ck] + cdx;
            const bool ok = ck < nc && y >= 0 && y <= H - ${P} && x >= 0 && x <= W - ${P}
                            && !seen_before(ck, y, x, cy, cx, h);
            __global const float *p = g + clamp(y, 0, H - ${P}) * W + clamp(x, 0, W - ${P}) + lane;
            float s = 0.0f;
            for (int r = 0; r < ${P}; ++r) {
                const float d = col[r] - p[r * W];
                s = fma(d, d, s);
            }
            const float d = lane_sum(s);
            if (ok) {
                ${list_insert("fr", Q, "d", "t", "y", "x")}
            }
            ${advance()}
        }
% else:
        for (int c0 = 0; c0 < count; c0 += ${P}) {
            // Round: lane l computes column l of candidates c0 ... c0 + ${P - 1}, then sums
            // candidate c0 + l's columns; every lane then inserts the round's candidates.
            int by[${P}], bx[${P}];
            bool bok[${P}];
            for (int i = 0; i < ${P}; ++i) {
                const bool in = c0 + i < count;
                const int y = cy[min(ck, ${Q - 1})] + cdy, x = cx[min(ck, ${Q - 1})] + cdx;
                by[i] = y;
                bx[i] = x;
                bok[i] = in && ck < nc && y >= 0 && y <= H - ${P} && x >= 0 && x <= W - ${P}
                         && !seen_before(ck, y, x, cy, cx, h);
                __global const float *p = g + clamp(y, 0, H - ${P}) * W + clamp(x, 0, W - ${P}) + lane;
                float s = 0.0f;
                for (int r = 0; r < ${P}; ++r) {
                    const float d = col[r] - p[r * W];
                    s = fma(d, d, s);
                }
                l_part[me][i][lane] = s;
                if (in) {
                    ${advance()}
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            {
                float s = 0.0f;
                for (int l = 0; l < ${P}; ++l)
                    s += l_part[me][lane][l];
                l_sum[me][lane] = s;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = 0; i < ${P}; ++i)
                if (bok[i]) {
                    const float d = l_sum[me][i];
                    ${list_insert("fr", Q, "d", "t", "by[i]", "bx[i]")}
                }
        }
% endif
        ${keep_frame()}
    }
    if (live && lane == 0) {
        ${write_results("best")}
    }
}
% endif
