# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3
"""The host's per-position loops in C (Cython), built at install where a C compiler is found;
`text.compiled` imports this module or falls back to the numpy passes that give the same
answers. Each function runs without the GIL, so encoder threads run on every core."""
from libc.stdint cimport int64_t, uint64_t
from libc.math cimport sqrt
from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.stdlib cimport calloc, free, malloc, qsort
from libc.string cimport memcmp
from libc.math cimport floor

cdef uint64_t MULTIPLIER = 0x9E3779B97F4A7C15ULL  # key_index._MULTIPLIER: the same home slots


cdef inline const int64_t* _start(const int64_t[::1] values) noexcept nogil:
    return &values[0] if values.shape[0] else NULL


cdef inline int64_t* _start_mutable(int64_t[::1] values) noexcept nogil:
    return &values[0] if values.shape[0] else NULL


cdef inline double* _start_mutable_double(double[::1] values) noexcept nogil:
    return &values[0] if values.shape[0] else NULL


cdef inline const double* _start_double(const double[::1] values) noexcept nogil:
    return &values[0] if values.shape[0] else NULL


cdef inline int64_t _find(int64_t key, const int64_t* dense, int64_t dense_size, const int64_t* slots,
                          const int64_t* keys, int64_t keys_size, int shift, int64_t mask) noexcept nogil:
    """`KeyIndex.find` of one key in one index (`KeyIndex.arrays()`): its position in the
    sorted table, or -1."""
    cdef int64_t slot, position
    if dense_size:  # a negative key or one past the table reads its last slot, -1 (`_dense_ends`), without a branch
        return dense[min(<uint64_t>key, <uint64_t>(dense_size - 1))]
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


cdef _dense_ends(const int64_t[::1] dense, int64_t start, int64_t size):
    """ValueError unless the dense table dense[start:start + size] (none where size is 0) ends
    in -1, which `_find` reads for every key outside it."""
    if size and dense[start + size - 1] != -1:
        raise ValueError("a dense key table does not end in -1")


def find_keys(const int64_t[::1] dense, const int64_t[::1] slots, const int64_t[::1] keys, int shift, int64_t mask,
              const int64_t[::1] asked, int64_t[::1] found):
    """`KeyIndex.find`: each asked key's position in the table the index (`KeyIndex.arrays()`)
    was made from, or -1, into `found`."""
    cdef Py_ssize_t i, size = asked.shape[0]
    if found.shape[0] != size:
        raise ValueError("find_keys' output is not as long as the keys asked")
    if not dense.shape[0] and not slots.shape[0]:
        raise ValueError("find_keys takes a dense table or hash slots")
    _dense_ends(dense, 0, dense.shape[0])
    with nogil:
        for i in range(size):
            found[i] = _find(asked[i], _start(dense), dense.shape[0], _start(slots), _start(keys), keys.shape[0],
                             shift, mask)


cdef inline bint _insertion_sort(int64_t* values, Py_ssize_t size, Py_ssize_t most) noexcept nogil:
    """Ascending, in place, by insertion; False, and the values left in some order, once they
    have moved more than `most` places in all."""
    cdef Py_ssize_t i, j, moves = 0
    cdef int64_t value
    for i in range(1, size):
        value = values[i]
        j = i - 1
        while j >= 0 and values[j] > value:
            values[j + 1] = values[j]
            j -= 1
        values[j + 1] = value
        moves += i - 1 - j
        if moves > most:
            return False
    return True


