"""Typicality statistics against a plain per-token reference, leave-one-out against refits, and
token ids against the texts they decode to."""
from __future__ import annotations

import functools
import re
import unicodedata

import numpy as np
import pytest
import torch
from spellchecker import SpellChecker

from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer, make_tokenizer
from gpu_neighbors.text.typicality import Typicality
from minilm import MODEL_PATH
from tests.conftest import ADVERSARIAL_TEXTS

CPU = torch.device("cpu")
ENGLISH = set(SpellChecker(language="en").word_frequency.keys())  # what the statistic reads by default
BY_LENGTH: dict[int, list[str]] = {}
for english_word in sorted(ENGLISH):
    BY_LENGTH.setdefault(len(english_word), []).append(english_word)
WHITESPACE = make_tokenizer("whitespace")


def one_letter_apart(a: str, b: str) -> bool:
    """Whether b is a with one letter deleted, inserted or replaced, or two adjacent ones swapped,
    by walking both strings side by side."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        apart = [i for i in range(len(a)) if a[i] != b[i]]
        return len(apart) == 1 or (len(apart) == 2 and apart[1] == apart[0] + 1
                                   and a[apart[0]] == b[apart[1]] and a[apart[1]] == b[apart[0]])
    shorter, longer = sorted((a, b), key=len)
    first = next((i for i in range(len(shorter)) if shorter[i] != longer[i]), len(shorter))
    return shorter[first:] == longer[first + 1:]


@functools.cache
def near_a_word(run: str) -> bool:
    """Not an English word but one letter apart from one (scanning the list's words of a length
    within one of the run's)."""
    return run not in ENGLISH and any(one_letter_apart(run, word) for length in (len(run) - 1, len(run), len(run) + 1)
                                      for word in BY_LENGTH.get(length, ()))


def misspelt(token: str) -> bool:
    """Some run of at least four letters of the token (NFC, lower-cased, cut at every other
    character) that is not an English word but one letter apart from one."""
    runs, current = [], ""
    for character in unicodedata.normalize("NFC", token).lower() + " ":
        if character.isalpha():
            current += character
        elif current:
            runs.append(current)
            current = ""
    return any(len(run) >= 4 and near_a_word(run) for run in runs)


def reference(training: list[str], texts: list[str], tokenize=str.split) -> np.ndarray:
    """The five statistics token by token, with Python sets: what Typicality computes at once.
    Support: tokens some training text holds, less two for each distinct character of the
    tokens that no training text holds. Order: bigrams some training text holds in the
    text's order, less the mean over a random order (every ordered pair of distinct positions
    once, the start before and the end after every token), per bigram. Repetition: bigrams equal
    to an earlier one of the text, among those whose tokens (start and end markers aside) have a
    word character. Ending: training texts whose last token ends in the same character.
    Spelling: tokens no training text holds with a run of four letters or more that is not a
    word of the list but one letter apart from one."""
    vocabulary = {token for text in training for token in tokenize(text)}
    start, end = "\0start", "\0end"

    def bigrams(tokens: list[str]) -> list[tuple[str, str]]:
        padded = [start] + tokens + [end]
        return list(zip(padded, padded[1:]))

    def wordlike(token: str) -> bool:
        return token in (start, end) or re.search(r"\w", token) is not None

    pairs = {pair for text in training for pair in bigrams(tokenize(text))}
    endings = [tokenize(text)[-1][-1] for text in training if tokenize(text)]
    characters = {character for text in training for character in "".join(tokenize(text))}
    rows = []
    for text in texts:
        tokens = tokenize(text)
        if not tokens:
            rows.append([np.nan] * 5)
            continue
        n, grams = len(tokens), bigrams(tokens)
        counted = [pair for pair in grams if wordlike(pair[0]) and wordlike(pair[1])]
        in_order = sum(pair in pairs for pair in grams)
        any_order = sum((tokens[i], tokens[j]) in pairs for i in range(n) for j in range(n) if i != j)
        any_order += sum((start, token) in pairs for token in tokens) + sum((token, end) in pairs for token in tokens)
        rows.append([
            sum(token in vocabulary for token in tokens) / n - 2 * len(set("".join(tokens)) - characters),
            (n * in_order - any_order) / (n * len(grams)),
            (len(counted) - len(set(counted))) / len(grams),
            endings.count(tokens[-1][-1]) / max(1, len(training)),
            sum(token not in vocabulary and misspelt(token) for token in tokens) / n,
        ])
    return np.array(rows, dtype=np.float64)


def test_statistics_equal_the_reference_on_real_and_adversarial_text(huse_records):
    training = [record["text"] for record in huse_records[:150]]
    texts = [record["text"] for record in huse_records[150:]] + ADVERSARIAL_TEXTS + [
        "the the the the", "zzz zzz zzz", training[0] + " " + training[0], " ".join(training[1].split()[::-1]),
        "# # # a # #", ", , ,", "a , b , c ,"]
    got = Typicality(training, WHITESPACE, CPU).of_texts(texts).numpy()
    np.testing.assert_array_equal(got, reference(training, texts))


def test_hand_computed_case():
    typicality = Typicality(["the cat sat", "the cat ran", "a dog"], WHITESPACE, CPU)
    got = typicality.of_texts(["the cat sat", "cat the sat", "the the the the", "zzz dog", "zzz zzz zzz",
                               "", "Thhe, cat"]).numpy()
    # order, (n * held in order - held in any order) / (n (n + 1)), and ending (of 3 texts, one
    # each ends in t, n, g): the cat sat holds all 4 of its bigrams in order, and 4 of them in
    # any order (cat-sat, the-cat, <s>-the, sat-</s>): (12 - 4) / 12; cat the sat holds sat-</s>
    # alone in its order: (3 - 4) / 12. the x4: <s>-the in order and after each of 4 starts,
    # the-the thrice; zzz dog: dog-</s> in order and in any order, (2 - 1) / 6; zzz x3, a word
    # no training text has: zzz-zzz twice in 4 bigrams, the second a repeat
    # no training text has the character z: support less 2. Spelling: "zzz" is an English word;
    # "Thhe," is misspelt ("thhe", one letter from "the") and no training text holds it, nor its
    # "T" and ",": support 1/2 - 2 x 2, no bigram held in any order, ends in "t"
    expected = [[1, 2 / 3, 0, 1 / 3, 0], [1, -1 / 12, 0, 1 / 3, 0], [1, 0, 2 / 5, 0, 0],
                [1 / 2 - 2, 1 / 6, 0, 1 / 3, 0], [-2, 0, 1 / 4, 0, 0], [np.nan] * 5, [1 / 2 - 4, 0, 0, 1 / 3, 1 / 2]]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)


