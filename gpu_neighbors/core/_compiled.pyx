# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3
"""The core's per-row host loops in C (Cython), built at install where a C compiler is found;
`core.compiled` imports this module or None, and then the callers run their torch passes, which
give the same answers. Each function runs without the GIL."""
from libc.stdint cimport int16_t, int64_t
from libc.math cimport NAN, sqrt
from libc.stdlib cimport free, malloc, qsort

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define prefetch_for_writing(address) __builtin_prefetch((address), 1, 3)
    #else
    #define prefetch_for_writing(address) ((void)0)
    #endif
    """
    void prefetch_for_writing(const void* address) nogil  # a hint: nothing where the compiler has none

# Entries ahead whose cell `scale_entries` prefetches: its cells (2% of a BLEU* tile's) are too sparse for
# the hardware's prefetcher, and each was a cache miss (a predict's order factors 0.023 -> 0.011 s).
cdef Py_ssize_t AHEAD = 32

cdef Py_ssize_t PRUNE_WIDTH = 4  # a tile at least this many k wide is gathered above a bound of its k-th value
cdef Py_ssize_t PARTS = 2  # chunks per k of the row whose maxima bound its k-th value


cdef struct Ranked:
    int64_t rank
    int64_t position


cdef inline int64_t _rank(int64_t index, const int64_t[::1] tie_rank, int64_t size) noexcept nogil:
    """An entry's tie rank; an index past the training set (an empty slot): after every rank."""
    return tie_rank[index] if 0 <= index < size else size


cdef int _by_rank(const void* one, const void* other) noexcept nogil:
    cdef int64_t a = (<const Ranked*>one).rank, b = (<const Ranked*>other).rank
    return (a > b) - (a < b)


