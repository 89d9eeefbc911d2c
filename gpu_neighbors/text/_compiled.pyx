# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3
"""The host's per-position loops in C (Cython), built at install where a C compiler is found;
`text.compiled` imports this module or falls back to the numpy passes that give the same
answers. Each function runs without the GIL, so encoder threads run on every core."""
from libc.stdint cimport int64_t, uint64_t
from libc.math cimport sqrt
from libc.stdlib cimport qsort

cdef uint64_t MULTIPLIER = 0x9E3779B97F4A7C15ULL  # key_index._MULTIPLIER: the same home slots


cdef inline int64_t _find(int64_t key, const int64_t[::1] dense, const int64_t[::1] slots,
                          const int64_t[::1] keys, int shift, int64_t mask) noexcept nogil:
    """`KeyIndex.find` of one key: its position in the sorted table, or -1."""
    cdef int64_t slot, position, size
    if dense.shape[0]:
        if key < 0 or key >= dense.shape[0] - 1:
            return -1
        return dense[key]
    if key < 0:
        return -1
    size = keys.shape[0] - 1
    slot = <int64_t>((<uint64_t>key * MULTIPLIER) >> shift)
    while True:
        position = slots[slot]
        if keys[position] == key:
            return position
        if position == size:
            return -1
        slot = (slot + 1) & mask


def char_walk(const int64_t[::1] padded, int64_t size, list lookups, int64_t[:, ::1] positions,
              int64_t[:, ::1] ids, int64_t[::1] counts):
    """`TfidfFeatures._char_walk` with its lookups, in one pass: for each order k (0 = bigrams)
    of `lookups` (each `KeyIndex.arrays()`), the positions of `padded` where an n-gram of the
    vocabulary starts, ascending, in positions[k, :counts[k]], and its id in ids[k, :counts[k]]."""
    cdef Py_ssize_t n = padded.shape[0], p, order, orders = len(lookups)
    cdef int64_t ident, following
    if orders != 4 or positions.shape[0] != 4 or ids.shape[0] != 4 or counts.shape[0] != 4:
        raise ValueError("char_walk takes four orders")
    if positions.shape[1] < n or ids.shape[1] < n:
        raise ValueError("char_walk's outputs hold fewer positions than the padded words")
    cdef const int64_t[::1] d0 = lookups[0][0], s0 = lookups[0][1], k0 = lookups[0][2]
    cdef const int64_t[::1] d1 = lookups[1][0], s1 = lookups[1][1], k1 = lookups[1][2]
    cdef const int64_t[::1] d2 = lookups[2][0], s2 = lookups[2][1], k2 = lookups[2][2]
    cdef const int64_t[::1] d3 = lookups[3][0], s3 = lookups[3][1], k3 = lookups[3][2]
    cdef int h0 = lookups[0][3], h1 = lookups[1][3], h2 = lookups[2][3], h3 = lookups[3][3]
    cdef int64_t m0 = lookups[0][4], m1 = lookups[1][4], m2 = lookups[2][4], m3 = lookups[3][4]
    cdef int64_t c0 = 0, c1 = 0, c2 = 0, c3 = 0
    with nogil:
        for p in range(n):
            ident = padded[p]
            if ident < 0:
                continue
            for order in range(4):
                if p + order + 1 >= n:
                    break
                following = padded[p + order + 1]
                if following < 0:
                    break
                if order == 0:
                    ident = _find(ident * size + following, d0, s0, k0, h0, m0)
                    if ident < 0:
                        break
                    positions[0, c0] = p
                    ids[0, c0] = ident
                    c0 += 1
                elif order == 1:
                    ident = _find(ident * size + following, d1, s1, k1, h1, m1)
                    if ident < 0:
                        break
                    positions[1, c1] = p
                    ids[1, c1] = ident
                    c1 += 1
                elif order == 2:
                    ident = _find(ident * size + following, d2, s2, k2, h2, m2)
                    if ident < 0:
                        break
                    positions[2, c2] = p
                    ids[2, c2] = ident
                    c2 += 1
                else:
                    ident = _find(ident * size + following, d3, s3, k3, h3, m3)
                    if ident < 0:
                        break
                    positions[3, c3] = p
                    ids[3, c3] = ident
                    c3 += 1
    counts[0], counts[1], counts[2], counts[3] = c0, c1, c2, c3


cdef int _ascending(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0], y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


cdef inline void _sort(int64_t* values, Py_ssize_t size) noexcept nogil:
    """Ascending, in place: insertion sort for the few values of most n-gram orders of a text,
    qsort for more."""
    cdef Py_ssize_t i, j
    cdef int64_t value
    if size > 48:
        qsort(values, size, sizeof(int64_t), _ascending)
        return
    for i in range(1, size):
        value = values[i]
        j = i - 1
        while j >= 0 and values[j] > value:
            values[j + 1] = values[j]
            j -= 1
        values[j + 1] = value