def test_order_is_the_held_bigrams_in_order_less_their_mean_over_every_order():
    """The random order's mean, over all 5! orders of a text's tokens (a repeated one among
    them): a shuffled copy's order statistic is 0 on average, the text's own above it."""
    import itertools

    training = ["the cat sat on the mat", "a cat sat on a dog", "the dog ran"]
    tokens = "the cat sat on the".split()
    typicality = Typicality(training, WHITESPACE, CPU)
    orders = [" ".join(order) for order in itertools.permutations(tokens)]
    per_order = typicality.of_texts(orders).numpy()[:, 1]
    assert abs(per_order.mean()) < 1e-15
    # in its order 5 of its 6 bigrams are held (all but the-</s>); in any order the-cat and
    # on-the twice each, cat-sat, sat-on, and <s>-the before either "the": 8
    assert typicality.of_texts([" ".join(tokens)]).numpy()[0, 1] == pytest.approx((5 * 5 - 8) / 30)


@pytest.mark.parametrize("rows", [1, 3, 100])
def test_pair_blocks_change_nothing(huse_records, monkeypatch, rows):
    training = [record["text"] for record in huse_records[:80]]
    texts = [record["text"] for record in huse_records[80:120]] + ["", "x"]
    typicality = Typicality(training, WHITESPACE, CPU)
    expected, own = typicality.of_texts(texts), typicality.of_texts(training, own=True)
    monkeypatch.setattr("gpu_neighbors.text.typicality.PAIR_BLOCK", rows)
    np.testing.assert_array_equal(typicality.of_texts(texts).numpy(), expected.numpy())  # NaN rows alike
    np.testing.assert_array_equal(typicality.of_texts(training, own=True).numpy(), own.numpy())


@pytest.mark.parametrize("rows", [2, 7, 4096])
def test_a_texts_statistics_are_its_own_in_any_batch(huse_records, monkeypatch, rows):
    """Texts are taken in slices of similar length (so that a slice pads to about its own width):
    each row gets the bits it gets alone, in any order of the texts and any slice size."""
    training = [record["text"] for record in huse_records[:80]]
    texts = [record["text"] for record in huse_records[80:110]] + ["", "x", "zzz unseen zzz unseen"]
    typicality = Typicality(training, WHITESPACE, CPU)
    alone = np.concatenate([typicality.of_texts([text]).numpy() for text in texts])
    monkeypatch.setattr("gpu_neighbors.text.typicality.FIT_ROWS", rows)
    order = np.random.default_rng(rows).permutation(len(texts))
    together = typicality.of_texts([texts[index] for index in order]).numpy()
    np.testing.assert_array_equal(together, alone[order])  # NaN rows alike


