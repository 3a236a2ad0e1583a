## The k best candidates of one query as a bounded max-heap, for the exhaustive engines
## (kNN, NNF). Keys are (distance, candidate index) pairs ordered by distance, then by the
## smaller index: the project's one tie rule. The heap keeps the k smallest keys of
## everything pushed, whatever the order of the pushes, so every kernel variant and every
## device that computes the same distances returns the same matches, ties included.
##
## A heap is k entries hd[0..k) (distances) and hi[0..k) (indices) in one address space,
## owned by one work-item (no other work-item touches it while it runs). Entry 0 is the
## largest key: a caller keeps it in registers as its threshold and pushes only keys
## before it (`before`), then reloads it. Empty entries hold (INFINITY, INT_MAX).
##
## `functions(prefix, space)` emits, for heaps in address space `space`:
##   bool  <prefix>_before(float da, int ia, float db, int ib)   (da, ia) < (db, ib)
##   void  <prefix>_clear(space float *hd, space int *hi, int k)
##   void  <prefix>_replace(space float *hd, space int *hi, int k, float d, int i)
##         the root becomes (d, i), sifted down (call only when (d, i) is before the root)
##   void  <prefix>_sort(space float *hd, space int *hi, int k)
##         heapsort in place: ascending keys afterwards (no longer a heap)
<%def name="functions(prefix='topk', space='__global')">
inline bool ${prefix}_before(const float da, const int ia, const float db, const int ib)
{
    return da < db || (da == db && ia < ib);
}

void ${prefix}_clear(${space} float *hd, ${space} int *hi, const int k)
{
    for (int e = 0; e < k; ++e) {
        hd[e] = INFINITY;
        hi[e] = INT_MAX;
    }
}

// Sift (d, i) down from entry `at` of the heap of `size` entries.
void ${prefix}_sift(${space} float *hd, ${space} int *hi, const int size, int at,
                    const float d, const int i)
{
    for (;;) {
        int child = 2 * at + 1;
        if (child >= size)
            break;
        float cd = hd[child];
        int ci = hi[child];
        if (child + 1 < size) {
            const float rd = hd[child + 1];
            const int ri = hi[child + 1];
            if (${prefix}_before(cd, ci, rd, ri)) {
                child += 1;
                cd = rd;
                ci = ri;
            }
        }
        if (!${prefix}_before(d, i, cd, ci))
            break;
        hd[at] = cd;
        hi[at] = ci;
        at = child;
    }
    hd[at] = d;
    hi[at] = i;
}

void ${prefix}_replace(${space} float *hd, ${space} int *hi, const int k, const float d,
                       const int i)
{
    ${prefix}_sift(hd, hi, k, 0, d, i);
}

void ${prefix}_sort(${space} float *hd, ${space} int *hi, const int k)
{
    for (int end = k - 1; end > 0; --end) {
        const float d = hd[end];
        const int i = hi[end];
        hd[end] = hd[0];
        hi[end] = hi[0];
        ${prefix}_sift(hd, hi, end, 0, d, i);
    }
}
</%def>