def count_rows(const int64_t[::1] rows, const int64_t[::1] features, const int64_t[::1] bounds,
               int64_t[::1] indptr, int64_t[::1] indices, int64_t[::1] counts):
    """`np.unique(rows * F + features, return_counts=True)` as CSR (F: any number above every
    feature), where rows[bounds[s]:bounds[s + 1]] ascends for every stream s and each stream's
    features lie above the stream before's (one n-gram order each): per text t, its distinct
    features ascending in indices[indptr[t]:indptr[t + 1]] and their occurrences in counts.
    indptr: one more than the texts; indices and counts: as long as rows. Each (text, stream)
    segment is sorted alone, in place (a few dozen values: no table, no global sort)."""
    cdef Py_ssize_t streams = bounds.shape[0] - 1, stream, t, i, start, stop, kept, total = 0
    cdef Py_ssize_t size = rows.shape[0], texts = indptr.shape[0] - 1
    cdef bint ordered = True
    if features.shape[0] != size or indices.shape[0] < size or counts.shape[0] < size or streams < 0:
        raise ValueError("count_rows takes rows and features alike, and outputs as long")
    if size and (bounds[0] != 0 or bounds[streams] != size):
        raise ValueError("count_rows' bounds do not cover the rows")
    cursor_array = bytearray(8 * max(streams, 1))
    cdef int64_t[::1] cursors = memoryview(cursor_array).cast("q")
    with nogil:
        for stream in range(streams):
            cursors[stream] = bounds[stream]
        indptr[0] = 0
        for t in range(texts):
            for stream in range(streams):
                start = cursors[stream]
                stop = start
                while stop < bounds[stream + 1] and rows[stop] == t:
                    indices[total + stop - start] = features[stop]
                    stop += 1
                cursors[stream] = stop
                if stop == start:
                    continue
                _sort(&indices[total], stop - start)
                if total > indptr[t] and indices[total] <= indices[total - 1]:
                    ordered = False  # a stream's features not above the one before's
                kept = total
                counts[kept] = 1
                for i in range(total + 1, total + stop - start):
                    if indices[i] == indices[kept]:
                        counts[kept] += 1
                    else:
                        kept += 1
                        indices[kept] = indices[i]
                        counts[kept] = 1
                total = kept + 1
            indptr[t + 1] = total
    if not ordered:
        raise ValueError("count_rows' streams do not hold ascending feature ranges")
    for stream in range(streams):
        if cursors[stream] != bounds[stream + 1]:
            raise ValueError("count_rows' rows do not ascend within a stream, or pass the texts")


def weigh_rows(const int64_t[::1] indptr, const int64_t[::1] indices, const int64_t[::1] counts,
               const double[::1] tf_of_count, const double[::1] idf, int64_t word_features, double[::1] values):
    """`TfidfFeatures._weighted` of CSR counts: each entry tf(count) x idf(feature)
    (`tf_of_count` indexed by count), each text's word block (features below `word_features`)
    and char block divided by its l2 norm, whose squares are summed in entry order: the same
    operations, in the same order, as numpy's passes (built with -ffp-contract=off: no fused
    multiply-adds)."""
    cdef Py_ssize_t texts = indptr.shape[0] - 1, t, i
    cdef double value, words, chars
    if values.shape[0] < indices.shape[0] or counts.shape[0] < indices.shape[0]:
        raise ValueError("weigh_rows' counts and values are shorter than its indices")
    with nogil:
        for t in range(texts):
            words = 0.0
            chars = 0.0
            for i in range(indptr[t], indptr[t + 1]):
                value = tf_of_count[counts[i]] * idf[indices[i]]
                values[i] = value
                if indices[i] < word_features:
                    words += value * value
                else:
                    chars += value * value
            words = sqrt(words)
            chars = sqrt(chars)
            for i in range(indptr[t], indptr[t + 1]):
                if indices[i] < word_features:
                    values[i] = values[i] / words
                else:
                    values[i] = values[i] / chars


def find_keys(const int64_t[::1] dense, const int64_t[::1] slots, const int64_t[::1] keys, int shift, int64_t mask,
              const int64_t[::1] asked, int64_t[::1] found):
    """`KeyIndex.find`: each asked key's position in the table the index (`KeyIndex.arrays()`)
    was made from, or -1, into `found`."""
    cdef Py_ssize_t i, size = asked.shape[0]
    if found.shape[0] != size:
        raise ValueError("find_keys' output is not as long as the keys asked")
    if not dense.shape[0] and not slots.shape[0]:
        raise ValueError("find_keys takes a dense table or hash slots")
    with nogil:
        for i in range(size):
            found[i] = _find(asked[i], dense, slots, keys, shift, mask)
