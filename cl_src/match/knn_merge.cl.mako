## The merge of the banded exhaustive kNN (clpatch/match/knn/banded.py): a query window's
## matches so far (`run`, from the reference bands before this one) and its matches in one
## more band (`band`) become the window's k best of both, on the device.
##
## Both lists of a grid point are sorted by (distance, candidate index). Every candidate of
## a later band has a larger global index than every candidate of the bands before it (the
## bands are consecutive ranges of candidate rows, or of columns for a one-row reference,
## and the index is row-major), so the merge takes the running entry on equal distances:
## the result is sorted by (distance, global index), the order of the unbanded search.
## The band's positions are local to the band: they are shifted by its origin.
##
## Rendered with: group (LX, work-items along the window's grid columns).
<%page args="group"/>
<%namespace name="mt" file="/lib/matches.mako"/>\
//
// knn_merge. Launch: global (cols rounded up to ${group}, rows), local (${group}, 1);
// work-item (j, i) merges grid point (i, j) of the window (rows x cols grid points).
// Arguments:
//   run_pos, run_dist    the running lists: point (i, j)'s entries at ((i * cols + j) * K
//                        + e), `run_count` of them (0: none, the window's first band; the
//                        buffers are then not read)
//   band_pos, band_dist  the band's Matches of the window: entries at ((i * cols + j) *
//                        band_count + e), positions (y, x) in the band
//   shift_y, shift_x     the band's origin in the reference
//   out_pos, out_dist    where the merged lists go: point (i, j)'s entries at
//                        ((out_base + i * out_row + j) * K + e), out_count of them
//                        (min(K, run_count + band_count)); out_base, out_row place the
//                        window in a larger grid (the whole result), or 0 and cols for a
//                        running list of the window's own
//   K                    entries between two grid points in the run and out buffers
//   rows, cols           the window's grid points
//
__kernel __attribute__((reqd_work_group_size(${group}, 1, 1)))
void knn_merge(__global const int *restrict run_pos, __global const float *restrict run_dist,
               const int run_count,
               __global const int *restrict band_pos,
               __global const float *restrict band_dist, const int band_count,
               const int shift_y, const int shift_x,
               __global int *restrict out_pos, __global float *restrict out_dist,
               const int out_count, const int out_base, const int out_row, const int K,
               const int rows, const int cols)
{
    const int j = get_global_id(0), i = get_global_id(1);
    if (j >= cols || i >= rows)
        return;
    const int point = ${mt.ref("i", "j", "cols")};
    const int out_ref = out_base + ${mt.ref("i", "j", "out_row")};
    int a = 0, b = 0;
    for (int e = 0; e < out_count; ++e) {
        const int at = ${mt.entry("out_ref", "K", "e")};
        const int ra = ${mt.entry("point", "K", "a")};
        const int bb = ${mt.entry("point", "band_count", "b")};
        // (an entry past its list's count is not read: the tests before it short-circuit)
        const bool from_run = b >= band_count
                              || (a < run_count
                                  && ${mt.dist("run_dist", "ra")} <= ${mt.dist("band_dist", "bb")});
        if (from_run) {
            ${mt.dist("out_dist", "at")} = ${mt.dist("run_dist", "ra")};
            ${mt.pos_y("out_pos", "at", 2)} = ${mt.pos_y("run_pos", "ra", 2)};
            ${mt.pos_x("out_pos", "at", 2)} = ${mt.pos_x("run_pos", "ra", 2)};
            ++a;
        } else {
            ${mt.dist("out_dist", "at")} = ${mt.dist("band_dist", "bb")};
            ${mt.pos_y("out_pos", "at", 2)} = ${mt.pos_y("band_pos", "bb", 2)} + shift_y;
            ${mt.pos_x("out_pos", "at", 2)} = ${mt.pos_x("band_pos", "bb", 2)} + shift_x;
            ++b;
        }
    }
}
