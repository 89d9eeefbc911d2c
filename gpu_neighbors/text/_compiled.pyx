# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3
"""The host's per-position loops in C (Cython), built at install where a C compiler is found;
`text.compiled` imports this module or falls back to the numpy passes that give the same
answers. Each function runs without the GIL, so encoder threads run on every core."""
from libc.stdint cimport int64_t, uint64_t
from libc.math cimport sqrt
from libc.stdlib cimport qsort

cdef uint64_t MULTIPLIER = 0x9E3779B97F4A7C15ULL  # key_index._MULTIPLIER: the same home slots


cdef inline const int64_t* _start(const int64_t[::1] values) noexcept nogil:
    return &values[0] if values.shape[0] else NULL


cdef inline int64_t _find(int64_t key, const int64_t* dense, int64_t dense_size, const int64_t* slots,
                          const int64_t* keys, int64_t keys_size, int shift, int64_t mask) noexcept nogil:
    """`KeyIndex.find` of one key in one index (`KeyIndex.arrays()`): its position in the
    sorted table, or -1."""
    cdef int64_t slot, position
    if dense_size:
        if key < 0 or key >= dense_size - 1:
            return -1
        return dense[key]
    if key < 0:
        return -1
    slot = <int64_t>((<uint64_t>key * MULTIPLIER) >> shift)
    while True:
        position = slots[slot]
        if keys[position] == key:
            return position
        if position == keys_size - 1:
            return -1
        slot = (slot + 1) & mask


def char_walk(const int64_t[::1] padded, int64_t size, const int64_t[::1] dense, const int64_t[::1] slots,
              const int64_t[::1] keys, const int64_t[:, ::1] bounds, int64_t[:, ::1] positions,
              int64_t[:, ::1] ids, int64_t[::1] counts):
    """`TfidfFeatures._char_walk` with its lookups, in one pass: for each order k (0 = bigrams),
    the positions of `padded` where an n-gram of the vocabulary starts, ascending, in
    positions[k, :counts[k]], and its id in ids[k, :counts[k]]. Each order's index
    (`KeyIndex.arrays()`) lies in the concatenated `dense`, `slots` and `keys`: bounds[k] holds
    its dense start and size, slots start, keys start and size, shift and mask."""
    cdef Py_ssize_t n = padded.shape[0], p, order, orders = bounds.shape[0]
    cdef int64_t ident, following
    if bounds.shape[1] != 7 or positions.shape[0] != orders or ids.shape[0] != orders or counts.shape[0] != orders:
        raise ValueError("char_walk takes seven bounds and an output row per order")
    if positions.shape[1] < n or ids.shape[1] < n:
        raise ValueError("char_walk's outputs hold fewer positions than the padded words")
    for order in range(orders):
        if (bounds[order, 0] + bounds[order, 1] > dense.shape[0] or bounds[order, 3] + bounds[order, 4] > keys.shape[0]
                or (not bounds[order, 1] and not bounds[order, 4])):
            raise ValueError("char_walk's bounds pass its tables, or name neither a dense table nor a hash")
        counts[order] = 0
    cdef const int64_t* dense_start = _start(dense)
    cdef const int64_t* slots_start = _start(slots)
    cdef const int64_t* keys_start = _start(keys)
    with nogil:
        for p in range(n):
            ident = padded[p]
            if ident < 0:
                continue
            for order in range(orders):
                if p + order + 1 >= n:
                    break
                following = padded[p + order + 1]
                if following < 0:
                    break
                ident = _find(ident * size + following, dense_start + bounds[order, 0], bounds[order, 1],
                              slots_start + bounds[order, 2], keys_start + bounds[order, 3], bounds[order, 4],
                              <int>bounds[order, 5], bounds[order, 6])
                if ident < 0:
                    break
                positions[order, counts[order]] = p
                ids[order, counts[order]] = ident
                counts[order] += 1


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
            found[i] = _find(asked[i], _start(dense), dense.shape[0], _start(slots), _start(keys), keys.shape[0],
                             shift, mask)


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


