"""BERTScore kernel against the bert-score package on real and adversarial text (CPU, MiniLM).

Every expected number comes from `bert_score.score` on the expanded pair lists (candidate =
cand, training text = ref), same model and layer. Idf: bert-score's `idf=True` would count
documents over the expanded reference list (every training text repeated once per candidate),
so the tests give it the idf dict of the training set made by its own `get_idf_dict`.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import ADVERSARIAL_TEXTS
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import BertScore
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.kernels.bertscore import (
    BertScoreKernel,
    baseline_sample,
    default_layer,
    load_model,
    read_baseline,
    shipped_baseline,
)
from gpu_neighbors.text.tokenizers import WhitespaceTokenizer
from minilm import MODEL_LAYERS, MODEL_PATH
from parity import all_pairs, assert_tiling_invariant

# A middle layer: the top layer of all-MiniLM-L6-v2 is trained for sentence embeddings, and its
# token cosines make P + R close to 0 for some pairs, where F = 2PR/(P+R) is ill-conditioned.
LAYER = 4
TOLERANCE = 1e-5
CPU = torch.device("cpu")


def make_kernel(train: list[str], **options) -> BertScoreKernel:
    options.setdefault("rescale", False)  # bert_score.score's default, which the parity tests use
    kernel = BertScoreKernel(tokenizer=WhitespaceTokenizer(), device=CPU, model=MODEL_PATH, layer=LAYER, **options)
    kernel.fit(train)
    return kernel


_REFERENCE_CACHE: dict = {}


def bert_score_utils():
    """bert-score's utils module; it imports pandas and matplotlib, which the device image has
    and a bare environment lacks, so a test that compares against it skips there (the GPU
    check's summary lists the reason)."""
    return pytest.importorskip("bert_score.utils")


def reference_f(candidates: list[str], train: list[str], idf: bool = False, **options) -> torch.Tensor:
    """bert-score F of every (candidate, training text) pair, [len(candidates), len(train)];
    with `idf`, idf weights from the training texts (see the module docstring)."""
    key = (tuple(candidates), tuple(train), idf, tuple(sorted(options.items())))
    if key not in _REFERENCE_CACHE:
        cands = [candidate for candidate in candidates for _ in train]
        refs = [text for _ in candidates for text in train]
        utils = bert_score_utils()
        weights = utils.get_idf_dict(train, utils.get_tokenizer(MODEL_PATH), nthreads=0) if idf else False
        _, _, f = pytest.importorskip("bert_score").score(cands, refs, model_type=MODEL_PATH, num_layers=LAYER, idf=weights, **options)
        _REFERENCE_CACHE[key] = f.view(len(candidates), len(train)).to(torch.float64)
    return _REFERENCE_CACHE[key]


def write_baseline(path, f_by_layer: dict[int, float]) -> str:
    """A baseline file in bert-score's format (LAYER,P,R,F, one row per layer 0..6)."""
    rows = [f"{layer},0.5,0.5,{f_by_layer.get(layer, 0.5)!r}" for layer in range(MODEL_LAYERS + 1)]
    path.write_text("LAYER,P,R,F\n" + "\n".join(rows) + "\n")
    return str(path)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Many small model and matching operations: on a shared 2-core machine, a second torch
    thread mostly waits for a busy core (3-4x slower here). The numbers do not depend on it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def bert_score_empty_text_support(monkeypatch):
    """bert-score 0.3.13 encodes an empty text as `tokenizer.build_inputs_with_special_tokens([])`,
    which transformers 5 no longer has; put back its BERT meaning ([CLS] ids [SEP]) so that
    bert-score's own code runs on empty and whitespace-only texts."""
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    if not hasattr(TokenizersBackend, "build_inputs_with_special_tokens"):
        monkeypatch.setattr(
            TokenizersBackend,
            "build_inputs_with_special_tokens",
            lambda self, ids, pair=None: [self.cls_token_id, *ids, self.sep_token_id],
            raising=False,
        )


@pytest.fixture(scope="module")
def train(huse_texts) -> list[str]:
    return huse_texts[:30]


@pytest.fixture(scope="module")
def candidates(huse_texts) -> list[str]:
    return huse_texts[100:130]


@pytest.fixture(scope="module")
def plain_kernel(train) -> BertScoreKernel:
    return make_kernel(train)


@pytest.mark.parametrize("idf", [False, True], ids=["no-idf", "idf"])
def test_all_pairs_match_bert_score_on_huse(idf, train, candidates, plain_kernel):
    kernel = make_kernel(train, idf=True) if idf else plain_kernel
    expected = reference_f(candidates, train, idf=idf)
    ours = all_pairs(kernel, candidates)
    assert ours.dtype == torch.float64 and ours.shape == (30, 30)
    assert torch.allclose(ours, expected, rtol=0, atol=TOLERANCE)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")  # inside bert-score
def test_rescaling_with_a_baseline_file(tmp_path, train, candidates):
    path = write_baseline(tmp_path / "baseline.tsv", {LAYER: 0.31, LAYER - 1: 0.9})
    kernel = make_kernel(train, rescale=True, baseline_path=path)
    expected = reference_f(candidates, train, rescale_with_baseline=True, lang="en", baseline_path=path)
    assert kernel.baseline == pytest.approx(0.31)
    assert torch.allclose(all_pairs(kernel, candidates), expected, rtol=0, atol=TOLERANCE)
    assert kernel.settings()["rescale"].startswith("file:baseline.tsv")


def test_estimated_baseline_is_the_mean_f_of_sampled_training_pairs(train, candidates):
    kernel = make_kernel(train, rescale=True)
    sample = [train[i] for i in baseline_sample(len(train)).tolist()]
    pair_f = reference_f(sample, sample)
    baseline = float(pair_f[~torch.eye(len(sample), dtype=torch.bool)].mean())
    assert kernel.baseline == pytest.approx(baseline, abs=1e-6)
    expected = (reference_f(candidates, train) - baseline) / (1 - baseline)
    assert torch.allclose(all_pairs(kernel, candidates), expected, rtol=0, atol=TOLERANCE)
    assert kernel.settings()["rescale"].startswith("estimated:sample=30,seed=0")


@pytest.mark.parametrize("idf", [False, True], ids=["no-idf", "idf"])
def test_adversarial_texts_match_bert_score(idf, huse_texts, bert_score_empty_text_support):
    """Empty, whitespace-only, one-token, repeated, unicode and over-long (962 and 830 tokens,
    truncated at 512) texts. bert-score runs one pair per batch here: in a padded batch it scores
    padding as a cosine of 0, which beats a token whose best cosine is negative (some of these
    texts have such tokens), so its numbers would depend on the batch's other pairs."""
    odd = ADVERSARIAL_TEXTS + ["hello [SEP] world [CLS]", "\t\n  leading and trailing  \n"]
    train = odd + huse_texts[:2]
    candidates = odd + huse_texts[150:151]
    kernel = make_kernel(train, idf=idf)
    assert max(kernel._train.lengths.tolist()) == kernel.max_length == 512
    expected = reference_f(candidates, train, idf=idf, batch_size=1)
    ours = all_pairs(kernel, candidates)
    assert torch.allclose(ours, expected, rtol=0, atol=TOLERANCE)
    empty = [index for index, text in enumerate(candidates) if not text.strip()]
    assert empty and (ours[empty] == 0).all() and (ours[:, empty] == 0).all()


def test_tiles_do_not_depend_on_chunks_or_blocks(train, candidates, plain_kernel):
    """Equal up to float32 rounding: texts encoded in other batches, and token cosines computed
    in products of other shapes, may differ in the last bits."""
    full = assert_tiling_invariant(
        plain_kernel, candidates, [(list(range(block, 30, block)), []) for block in (1, 4, 13)], atol=1e-6
    )
    for rows in (1, 7):
        chunked = all_pairs(plain_kernel, candidates[:14], chunks=range(rows, 14, rows))
        assert torch.allclose(chunked, full[:14], rtol=0, atol=1e-6)
    own = plain_kernel.tile(plain_kernel.encode_train(5, 17), 0, 30)
    assert torch.allclose(own, all_pairs(plain_kernel, train[5:17]), rtol=0, atol=1e-6)
    assert torch.allclose(own[torch.arange(12), torch.arange(5, 17)], torch.ones(12, dtype=torch.float64))


def test_scorer_predictions_identical_for_any_chunk_size(huse_texts, huse_scores):
    scorer = NeighborsScorer(kernel=BertScore(model=MODEL_PATH, layer=LAYER, rescale=True),
                             estimator=Threshold.paper(), device="cpu").fit(huse_texts[:80], huse_scores[:80])
    assert scorer.tau_ == 0.10 and f"model:{MODEL_PATH}|layer:4" in str(scorer.signature)
    candidates = huse_texts[185:]
    runs = []
    for chunk_size, budget in ((None, None), (1, None), (6, 8 * 6 * 30), (15, 8 * 15 * 7)):
        scorer.chunk_size, scorer.memory_budget = chunk_size, budget
        runs.append((scorer.predict(candidates), scorer.leave_one_out()))
    first_prediction, first_loo = runs[0]
    assert 0 < first_prediction.covered.mean() < 1 and 0 < first_loo.covered.mean() < 1
    for prediction, loo in runs[1:]:
        for ours, reference in ((prediction, first_prediction), (loo, first_loo)):
            assert np.array_equal(ours.num_neighbors, reference.num_neighbors)
            assert np.array_equal(ours.scores, reference.scores, equal_nan=True)


def test_default_layer_comes_from_bert_score():
    expected = bert_score_utils().model2layers["roberta-large"]
    assert default_layer("roberta-large") == expected == 17
    with pytest.raises(ValueError, match="no default layer.*layer"):
        default_layer(MODEL_PATH)


def test_shipped_baseline_is_read_as_bert_score_reads_it():
    path = shipped_baseline("en", "roberta-large")
    assert path is not None and path.name == "roberta-large.tsv"
    assert read_baseline(path, 17) == pytest.approx(float(pytest.importorskip("pandas").read_csv(path).iloc[17]["F"]))
    assert shipped_baseline("en", MODEL_PATH) is None


def test_bad_options_are_named(tmp_path):
    def kernel(**options):
        return BertScoreKernel(tokenizer=WhitespaceTokenizer(), device=CPU, **options)

    with pytest.raises(ValueError, match="cannot load BERTScore model 'roberta-large'"):
        kernel()  # bert-score's English default, layer 17, is not in this machine's cache
    with pytest.raises(ValueError, match="layer must be an integer from 0 to 6"):
        kernel(model=MODEL_PATH, layer=7)
    with pytest.raises(ValueError, match="cannot load BERTScore model"):
        kernel(model=str(tmp_path / "no-such-model"), layer=1)
    with pytest.raises(ValueError, match="idf must be True or False"):
        kernel(model=MODEL_PATH, layer=1, idf="yes")
    with pytest.raises(ValueError, match="set rescale=True"):
        kernel(model=MODEL_PATH, layer=1, rescale=False, baseline_path="x.tsv")
    with pytest.raises(ValueError, match="cannot read baseline file x.tsv"):
        kernel(model=MODEL_PATH, layer=1, baseline_path="x.tsv")
    only_layer_0 = tmp_path / "short.tsv"
    only_layer_0.write_text("LAYER,P,R,F\n0,0.5,0.5,0.5\n")
    with pytest.raises(ValueError, match="no baseline row for layer 1"):
        kernel(model=MODEL_PATH, layer=1, rescale=True, baseline_path=str(only_layer_0))
    one_text = kernel(model=MODEL_PATH, layer=1, rescale=True)
    with pytest.raises(ValueError, match="at least 2 training texts"):
        one_text.fit(["only one"])


def test_settings_record_what_changes_the_numbers(plain_kernel):
    assert plain_kernel.settings() == {
        "model": MODEL_PATH,
        "layer": "4",
        "idf": "no",
        "rescale": "no",
        "dtype": "float32",
    }


def test_training_set_dependence_is_declared(train):
    assert not make_kernel(train).depends_on_training_set
    assert make_kernel(train, idf=True).depends_on_training_set
    assert make_kernel(train, rescale=True).depends_on_training_set  # baseline estimated from train
    scorer = NeighborsScorer(kernel=BertScore(model=MODEL_PATH, layer=LAYER, idf=True))
    with pytest.warns(UserWarning, match="depend on the whole training set"):
        scorer.fit_pairwise(train[:12], np.linspace(0, 1, 12))


def test_loading_the_model_draws_no_progress_bar(capfd):
    """transformers draws a "Loading weights" bar on stderr at every load of a model on disk:
    `score --quiet` with the bertscore kernel printed it (the fluency model's loads were
    silenced first; both loads now go through `text.hub.no_progress_bars`)."""
    capfd.readouterr()
    load_model(str(MODEL_PATH), MODEL_LAYERS)
    assert "Loading weights" not in capfd.readouterr().err