cdef void _radix_sort(int64_t* values, Py_ssize_t size, int64_t* spare) noexcept nogil:
    """Ascending, in place, in linear time: a stable counting sort per byte of (value - least),
    least significant first, as many bytes as the range takes (`spare`: room for `size`)."""
    cdef Py_ssize_t i, digit
    cdef int64_t least = values[0], most = values[0]
    cdef uint64_t span
    cdef Py_ssize_t[256] starts
    cdef Py_ssize_t position, count
    cdef int shift = 0
    cdef int64_t* swap
    for i in range(size):
        least = min(least, values[i])
        most = max(most, values[i])
    span = <uint64_t>(most - least)
    while span >> shift:
        for digit in range(256):
            starts[digit] = 0
        for i in range(size):
            starts[((<uint64_t>(values[i] - least)) >> shift) & 255] += 1
        position = 0
        for digit in range(256):
            count = starts[digit]
            starts[digit] = position
            position += count
        for i in range(size):
            digit = ((<uint64_t>(values[i] - least)) >> shift) & 255
            spare[starts[digit]] = values[i]
            starts[digit] += 1
        swap = values
        values = spare
        spare = swap
        shift += 8
    if (shift // 8) % 2:  # the sorted values are in the spare room: back into place
        for i in range(size):
            spare[i] = values[i]


cdef void _bucket_sort(int64_t* values, Py_ssize_t size, int64_t* spare) noexcept nogil:
    """Ascending, in place, for up to 256 values: dealt into as many buckets as values by their
    top bits (`spare`: room for `size`), then an insertion sort, which moves each value within
    its bucket only (at worst, every value in one bucket, 256^2 / 4 moves)."""
    cdef Py_ssize_t i, bucket, position, count, buckets = 1
    cdef Py_ssize_t[257] starts
    cdef int64_t least = values[0], most = values[0]
    cdef int shift = 0, bits = 0
    for i in range(size):
        least = min(least, values[i])
        most = max(most, values[i])
    while buckets < size:
        buckets <<= 1
        bits += 1
    while (<uint64_t>(most - least)) >> shift >= <uint64_t>buckets:
        shift += 1
    for bucket in range(buckets):
        starts[bucket] = 0
    for i in range(size):
        starts[(<uint64_t>(values[i] - least)) >> shift] += 1
    position = 0
    for bucket in range(buckets):
        count = starts[bucket]
        starts[bucket] = position
        position += count
    for i in range(size):
        bucket = (<uint64_t>(values[i] - least)) >> shift
        spare[starts[bucket]] = values[i]
        starts[bucket] += 1
    for i in range(size):
        values[i] = spare[i]
    _insertion_sort(values, size, size * size)  # never past n(n - 1) / 2 moves


cdef inline void _sort(int64_t* values, Py_ssize_t size, int64_t* spare) noexcept nogil:
    """Ascending, in place, in time linear in the values (no input is quadratic; glibc's qsort,
    with its comparison callback, cost 30 ns a value here): an insertion sort for a dozen, a
    bucket pass then an insertion sort for most of a text's n-gram orders, a radix sort for
    more."""
    if size <= 12:
        _insertion_sort(values, size, size * size)  # never past n(n - 1) / 2 moves
    elif size <= 256:
        _bucket_sort(values, size, spare)
    else:
        _radix_sort(values, size, spare)


cdef inline int64_t _weighed_row(const int64_t* indices, const double* counts, Py_ssize_t size,
                                 const double* tf_of_count, Py_ssize_t table, const double* idf, Py_ssize_t features,
                                 int64_t word_features, double* values) noexcept nogil:
    """`weigh_rows` of one row: 0 once weighed; a count past the table, plus one; or -1 where a
    count is below one or a feature passes the idf."""
    cdef Py_ssize_t i, count
    cdef int64_t feature
    cdef double value, words = 0.0, chars = 0.0
    for i in range(size):
        count = <Py_ssize_t>counts[i]
        feature = indices[i]
        if count < 1 or feature < 0 or feature >= features:
            return -1
        if count >= table:
            return count + 1
        value = tf_of_count[count] * idf[feature]
        values[i] = value
        if feature < word_features:
            words += value * value
        else:
            chars += value * value
    words = sqrt(words)
    chars = sqrt(chars)
    for i in range(size):
        if indices[i] < word_features:
            values[i] = values[i] / words
        else:
            values[i] = values[i] / chars
    return 0


cdef _check_rows(const int64_t[::1] indptr, Py_ssize_t entries, str name):
    cdef Py_ssize_t t
    for t in range(indptr.shape[0] - 1):
        if indptr[t] < 0 or indptr[t + 1] < indptr[t] or indptr[t + 1] > entries:
            raise ValueError(f"{name}'s rows pass its entries")


def weigh_rows(const int64_t[::1] indptr, const int64_t[::1] indices, const double[::1] counts,
               const double[::1] tf_of_count, const double[::1] idf, int64_t word_features, double[::1] values):
    """`TfidfFeatures._weighted` of CSR counts: each entry tf(count) x idf(feature)
    (`tf_of_count` indexed by count), each text's word block (features below `word_features`)
    and char block divided by its l2 norm, whose squares are summed in entry order: the same
    operations, in the same order, as numpy's passes (built with -ffp-contract=off: no fused
    multiply-adds). Returns 0, or a count past the table, plus one: the table the caller makes
    longer before calling again (the caller need not find the largest count first)."""
    cdef Py_ssize_t texts = indptr.shape[0] - 1, t
    cdef int64_t past = 0
    if values.shape[0] < indices.shape[0] or counts.shape[0] < indices.shape[0]:
        raise ValueError("weigh_rows' counts and values are shorter than its indices")
    _check_rows(indptr, indices.shape[0], "weigh_rows")
    if not indices.shape[0]:
        return 0
    with nogil:
        for t in range(texts):
            past = _weighed_row(&indices[0] + indptr[t], &counts[0] + indptr[t], indptr[t + 1] - indptr[t],
                                _start_double(tf_of_count), tf_of_count.shape[0], _start_double(idf), idf.shape[0],
                                word_features, &values[0] + indptr[t])
            if past:
                break
    if past < 0:
        raise ValueError("weigh_rows' counts are below one, or its features pass the idf")
    return past


cdef struct Index:
    # One `KeyIndex.arrays()`, as pointers into the concatenated tables (`key_index.concatenated`).
    const int64_t* dense
    int64_t dense_size
    const int64_t* slots
    const int64_t* keys
    int64_t keys_size
    int shift
    int64_t mask


cdef inline int64_t _look(const Index* index, int64_t key) noexcept nogil:
    return _find(key, index.dense, index.dense_size, index.slots, index.keys, index.keys_size, index.shift,
                 index.mask)


cdef Index* _indexes(const int64_t[::1] dense, const int64_t[::1] slots, const int64_t[::1] keys,
                     const int64_t[:, ::1] bounds) except NULL:
    """Each row of `bounds` (`key_index.concatenated`: dense start and size, slots start, keys
    start and size, shift, mask) as an `Index` into the concatenated tables (malloc'd: the
    caller frees it); ValueError where one passes its tables or names neither a dense table nor
    a hash."""
    cdef Py_ssize_t row, rows = bounds.shape[0]
    if bounds.shape[1] != 7:
        raise ValueError("an index's bounds are seven numbers")
    for row in range(rows):
        if (bounds[row, 0] < 0 or bounds[row, 0] + bounds[row, 1] > dense.shape[0]
                or bounds[row, 2] < 0 or bounds[row, 2] + (bounds[row, 6] + 1 if bounds[row, 4] else 0) > slots.shape[0]
                or bounds[row, 3] < 0 or bounds[row, 3] + bounds[row, 4] > keys.shape[0]
                or (not bounds[row, 1] and not bounds[row, 4])):
            raise ValueError("an index's bounds pass its tables, or name neither a dense table nor a hash")
        _dense_ends(dense, bounds[row, 0], bounds[row, 1])
    cdef Index* indexes = <Index*>malloc(sizeof(Index) * max(rows, 1))
    if indexes == NULL:
        raise MemoryError()
    for row in range(rows):
        indexes[row].dense = _start(dense) + bounds[row, 0]
        indexes[row].dense_size = bounds[row, 1]
        indexes[row].slots = _start(slots) + bounds[row, 2]
        indexes[row].keys = _start(keys) + bounds[row, 3]
        indexes[row].keys_size = bounds[row, 4]
        indexes[row].shift = <int>bounds[row, 5]
        indexes[row].mask = bounds[row, 6]
    return indexes


cdef _check_trie(const int64_t[::1] ends, const int64_t[:, ::1] end_bounds, Py_ssize_t indexes):
    if end_bounds.shape[1] != 2 or indexes < end_bounds.shape[0] - 1:
        raise ValueError("a trie takes an end table per depth and an index per depth past the first")
    for depth in range(end_bounds.shape[0]):
        if end_bounds[depth, 0] < 0 or end_bounds[depth, 1] < 0 or end_bounds[depth, 0] + end_bounds[depth, 1] > ends.shape[0]:
            raise ValueError("a trie's end bounds pass its table")


cdef inline int64_t _trie_word(const int32_t* char_ids, Py_ssize_t start, Py_ssize_t length, int64_t size,
                               const int64_t* ends, const int64_t[:, ::1] end_bounds, const Index* nodes) noexcept nogil:
    """`word_ids` of one token: its word id, or -1."""
    cdef Py_ssize_t depths = end_bounds.shape[0], depth = 1
    cdef int64_t node, following
    if not depths:
        return -1
    node = char_ids[start]
    while True:
        if length == depth:
            if node >= 0 and node < end_bounds[depth - 1, 1]:
                return ends[end_bounds[depth - 1, 0] + node]
            return -1
        if node < 0 or depth == depths:
            return -1
        following = char_ids[start + depth]
        if following < 0:
            return -1
        node = _look(&nodes[depth - 1], node * size + following)
        depth += 1


def word_ids(const int32_t[::1] char_ids, const int64_t[::1] starts, const int64_t[::1] lengths, int64_t size,
             const int64_t[::1] ends, const int64_t[:, ::1] end_bounds, const int64_t[::1] dense,
             const int64_t[::1] slots, const int64_t[::1] keys, const int64_t[:, ::1] bounds, int64_t[::1] found):
    """`TfidfFeatures._unigram_ids`: each token's word id (-1: not a vocabulary word), walked
    character by character through the vocabulary's trie. A token is char_ids[starts[t]:starts[t] +
    lengths[t]] (alphabet ids, -1 unknown); the word ending at depth d's nodes is in `ends` at
    end_bounds[d - 1] (start, size); the nodes of depth d + 1 are found from (node * size +
    character) in index d - 1 of the concatenated `dense`, `slots`, `keys` (rows of `bounds`)."""
    cdef Py_ssize_t tokens = starts.shape[0], t
    if lengths.shape[0] != tokens or found.shape[0] != tokens:
        raise ValueError("word_ids takes a start, a length and an output per token")
    _check_trie(ends, end_bounds, bounds.shape[0])
    for t in range(tokens):
        if lengths[t] < 1 or starts[t] < 0 or starts[t] + lengths[t] > char_ids.shape[0]:
            raise ValueError("word_ids' tokens pass the characters")
    cdef Index* nodes = _indexes(dense, slots, keys, bounds)
    cdef const int32_t* ids = &char_ids[0] if char_ids.shape[0] else NULL
    with nogil:
        for t in range(tokens):
            found[t] = _trie_word(ids, starts[t], lengths[t], size, _start(ends), end_bounds, nodes)
    free(nodes)


cdef inline Py_ssize_t _counted(int64_t* values, Py_ssize_t size, int64_t* spare, int64_t* indices, double* counts,
                                Py_ssize_t total) noexcept nogil:
    """values sorted (`spare`: room for as many), then each distinct one and its occurrences
    appended at `total`; the new total."""
    cdef Py_ssize_t i, kept
    if not size:
        return total
    _sort(values, size, spare)
    kept = total
    indices[kept] = values[0]
    counts[kept] = 1
    for i in range(1, size):
        if values[i] == indices[kept]:
            counts[kept] += 1
        else:
            kept += 1
            indices[kept] = values[i]
            counts[kept] = 1
    return kept + 1


cdef inline void _nearly_sorted(int64_t* values, Py_ssize_t size, int64_t* spare) noexcept nogil:
    """Ascending, in place: an insertion sort, which moves a value only past those above it (few,
    in the walk's next order), handing over to `_sort` once it has moved more than four per value
    (time linear in the values whatever their order)."""
    if not _insertion_sort(values, size, 4 * size):
        _sort(values, size, spare)


cdef inline Py_ssize_t _emitted(const int64_t* packed, Py_ssize_t size, int bits, int64_t offset, int64_t* indices,
                                double* counts, Py_ssize_t total) noexcept nogil:
    """The ids of `packed` (ascending id << bits | position), each distinct one plus `offset`
    and its occurrences appended at `total`; the new total."""
    cdef Py_ssize_t i
    cdef int64_t ident, last = -1
    for i in range(size):
        ident = packed[i] >> bits
        if ident != last:
            indices[total] = ident + offset
            counts[total] = 1
            total += 1
            last = ident
        else:
            counts[total - 1] += 1
    return total


def count_texts(const int32_t[::1] char_ids, const int8_t[::1] kinds, int word_bit, int space_bit,
                const int64_t[::1] bounds, Py_ssize_t first, int64_t size, int64_t space_id, const int64_t[::1] ends,
                const int64_t[:, ::1] end_bounds, const int64_t[::1] dense, const int64_t[::1] slots,
                const int64_t[::1] keys, const int64_t[:, ::1] index_bounds, int64_t unigrams,
                const int64_t[::1] char_offsets, int64_t[::1] indptr, int64_t[::1] indices, double[::1] counts):
    """`TfidfFeatures._chunk_counts` in one pass per text, from its characters' alphabet ids
    (`char_ids`, -1 unknown) and classes (`kinds`: `word_bit`, `space_bit`) to its row of
    counts: the tokens (runs of word characters) walked through the vocabulary's trie, the
    bigrams of consecutive known tokens, the char_wb n-grams of each padded word, every order's
    features sorted and counted. Text t is positions bounds[t]:bounds[t + 1]. The indexes
    (`key_index.concatenated`) in `index_bounds`' rows: the trie's depths 2.. (one fewer than
    `end_bounds`' rows), then the word bigrams, then each char order (`char_offsets`: its
    first feature). From text `first` on, each text's distinct features ascending go to
    indices[indptr[t]:indptr[t + 1]] with their counts, while `indices` has room; returns the
    text it stopped before (every text: all done).

    The char n-grams go order by order: the first order's in text order, then sorted by id; each
    later order's read in the order of the one before, whose ids its own follow (an n-gram's key
    is its prefix's id x the alphabet + its last character, and ids number the sorted keys), so
    only n-grams of one prefix can come out of order and an insertion sort finishes them (the
    per-order sorts in text order were 40% of the count). An entry is its id << `bits` | its
    place in the text's padded words."""
    cdef Py_ssize_t texts = bounds.shape[0] - 1, depths = end_bounds.shape[0], orders = char_offsets.shape[0]
    cdef Py_ssize_t t, p, start, hi, q, i, order, stream, streams = 2 + orders, entries, total, longest = 0, padded
    cdef Py_ssize_t capacity = indices.shape[0], row, kept
    cdef int64_t word, previous, ident, following, key, span, largest = 0, mask
    cdef int bits = 0
    if index_bounds.shape[0] != max(depths - 1, 0) + 1 + orders:
        raise ValueError("count_texts takes an index per trie depth past the first, the bigrams' and each order's")
    if indptr.shape[0] != texts + 1 or counts.shape[0] != indices.shape[0]:
        raise ValueError("count_texts takes outputs for every text")
    if kinds.shape[0] != char_ids.shape[0] or texts < 0 or bounds[0] != 0 or bounds[texts] != char_ids.shape[0]:
        raise ValueError("count_texts' bounds do not cover the characters")
    _check_trie(ends, end_bounds, index_bounds.shape[0])
    for t in range(texts):
        if bounds[t + 1] < bounds[t]:
            raise ValueError("count_texts' bounds do not ascend")
        longest = max(longest, bounds[t + 1] - bounds[t])
    if first < 0 or first > texts:
        raise ValueError("count_texts starts past its texts")
    # Per text and stream at most: a unigram and a bigram per character, an n-gram of each order
    # per position of its padded words (each word " w " and a separator: at most 2 x its
    # characters + 2), which is also the padded words' length.
    span = 2 * longest + 2
    while (<int64_t>1 << bits) < span:
        bits += 1
    mask = (<int64_t>1 << bits) - 1
    for row in range(max(depths - 1, 0) + 1, index_bounds.shape[0]):
        largest = max(largest, index_bounds[row, 1], index_bounds[row, 4])  # an id is below its table's size
    if bits > 40 or largest >= (<int64_t>1 << (62 - bits)):
        raise ValueError("count_texts' char n-gram ids and positions do not fit an int64 together")
    cdef Index* indexes = _indexes(dense, slots, keys, index_bounds)
    # Each stream's entries, then the padded words and the sorts' spare room.
    cdef int64_t* scratch = <int64_t*>malloc(sizeof(int64_t) * span * (streams + 2))
    cdef Py_ssize_t* found = <Py_ssize_t*>malloc(sizeof(Py_ssize_t) * streams)
    if scratch == NULL or found == NULL:
        free(indexes)
        free(scratch)
        free(found)
        raise MemoryError()
    cdef int64_t* pad = scratch + streams * span
    cdef int64_t* spare = pad + span
    cdef int64_t* entry
    cdef const int64_t* before
    cdef const Index* bigram_index = &indexes[max(depths - 1, 0)]
    cdef const Index* char_indexes = bigram_index + 1
    cdef const int32_t* ids = &char_ids[0] if char_ids.shape[0] else NULL
    cdef const int64_t* end_table = _start(ends)
    cdef int64_t bigram_size = max(unigrams, 1)
    total = indptr[first] if first else 0
    indptr[0] = 0
    t = first
    with nogil:
        while t < texts:
            for stream in range(streams):
                found[stream] = 0
            hi = bounds[t + 1]
            # Tokens: maximal runs of word characters; a bigram of each two consecutive ones known.
            p = bounds[t]
            previous = -1
            while p < hi:
                if not (kinds[p] & word_bit):
                    p += 1
                    continue
                start = p
                while p < hi and (kinds[p] & word_bit):
                    p += 1
                word = _trie_word(ids, start, p - start, size, end_table, end_bounds, indexes)
                if word >= 0:
                    scratch[found[0]] = word
                    found[0] += 1
                    if previous >= 0:
                        ident = _look(bigram_index, previous * bigram_size + word)
                        if ident >= 0:
                            scratch[span + found[1]] = ident + unigrams
                            found[1] += 1
                previous = word
            # Words (maximal runs of non-space characters) padded " w ", each followed by a
            # separator (-1, as an unknown character): an n-gram is a run of known ids.
            p = bounds[t]
            padded = 0
            while p < hi:
                if kinds[p] & space_bit:
                    p += 1
                    continue
                pad[padded] = space_id
                padded += 1
                while p < hi and not (kinds[p] & space_bit):
                    pad[padded] = ids[p]
                    padded += 1
                    p += 1
                pad[padded] = space_id
                pad[padded + 1] = -1
                padded += 2
            # (each count in a local: a store through `entry` may not alias it)
            entry = scratch + 2 * span
            kept = 0
            for q in range(padded - 1):
                key = pad[q] * size + pad[q + 1] if pad[q] >= 0 and pad[q + 1] >= 0 else -1
                ident = _look(&char_indexes[0], key)
                entry[kept] = (ident << bits) | q
                kept += ident >= 0
            _sort(entry, kept, spare)
            found[2] = kept
            for order in range(1, orders):
                before = entry  # the n-grams one shorter, sorted
                entry = scratch + (2 + order) * span
                kept = 0
                for i in range(found[1 + order]):
                    q = before[i] & mask
                    following = pad[q + order + 1]
                    key = (before[i] >> bits) * size + following if following >= 0 else -1
                    ident = _look(&char_indexes[order], key)
                    entry[kept] = (ident << bits) | q
                    kept += ident >= 0
                _nearly_sorted(entry, kept, spare)
                found[2 + order] = kept
            entries = 0
            for stream in range(streams):
                entries += found[stream]
            if total + entries > capacity:
                break
            for stream in range(2):
                total = _counted(scratch + stream * span, found[stream], spare, &indices[0], &counts[0], total)
            for order in range(orders):
                total = _emitted(scratch + (2 + order) * span, found[2 + order], bits, char_offsets[order],
                                 &indices[0], &counts[0], total)
            indptr[t + 1] = total
            t += 1
    free(indexes)
    free(scratch)
    free(found)
    return t


cdef inline Py_ssize_t _quantised_row(const int64_t* indices, const double* values, Py_ssize_t size,
                                      int64_t word_features, double scale, int64_t max_squared_norm,
                                      const int64_t* position, Py_ssize_t features, Py_ssize_t columns, double* head,
                                      int64_t* tail_indices, double* tail_values, Py_ssize_t kept,
                                      int64_t* quanta) noexcept nogil:
    """`quantise_split` of one row (its head row `head`, its tail entries appended at `kept`,
    `quanta`: room for its entries): the tail's new length, or -1 where a feature passes the
    head positions."""
    cdef Py_ssize_t i, largest
    cdef int64_t quantised, column, word_squares = 0, char_squares = 0
    cdef int64_t[2] squares_of
    cdef double scaled
    cdef int block
    # Summed in two locals, not an array indexed by block: that made each entry wait for the
    # last one's store (exact integers: the same sums in any order)
    for i in range(size):
        scaled = values[i] * scale
        quantised = <int64_t>scaled if scaled >= 0 else <int64_t>floor(scaled)  # floor
        quanta[i] = quantised
        if indices[i] < word_features:
            word_squares += quantised * quantised
        else:
            char_squares += quantised * quantised
    squares_of[0] = word_squares
    squares_of[1] = char_squares
    for block in range(2):
        while squares_of[block] > max_squared_norm:
            largest = -1
            for i in range(size):
                if (indices[i] >= word_features) == block and (largest < 0 or quanta[i] > quanta[largest]):
                    largest = i
            squares_of[block] -= 2 * quanta[largest] - 1
            quanta[largest] -= 1
    for i in range(size):
        if indices[i] < 0 or indices[i] >= features or position[indices[i]] >= columns:
            return -1
        column = position[indices[i]]
        if column >= 0:
            head[column] = <double>quanta[i]
        else:
            tail_indices[kept] = indices[i]
            tail_values[kept] = <double>quanta[i]
            kept += 1
    return kept


cdef Py_ssize_t _split_shapes(const int64_t[::1] indptr, Py_ssize_t entries, double[:, ::1] head,
                              int64_t[::1] tail_indptr, int64_t[::1] tail_indices, double[::1] tail_values,
                              str name) except -1:
    """ValueError unless the head and tail outputs fit rows `indptr` of `entries`; the widest row."""
    cdef Py_ssize_t texts = indptr.shape[0] - 1, t, widest = 0
    if head.shape[0] != texts or tail_indptr.shape[0] != texts + 1:
        raise ValueError(f"{name} takes a head row and a tail row per text")
    if tail_indices.shape[0] < entries or tail_values.shape[0] < entries:
        raise ValueError(f"{name}'s tail is shorter than the entries")
    _check_rows(indptr, entries, name)
    for t in range(texts):
        widest = max(widest, indptr[t + 1] - indptr[t])
    return widest


cdef int64_t _split_rows(const int64_t[::1] indptr, const int64_t[::1] indices, const double[::1] source,
                         const double[::1] tf_of_count, const double[::1] idf, bint weigh, int64_t word_features,
                         double scale, int64_t max_squared_norm, const int64_t[::1] position, double[:, ::1] head,
                         int64_t[::1] tail_indptr, int64_t[::1] tail_indices, double[::1] tail_values,
                         str name) except -2:
    """`quantise_split` of the rows' values (`source`), or where `weigh` of their counts weighed
    row by row as `weigh_rows` weighs them: 0, or a count past the tf table plus one."""
    cdef Py_ssize_t texts = indptr.shape[0] - 1, t, kept = 0, size
    cdef int64_t past = 0
    if source.shape[0] < indices.shape[0]:
        raise ValueError(f"{name} takes a value per entry")
    cdef Py_ssize_t widest = _split_shapes(indptr, indices.shape[0], head, tail_indptr, tail_indices, tail_values, name)
    cdef int64_t* quanta = <int64_t*>malloc((sizeof(int64_t) + sizeof(double)) * max(widest, 1))  # one text's
    if quanta == NULL:
        raise MemoryError()
    cdef double* weighed = <double*>(quanta + max(widest, 1))  # and its weighed values
    cdef const double* values
    with nogil:
        tail_indptr[0] = 0
        for t in range(texts):
            size = indptr[t + 1] - indptr[t]
            if size:
                values = &source[0] + indptr[t]
                if weigh:
                    past = _weighed_row(&indices[0] + indptr[t], values, size, _start_double(tf_of_count),
                                        tf_of_count.shape[0], _start_double(idf), idf.shape[0], word_features, weighed)
                    if past:
                        break
                    values = weighed
                kept = _quantised_row(&indices[0] + indptr[t], values, size, word_features, scale, max_squared_norm,
                                      _start(position), position.shape[0], head.shape[1],
                                      &head[t, 0] if head.shape[1] else NULL, _start_mutable(tail_indices),
                                      _start_mutable_double(tail_values), kept, quanta)
                if kept < 0:
                    break
            tail_indptr[t + 1] = kept
    free(quanta)
    if past < 0:
        raise ValueError(f"{name}'s counts are below one, or its features pass the idf")
    if kept < 0:
        raise ValueError(f"{name}'s features pass its head positions")
    return past


def quantise_split(const int64_t[::1] indptr, const int64_t[::1] indices, const double[::1] values,
                   int64_t word_features, double scale, int64_t max_squared_norm, const int64_t[::1] position,
                   double[:, ::1] head, int64_t[::1] tail_indptr, int64_t[::1] tail_indices, double[::1] tail_values):
    """`kernels.tfidf.quantise` then `HeadSplit.split` of l2-normalised rows: each value
    floor(v x scale) (the same operations), each text's word and char block brought to a
    squared norm of at most `max_squared_norm` (its first largest entry lowered one at a time,
    counted exactly in integers), then each entry into the dense `head` (zeros) at its
    feature's column (`position`, -1: none) or appended to the tail's CSR rows."""
    _split_rows(indptr, indices, values, values[:0], values[:0], False, word_features, scale, max_squared_norm,
                position, head, tail_indptr, tail_indices, tail_values, "quantise_split")


def weigh_quantise_split(const int64_t[::1] indptr, const int64_t[::1] indices, const double[::1] counts,
                         const double[::1] tf_of_count, const double[::1] idf, int64_t word_features, double scale,
                         int64_t max_squared_norm, const int64_t[::1] position, double[:, ::1] head,
                         int64_t[::1] tail_indptr, int64_t[::1] tail_indices, double[::1] tail_values):
    """`weigh_rows` then `quantise_split` of CSR counts, row by row while the row is at hand
    (the same operations on the same values: the same bits), without the weighed values of the
    whole chunk in between. Returns 0, or as `weigh_rows` a count past the table, plus one (the
    caller calls again with a longer table, from the first row)."""
    return _split_rows(indptr, indices, counts, tf_of_count, idf, True, word_features, scale, max_squared_norm,
                       position, head, tail_indptr, tail_indices, tail_values, "weigh_quantise_split")


cdef inline bint _held_key(const Index* index, int64_t key) noexcept nogil:
    return key >= 0 and _look(index, key) >= 0


def typicality_of_tokens(const int64_t[::1] ids, const int64_t[::1] identities, const uint8_t[::1] misspelt,
                         const int64_t[::1] lengths, const int64_t[::1] endings, const int64_t[::1] codes,
                         const int64_t[::1] code_bounds, int64_t vocab_size, int64_t identity_count,
                         const int64_t[::1] dense, const int64_t[::1] slots, const int64_t[::1] keys,
                         const int64_t[:, ::1] index_bounds, const int64_t[::1] ending_counts,
                         const int64_t[::1] bigram_table, const int64_t[::1] successors, const uint8_t[::1] opens,
                         const uint8_t[::1] closes, int64_t texts, int64_t table_pairs, double nan,
                         double[:, ::1] statistics):
    """`Typicality.statistics` of new texts (none left out) from their tokens in order: per
    token its vocabulary id (-1: unseen), identity (-1: no word character) and whether it is
    misspelt; per text its token count (`lengths`), the code point ending it (-1: none) and its
    tokens' code points, codes[code_bounds[t]:code_bounds[t + 1]]. The tables' indexes
    (`key_index.concatenated`, rows: tokens, bigrams, endings, characters), with the endings'
    counts by position, and the bigram table's sorted keys (a * (vocabulary + 2) + b), where
    those of first token a start (`successors`, one more than tokens and start and end), and per
    token whether the table holds it after the start (`opens`) and before the end (`closes`).
    Every count an integer, as the torch passes count it (the order statistic's pairs from the
    table's side for a row whose known tokens squared pass `table_pairs` x (table + vocabulary
    + 2), else per distinct known token a of the row, from a's bigrams in the table or by
    looking up a's bigram with each of the row's tokens, whichever is fewer: the same
    integers), then the same divisions; `nan` for a text without a token."""
    cdef Py_ssize_t rows = lengths.shape[0], row, i, j, first, n, known_count, bigram_count, table_size
    cdef Py_ssize_t total_tokens = ids.shape[0], longest = 0, distinct
    cdef int64_t size = vocab_size + 2, start = vocab_size, end = vocab_size + 1
    cdef int64_t identity_size = identity_count + 2, a, b, key, previous
    cdef int64_t held_tokens, new_characters, held_bigrams, shuffled, repeats, ending, misspellings, pairs
    cdef bint bad = False
    if (identities.shape[0] != total_tokens or misspelt.shape[0] != total_tokens or endings.shape[0] != rows
            or code_bounds.shape[0] != rows + 1 or statistics.shape[0] != rows or statistics.shape[1] != 5):
        raise ValueError("typicality_of_tokens takes a value per token, per text, and a row of five per text")
    if index_bounds.shape[0] != 4 or vocab_size < 0 or identity_count < vocab_size:
        raise ValueError("typicality_of_tokens takes four tables' indexes and identities from the vocabulary's on")
    if rows and (code_bounds[0] != 0 or code_bounds[rows] != codes.shape[0]):
        raise ValueError("typicality_of_tokens' code bounds do not cover the code points")
    first = 0
    for row in range(rows):
        if lengths[row] < 0 or code_bounds[row + 1] < code_bounds[row]:
            raise ValueError("typicality_of_tokens' lengths or code bounds are negative")
        first += lengths[row]
        longest = max(longest, lengths[row], code_bounds[row + 1] - code_bounds[row])
    if first != total_tokens:
        raise ValueError("typicality_of_tokens' lengths do not cover the tokens")
    for i in range(total_tokens):
        if ids[i] >= vocab_size or ids[i] < -1 or identities[i] >= identity_count or identities[i] < -1:
            raise ValueError("typicality_of_tokens' ids or identities pass the vocabulary")
    table_size = bigram_table.shape[0]
    if successors.shape[0] != size + 1 or opens.shape[0] != size or closes.shape[0] != size:
        raise ValueError("typicality_of_tokens takes where each token's bigrams start, and two flags a token")
    if successors[0] != 0 or successors[size] != table_size:
        raise ValueError("typicality_of_tokens' bigram starts do not cover the table")
    for i in range(size):
        if successors[i + 1] < successors[i]:
            raise ValueError("typicality_of_tokens' bigram starts do not ascend")
    cdef Index* indexes = _indexes(dense, slots, keys, index_bounds)
    cdef int64_t* occurrences = <int64_t*>calloc(size, sizeof(int64_t))  # of each known token, in one row
    cdef int64_t* scratch = <int64_t*>malloc(sizeof(int64_t) * 3 * (longest + 2))
    if occurrences == NULL or scratch == NULL:
        free(indexes)
        free(occurrences)
        free(scratch)
        raise MemoryError()
    cdef int64_t* spare = scratch + longest + 2
    cdef int64_t* present = spare + longest + 2  # the row's distinct known tokens
    with nogil:
        first = 0
        for row in range(rows):
            n = lengths[row]
            if not n:
                for i in range(5):
                    statistics[row, i] = nan
                continue
            held_tokens = misspellings = shuffled = known_count = distinct = 0
            for i in range(first, first + n):
                a = ids[i]
                if _held_key(&indexes[0], a):
                    held_tokens += 1
                elif misspelt[i]:
                    misspellings += 1
                if a >= 0:
                    known_count += 1
                    if not occurrences[a]:
                        present[distinct] = a
                        distinct += 1
                    occurrences[a] += 1
                    shuffled += opens[a] + closes[a]
            # bigrams start t1 .. tn end, held where both tokens are known
            held_bigrams = 0
            previous = start
            for i in range(first, first + n + 1):
                b = ids[i] if i < first + n else end
                if previous >= 0 and b >= 0:
                    held_bigrams += _held_key(&indexes[1], previous * size + b)
                previous = b
            # the pairs of distinct positions of known tokens whose bigram is held
            if <double>known_count * known_count > <double>table_pairs * (table_size + size):  # no int64 overflow
                for j in range(table_size):
                    a = bigram_table[j] // size
                    b = bigram_table[j] % size
                    if a < vocab_size and b < vocab_size:
                        shuffled += occurrences[a] * (occurrences[b] - (a == b))
            else:  # pairs (i, j), i != j, of tokens a, b: held(a, b) x m(a) x (m(b) - [a = b]), per distinct a
                for i in range(distinct):
                    a = present[i]
                    pairs = 0
                    if successors[a + 1] - successors[a] <= distinct:
                        for j in range(successors[a], successors[a + 1]):
                            b = bigram_table[j] - a * size
                            if b < 0 or b >= size:
                                bad = True
                                break
                            pairs += occurrences[b] - (b == a)
                        if bad:
                            break
                    else:
                        for j in range(distinct):
                            b = present[j]
                            if _held_key(&indexes[1], a * size + b):
                                pairs += occurrences[b] - (b == a)
                    shuffled += occurrences[a] * pairs
            for i in range(distinct):
                occurrences[present[i]] = 0
            if bad:
                break
            # repeated bigrams of identities (start t1 .. tn end; a token without a word character matches none)
            bigram_count = 0
            previous = identity_count
            for i in range(first, first + n + 1):
                b = identities[i] if i < first + n else identity_count + 1
                if previous >= 0 and b >= 0:
                    scratch[bigram_count] = previous * identity_size + b
                    bigram_count += 1
                previous = b
            repeats = 0
            if bigram_count:
                _sort(scratch, bigram_count, spare)
                for i in range(1, bigram_count):
                    repeats += scratch[i] == scratch[i - 1]
            # distinct code points of the row's tokens that no training text holds
            distinct = 0
            for i in range(code_bounds[row], code_bounds[row + 1]):
                if not _held_key(&indexes[3], codes[i]):
                    scratch[distinct] = codes[i]
                    distinct += 1
            new_characters = 0
            if distinct:
                _sort(scratch, distinct, spare)
                new_characters = 1
                for i in range(1, distinct):
                    new_characters += scratch[i] != scratch[i - 1]
            ending = 0
            if endings[row] >= 0:
                key = _look(&indexes[2], endings[row])
                if key >= 0 and key < ending_counts.shape[0]:
                    ending = ending_counts[key]
            statistics[row, 0] = <double>(held_tokens - 2 * new_characters * n) / <double>n
            statistics[row, 1] = <double>(n * held_bigrams - shuffled) / <double>(n * (n + 1))
            statistics[row, 2] = <double>repeats / <double>(n + 1)
            statistics[row, 3] = <double>ending / <double>max(1, texts)
            statistics[row, 4] = <double>misspellings / <double>n
            first += n
    free(indexes)
    free(occurrences)
    free(scratch)
    if bad:
        raise ValueError("typicality_of_tokens' bigram starts put a key among another token's")


cdef struct Unknown:
    int64_t hash
    Py_ssize_t token
    Py_ssize_t start  # its first code point


cdef int _by_hash(const void* a, const void* b) noexcept nogil:
    cdef const Unknown* x = <const Unknown*>a
    cdef const Unknown* y = <const Unknown*>b
    if x.hash != y.hash:
        return (x.hash > y.hash) - (x.hash < y.hash)
    return (x.token > y.token) - (x.token < y.token)


cdef inline bint _same_codes(const int64_t* a, const int64_t* b, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(length):
        if a[i] != b[i]:
            return False
    return True


def split_words(const int64_t[::1] codes, const int8_t[::1] kinds, int word_bit, int space_bit,
                const int64_t[::1] bounds, uint64_t base, uint64_t low_bits, const int64_t[::1] vocabulary_codes, const int64_t[::1] vocabulary_firsts,
                const int64_t[::1] vocabulary_lengths, const int64_t[::1] dense, const int64_t[::1] slots,
                const int64_t[::1] keys, int shift, int64_t mask, const int64_t[::1] hash_ids, int64_t[::1] ids,
                int64_t[::1] unknown_rank, uint8_t[::1] wordlike, int64_t[::1] firsts, int64_t[::1] token_lengths,
                int64_t[::1] lengths, int64_t[::1] endings, int64_t[::1] inside_codes, int64_t[::1] code_bounds):
    """`token_runs.split_tokens`'s tokens in one pass per text: each maximal run of non-space
    code points (`kinds`' `space_bit`) of text t (codes[bounds[t]:bounds[t + 1]]) hashed as
    `Runs.hashes` hashes it (sum of (code + 1) base^place, wrapping, then & `low_bits`), looked up among the vocabulary's hashes (the index over them, and
    the token id of each, `hash_ids`) and checked code point by code point: its id, else -1
    and its rank among the distinct unknown tokens by hash (np.unique's order); whether it
    holds a word character (`word_bit`), its first code point (counted among the non-space ones)
    and length; per text its token count and the code point ending its last token (-1: none);
    every non-space code point in `inside_codes`, text t's from code_bounds[t] to code_bounds[t + 1].
    Returns (tokens, distinct unknown tokens), their leaders (each one's first occurrence) in
    firsts[tokens:] and token_lengths[tokens:] by rank; or (-1, -1) where two different unknown
    tokens share a hash (the caller tokenizes those texts another way)."""
    cdef Py_ssize_t texts = bounds.shape[0] - 1, t, p, hi, start, length, tokens = 0, inside = 0, unknowns = 0
    cdef Py_ssize_t position, candidate, distinct = 0, i, capacity = ids.shape[0], most = 0
    cdef uint64_t hashed, power
    cdef bint word, collided = False, failed = False
    cdef Unknown leader
    cdef Py_ssize_t table_size = 1, slot, groups = 0
    cdef int table_shift = 64
    cdef Py_ssize_t* table = NULL
    cdef Py_ssize_t* group_of = NULL
    cdef Unknown* leaders = NULL
    if kinds.shape[0] != codes.shape[0] or texts < 0 or lengths.shape[0] != texts or endings.shape[0] != texts:
        raise ValueError("split_words takes a class per code point and an output per text")
    if bounds[0] != 0 or bounds[texts] != codes.shape[0]:
        raise ValueError("split_words' bounds do not cover the code points")
    for t in range(texts):
        if bounds[t + 1] < bounds[t]:
            raise ValueError("split_words' bounds do not ascend")
    for t in range(texts):
        most += (bounds[t + 1] - bounds[t] + 1) // 2  # tokens, each but the last followed by a space
    if (unknown_rank.shape[0] != capacity or wordlike.shape[0] != capacity or firsts.shape[0] != 2 * capacity
            or token_lengths.shape[0] != 2 * capacity or capacity < most
            or inside_codes.shape[0] < codes.shape[0] or code_bounds.shape[0] != texts + 1):
        raise ValueError("split_words' outputs hold fewer tokens than the texts may (twice for the leaders), or fewer "
                         "code points, or its code bounds are not one more than the texts")
    if vocabulary_firsts.shape[0] != vocabulary_lengths.shape[0]:
        raise ValueError("split_words' vocabulary takes a first code point and a length per token")
    for i in range(vocabulary_firsts.shape[0]):
        if vocabulary_firsts[i] < 0 or vocabulary_lengths[i] < 0 or vocabulary_firsts[i] + vocabulary_lengths[i] > vocabulary_codes.shape[0]:
            raise ValueError("split_words' vocabulary tokens pass its code points")
    for i in range(hash_ids.shape[0]):
        if hash_ids[i] < 0 or hash_ids[i] >= vocabulary_firsts.shape[0]:
            raise ValueError("split_words' hash ids pass the vocabulary")
    if not dense.shape[0] and not slots.shape[0] and hash_ids.shape[0]:
        raise ValueError("split_words takes a dense table or hash slots")
    _dense_ends(dense, 0, dense.shape[0])
    cdef Unknown* unknown = <Unknown*>malloc(sizeof(Unknown) * max(most, 1))
    if unknown == NULL:
        raise MemoryError()
    cdef const int64_t* code = _start(codes)
    cdef const int64_t* vocabulary_code = _start(vocabulary_codes)
    with nogil:
        for t in range(texts):
            p = bounds[t]
            hi = bounds[t + 1]
            lengths[t] = 0
            endings[t] = -1
            code_bounds[t] = inside
            while p < hi:
                if kinds[p] & space_bit:
                    p += 1
                    continue
                start = p
                hashed = 0
                power = 1
                word = False
                while p < hi and not (kinds[p] & space_bit):
                    inside_codes[inside + p - start] = code[p]
                    hashed += (<uint64_t>code[p] + 1) * power
                    power *= base
                    word = word or (kinds[p] & word_bit)
                    p += 1
                length = p - start
                hashed &= low_bits
                ids[tokens] = -1
                if hash_ids.shape[0]:
                    position = _find(<int64_t>hashed, _start(dense), dense.shape[0], _start(slots), _start(keys),
                                     keys.shape[0], shift, mask)
                    if position >= 0:
                        candidate = hash_ids[position]
                        if vocabulary_lengths[candidate] == length and _same_codes(
                                code + start, vocabulary_code + vocabulary_firsts[candidate], length):
                            ids[tokens] = candidate
                if ids[tokens] < 0:
                    unknown[unknowns].hash = <int64_t>hashed
                    unknown[unknowns].token = tokens
                    unknown[unknowns].start = start
                    unknowns += 1
                unknown_rank[tokens] = -1
                wordlike[tokens] = word
                firsts[tokens] = inside
                token_lengths[tokens] = length
                inside += length
                lengths[t] += 1
                endings[t] = code[p - 1]
                tokens += 1
        code_bounds[texts] = inside
        # Unknown tokens grouped by hash (open addressing, in token order: each group's first
        # occurrence leads it, and every other member must be the same code points), then only
        # the groups' leaders sorted by hash for their ranks: np.unique's order, without sorting
        # every occurrence (with a small vocabulary, most tokens are unknown).
        while table_size < 2 * unknowns:
            table_size <<= 1
            table_shift -= 1
        table = <Py_ssize_t*>malloc(sizeof(Py_ssize_t) * table_size)
        group_of = <Py_ssize_t*>malloc(sizeof(Py_ssize_t) * max(unknowns, 1))
        leaders = <Unknown*>malloc(sizeof(Unknown) * max(unknowns, 1))
        if table == NULL or group_of == NULL or leaders == NULL:
            failed = True
        else:
            for slot in range(table_size):
                table[slot] = -1
            for i in range(unknowns):
                slot = <Py_ssize_t>((<uint64_t>unknown[i].hash * MULTIPLIER) >> table_shift)
                while table[slot] >= 0 and leaders[table[slot]].hash != unknown[i].hash:
                    slot = (slot + 1) & (table_size - 1)
                if table[slot] < 0:
                    table[slot] = groups
                    leaders[groups] = unknown[i]
                    groups += 1
                else:
                    leader = leaders[table[slot]]
                    if (token_lengths[unknown[i].token] != token_lengths[leader.token] or not _same_codes(
                            code + unknown[i].start, code + leader.start, token_lengths[leader.token])):
                        collided = True
                group_of[i] = table[slot]
            for i in range(groups):
                leaders[i].start = i  # the group, kept through the sort (distinct hashes: no ties)
            qsort(leaders, groups, sizeof(Unknown), _by_hash)
            for distinct in range(groups):
                table[leaders[distinct].start] = distinct  # the table now maps a group to its rank
                firsts[tokens + distinct] = firsts[leaders[distinct].token]
                token_lengths[tokens + distinct] = token_lengths[leaders[distinct].token]
            distinct = groups
            for i in range(unknowns):
                unknown_rank[unknown[i].token] = table[group_of[i]]
    free(unknown)
    free(table)
    free(group_of)
    free(leaders)
    if failed:
        raise MemoryError()
    if collided:
        return -1, -1
    return tokens, distinct


def ngram_order(const int64_t[::1] ids, const int64_t[::1] offsets, const int64_t[::1] lengths, int order,
                int64_t vocab_size, const int64_t[::1] dense, const int64_t[::1] slots, const int64_t[::1] keys,
                const int64_t[:, ::1] bounds, int64_t max_rank, int64_t[::1] grams, int64_t[::1] indptr,
                int64_t[::1] indices):
    """One order of `NgramFeatures.transform` for every text, in place of its torch passes.
    `grams` holds each position's (order-1)-gram id (order 1: the token ids) and leaves with its
    `order`-gram id (its position among the order's gram keys), -1 where unknown or past the
    text's end. A text's features are the k-th occurrences (k < max_rank) of its known n-grams
    among the feature keys, written as the ascending columns of its CSR row (`indptr`, `indices`:
    room for every position). The keys are found by two `KeyIndex`es (`key_index.concatenated`:
    the gram keys', then the feature keys'), a slot or two a key. Returns the number of entries."""
    cdef Py_ssize_t text, i, start, stop, count, run, k, size = ids.shape[0], texts = lengths.shape[0]
    cdef Py_ssize_t longest = 0, entries = 0
    cdef int64_t gram, last, column
    cdef Index* indexes
    cdef int64_t* known
    cdef int64_t* spare
    if grams.shape[0] != size or indices.shape[0] < size or indptr.shape[0] != texts + 1 or offsets.shape[0] != texts:
        raise ValueError("ngram_order's arrays do not match its ids and lengths")
    if order < 1 or max_rank < 1:
        raise ValueError("ngram_order takes an order and a max_rank of at least 1")
    if bounds.shape[0] != 2:
        raise ValueError("ngram_order takes two indexes: its gram keys' and its feature keys'")
    for text in range(texts):
        if lengths[text] < 0 or offsets[text] < 0 or offsets[text] + lengths[text] > size:
            raise ValueError("ngram_order's offsets and lengths pass the ids")
        longest = max(longest, lengths[text])
    indexes = _indexes(dense, slots, keys, bounds)
    known = <int64_t*>malloc(max(longest, 1) * sizeof(int64_t))
    spare = <int64_t*>malloc(max(longest, 1) * sizeof(int64_t))
    if known == NULL or spare == NULL:
        free(indexes)
        free(known)
        free(spare)
        raise MemoryError()
    with nogil:
        indptr[0] = 0
        for text in range(texts):
            start = offsets[text]
            stop = start + lengths[text] - order + 1  # the starts with room for an n-gram
            count = 0
            for i in range(start, max(stop, start)):
                gram = grams[i]
                if order > 1 and gram >= 0:
                    last = ids[i + order - 1]
                    gram = gram * vocab_size + last if last >= 0 else -1
                gram = _look(&indexes[0], gram)  # -1 too, as the torch pass looks it up
                grams[i] = gram
                if gram >= 0:
                    known[count] = gram
                    count += 1
            for i in range(max(stop, start), start + lengths[text]):
                grams[i] = -1
            if count:
                _sort(known, count, spare)
            i = 0
            while i < count:
                run = i
                while run < count and known[run] == known[i]:
                    run += 1
                for k in range(min(run - i, max_rank)):
                    column = _look(&indexes[1], known[i] * max_rank + k)
                    if column >= 0:
                        indices[entries] = column
                        entries += 1
                i = run
            indptr[text + 1] = entries
    free(indexes)
    free(known)
    free(spare)
    return entries




def shared_counts(const int64_t[::1] ids, const int64_t[::1] lengths, int64_t vocab_size, int64_t[:, ::1] matches):
    """`bleu_sets.shared_matches` in place of its torch passes: per text and order, the sum over
    its n-grams g of min(its count of g, the second largest count of g over all texts), added
    into `matches` [texts, orders]. Per order, one sort of (n-gram key, position) composites
    numbers the n-grams (their distinct keys, ascending) and, as a text's positions are
    contiguous, counts each (n-gram, text) pair as a run. Returns False, having written nothing,
    where an id is outside the vocabulary or a composite might not fit an int64 (the torch
    passes handle those)."""
    cdef Py_ssize_t size = ids.shape[0], texts = lengths.shape[0], orders = matches.shape[1]
    cdef Py_ssize_t text, i, start, end, valid, distinct, run, order, gram
    cdef int64_t key, position_mask, position
    cdef int bits = 0
    cdef int64_t* grams
    cdef int64_t* rows
    cdef int64_t* composite
    cdef int64_t* spare
    cdef int64_t* top
    cdef int64_t* tops
    cdef int64_t* below
    if matches.shape[0] != texts:
        raise ValueError("shared_counts' matches do not have a row per text")
    start = 0
    for text in range(texts):
        if lengths[text] < 0:
            raise ValueError("shared_counts' lengths are negative")
        start += lengths[text]
    if start != size:
        raise ValueError("shared_counts' lengths do not add up to its ids")
    while (<int64_t>1 << bits) < size:  # composite = key << bits | position
        bits += 1
    position_mask = (<int64_t>1 << bits) - 1
    if <double>(size + 1) * <double>max(vocab_size, 1) * <double>(1LL << bits) >= <double>(1LL << 62):
        return False
    for i in range(size):
        if ids[i] < 0 or ids[i] >= max(vocab_size, 1):
            return False
    grams = <int64_t*>malloc(max(size, 1) * sizeof(int64_t) * 7)
    if grams == NULL:
        raise MemoryError()
    rows, composite, spare = grams + size, grams + 2 * size, grams + 3 * size
    top, tops, below = grams + 4 * size, grams + 5 * size, grams + 6 * size
    with nogil:
        start = 0
        for text in range(texts):
            for i in range(start, start + lengths[text]):
                grams[i] = ids[i]
                rows[i] = text
            start += lengths[text]
        for order in range(1, orders + 1):
            valid = 0
            start = 0
            for text in range(texts):  # the composite of the n-gram starting at each position
                end = start + lengths[text]
                for i in range(start, end - order + 1):
                    if grams[i] >= 0:
                        key = grams[i] if order == 1 else grams[i] * vocab_size + ids[i + order - 1]
                        composite[valid] = (key << bits) | i
                        valid += 1
                start = end
            if valid:
                _radix_sort(composite, valid, spare)
            for i in range(size):
                grams[i] = -1
            distinct = 0
            i = 0
            while i < valid:  # per (n-gram, text) run: its count beside the n-gram's largest ones
                key = composite[i] >> bits
                if distinct == 0 or composite[i - 1] >> bits != key:
                    top[distinct] = 0
                    tops[distinct] = 0
                    below[distinct] = 0
                    distinct += 1
                gram = distinct - 1
                run = i
                while run < valid and composite[run] >> bits == key and \
                        rows[composite[run] & position_mask] == rows[composite[i] & position_mask]:
                    grams[composite[run] & position_mask] = gram  # the next order's keys
                    run += 1
                if run - i > top[gram]:
                    below[gram] = max(below[gram], top[gram])
                    top[gram] = run - i
                    tops[gram] = 1
                elif run - i == top[gram]:
                    tops[gram] += 1
                else:
                    below[gram] = max(below[gram], run - i)
                i = run
            for gram in range(distinct):  # the second largest count (the largest, where two texts reach it)
                if tops[gram] < 2:
                    top[gram] = below[gram]
            i = 0
            while i < valid:
                position = composite[i] & position_mask
                run = i
                while run < valid and composite[run] >> bits == composite[i] >> bits and \
                        rows[composite[run] & position_mask] == rows[position]:
                    run += 1
                matches[rows[position], order - 1] += min(run - i, top[grams[position]])
                i = run
    free(grams)
    return True


cdef inline bint _is_split_space(uint8_t byte) noexcept nogil:
    """Whether `str.split()` splits at this ASCII byte (str.isspace: 9-13 and 28-32)."""
    return byte == 32 or 9 <= byte <= 13 or 28 <= byte <= 31


cdef struct WordSlot:
    uint64_t hash
    Py_ssize_t start  # the word's first occurrence in the bytes, or -1: an empty slot
    Py_ssize_t length
    int64_t number


cdef WordSlot* _word_table(Py_ssize_t capacity) noexcept nogil:
    cdef WordSlot* table = <WordSlot*>malloc(capacity * sizeof(WordSlot))
    cdef Py_ssize_t slot
    if table != NULL:
        for slot in range(capacity):
            table[slot].start = -1
    return table


cdef inline Py_ssize_t _word_home(uint64_t hashed, Py_ssize_t capacity) noexcept nogil:
    return <Py_ssize_t>((hashed * MULTIPLIER) >> 1) & (capacity - 1)


cdef WordSlot* _grown_word_table(WordSlot* table, Py_ssize_t capacity) noexcept nogil:
    """The table's words in one of twice the slots (`table` freed), or NULL (`table` kept)."""
    cdef WordSlot* grown = _word_table(2 * capacity)
    cdef Py_ssize_t old, slot
    if grown == NULL:
        return NULL
    for old in range(capacity):
        if table[old].start >= 0:
            slot = _word_home(table[old].hash, 2 * capacity)
            while grown[slot].start >= 0:
                slot = (slot + 1) & (2 * capacity - 1)
            grown[slot] = table[old]
    free(table)
    return grown


def number_words(const uint8_t[::1] data, uint8_t separator, int64_t[::1] ids, int64_t[::1] counts,
                 int64_t[::1] starts, int64_t[::1] ends):
    """`str.split()`'s words of ASCII texts joined by `separator` (a byte `str.split` splits at),
    numbered by first occurrence (0, 1, ...: equal words, equal numbers) into `ids`, each
    text's word count into `counts`, where each distinct word first occurs (bytes
    starts[number]..ends[number] - 1), by one pass over the bytes and a hash table over the
    words' bytes (sized by the distinct words, so that it stays in cache). `ids`, `starts` and
    `ends` hold at least (len(data) + 1) // 2 entries, `counts` one per text. Returns (words,
    distinct words)."""
    cdef Py_ssize_t size = data.shape[0], position = 0, start, length, words = 0, text = 0, in_text = 0
    cdef Py_ssize_t capacity = 1024, slot, distinct = 0
    cdef uint64_t hashed
    cdef uint8_t byte
    cdef WordSlot* table = _word_table(capacity)
    cdef WordSlot* grown
    cdef bint failed = table == NULL
    with nogil:
        while position < size and not failed:
            byte = data[position]
            if byte == separator:
                counts[text] = in_text
                text += 1
                in_text = 0
                position += 1
                continue
            if _is_split_space(byte):
                position += 1
                continue
            start = position
            hashed = 14695981039346656037ULL  # FNV-1a over the word's bytes
            while position < size and not _is_split_space(data[position]):
                hashed = (hashed ^ data[position]) * 1099511628211ULL
                position += 1
            length = position - start
            slot = _word_home(hashed, capacity)
            while table[slot].start >= 0 and not (table[slot].hash == hashed and table[slot].length == length
                                                  and memcmp(&data[table[slot].start], &data[start], length) == 0):
                slot = (slot + 1) & (capacity - 1)
            if table[slot].start < 0:
                table[slot].hash, table[slot].start, table[slot].length = hashed, start, length
                table[slot].number = distinct
                starts[distinct], ends[distinct] = start, position
                distinct += 1
            ids[words] = table[slot].number
            words += 1
            in_text += 1
            if 2 * distinct > capacity:  # half full: twice as many slots
                grown = _grown_word_table(table, capacity)
                if grown == NULL:
                    failed = True
                    break
                table, capacity = grown, 2 * capacity
        counts[text] = in_text
    free(table)
    if failed:
        raise MemoryError()
    return words, distinct
