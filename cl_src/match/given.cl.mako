## Matches a caller gives a filter (`matches=`, clpatch/match/given.py): a check of their
## values and a copy of a block of them into the layout the filter's kernels read
## (lib/matches.mako), its first N of every reference's K entries.
##
## Rendered with: dim (2: positions (y, x), 3: (t, y, x)). Every size is an argument.
<%page args="dim"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
<%
    DIM = dim
    if DIM not in (2, 3):
        raise ValueError("dim must be 2 or 3")
%>
//
// check_matches. Launch: global (entries), any local size; work-item e checks entry e of
// the caller's matches (e < refs * K) and measures how far it lies from its reference.
// Arguments:
//   pos, dist       the caller's matches: refs references of K entries (lib/matches.mako),
//                   [frame][gy][gx][K]
//   entries, K      refs * K, entries per reference
//   ys, xs, gy, gx  the grid: top-left row of every grid row, column of every grid column
//   max_t, max_y, max_x   the largest valid frame, row and column of a top-left corner
//                   (frames - 1, rows - patch, cols - patch; max_t unused for images)
//   bad             two uints the caller zeroes first: bad[0] or-ed with 1: a position out of
//                   range, 2: a distance NaN, infinite or negative, 4: a distance below its
//                   predecessor's (the contract's ascending order); bad[1] the largest
//                   |row| or |column| offset of a position in range from its reference
__kernel void check_matches(__global const int *restrict pos,
                            __global const float *restrict dist, const int entries,
                            const int K, __global const int *restrict ys,
                            __global const int *restrict xs, const int gy, const int gx,
                            const int max_t, const int max_y, const int max_x,
                            __global volatile uint *bad)
{
    const int e = get_global_id(0);
    if (e >= entries)
        return;
    const int ref = e / K;
    const int col = ref % gx;
    const int row = (ref / gx) % gy;
    uint flags = 0;
% if DIM == 3:
    const int t = ${mt.pos_t("pos", "e", DIM)};
    if (t < 0 || t > max_t)
        flags |= 1u;
% endif
    const int y = ${mt.pos_y("pos", "e", DIM)};
    const int x = ${mt.pos_x("pos", "e", DIM)};
    if (y < 0 || y > max_y || x < 0 || x > max_x)
        flags |= 1u;
    else
        atomic_max(bad + 1, (uint)max(abs(y - ys[row]), abs(x - xs[col])));
    const float d = ${mt.dist("dist", "e")};
    if (!(d >= 0.0f) || isinf(d))
        flags |= 2u;
    else if (e % K != 0 && d < ${mt.dist("dist", "e - 1")})
        flags |= 4u;
    if (flags)
        atomic_or(bad, flags);
}

//
// copy_matches. Launch: global (count), any local size, count = nr * gy * gx * N; work-item
// i copies entry j = i % N of reference (f, row, col) of the block: (i / N) =
// (f * gy + row) * gx + col.
// Arguments:
//   src_pos, src_dist   the caller's matches: [frame][src_gy][gx][K] (positions dim ints)
//   K, src_gy, gx       entries per reference, grid rows and columns of the caller's matches
//   r0, g0              first frame and grid row of the block in them
//   nr, gy, N           frames and grid rows of the block, entries kept per reference
//                       (N <= K: the first N)
//   out_pos, out_dist   the filter's buffers: [frame][out_rows][gx][N]
//   out_rows, out_row0, out_f0   their grid rows, and where the block's first row and frame go
//   max_t, max_y, max_x as check_matches'; positions are clamped to them (the caller's
//                       buffer may have changed since it was checked: the filter's reads
//                       stay in the image whatever it holds)
//   count               nr * gy * gx * N
__kernel void copy_matches(__global const int *restrict src_pos,
                           __global const float *restrict src_dist, const int K,
                           const int src_gy, const int gx, const int r0, const int g0,
                           const int nr, const int gy, const int N,
                           __global int *restrict out_pos, __global float *restrict out_dist,
                           const int out_rows, const int out_row0, const int out_f0,
                           const int max_t, const int max_y, const int max_x, const int count)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    const int j = i % N;
    const int ref = i / N;
    const int col = ref % gx;
    const int rest = ref / gx;
    const int row = rest % gy;
    const int f = rest / gy;
    const int src_ref = ${mt.ref("g0 + row", "col", "gx", frame="r0 + f", gy="src_gy")};
    const int dst_ref = ${mt.ref("out_row0 + row", "col", "gx", frame="out_f0 + f", gy="out_rows")};
    const int s = ${mt.entry("src_ref", "K", "j")};
    const int d = ${mt.entry("dst_ref", "N", "j")};
% if DIM == 3:
    ${mt.pos_t("out_pos", "d", DIM)} = clamp(${mt.pos_t("src_pos", "s", DIM)}, 0, max_t);
% endif
    ${mt.pos_y("out_pos", "d", DIM)} = clamp(${mt.pos_y("src_pos", "s", DIM)}, 0, max_y);
    ${mt.pos_x("out_pos", "d", DIM)} = clamp(${mt.pos_x("src_pos", "s", DIM)}, 0, max_x);
    ${mt.dist("out_dist", "d")} = ${mt.dist("src_dist", "s")};
}
