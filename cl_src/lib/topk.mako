## The k best candidates of one query as a bounded max-heap, for the exhaustive engines
## (kNN). Keys are (distance, candidate index) pairs ordered by distance, then by the
## smaller index: the project's one tie rule. The heap keeps the k smallest keys of
## everything pushed, whatever the order of the pushes, so every kernel variant and every
## device that computes the same distances returns the same matches, ties included.
##
## Storage: one 64-bit key per entry, ordered as the pairs are: the distance's bits mapped
## to an unsigned integer of the same order (-0 taken as +0), above the index (>= 0). The
## heap is 4-ary: the children of entry j are 4j + 1 ... 4j + 4. Entry j lives in slot
## j + 3 of the heap's slots (TOPK_BASE = 3; slots 0..2 are free for the caller's use), so
## the four children of an entry are one aligned 32-byte group (slots 4(j + 1) ... 4(j + 1)
## + 3) read at once: a push costs log4(k) dependent reads of one memory sector each, where
## a binary heap of separate distance and index arrays cost log2(k) levels of four scattered
## reads. A heap's slots start at a multiple of 4 slots (32 bytes) of an aligned buffer;
## knn_plan.heap_slots(k) is their count, a multiple of 4 past the last group a heap of k
## entries reads.
##
## A heap is owned by one work-item while it runs. Entry 0 is the largest key: a caller
## keeps it in registers as its threshold (as a (distance, index) pair) and pushes only keys
## before it (`before`). Empty entries hold TOPK_EMPTY, the key of (INFINITY, INT_MAX).
## A list sorted descending is a heap too (the team top-k variants keep their lists so).
##
## `functions(prefix, space)` emits, for heaps in address space `space`:
##   bool  <prefix>_before(float da, int ia, float db, int ib)   (da, ia) < (db, ib)
##   ulong <prefix>_key(float d, int i)        the key of (d, i)
##   float <prefix>_dist(ulong key), int <prefix>_index(ulong key)   its parts back
##   ulong <prefix>_replace(space ulong *h, int k, ulong key)
##         the root becomes `key`, sifted down (call only when key is before the root);
##         returns the new root
##   ulong <prefix>_sift_below(space ulong *h, int size, int at, ulong key)
##         sifts key down from entry `at`, returning the value of entry `at` (not written)
##   void  <prefix>_sort(space ulong *h, int k)
##         heapsort in place: entries ascending afterwards (no longer a heap)
## (emit the address-space-free helpers once: `functions` with keys=True, the default)
<%def name="functions(prefix='topk', space='__global', keys=True)">
% if keys:
#define TOPK_BASE 3
#define TOPK_EMPTY ((ulong)0xff8000007fffffffUL)

inline bool ${prefix}_before(const float da, const int ia, const float db, const int ib)
{
    return da < db || (da == db && ia < ib);
}

inline ulong ${prefix}_key(const float d, const int i)
{
    const uint u = d == 0.0f ? 0u : as_uint(d);
    const uint o = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((ulong)o << 32) | (uint)i;
}

inline float ${prefix}_dist(const ulong key)
{
    const uint o = (uint)(key >> 32);
    return as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

inline int ${prefix}_index(const ulong key)
{
    return (int)(uint)key;
}
% endif

// Sift `key` down from entry `at` of the heap of `size` entries; returns the heap's root
// afterwards when at == 0.
ulong ${prefix}_sift(${space} ulong *h, const int size, int at, const ulong key)
{
    ulong top = key;
    for (int level = 0;; ++level) {
        const int first = 4 * at + 1;
        if (first >= size)
            break;
        const ulong4 c = ((${space} const ulong4 *)h)[at + 1];
        ulong best = c.x;
        int m = 0;
        if (first + 1 < size && c.y > best) {
            best = c.y;
            m = 1;
        }
        if (first + 2 < size && c.z > best) {
            best = c.z;
            m = 2;
        }
        if (first + 3 < size && c.w > best) {
            best = c.w;
            m = 3;
        }
        if (!(key < best))
            break;
        h[TOPK_BASE + at] = best;
        if (level == 0)
            top = best;
        at = first + m;
    }
    h[TOPK_BASE + at] = key;
    return top;
}

// Sift `key` down from entry `at` without writing entry `at`: the entries below it are
// updated, and the value entry `at` takes is returned (for a caller that keeps the top of
// the heap in registers).
ulong ${prefix}_sift_below(${space} ulong *h, const int size, const int at, const ulong key)
{
    const int first = 4 * at + 1;
    if (first >= size)
        return key;
    const ulong4 c = ((${space} const ulong4 *)h)[at + 1];
    ulong best = c.x;
    int m = 0;
    if (first + 1 < size && c.y > best) {
        best = c.y;
        m = 1;
    }
    if (first + 2 < size && c.z > best) {
        best = c.z;
        m = 2;
    }
    if (first + 3 < size && c.w > best) {
        best = c.w;
        m = 3;
    }
    if (!(key < best))
        return key;
    ${prefix}_sift(h, size, first + m, key);
    return best;
}

ulong ${prefix}_replace(${space} ulong *h, const int k, const ulong key)
{
    return ${prefix}_sift(h, k, 0, key);
}

void ${prefix}_sort(${space} ulong *h, const int k)
{
    for (int end = k - 1; end > 0; --end) {
        const ulong key = h[TOPK_BASE + end];
        h[TOPK_BASE + end] = h[TOPK_BASE];
        ${prefix}_sift(h, end, 0, key);
    }
}
</%def>