def test_own_statistics_are_those_of_a_training_set_without_the_text(huse_records):
    """Leave-one-out: each training text's statistics equal those against the others alone
    (a refit without it), duplicates included."""
    training = [record["text"] for record in huse_records[:60]] + [huse_records[0]["text"]]
    own = Typicality(training, WHITESPACE, CPU).of_texts(training, own=True).numpy()
    for index in (0, 1, 17, len(training) - 1):
        others = training[:index] + training[index + 1:]
        np.testing.assert_array_equal(own[index], Typicality(others, WHITESPACE, CPU).of_texts([training[index]])[0])


def test_a_copy_is_measured_without_its_original(huse_records):
    """`originals`: each copy's statistics equal those against the training set without the
    text it copies (a refit), whatever else the batch holds; the copies perturbed every way the
    negative evidence perturbs them, and one with a character only its original holds."""
    from gpu_neighbors.text.perturbations import PERTURBATIONS, WordPool, perturb

    training = [record["text"] for record in huse_records[:60]] + ["zebra \u00e9t\u00e9 quartz"]
    pool = WordPool.from_texts(training)
    originals = [training[index] for index in (0, 5, 17, 60)]
    copies = [copy for name in PERTURBATIONS for copy in perturb(originals, name, seed=0, vocabulary=pool)]
    sources = originals * len(PERTURBATIONS)
    got = Typicality(training, WHITESPACE, CPU).of_texts(copies, originals=sources).numpy()
    for row, (copy, source) in enumerate(zip(copies, sources)):
        others = list(training)
        others.remove(source)
        np.testing.assert_array_equal(got[row], Typicality(others, WHITESPACE, CPU).of_texts([copy])[0])
    with pytest.raises(ValueError, match="one to a text"):
        Typicality(training, WHITESPACE, CPU).of_texts(copies, originals=sources[:-1])


def test_the_training_order_and_batching_change_nothing(huse_records, monkeypatch):
    training = [record["text"] for record in huse_records[:100]]
    texts = [record["text"] for record in huse_records[100:]]
    order = np.random.default_rng(3).permutation(len(training))
    shuffled = [training[index] for index in order]
    reference_stats = Typicality(training, WHITESPACE, CPU).of_texts(texts)
    monkeypatch.setattr("gpu_neighbors.text.typicality.FIT_ROWS", 7)
    assert torch.equal(Typicality(shuffled, WHITESPACE, CPU).of_texts(texts), reference_stats)
    assert torch.equal(Typicality(training, WHITESPACE, CPU).of_texts(training, own=True)[order],
                       Typicality(shuffled, WHITESPACE, CPU).of_texts(shuffled, own=True))


@pytest.mark.parametrize("training", [[], [""], ["   "]])
def test_a_training_set_without_tokens_supports_nothing(training):
    got = Typicality(training, WHITESPACE, CPU).of_texts(["a b", ""]).numpy()
    np.testing.assert_array_equal(got[0], [-4.0, 0.0, 0.0, 0.0, 0.0])  # no token held, two characters new
    assert np.isnan(got[1]).all()


def test_token_ids_give_the_statistics_of_their_decoded_texts(huse_records):
    tokenizer = HuggingFaceTokenizer(MODEL_PATH)
    training = [record["text"] for record in huse_records[:120]]
    texts = [record["text"] for record in huse_records[120:160]] + ["the the the the the", "zqx vvk", "", "# , # .", "naïve Café ☃ ½"]
    typicality = Typicality(training, tokenizer, CPU)
    encoded = tokenizer.hf(texts, padding=True, return_tensors="pt")
    decoded = tokenizer.hf.batch_decode(encoded["input_ids"], skip_special_tokens=True)
    from_ids = typicality.of_ids(encoded["input_ids"], encoded["attention_mask"])
    np.testing.assert_array_equal(from_ids.numpy(), typicality.of_texts(decoded).numpy())
    np.testing.assert_array_equal(from_ids.numpy(), reference(training, decoded, tokenizer.tokenize))


@pytest.mark.parametrize(("dense", "hashed"), [((0, 0), True), ((0, 0), False), ((1 << 40, 0), True)],
                         ids=["hashed", "searched", "indexed"])
def test_counting_by_index_by_hash_or_by_search_gives_the_same_statistics(huse_records, monkeypatch, dense, hashed):
    """Tables count a key by index where their keys' range is small, elsewhere by a hash index
    on the CPU and by binary search on a GPU: every table one way or every table another gives
    the default's bits (keys past the largest, negative keys and unknown tokens included)."""
    training = [record["text"] for record in huse_records[:80]]
    texts = [record["text"] for record in huse_records[80:110]] + ADVERSARIAL_TEXTS + ["", "zzz ~~ unseen"]
    default = Typicality(training, WHITESPACE, CPU)
    expected = [default.of_texts(texts), default.of_texts(training, own=True),
                default.of_texts(texts[:len(training)], originals=training[:len(texts)])]
    monkeypatch.setattr("gpu_neighbors.text.key_index.DENSE_KEYS", dense[0])
    monkeypatch.setattr("gpu_neighbors.text.key_index.DENSE_PER_KEY", dense[1])
    monkeypatch.setattr("gpu_neighbors.text.typicality.HASHED_ON", frozenset({"cpu"} if hashed else ()))
    typicality = Typicality(training, WHITESPACE, CPU)
    tables = [getattr(typicality.tables, name) for name in ("tokens", "bigrams", "endings", "characters")]
    assert all((table.by_key is not None) == (dense[0] > 0) for table in tables)
    got = [typicality.of_texts(texts), typicality.of_texts(training, own=True),
           typicality.of_texts(texts[:len(training)], originals=training[:len(texts)])]
    for one, other in zip(got, expected):
        np.testing.assert_array_equal(one.numpy(), other.numpy())  # NaN rows alike


