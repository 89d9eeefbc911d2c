# The compiled host loops (_compiled.pyx), for the type checker.
import numpy as np

def count_texts(char_ids: np.ndarray, kinds: np.ndarray, word_bit: int, space_bit: int, bounds: np.ndarray, first: int,
                size: int, space_id: int, ends: np.ndarray, end_bounds: np.ndarray, dense: np.ndarray,
                slots: np.ndarray, keys: np.ndarray, index_bounds: np.ndarray, unigrams: int, char_offsets: np.ndarray,
                indptr: np.ndarray, indices: np.ndarray, counts: np.ndarray) -> int: ...
def weigh_rows(indptr: np.ndarray, indices: np.ndarray, counts: np.ndarray, tf_of_count: np.ndarray, idf: np.ndarray,
               word_features: int, values: np.ndarray) -> int: ...
def quantise_split(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, word_features: int, scale: float,
                   max_squared_norm: int, position: np.ndarray, head: np.ndarray, tail_indptr: np.ndarray,
                   tail_indices: np.ndarray, tail_values: np.ndarray) -> None: ...
def weigh_quantise_split(indptr: np.ndarray, indices: np.ndarray, counts: np.ndarray, tf_of_count: np.ndarray,
                         idf: np.ndarray, word_features: int, scale: float, max_squared_norm: int, position: np.ndarray,
                         head: np.ndarray, tail_indptr: np.ndarray, tail_indices: np.ndarray,
                         tail_values: np.ndarray) -> int: ...
def find_keys(dense: np.ndarray, slots: np.ndarray, keys: np.ndarray, shift: int, mask: int, asked: np.ndarray,
              found: np.ndarray) -> None: ...
def word_ids(char_ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, size: int, ends: np.ndarray,
             end_bounds: np.ndarray, dense: np.ndarray, slots: np.ndarray, keys: np.ndarray, bounds: np.ndarray,
             found: np.ndarray) -> None: ...
def typicality_of_tokens(ids: np.ndarray, identities: np.ndarray, misspelt: np.ndarray, lengths: np.ndarray,
                         endings: np.ndarray, codes: np.ndarray, code_bounds: np.ndarray, vocab_size: int,
                         identity_count: int, dense: np.ndarray, slots: np.ndarray, keys: np.ndarray,
                         index_bounds: np.ndarray, ending_counts: np.ndarray, bigram_table: np.ndarray,
                         successors: np.ndarray, opens: np.ndarray, closes: np.ndarray, texts: int,
                         table_pairs: int, nan: float, statistics: np.ndarray) -> None: ...
def split_words(codes: np.ndarray, kinds: np.ndarray, word_bit: int, space_bit: int, bounds: np.ndarray, base: int,
                low_bits: int,                vocabulary_codes: np.ndarray, vocabulary_firsts: np.ndarray, vocabulary_lengths: np.ndarray,
                dense: np.ndarray, slots: np.ndarray, keys: np.ndarray, shift: int, mask: int, hash_ids: np.ndarray,
                ids: np.ndarray, unknown_rank: np.ndarray, wordlike: np.ndarray, firsts: np.ndarray,
                token_lengths: np.ndarray, lengths: np.ndarray, endings: np.ndarray, inside_codes: np.ndarray,
                code_bounds: np.ndarray) -> tuple[int, int]: ...
def ngram_order(ids: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, order: int, vocab_size: int,
                dense: np.ndarray, slots: np.ndarray, keys: np.ndarray, bounds: np.ndarray, max_rank: int,
                grams: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> int: ...
def shared_counts(ids: np.ndarray, lengths: np.ndarray, vocab_size: int, matches: np.ndarray) -> bool: ...
def number_words(data: np.ndarray, separator: int, ids: np.ndarray, counts: np.ndarray, starts: np.ndarray,
                 ends: np.ndarray) -> tuple[int, int]: ...