def word_ids(const int64_t[::1] char_ids, const int64_t[::1] starts, const int64_t[::1] lengths, int64_t size,
             const int64_t[::1] ends, const int64_t[:, ::1] end_bounds, const int64_t[::1] dense,
             const int64_t[::1] slots, const int64_t[::1] keys, const int64_t[:, ::1] bounds, int64_t[::1] found):
    """`TfidfFeatures._unigram_ids`: each token's word id (-1: not a vocabulary word), walked
    character by character through the vocabulary's trie. A token is char_ids[starts[t]:starts[t] +
    lengths[t]] (alphabet ids, -1 unknown); the word ending at depth d's nodes is in `ends` at
    end_bounds[d - 1] (start, size); the nodes of depth d + 1 are found from (node * size +
    character) in index d - 1 of the concatenated `dense`, `slots`, `keys` (`bounds`, as
    `char_walk`'s)."""
    cdef Py_ssize_t tokens = starts.shape[0], t, depths = end_bounds.shape[0], depth
    cdef int64_t node, following
    if lengths.shape[0] != tokens or found.shape[0] != tokens:
        raise ValueError("word_ids takes a start, a length and an output per token")
    if end_bounds.shape[1] != 2 or bounds.shape[1] != 7 or bounds.shape[0] < depths - 1:
        raise ValueError("word_ids takes an end table per depth and an index per depth past the first")
    for depth in range(depths):
        if end_bounds[depth, 0] + end_bounds[depth, 1] > ends.shape[0]:
            raise ValueError("word_ids' end bounds pass its table")
    for depth in range(depths - 1):
        if bounds[depth, 0] + bounds[depth, 1] > dense.shape[0] or bounds[depth, 3] + bounds[depth, 4] > keys.shape[0]:
            raise ValueError("word_ids' bounds pass its tables")
    for t in range(tokens):
        if lengths[t] < 1 or starts[t] < 0 or starts[t] + lengths[t] > char_ids.shape[0]:
            raise ValueError("word_ids' tokens pass the characters")
    cdef const int64_t* dense_start = _start(dense)
    cdef const int64_t* slots_start = _start(slots)
    cdef const int64_t* keys_start = _start(keys)
    with nogil:
        for t in range(tokens):
            found[t] = -1
            if not depths:
                continue
            node = char_ids[starts[t]]
            depth = 1
            while True:
                if lengths[t] == depth:
                    if node >= 0 and node < end_bounds[depth - 1, 1]:
                        found[t] = ends[end_bounds[depth - 1, 0] + node]
                    break
                if node < 0 or depth == depths:
                    break
                following = char_ids[starts[t] + depth]
                if following < 0:
                    break
                node = _find(node * size + following, dense_start + bounds[depth - 1, 0], bounds[depth - 1, 1],
                             slots_start + bounds[depth - 1, 2], keys_start + bounds[depth - 1, 3],
                             bounds[depth - 1, 4], <int>bounds[depth - 1, 5], bounds[depth - 1, 6])
                depth += 1


def pad_words(const int64_t[::1] char_ids, const int64_t[::1] starts, const int64_t[::1] lengths,
              const int64_t[::1] texts, int64_t space_id, int64_t[::1] padded, int64_t[::1] text_of_position):
    """`tfidf._padded_words` and each padded position's text, in one pass: word r (characters
    char_ids[starts[r]:starts[r] + lengths[r]], of text texts[r]) becomes " w " in alphabet ids
    followed by a -1 separator, all words concatenated."""
    cdef Py_ssize_t words = starts.shape[0], r, i, position = 0, total = 0
    if lengths.shape[0] != words or texts.shape[0] != words:
        raise ValueError("pad_words takes a start, a length and a text per word")
    for r in range(words):
        if lengths[r] < 0 or starts[r] < 0 or starts[r] + lengths[r] > char_ids.shape[0]:
            raise ValueError("pad_words' words pass the characters")
        total += lengths[r] + 3
    if padded.shape[0] != total or text_of_position.shape[0] != total:
        raise ValueError("pad_words' outputs are not the padded words' length")
    with nogil:
        for r in range(words):
            padded[position] = space_id
            for i in range(lengths[r]):
                padded[position + 1 + i] = char_ids[starts[r] + i]
            padded[position + lengths[r] + 1] = space_id
            padded[position + lengths[r] + 2] = -1
            for i in range(lengths[r] + 3):
                text_of_position[position + i] = texts[r]
            position += lengths[r] + 3
