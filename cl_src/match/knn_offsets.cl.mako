## Exhaustive patch kNN by offsets (L2 and L1): for one offset (dy, dx) between the query
## image and the reference, the distances of all query patches to the candidates at that
## offset are box sums of one difference image D(y, x) = sum over channels of
## (Q(y, x) - R(y + dy, x + dx))^2 (|.| for L1), so each (query, candidate) pair costs a few
## additions whatever the patch size. A work-group owns a TY x TX tile of query positions,
## keeps the tile's query pixels in local memory, and walks every offset that reaches a
## valid candidate for some position of the tile, G x OBX offsets (consecutive dy, dx) at a
## time:
##   A  column sums  c[o][r][x] = sum_{j<P} D(r + j, x), one work-item per (dx, column) for
##      the G dy (a reference pixel it loads serves G offsets), sliding down the TY rows;
##   B  box sums     b[o][r][x] = sum_{i<P} c[o][r][x + i], one work-item per (offset, row,
##      segment of the row), sliding along it;
##   C  each work-item (one query position) offers the pass's G x OBX distances to its heap.
## Distances here are sliding sums (exact for integer-valued images, within float32 rounding
## otherwise): knn_finish.cl.mako re-scores the k kept candidates with direct sums.
##
## Rendered with: patch (P), channels (C), metric ("l2" | "l1"), tile_x (TX), tile_y (TY),
## offsets (OBX: consecutive dx per pass), dys (G: consecutive dy per pass), topk (stage C's
## selection, below), team_rows (J, team variants: list entries per work-item), heap_local
## (heaps: their third level, 16 entries per work-item, in local memory; the plan sets it
## where it fits). The number of neighbours k is an argument (one program serves every k up
## to the program's bound).
##
## Stage C's top-k (`topk`):
##   0  heap: each work-item pushes its passing candidates one by one into its own 4-ary
##      max-heap of packed keys in global memory (lib/topk.mako): a log4(k)-deep chain of
##      dependent loads of one 32-byte group each per push;
##   1  group (portable): the heaps are lists sorted descending by key (entry 0 the largest:
##      still max-heaps, so knn_finish.cl.mako merges and sorts them unchanged). Each
##      work-item appends the pass's candidates before its threshold (entry 0) to its
##      buffer in global memory (B entries, no ordering); when the buffer could not take
##      another pass (and at the end of the launch) a team of work-items merges all of it
##      into the list at once: the list is loaded coalesced (ascending rank r = j * TEAM +
##      lane, in registers and staged in local memory), each buffered candidate's rank is
##      (candidates before it: its place in a sorted copy) + (entries before it: binary
##      search of the staged list), each entry's rank is r + (candidates before it: binary
##      search of the sorted copy), and whatever ranks below k is written back. The team is
##      the whole work-group, synchronised by barriers (flags in local memory);
##   2  warp: the same merges by teams of one warp (32 work-items, its own 32 positions),
##      with a ballot for the positions needing a merge: with `ptx` (NVIDIA) a vote.sync
##      ballot and bar.warp.sync; without, for work-groups of 32 work-items only, ballots
##      through local memory and barriers.
## Timed on the H100 (Table 4 case), both team variants were slower than the heaps at every
## k (knn_config.py has the numbers): the rule takes the heaps; the others are kept for
## tuning entries, for devices where the heaps' scattered global accesses cost more, and
## as the tested base of a faster merge.
## All three keep the k smallest keys (distance, candidate index) of the same candidates:
## the matches are identical.
<%page args="patch, channels, metric, tile_x, tile_y, offsets, dys=1, topk=0, team_rows=1, ptx=False, heap_local=False"/>
<%namespace name="tk" file="/lib/topk.mako"/>\
<%def name="merges(flag, topk, WG, TEAM, J, B)">\
// Every position of the team whose `${flag}` holds has its buffer merged into its list, one
// position at a time by the whole team; its threshold is then its list's new entry 0.
%   if topk == 2:
            uint todo = TEAM_BALLOT(${flag});
            if (todo != 0) {
                cnt[lid] = nb;
                TEAM_SYNC;
            }
            for (; todo != 0; todo &= todo - 1) {
                const int q = team * 32 + low_bit(todo);
                {
%   else:
            cnt[lid] = nb;
            need[lid] = ${flag};
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            for (int q = 0; q < ${WG}; ++q) {
                if (need[q]) {
%   endif
                    const int hq = hbase[q], bq = (hq / S) * ${B}, n = cnt[q];
                    __global ulong *hl = h + hq + TOPK_BASE;
                    __local float *ld = ld_all + team * ${J * TEAM};
                    __local int *li = li_all + team * ${J * TEAM};
                    __local float *cd = cd_all + team * ${B};
                    __local int *ci = ci_all + team * ${B};
                    __local float *sd = sd_all + team * ${B};
                    __local int *si = si_all + team * ${B};
                    for (int o = lane; o < n; o += ${TEAM}) {
                        cd[o] = bd[bq + o];
                        ci[o] = bx[bq + o];
                    }
                    // The list, ascending: rank r = j * ${TEAM} + lane at entry K - 1 - r.
                    float ad[${J}];
                    int ai[${J}];
                    for (int j = 0; j < ${J}; ++j) {
                        const int r = j * ${TEAM} + lane;
                        ad[j] = INFINITY;
                        ai[j] = INT_MAX;
                        if (r < K) {
                            const ulong key = hl[K - 1 - r];
                            ad[j] = topk_dist(key);
                            ai[j] = topk_index(key);
                        }
                        ld[r] = ad[j];
                        li[r] = ai[j];
                    }
                    TEAM_SYNC;
                    // A candidate's rank: candidates before it (its place in the sorted
                    // copy sd, si) plus entries before it (keys are distinct: a candidate is
                    // offered once; all of them are before the list's largest, the
                    // threshold they passed).
                    for (int o = lane; o < n; o += ${TEAM}) {
                        const float d = cd[o];
                        const int idx = ci[o];
                        int among = 0;
                        for (int o2 = 0; o2 < n; ++o2)
                            among += topk_before(cd[o2], ci[o2], d, idx) ? 1 : 0;
                        sd[among] = d;
                        si[among] = idx;
                        int lo = 0, top = ${J * TEAM};
                        while (lo < top) {
                            const int mid = (lo + top) >> 1;
                            if (topk_before(ld[mid], li[mid], d, idx))
                                lo = mid + 1;
                            else
                                top = mid;
                        }
                        const int rank = lo + among;
                        if (rank < K) {
                            hl[K - 1 - rank] = topk_key(d, idx);
                            if (rank == K - 1) {
                                thr_d[q] = d;
                                thr_i[q] = idx;
                            }
                        }
                    }
                    TEAM_SYNC;
                    // An entry moves up by the candidates before it (binary search of sd).
                    for (int j = 0; j < ${J}; ++j) {
                        const int r = j * ${TEAM} + lane;
                        int lo = 0, top = n;
                        while (lo < top) {
                            const int mid = (lo + top) >> 1;
                            if (topk_before(sd[mid], si[mid], ad[j], ai[j]))
                                lo = mid + 1;
                            else
                                top = mid;
                        }
                        const int rank = r + lo;
                        if (lo > 0 && rank < K) {
                            hl[K - 1 - rank] = topk_key(ad[j], ai[j]);
                            if (rank == K - 1) {
                                thr_d[q] = ad[j];
                                thr_i[q] = ai[j];
                            }
                        }
                    }
                    TEAM_SYNC;
                }
            }
            if (${flag})
                nb = 0;
            root_d = thr_d[lid];
            root_i = thr_i[lid];
</%def>
<%
    P, C, TX, TY, OBX, G = patch, channels, tile_x, tile_y, offsets, dys
    OB = OBX * G             # offsets per pass: G consecutive dy times OBX consecutive dx
    CW = TX + P - 1          # columns of the tile's pixel block
    RH = TY + P - 1          # rows of the tile's pixel block
    WG = TX * TY
    SEG = 2 if OB * TY * 2 <= WG else 1    # stage B: segments per row
    SL = TX // SEG                          # box sums per segment
    TEAM = 32 if topk == 2 else WG          # work-items merging one query's list
    TEAMS = WG // TEAM
    J = team_rows
    B = 32 * ((OB + 63) // 32)              # buffer entries per list (team variants)
    MASK_BITS = 32 if OB <= 32 else 64      # the heaps' mark of a pass's candidates
    MASK = "uint" if OB <= 32 else "ulong"
%>
//
// Launch: global (tiles_x * ${TX}, tiles_y * ${TY}, splits), local (${TX}, ${TY}, 1);
// work-item (lx, ly) of tile (bx, by) is the query position (qy0 + by * ${TY} + ly,
// bx * ${TX} + lx). The tile's offsets dy, in groups of ${G}, are shared among `splits`
// work-groups (layer s takes every splits-th group), each with its own heaps (split_stride
// slots apart), so small images still fill a large GPU; knn_finish.cl.mako merges them.
// A work-group visits its groups nearest dy = 0 first: on a self-search the best candidates
// come early, the heaps' thresholds fall fast and later candidates rarely enter.
// Arguments:
//   qimg, Hq, Wq        query image, planar float qimg[(c * Hq + y) * Wq + x]
//   rimg, Hr, Wr        reference image, the same layout (may be qimg)
//   grid_row, grid_col  per query position row / column: its grid index, or -1 off the grid
//   qy0                 first query position row of this launch (tiles_y tiles below it)
//   g0, g1, gx          grid rows [g0, g1) of the heaps' block (positions on other grid
//                       rows are computed, not offered), grid columns
//   dy_lo, dy_hi        offsets dy of this launch (a piece of the full range)
//   split_stride        heap slots between two splits' heap sets
//   K, S                neighbours kept per query, slots per heap
//   h                   heaps (lib/topk.mako), the grid point's at slot ((grid row - g0) *
//                       gx + grid col) * S (+ s * split_stride for split s); candidate
//                       index = cy * (Wr - P + 1) + cx
% if topk:
//   bd, bx              (team variants) candidate buffers, ${B} entries for the heap at
//                       slot a from entry a / S * ${B}; empty between launches
% endif
//
${tk.functions()}

#define P ${P}
% if topk:

// Candidate `o` of the pass (dy = dyb + o / ${OBX}, dx = dxb + o % ${OBX}) of the query at tile
// position (ly, lx), image position (qy, qx): false when it is no valid candidate, else
// its key in *d, *idx.
inline bool pass_candidate(__local const float *bs, const int o, const int ly, const int lx,
                           const int qy, const int qx, const int dyb, const int dxb,
                           const int dy1, const int Hc, const int Wc, float *d, int *idx)
{
    const int g = o / ${OBX}, ox = o - g * ${OBX};
    const int cy = qy + dyb + g, cx = qx + dxb + ox;
    if (dyb + g >= dy1 || cy < 0 || cy >= Hc || cx < 0 || cx >= Wc)
        return false;
    *d = bs[(o * ${TY} + ly) * ${TX} + lx];
    *idx = cy * Wc + cx;
    return true;
}

// The lowest set bit's index of a non-zero mask.
inline int low_bit(const uint m)
{
    return 31 - (int)clz(m & (0u - m));
}
%   if topk == 2 and ptx:

// The warp's mask of `flag` (inline PTX vote; every lane of the warp takes part).
inline uint team_ballot(const bool flag)
{
    uint mask;
    asm volatile("{ .reg .pred p; setp.ne.u32 p, %1, 0; vote.sync.ballot.b32 %0, p, 0xffffffff; }"
                 : "=r"(mask) : "r"((uint)flag));
    return mask;
}
#define TEAM_BALLOT(flag) team_ballot(flag)

// The warp's lanes meet (memory ordered around it, as __syncwarp).
// bar.warp.sync orders the lanes' memory accesses (global ones too) around it; the
// local fences keep the compiler from moving accesses across it.
#define TEAM_SYNC do { mem_fence(CLK_LOCAL_MEM_FENCE); asm volatile("bar.warp.sync -1;"); \
    mem_fence(CLK_LOCAL_MEM_FENCE); } while (0)
%   elif topk == 2:

// Without PTX the warp variant runs work-groups of one warp (32 work-items): the ballot
// goes through local memory, the team meets at barriers.
inline uint team_ballot(const bool flag, __local uint *bal, const int lane)
{
    bal[lane] = flag ? 1u << lane : 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint mask = 0u;
    for (int l = 0; l < 32; ++l)
        mask |= bal[l];
    barrier(CLK_LOCAL_MEM_FENCE);
    return mask;
}
#define TEAM_BALLOT(flag) team_ballot(flag, bal, lid)
#define TEAM_SYNC barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
%   else:

// The work-group (the team) meets.
#define TEAM_SYNC barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
%   endif
% endif

__kernel __attribute__((reqd_work_group_size(${TX}, ${TY}, 1)))
void knn_offsets(__global const float *restrict qimg, const int Hq, const int Wq,
                 __global const float *restrict rimg, const int Hr, const int Wr,
                 __global const int *restrict grid_row, __global const int *restrict grid_col,
                 const int qy0, const int g0, const int g1, const int gx, const int dy_lo,
                 const int dy_hi, const int split_stride, const int K, const int S,
                 __global ulong *restrict h
% if topk:
                 , __global float *restrict bd, __global int *restrict bx
% endif
                 )
{
    __local float qt[${C * RH * CW}];
    __local float cs[${OB * TY * CW}];
    __local float bs[${OB * TY * TX}];
% if topk == 0 and heap_local:
    // The heaps' entries 5 ... 20 (the third level), entry e of work-item l at
    // (e - 5) * ${WG} + l.
    __local ulong hl2[${16 * WG}];
% endif
% if topk:
    // Team variants: every position's threshold (its list's entry 0) and list, the lists
    // being merged (one per team, ascending), the positions needing a merge (group).
    __local float thr_d[${WG}];
    __local int thr_i[${WG}];
    __local int hbase[${WG}];
    __local float ld_all[${TEAMS * J * TEAM}];
    __local int li_all[${TEAMS * J * TEAM}];
    __local float cd_all[${TEAMS * B}];
    __local int ci_all[${TEAMS * B}];
    __local float sd_all[${TEAMS * B}];
    __local int si_all[${TEAMS * B}];
    __local int cnt[${WG}];
%   if topk == 1:
    __local int need[${WG}];
%   elif not ptx:
    __local uint bal[32];
%   endif
% endif
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int lid = ly * ${TX} + lx;
    const int bx0 = get_group_id(0) * ${TX};
    const int by0 = qy0 + get_group_id(1) * ${TY};
    const int Hc = Hr - P + 1, Wc = Wr - P + 1;        // candidate positions
    const int Hp = Hq - P + 1, Wp = Wq - P + 1;        // query positions
    const int plane = Hr * Wr;

    // The tile's query pixels (clamped at the image's edges: positions beyond them are
    // computed but never offered).
    for (int e = lid; e < ${C * RH * CW}; e += ${WG}) {
        const int c = e / ${RH * CW}, rest = e - c * ${RH * CW};
        const int r = rest / ${CW}, x = rest - r * ${CW};
        const int y = min(by0 + r, Hq - 1), xx = min(bx0 + x, Wq - 1);
        qt[e] = qimg[(c * Hq + y) * Wq + xx];
    }

    // This work-item's query and heap.
    const int qy = by0 + ly, qx = bx0 + lx;
    int heap = -1;
    if (qy < Hp && qx < Wp) {
        const int gr = grid_row[qy], gc = grid_col[qx];
        if (gr >= g0 && gr < g1 && gc >= 0)
            heap = ((gr - g0) * gx + gc) * S + get_group_id(2) * split_stride;
    }
    float root_d = INFINITY;
    int root_i = INT_MAX;
% if topk == 0:
    // The heap's entries 0 ... 4 (the root and its children) are kept in registers during
    // the launch, h0 ... h4, written back at its end: a push reads memory from the third
    // level of the heap on.
    ulong h0 = TOPK_EMPTY, h1 = TOPK_EMPTY, h2 = TOPK_EMPTY, h3 = TOPK_EMPTY,
          h4 = TOPK_EMPTY;
    if (heap >= 0) {
        __global const ulong *top = h + heap + TOPK_BASE;
        h0 = top[0];
        h1 = K > 1 ? top[1] : TOPK_EMPTY;
        h2 = K > 2 ? top[2] : TOPK_EMPTY;
        h3 = K > 3 ? top[3] : TOPK_EMPTY;
        h4 = K > 4 ? top[4] : TOPK_EMPTY;
        root_d = topk_dist(h0);
        root_i = topk_index(h0);
%   if heap_local:
        for (int e = 5; e < min(K, 21); ++e)
            hl2[(e - 5) * ${WG} + lid] = top[e];
%   endif
    }
% else:
    if (heap >= 0) {
        const ulong root = h[heap + TOPK_BASE];
        root_d = topk_dist(root);
        root_i = topk_index(root);
    }
% endif
% if topk:
    // Its buffer of candidates waiting for a merge (nb of them; emptied by the end).
    const int buf = heap >= 0 ? heap / S * ${B} : 0;
    int nb = 0;
%   if topk == 2:
    const int lane = lid & 31, team = lid >> 5;
%   else:
    const int lane = lid, team = 0;
%   endif
    hbase[lid] = heap;
    thr_d[lid] = root_d;
    thr_i[lid] = root_i;
% endif
    barrier(CLK_LOCAL_MEM_FENCE);

    // Offsets that reach a candidate from some position of the tile.
    const int y_hi = min(by0 + ${TY - 1}, Hp - 1), x_hi = min(bx0 + ${TX - 1}, Wp - 1);
    const int dy0 = max(dy_lo, -y_hi), dy1 = min(dy_hi, Hc - by0);
    const int dx0 = -x_hi, dx1 = Wc - bx0;
    // This split's offsets: groups of ${G} consecutive dy, every splits-th group of
    // [dy0, dy1), visited from the group nearest dy = 0 outwards (every split meets the
    // near offsets first).
    const int splits = get_num_groups(2), split = get_group_id(2);
% if topk == 0:
    // The splits of a query share a bound: a split whose heap is full has k candidates at
    // or below its k-th distance, so a candidate farther than the smallest k-th distance
    // of any split is not among the query's k best. Each split publishes its own by an
    // atomic minimum (the distance's order-preserving bits, lib/topk.mako) in the unused
    // slot 0 of split 0's heap, once per group of offsets dy.
    __global uint *shared_kth = 0;
    float bound_d = INFINITY;
    if (heap >= 0) {
#ifdef __ENDIAN_LITTLE__
        shared_kth = (__global uint *)(h + heap - split * split_stride) + 1;
#else
        shared_kth = (__global uint *)(h + heap - split * split_stride);
#endif
    }
% endif
    const int groups = (max(dy1 - dy0, 0) + ${G - 1}) / ${G};
    const int centre = clamp(-dy0 / ${G}, 0, max(groups - 1, 0));
    for (int t = 0; t < 2 * groups; ++t) {
        const int gi = centre + ((t & 1) ? (t + 1) / 2 : -(t / 2));
        if (gi < 0 || gi >= groups || gi % splits != split)
            continue;
        const int dyb = dy0 + gi * ${G};        // offsets dyb ... dyb + ${G - 1} (< dy1 used)
% if topk == 0:
        if (splits > 1 && heap >= 0) {
            // Publish this split's k-th distance, take the smallest published.
            const uint mine = (uint)(topk_key(root_d, 0) >> 32);
            const uint seen = atomic_min(shared_kth, mine);
            bound_d = topk_dist((ulong)min(seen, mine) << 32);
        }
% endif
        for (int dxb = dx0; dxb < dx1; dxb += ${OBX}) {
            // A: column sums of ${G} dy x ${OBX} dx offsets; a work-item takes one dx and
            // one column for all ${G} dy, so each pixel it loads serves ${G} offsets.
            for (int item = lid; item < ${OBX * CW}; item += ${WG}) {
                const int ox = item / ${CW}, x = item - ox * ${CW};
                __global const float *rcol = rimg + clamp(bx0 + x + dxb + ox, 0, Wr - 1);
                __local const float *qcol = qt + x;
                // Rows of the candidate block: clamped only where it leaves the image.
                const int ry0 = by0 + dyb;
                const bool inside = ry0 >= 0 && ry0 + ${RH + G - 1} <= Hr;
% for g in range(G):
%   for c in range(C):
                float q${g}_${c} = 0.0f;
%   endfor
% endfor
% for g in range(G):
                float ${", ".join("col%d_%d" % (g, r) for r in range(RH))};
% endfor
% for i in range(RH + G - 1):
                {
                    __global const float *rp = rcol + (inside ? ry0 + ${i} : clamp(ry0 + ${i}, 0, Hr - 1)) * Wr;
%   for c in range(C):
                    const float r${c} = rp[${c} * plane];
%   endfor
%   for g in reversed(range(1, G)):
%     for c in range(C):
                    q${g}_${c} = q${g - 1}_${c};
%     endfor
%   endfor
%   if i < RH:
%     for c in range(C):
                    q0_${c} = qcol[${c * RH * CW + i * CW}];
%     endfor
%   endif
%   for g in range(G):
%     if 0 <= i - g < RH:
                    col${g}_${i - g} = 0.0f;
%       for c in range(C):
                    {
                        const float t = q${g}_${c} - r${c};
%         if metric == "l2":
                        col${g}_${i - g} = mad(t, t, col${g}_${i - g});
%         else:
                        col${g}_${i - g} += fabs(t);
%         endif
                    }
%       endfor
%     endif
%   endfor
                }
% endfor
% for g in range(G):
                {
                    __local float *out = cs + (${g * OBX} + ox) * ${TY * CW} + x;
                    float run = ${" + ".join("col%d_%d" % (g, j) for j in range(P))};
                    out[0] = run;
%   for r in range(1, TY):
                    run += col${g}_${r + P - 1} - col${g}_${r - 1};
                    out[${r * CW}] = run;
%   endfor
                }
% endfor
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            // B: box sums, sliding along ${SEG} segment(s) of each row.
            for (int item = lid; item < ${OB * TY * SEG}; item += ${WG}) {
                const int o = item / ${TY * SEG}, rest = item - o * ${TY * SEG};
                const int r = rest / ${SEG}, x0 = (rest - r * ${SEG}) * ${SL};
                __local const float *row = cs + (o * ${TY} + r) * ${CW};
                float run = 0.0f;
                for (int i = 0; i < P; ++i)
                    run += row[x0 + i];
                __local float *out = bs + (o * ${TY} + r) * ${TX};
                out[x0] = run;
                for (int x = x0 + 1; x < x0 + ${SL}; ++x) {
                    run += row[x + P - 1] - row[x - 1];
                    out[x] = run;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
% if topk == 0 and OB <= 64:
            // C: the pass's candidates before this position's threshold are marked (bit o:
            // dy = dyb + o / ${OBX}, dx = dxb + o % ${OBX}) and pushed into its heap after the
            // scan, so that a warp runs as many pushes as its lane with the most, where
            // pushing during the scan would run one for every candidate any lane pushes.
            if (heap >= 0) {
                ${MASK} todo = 0;
                for (int g = 0; g < ${G}; ++g) {
                    const int cy = qy + dyb + g;
                    if (dyb + g >= dy1 || cy < 0 || cy >= Hc)
                        continue;
                    for (int ox = 0; ox < ${OBX}; ++ox) {
                        const int cx = qx + dxb + ox;
                        if (cx < 0 || cx >= Wc)
                            continue;
                        const float d = bs[((g * ${OBX} + ox) * ${TY} + ly) * ${TX} + lx];
                        if (topk_before(d, cy * Wc + cx, root_d, root_i) && d <= bound_d)
                            todo |= (${MASK})1 << (g * ${OBX} + ox);
                    }
                }
                while (todo != 0) {
                    const int o = ${MASK_BITS - 1} - (int)clz(todo & (0 - todo));
                    todo &= todo - 1;
                    const int g = o / ${OBX};
                    const float d = bs[(o * ${TY} + ly) * ${TX} + lx];
                    const int idx = (qy + dyb + g) * Wc + qx + dxb + o - g * ${OBX};
                    if (topk_before(d, idx, root_d, root_i)) {
                        // The root becomes the key, sifted down: through the registers'
                        // level, then (topk_sift_below) through memory.
                        const ulong key = topk_key(d, idx);
                        ulong best = h1;
                        int m = 0;
                        if (K > 2 && h2 > best) {
                            best = h2;
                            m = 1;
                        }
                        if (K > 3 && h3 > best) {
                            best = h3;
                            m = 2;
                        }
                        if (K > 4 && h4 > best) {
                            best = h4;
                            m = 3;
                        }
                        if (K == 1 || !(key < best)) {
                            h0 = key;
                        } else {
                            h0 = best;
%   if heap_local:
                            // Entry 1 + m's children, entries c0 ... c0 + 3, in local memory.
                            const int c0 = 4 * m + 5;
                            ulong v = key;
                            if (c0 < K) {
                                __local ulong *lc = hl2 + (c0 - 5) * ${WG} + lid;
                                ulong b2 = lc[0];
                                int m2 = 0;
                                if (c0 + 1 < K && lc[${WG}] > b2) {
                                    b2 = lc[${WG}];
                                    m2 = 1;
                                }
                                if (c0 + 2 < K && lc[${2 * WG}] > b2) {
                                    b2 = lc[${2 * WG}];
                                    m2 = 2;
                                }
                                if (c0 + 3 < K && lc[${3 * WG}] > b2) {
                                    b2 = lc[${3 * WG}];
                                    m2 = 3;
                                }
                                if (key < b2) {
                                    v = b2;
                                    lc[m2 * ${WG}] = topk_sift_below(h + heap, K, c0 + m2, key);
                                }
                            }
%   else:
                            const ulong v = topk_sift_below(h + heap, K, 1 + m, key);
%   endif
                            h1 = m == 0 ? v : h1;
                            h2 = m == 1 ? v : h2;
                            h3 = m == 2 ? v : h3;
                            h4 = m == 3 ? v : h4;
                        }
                        root_d = topk_dist(h0);
                        root_i = topk_index(h0);
                    }
                }
            }
% elif topk == 0:
            // C: offer the pass's candidates to this position's heap.
            if (heap >= 0) {
                for (int g = 0; g < ${G}; ++g) {
                    const int cy = qy + dyb + g;
                    if (dyb + g >= dy1 || cy < 0 || cy >= Hc)
                        continue;
                    for (int ox = 0; ox < ${OBX}; ++ox) {
                        const int cx = qx + dxb + ox;
                        if (cx < 0 || cx >= Wc)
                            continue;
                        const float d = bs[((g * ${OBX} + ox) * ${TY} + ly) * ${TX} + lx];
                        const int idx = cy * Wc + cx;
                        if (topk_before(d, idx, root_d, root_i) && d <= bound_d) {
                            const ulong root = topk_replace(h + heap, K, topk_key(d, idx));
                            root_d = topk_dist(root);
                            root_i = topk_index(root);
                        }
                    }
                }
            }
% else:
            // C: the candidates before this position's threshold go to its buffer; a full
            // buffer is merged into the list by its team (see the top).
            if (heap >= 0) {
                for (int o = 0; o < ${OB}; ++o) {
                    float d;
                    int idx;
                    if (pass_candidate(bs, o, ly, lx, qy, qx, dyb, dxb, dy1, Hc, Wc, &d, &idx)
                        && topk_before(d, idx, root_d, root_i)) {
                        bd[buf + nb] = d;
                        bx[buf + nb] = idx;
                        ++nb;
                    }
                }
            }
            ${merges("nb > %d" % (B - OB), topk, WG, TEAM, J, B)}
% endif
        }
    }
% if topk:
    // The buffers' last candidates (once every work-item is done with the last pass's
    // flags and counts).
%   if topk == 2:
    TEAM_SYNC;
%   else:
    barrier(CLK_LOCAL_MEM_FENCE);
%   endif
    ${merges("nb > 0", topk, WG, TEAM, J, B)}
% elif OB <= 64:
    if (heap >= 0) {
        __global ulong *top = h + heap + TOPK_BASE;
        top[0] = h0;
        if (K > 1)
            top[1] = h1;
        if (K > 2)
            top[2] = h2;
        if (K > 3)
            top[3] = h3;
        if (K > 4)
            top[4] = h4;
%   if heap_local:
        for (int e = 5; e < min(K, 21); ++e)
            top[e] = hl2[(e - 5) * ${WG} + lid];
%   endif
    }
% endif
}
