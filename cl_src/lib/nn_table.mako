## The table of the n best candidates one work-item keeps for its reference patch
## (Davy-Ehret 4.1.1). Every access uses an index fixed when the template is rendered,
## so the table stays in registers: loops over the table are unrolled here, not by the
## OpenCL compiler.
##
## The table is the array `bk` of n keys, one 64-bit integer per entry: the distance's
## float bits in the high half, the packed candidate offset (see pack_defines) in the low
## half. Distances are never negative (sums of squares or absolute values, +0 at least), so
## their bits order like the floats and one unsigned comparison orders the keys by
## (distance, packed offset): equal distances (common on integer-valued images, whose
## distances are exact integers in float) go to the candidate of smaller offset (dt, dy, dx)
## in lexicographic order, i.e. the smaller (t, y, x) of the candidate's top-left corner in
## raster order. This is the project's one tie rule (DESIGN.md, tests/reference/search.py):
## the table keeps the n smallest keys whatever the order the candidates are offered in, so
## every variant, work-group shape, batch and table kind gives the same matches. The
## ordered kind keeps the keys ascending (Algorithm 2); the unordered kind keeps the largest
## key in `kmax` (Algorithm 3) and is sorted once at the end.
<%namespace name="mt" file="/lib/matches.mako"/>

## Candidate offsets relative to the reference (frame, row, column), each in [-127, 127],
## packed in one int, the low half of a table key. Each field is stored biased
## by 128 (1 ... 255), so comparing two codes as ints compares (dt, dy, dx) lexicographically.
<%def name="pack_defines()">
#define PACK_OFFSET(dt, dy, dx) ((((dt) + 128) << 16) | (((dy) + 128) << 8) | ((dx) + 128))
#define OFFSET_T(code) (((code) >> 16) - 128)
#define OFFSET_Y(code) ((((code) >> 8) & 255) - 128)
#define OFFSET_X(code) (((code) & 255) - 128)
// Table keys: distance bits (high half) and packed offset (low half); see the file's header.
#define NN_KEY(d, code) (((ulong)as_uint(d) << 32) | (ulong)(uint)(code))
#define NN_DIST(key) as_float((uint)((key) >> 32))
#define NN_CODE(key) ((int)(uint)(key))
</%def>

<%def name="declare(n, kind)">
    ulong bk[${n}];
% for i in range(n):
    bk[${i}] = NN_KEY(INFINITY, PACK_OFFSET(0, 0, 0));
% endfor
% if kind == "unordered":
    ulong kmax = NN_KEY(INFINITY, PACK_OFFSET(0, 0, 0));
% endif
</%def>

## Offer candidate `pos` at distance `d` (both expressions without side effects).
<%def name="insert(n, kind, d, pos)">
    {
        const ulong key_ = NN_KEY(${d}, ${pos});
% if kind == "ordered":
        if (key_ < bk[${n - 1}]) {
            ## Algorithm 2 without branches inside. The table is sorted, so after_i (old
            ## entry i comes after the new key) is false up to some entry and true from there
            ## on. The new entry i is old[i-1] where after_{i-1} (shifted up), the new key
            ## where after_i alone (its place), old[i] below.
% for i in range(n):
            const bool after${i} = key_ < bk[${i}];
% endfor
            ## Going downwards, bk[i-1] and bk[i] still hold the old keys when read.
% for i in range(n - 1, 0, -1):
            bk[${i}] = after${i - 1} ? bk[${i - 1}] : (after${i} ? key_ : bk[${i}]);
% endfor
            bk[0] = after0 ? key_ : bk[0];
        }
% else:
        if (key_ < kmax) {
            ## Algorithm 3: replace the entry holding the largest key (the first one while
            ## empty entries share it), then find the new largest key.
            bool done = false;
% for i in range(n):
            {
                const bool hit = !done & (bk[${i}] == kmax);
                bk[${i}] = hit ? key_ : bk[${i}];
                done = done | hit;
            }
% endfor
            kmax = bk[0];
% for i in range(1, n):
            kmax = max(kmax, bk[${i}]);
% endfor
        }
% endif
    }
</%def>

## The distance a candidate must not exceed to enter the table: a cheap pre-test on the
## distance alone (a candidate at exactly this distance may still lose on the tie rule,
## which insert() decides).
<%def name="threshold(n, kind)">NN_DIST(${"bk[%d]" % (n - 1) if kind != "unordered" else "kmax"})</%def>

## Leave the table ascending. The unordered kind is sorted by Batcher's odd-even merge sort
## network for the next power of two (comparators touching an entry past n dropped: those
## entries would hold +inf). 63 compare-exchanges for n = 16 where an odd-even transposition
## network takes 120; and that one, after Algorithm 3's loop, crashed Intel's CPU compiler
## (OpenCL runtime 2026.22, its Machine LICM pass) for n = 16.
<%def name="finish(n, kind)">
% if kind == "unordered":
% for i, j in merge_sort_network(n):
    {
        const ulong k0 = min(bk[${i}], bk[${j}]);
        const ulong k1 = max(bk[${i}], bk[${j}]);
        bk[${i}] = k0; bk[${j}] = k1;
    }
% endfor
% endif
</%def>

<%!
def merge_sort_network(n):
    """Compare-exchange pairs (i, j), i < j < n, of Batcher's odd-even merge sort: applied
    in order, they sort any n values ascending."""
    size = 1
    while size < n:
        size *= 2
    pairs = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    a, b = i + j, i + j + k
                    if a // (2 * p) == b // (2 * p) and b < n:
                        pairs.append((a, b))
            k //= 2
        p *= 2
    return pairs
%>

## Write the table of the reference at (frame t, row ry, column rx), buffer coordinates,
## as absolute positions: (y, x), or (t, y, x) for video, in the layout of lib/matches.mako.
## `first` is the index of the reference's first entry in out_dist (mt.first).
<%def name="write(n, video, first, t, ry, rx)">
% for k in range(n):
    {
        const int code = NN_CODE(bk[${k}]);
        const int e = ${mt.entry_from(first, k)};
        ${mt.dist("out_dist", "e")} = NN_DIST(bk[${k}]);
% if video:
        ${mt.pos_t("out_pos", "e", 3)} = frame_base + ${t} + OFFSET_T(code);
        ${mt.pos_y("out_pos", "e", 3)} = band_y0 + ${ry} + OFFSET_Y(code);
        ${mt.pos_x("out_pos", "e", 3)} = ${rx} + OFFSET_X(code);
% else:
        ${mt.pos_y("out_pos", "e", 2)} = band_y0 + ${ry} + OFFSET_Y(code);
        ${mt.pos_x("out_pos", "e", 2)} = ${rx} + OFFSET_X(code);
% endif
    }
% endfor
</%def>
