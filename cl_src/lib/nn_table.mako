## The table of the n best candidates one work-item keeps for its reference patch
## (Davy-Ehret 4.1.1). Every access uses an index fixed when the template is rendered,
## so the table stays in registers: loops over the table are unrolled here, not by the
## OpenCL compiler.
##
## The table is the arrays `bd` (distances) and `bp` (packed candidate offsets, see
## pack_offset). The ordered kind keeps bd ascending (Algorithm 2); the unordered kind
## keeps the current maximum in `bmax` (Algorithm 3) and is sorted once at the end.
<%namespace name="mt" file="/lib/matches.mako"/>

## Candidate offsets relative to the reference (frame, row, column), each in [-127, 127],
## packed in one int: the table then holds one int per entry.
<%def name="pack_defines()">
#define PACK_OFFSET(dt, dy, dx) ((((dt) + 128) << 16) | (((dy) + 128) << 8) | ((dx) + 128))
#define OFFSET_T(code) (((code) >> 16) - 128)
#define OFFSET_Y(code) ((((code) >> 8) & 255) - 128)
#define OFFSET_X(code) (((code) & 255) - 128)
</%def>

<%def name="declare(n, kind)">
    float bd[${n}];
    int bp[${n}];
% for i in range(n):
    bd[${i}] = INFINITY;
    bp[${i}] = PACK_OFFSET(0, 0, 0);
% endfor
% if kind == "unordered":
    float bmax = INFINITY;
% endif
</%def>

## Offer candidate `pos` at distance `d` (both expressions without side effects).
<%def name="insert(n, kind, d, pos)">
% if kind == "ordered":
    if (${d} < bd[${n - 1}]) {
        ## Algorithm 2 without branches inside. On the sorted table, the new entry i is
        ## max(old[i-1], min(old[i], d)): old[i-1] if it is larger than d (shifted up),
        ## d at the first entry larger than d, old[i] below. Positions follow with selects.
        ## Going downwards, bd[i-1] and bd[i] still hold the old values when read.
% for i in range(n - 1, 0, -1):
        bp[${i}] = bd[${i - 1}] > ${d} ? bp[${i - 1}] : (bd[${i}] > ${d} ? ${pos} : bp[${i}]);
        bd[${i}] = fmax(bd[${i - 1}], fmin(bd[${i}], ${d}));
% endfor
        bp[0] = bd[0] > ${d} ? ${pos} : bp[0];
        bd[0] = fmin(bd[0], ${d});
    }
% else:
    if (${d} < bmax) {
        ## Algorithm 3: replace the first entry holding the maximum, then find the new maximum.
        bool done = false;
% for i in range(n):
        {
            const bool hit = !done & (bd[${i}] == bmax);
            bp[${i}] = hit ? ${pos} : bp[${i}];
            bd[${i}] = hit ? ${d} : bd[${i}];
            done = done | hit;
        }
% endfor
        bmax = bd[0];
% for i in range(1, n):
        bmax = bd[${i}] > bmax ? bd[${i}] : bmax;
% endfor
    }
% endif
</%def>

## The distance a candidate must beat to enter the table.
<%def name="threshold(n, kind)">${"bd[%d]" % (n - 1) if kind != "unordered" else "bmax"}</%def>

## Leave the table ascending by distance (the unordered kind is sorted by an odd-even
## transposition network: n rounds of fixed compare-exchanges).
<%def name="finish(n, kind)">
% if kind == "unordered":
% for r in range(n):
% for i in range(r % 2, n - 1, 2):
    {
        const bool swap = bd[${i}] > bd[${i + 1}];
        const float d0 = swap ? bd[${i + 1}] : bd[${i}];
        const float d1 = swap ? bd[${i}] : bd[${i + 1}];
        const int p0 = swap ? bp[${i + 1}] : bp[${i}];
        const int p1 = swap ? bp[${i}] : bp[${i + 1}];
        bd[${i}] = d0; bd[${i + 1}] = d1; bp[${i}] = p0; bp[${i + 1}] = p1;
    }
% endfor
% endfor
% endif
</%def>

## Write the table of the reference at (frame t, row ry, column rx), buffer coordinates,
## as absolute positions: (y, x), or (t, y, x) for video, in the layout of lib/matches.mako.
## `first` is the index of the reference's first entry in out_dist (mt.first).
<%def name="write(n, video, first, t, ry, rx)">
% for k in range(n):
    {
        const int code = bp[${k}];
        const int e = ${mt.entry_from(first, k)};
        ${mt.dist("out_dist", "e")} = bd[${k}];
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