cdef double _kth_largest(const double* source, Py_ssize_t size, Py_ssize_t k, double* spare,
                         Py_ssize_t room) noexcept nogil:
    """The k-th largest of `source`'s first `size` (1 <= k <= size <= room; no NaN), which it leaves
    as they are: partitions around a median of three, out of place and without a branch on the
    values (each written to both sides, counted in one; those equal to the pivot in neither), into
    two pairs of halves of `spare` (4 room) in turn."""
    cdef const double* current = source
    cdef double* above
    cdef double* below
    cdef Py_ssize_t turn = 0, i, more, less
    cdef double pivot, a, b, c, value
    while True:
        a, b, c = current[0], current[size // 2], current[size - 1]
        pivot = max(min(a, b), min(max(a, b), c))
        above = spare + 2 * turn * room
        below = above + room
        more = 0
        less = 0
        for i in range(size):
            value = current[i]
            above[more] = value
            more += value > pivot
            below[less] = value
            less += value < pivot
        if k <= more:
            current, size = above, more
        elif k <= size - less:
            return pivot
        else:
            k -= size - less
            current, size = below, less
        turn = 1 - turn


cdef void _chunk_maxima(const double* row, Py_ssize_t chunk, Py_ssize_t parts, double* maxima) noexcept nogil:
    """The maxima of a row's first `parts` chunks, `chunk` wide. Four running maxima a chunk, so
    that no maximum waits on the one before (a third of the pass's time with one)."""
    cdef Py_ssize_t part, column, start, stop
    cdef double one, two, three, four
    for part in range(parts):
        start, stop = part * chunk, (part + 1) * chunk
        one = two = three = four = row[start]
        column = start + 1
        while column + 4 <= stop:
            one = row[column] if row[column] > one else one
            two = row[column + 1] if row[column + 1] > two else two
            three = row[column + 2] if row[column + 2] > three else three
            four = row[column + 3] if row[column + 3] > four else four
            column += 4
        while column < stop:
            one = row[column] if row[column] > one else one
            column += 1
        one = two if two > one else one
        three = four if four > three else three
        maxima[part] = three if three > one else one


def merge_top(const double[:, ::1] tile, int64_t first_column, const int64_t[::1] tie_rank,
              double[:, ::1] similarity, int64_t[:, ::1] index):
    """`TopKReduction`'s merge of a CPU tile (similarities [rows, columns] of training columns
    from `first_column`) into its buffers [rows, k] (`similarity`, `index`, in place): each row's
    first k of its buffer and the tile together in the order similarity descending, tie rank
    ascending (an index past the training set, an empty slot's: after every rank), as a set in
    no particular order; the order is total (ranks are distinct), so the set is `select_top`'s.

    Per row, a floor with k entries at or above it: the buffer's least, and on a tile at least
    PRUNE_WIDTH k wide the k-th largest of the maxima of 2k chunks of the row (k of them are k
    distinct entries at or above it; `topk._kth_lower_bound`). Then one pass, over the chunks
    whose maximum is above the floor (fewer than k of the 2k), that gathers every entry above
    it, raising it to the k-th largest gathered whenever the room (4k + 32) fills: the k-th
    largest value is then the k-th gathered or, with fewer than k, the floor, and every entry
    above it is kept. Of the entries at it, those with the lowest ranks: where it is above the
    floor they were gathered; at the floor, the buffer's and a walk through the tile's columns
    in rank order (sorted once a tile) until the k are full (BLEU*'s few values and TF-IDF's
    zeros tie whole rows: the walk reads about as many as it keeps). No NaN (the tiles have none)."""
    cdef Py_ssize_t rows = tile.shape[0], columns = tile.shape[1], k = similarity.shape[1]
    cdef Py_ssize_t room = 4 * k + 32
    cdef Py_ssize_t parts = PARTS * k if columns >= PRUNE_WIDTH * k else 0
    cdef Py_ssize_t chunk = columns // parts if parts else columns, part, start, stop
    cdef Py_ssize_t row, column, slot, gathered, kept, taken, walked, tied
    cdef int64_t size = tie_rank.shape[0], held, position
    cdef double value, floor, kth
    cdef double* values
    cdef int64_t* positions
    cdef double* scratch
    cdef double* maxima
    cdef double* out_similarity
    cdef int64_t* out_index
    cdef Ranked* ties
    cdef Ranked* by_rank
    if similarity.shape[0] != rows or index.shape[0] != rows or index.shape[1] != k:
        raise ValueError("merge_top's buffers are not [tile rows, k]")
    if first_column < 0 or first_column + columns > size:
        raise ValueError("merge_top's tile reaches past the training set")
    if not rows or not k:
        return
    values = <double*>malloc((room + 1) * sizeof(double))  # + 1: the slot written past the last gathered
    positions = <int64_t*>malloc((room + 1) * sizeof(int64_t))
    scratch = <double*>malloc(4 * room * sizeof(double))  # `_kth_largest`'s halves
    maxima = <double*>malloc((parts + 1) * sizeof(double))
    out_similarity = <double*>malloc(k * sizeof(double))
    out_index = <int64_t*>malloc(k * sizeof(int64_t))
    ties = <Ranked*>malloc(room * sizeof(Ranked))  # the gathered entries at the k-th value, or the buffer's
    by_rank = <Ranked*>malloc((columns + 1) * sizeof(Ranked))
    try:
        if (values == NULL or positions == NULL or scratch == NULL or maxima == NULL or out_similarity == NULL
                or out_index == NULL or ties == NULL or by_rank == NULL):
            raise MemoryError()
        with nogil:
            for column in range(columns):
                by_rank[column].rank, by_rank[column].position = tie_rank[first_column + column], column
            qsort(by_rank, columns, sizeof(Ranked), _by_rank)
            for row in range(rows):
                # Every entry above the floor (positions: the buffer's slots, then k + the tile's columns).
                floor = similarity[row, 0]
                for slot in range(1, k):
                    floor = min(floor, similarity[row, slot])
                if parts:
                    _chunk_maxima(&tile[row, 0], chunk, parts, maxima)
                    floor = max(floor, _kth_largest(maxima, parts, k, scratch, room))
                gathered = 0
                for slot in range(k):
                    if similarity[row, slot] > floor:
                        values[gathered], positions[gathered] = similarity[row, slot], slot
                        gathered += 1
                for part in range(parts + 1):
                    start, stop = part * chunk, (part + 1) * chunk if part < parts else columns
                    if part < parts and maxima[part] <= floor:
                        continue  # nothing in it above the floor
                    for column in range(start, stop):
                        # Written always, counted where above the floor: no branch to mispredict.
                        value = tile[row, column]
                        values[gathered], positions[gathered] = value, k + column
                        gathered += value > floor
                        if gathered == room:
                            floor = _kth_largest(values, gathered, k, scratch, room)
                            kept = 0
                            for slot in range(gathered):
                                if values[slot] > floor:
                                    values[kept], positions[kept] = values[slot], positions[slot]
                                    kept += 1
                            gathered = kept
                kth = floor
                if gathered >= k:
                    kth = _kth_largest(values, gathered, k, scratch, room)
                # Every entry above the k-th value; those at it, where it is above the floor, are gathered too.
                taken = 0
                tied = 0
                for slot in range(gathered):
                    value, position = values[slot], positions[slot]
                    if value >= kth:
                        held = index[row, position] if position < k else first_column + position - k
                        if value > kth:
                            out_similarity[taken], out_index[taken] = value, held
                            taken += 1
                        else:
                            ties[tied].rank = _rank(held, tie_rank, size)
                            ties[tied].position = position
                            tied += 1
                if kth > floor:
                    qsort(ties, tied, sizeof(Ranked), _by_rank)
                    for slot in range(k - taken):
                        position = ties[slot].position
                        out_similarity[taken] = tile[row, position - k] if position >= k else similarity[row, position]
                        out_index[taken] = index[row, position] if position < k else first_column + position - k
                        taken += 1
                else:
                    # At the floor: the buffer's entries at it, and the tile's by a walk through its
                    # columns in rank order, lowest rank first until the k are full.
                    tied = 0
                    for slot in range(k):
                        if similarity[row, slot] == kth:
                            ties[tied].rank = _rank(index[row, slot], tie_rank, size)
                            ties[tied].position = slot
                            tied += 1
                    qsort(ties, tied, sizeof(Ranked), _by_rank)
                    walked = 0
                    slot = 0
                    while taken < k:
                        while walked < columns and tile[row, by_rank[walked].position] != kth:
                            walked += 1
                        if slot < tied and (walked == columns or ties[slot].rank < by_rank[walked].rank):
                            out_similarity[taken] = similarity[row, ties[slot].position]
                            out_index[taken] = index[row, ties[slot].position]
                            slot += 1
                        elif walked == columns:  # never while k entries are at or above the floor: no read past the row
                            out_similarity[taken], out_index[taken] = NAN, -1
                        else:
                            out_similarity[taken] = tile[row, by_rank[walked].position]
                            out_index[taken] = first_column + by_rank[walked].position
                            walked += 1
                        taken += 1
                for slot in range(k):
                    similarity[row, slot], index[row, slot] = out_similarity[slot], out_index[slot]
    finally:
        free(values)
        free(positions)
        free(scratch)
        free(maxima)
        free(out_similarity)
        free(out_index)
        free(ties)
        free(by_rank)


cdef double ROUNDER = 4503599627370496.0  # 2^52: (x + 2^52) - 2^52 rounds 0 <= x < 2^51 half to even


cdef inline double _quantised_weight(double similarity, double power, Py_ssize_t whole, bint half) noexcept nogil:
    """`neighbours.quantised_weights` of one similarity, by the same operations in the same order
    (C's sqrt is correctly rounded, as `portable.rounded_sqrt` is; the rounding to a whole unit
    is half to even, as torch.round's; no fused multiply-add: -ffp-contract=off)."""
    cdef double base, weight, square
    cdef Py_ssize_t exponent = whole
    if power == 0:
        return 1.0
    base = min(max(similarity, 0.0), 1.0)
    weight = sqrt(base) if half else 1.0
    square = base
    while exponent:
        if exponent & 1:
            weight = weight * square
        exponent >>= 1
        if exponent:
            square = square * square
    weight = (weight * 1048576.0 + ROUNDER) - ROUNDER  # 2^WEIGHT_BITS units, at most 2^20
    return weight if weight > 1.0 else 1.0


def topk_sums(const double[:, ::1] similarity, const int64_t[:, ::1] index, const int64_t[::1] ends,
              const double[:, ::1] table, double power, int64_t[:, :, ::1] sums, int64_t[:, ::1] counts):
    """`topk.running_sums`' segment sums on the CPU, one pass per row: over each segment of a row
    of the top list (from the previous of `ends` to each), the entries with an index and a
    positive similarity, counted into `counts` [rows, segments], and their quantised weight (power
    `power`, a multiple of 1/2) times their training text's row of `table`
    (`Quality.weighted_columns`: integers in float64) added into `sums` [rows, segments, columns]
    (written whole). Every product and sum is an integer below 2^53, exact in float64 in any
    order, as in the torch pass's float64 product: the same numbers."""
    cdef Py_ssize_t rows = similarity.shape[0], width = similarity.shape[1], segments = ends.shape[0]
    cdef Py_ssize_t size = table.shape[0], columns = table.shape[1]
    cdef Py_ssize_t row, segment, position, column, start, stop, whole = <Py_ssize_t>power
    cdef bint half = power != <double>whole
    cdef int64_t held, count
    cdef double value, weight
    cdef const double* text
    cdef double* total
    if index.shape[0] != rows or index.shape[1] != width:
        raise ValueError("topk_sums' similarity and index differ in shape")
    if sums.shape[0] != rows or sums.shape[1] != segments or sums.shape[2] != columns:
        raise ValueError("topk_sums' sums are not [rows, segments, table columns]")
    if counts.shape[0] != rows or counts.shape[1] != segments:
        raise ValueError("topk_sums' counts are not [rows, segments]")
    for segment in range(segments):
        if ends[segment] > width or ends[segment] < (ends[segment - 1] if segment else 0):
            raise ValueError("topk_sums' segment ends must ascend within the row")
    total = <double*>malloc((columns + 1) * sizeof(double))
    if total == NULL:
        raise MemoryError()
    with nogil:
        for row in range(rows):
            start = 0
            for segment in range(segments):
                stop = ends[segment]
                count = 0
                for column in range(columns):
                    total[column] = 0.0
                for position in range(start, stop):
                    value = similarity[row, position]
                    held = index[row, position]
                    if held < 0 or not value > 0:
                        continue
                    count += 1
                    if not size:  # no table to sum: counted, as the torch pass counts it
                        continue
                    text = &table[min(held, size - 1), 0]  # in range, as the torch pass clamps it
                    weight = _quantised_weight(value, power, whole, half)
                    for column in range(columns):
                        total[column] += weight * text[column]
                counts[row, segment] = count
                for column in range(columns):
                    sums[row, segment, column] = <int64_t>total[column]
                start = stop
    free(total)


def rows_times_indicator(const double[:, ::1] table, const int64_t[::1] rows, const int16_t[:, ::1] counts,
                         double[:, ::1] out):
    """out[i, j] = table[rows[i], j] * (1 where counts[i, j] > 0, else 0), in one pass: the torch
    passes it replaces (a row gather, the counts made a float64 indicator, a multiply) write and
    read the tile three times. The same multiply, so the same bits (0 times a value is +0 or -0
    as there, NaN stays NaN)."""
    cdef Py_ssize_t height = out.shape[0], width = out.shape[1], size = table.shape[0], row, column
    cdef const double* source
    cdef const int16_t* count
    cdef double* target
    if rows.shape[0] != height or counts.shape[0] != height or counts.shape[1] != width or table.shape[1] != width:
        raise ValueError("rows_times_indicator's rows, counts and out differ in shape")
    for row in range(height):
        if not 0 <= rows[row] < size:
            raise ValueError("rows_times_indicator's row index is outside the table")
    with nogil:
        for row in range(height):
            source, count, target = &table[rows[row], 0], &counts[row, 0], &out[row, 0]
            for column in range(width):
                target[column] = source[column] * (1.0 if count[column] > 0 else 0.0)


def scale_entries(double[:, ::1] matrix, int64_t first_row, const int64_t[::1] rows, const int64_t[::1] cols,
                  const int64_t[:, :] counts, const double[:, ::1] factors):
    """Each entry p's matrix[rows[p] - first_row, cols[p]] (distinct positions) times factors[0,
    counts[0, p]], then times factors[1, counts[1, p]], ..., in place: torch's gather, a gather
    and a multiply per order, and a scatter, in one pass (the same multiplies in the same order,
    so the same bits). Every position and count is checked before any entry changes."""
    cdef Py_ssize_t height = matrix.shape[0], width = matrix.shape[1], orders = counts.shape[0]
    cdef Py_ssize_t entries = rows.shape[0], size = factors.shape[1], entry, order, row, column, ahead
    cdef double value
    cdef bint outside = False
    if cols.shape[0] != entries or counts.shape[1] != entries or factors.shape[0] < orders:
        raise ValueError("scale_entries' rows, columns, counts and factors do not fit")
    with nogil:
        for entry in range(entries):
            outside |= not (0 <= rows[entry] - first_row < height and 0 <= cols[entry] < width)
            for order in range(orders):
                outside |= not 0 <= counts[order, entry] < size
    if outside:
        raise ValueError("scale_entries: an entry or a count lies outside the matrix or the factors")
    with nogil:
        for entry in range(entries):
            if entry + AHEAD < entries:
                ahead = rows[entry + AHEAD] - first_row
                prefetch_for_writing(&matrix[ahead, 0] + cols[entry + AHEAD])
            row, column = rows[entry] - first_row, cols[entry]
            value = matrix[row, column]
            for order in range(orders):
                value = value * factors[order, counts[order, entry]]
            matrix[row, column] = value