def test_the_vocabulary_is_judged_for_spelling_only_where_a_text_is_left_out(huse_records):
    """A new text's vocabulary tokens are all held by a training text, so scoring it (and
    loading a scorer) never judges the vocabulary's spelling; measuring training texts without
    themselves judges the tokens one training text holds, and only those."""
    training = [record["text"] for record in huse_records[:100]] + ["a resturant servd", "the resturant"]
    typicality = Typicality(training, WHITESPACE, CPU)
    typicality.of_texts([record["text"] for record in huse_records[100:120]] + ["a resturant"])
    assert "_misspelt_once" not in typicality.__dict__
    own = typicality.of_texts(training, own=True).numpy()
    judged = typicality._misspelt_once
    tokens = typicality.vocabulary.tokens()
    assert judged[tokens.index("servd")] and not judged[tokens.index("resturant")]  # held by two texts
    assert own[-2, 4] == 1 / 3 and own[-1, 4] == 0  # servd alone; resturant held by the other text


@pytest.mark.parametrize("table_pairs", [0, 1 << 62], ids=["by-table", "by-position"])
def test_the_order_statistic_counts_the_same_pairs_from_the_table_or_by_position(huse_records, monkeypatch,
                                                                                 table_pairs):
    """The pairs of positions a training text holds in any order, counted pair by pair or read
    from the bigram table's side: the same integers for new texts, training texts left out of
    their own counts and copies without their originals (repeated tokens, unknown ones and
    bigrams only the left-out text holds included)."""
    training = [record["text"] for record in huse_records[:80]] + ["the the cat the cat", "solo bigram here"]
    texts = [record["text"] for record in huse_records[80:110]] + ADVERSARIAL_TEXTS + [
        "", "x", "the the the the", "cat the the cat zzz the", "solo bigram here here solo"]
    default = Typicality(training, WHITESPACE, CPU)
    expected = [default.of_texts(texts), default.of_texts(training, own=True),
                default.of_texts(texts[:len(training)], originals=training[:len(texts)])]
    monkeypatch.setattr("gpu_neighbors.text.typicality.TABLE_PAIRS", table_pairs)
    monkeypatch.setattr("gpu_neighbors.text.typicality.PAIR_BLOCK", 997)  # blocks of rows and of keys
    got = [default.of_texts(texts), default.of_texts(training, own=True),
           default.of_texts(texts[:len(training)], originals=training[:len(texts)])]
    for one, other in zip(got, expected):
        np.testing.assert_array_equal(one.numpy(), other.numpy())  # NaN rows alike
    np.testing.assert_array_equal(got[0].numpy(), reference(training, texts))


def test_a_long_texts_order_statistic_reads_work_linear_in_its_length(huse_records, monkeypatch):
    """A text of n tokens asks the tables for O(n + table) keys, not one per pair of positions
    (n^2: a 50,000-token line took minutes), and gets the reference's statistics; its own
    statistics as a training text too."""
    from gpu_neighbors.text.typicality import DocumentFrequency

    training = [record["text"] for record in huse_records[:60]]
    words = " ".join(training).split()
    long_text = " ".join(words[index % len(words)] for index in range(3_000)) + " unseen1 unseen2 unseen1"
    typicality = Typicality(training + [long_text], WHITESPACE, CPU)
    asked = []
    count = DocumentFrequency.count

    def counting(self, keys, host_waits=True):
        asked.append(keys.numel())
        return count(self, keys, host_waits)

    monkeypatch.setattr(DocumentFrequency, "count", counting)
    new = typicality.of_texts([long_text, long_text[:5_000]]).numpy()
    own = typicality.of_texts(training + [long_text], own=True).numpy()[-1]
    tables = typicality.tables
    bound = 50 * (len(long_text.split()) + tables.bigrams.keys.numel() + typicality.vocab_size) * 3
    assert sum(asked) < bound
    np.testing.assert_array_equal(new, reference(training + [long_text], [long_text, long_text[:5_000]]))
    np.testing.assert_array_equal(own, reference(training, [long_text])[0])
