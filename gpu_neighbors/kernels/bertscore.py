"""BERTScore F1 (Zhang et al., 2019) for all pairs, as batched matrix products.

The numbers equal `bert_score.score([x], [s], model_type=model, num_layers=layer,
rescale_with_baseline=...)` F for a candidate x and a training text s (with idf, given
`idf=get_idf_dict(training texts)`: the weights come from the training set, not from the pair):
- a text is stripped, encoded with the model's special tokens and truncated to the model's
  maximum length; the model keeps its first `layer` layers and its last hidden state gives the
  token embeddings (layer 0 = the embedding layer), normalised to unit length;
- every token of one side is matched to its most similar token of the other side (special
  tokens included), and the matches are averaged with per-text normalised weights: 1 for every
  token but the [CLS]/[SEP] ids (idf off), or idf(t) = log((M + 1) / (df(t) + 1)) over the M
  training texts (idf on; special tokens occur in every text and so weigh 0). P averages over
  the candidate's tokens, R over the training text's, F = 2PR / (P + R), and F = 0 when a side
  has no weight (an empty or whitespace-only text);
- rescaling maps F to (F - b) / (1 - b) with the baseline b of the model and layer.

Each distinct text is encoded once (length-sorted batches; by default float16 autocast on CUDA
and float32 on the CPU, or the `precision` asked for) and its unit token embeddings and weights are kept; the training side is cached at
`fit`. A tile is computed in sub-tiles of similar-length texts sized by a fixed token budget:
one matrix product of all candidate tokens with all training tokens of the sub-tile, then a max
over each text's token positions. A shorter text is padded with copies of its own first token
at weight 0, which changes no maximum, so padding needs no mask. (bert-score scores padding as
a similarity of 0 instead, so for a token whose best cosine is negative its number depends on
the other pairs of its batch; ours is the unpadded value, which bert-score gives a pair alone.)
The weighted sums run in float64, so how training texts are split into blocks changes nothing
beyond float32 rounding of the token cosines; candidates encoded in other batches can differ
by such rounding too (about 1e-7), so only a similarity that close to tau can fall either way.

Baseline b for `rescale=True`: the F column of `baseline_path` (bert-score's LAYER,P,R,F
format) at the row of `layer`, else bert-score's own file for `lang` and the model when it ships
one, else an estimate from the training set: the mean F over all ordered pairs of distinct
texts among a seeded random sample of at most 512 training texts. bert-score's files are means
over random pairs of unrelated sentences (for English, from a news crawl), so rescaled F is
near 0 for unrelated texts, and the paper's tau = 0.10 presumes rescaling. An estimated
baseline is the mean over pairs of one domain, which are closer than unrelated sentences, so it
is higher and rescaled F lower than with bert-score's file for the same model. Unscaled F of unrelated texts is already high
(b = 0.831 for roberta-large at layer 17 in bert-score's en/roberta-large.tsv), so with
`rescale=False` tau must be set on that scale: a rescaled threshold t is the unscaled
threshold b + t (1 - b), e.g. 0.848 for t = 0.10 there.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import torch

from gpu_neighbors.core.tiling import HostTensors
from gpu_neighbors.text.hub import hub_access, no_progress_bars
from gpu_neighbors.text.tokenizers import Tokenizer, one_line
from gpu_neighbors.kernels.base import Kernel

PRECISIONS = ("float32", "float16", "bfloat16")
DEFAULT_MODEL = "roberta-large"  # bert-score's model for lang="en"
ENCODE_TOKENS = 1 << 14  # padded tokens per forward pass, at most
PADDING_LIMIT = 1.5  # padded tokens of a group, at most, per real token
BASELINE_SAMPLE = 512  # training texts whose pairs estimate a missing baseline
BASELINE_SEED = 0


@dataclass(frozen=True)
class TokenEmbeddings(HostTensors):
    """Unit token embeddings and normalised weights of a list of texts (a ragged batch).

    Texts with the same tokens share one stored slice, so `offsets` may repeat. The lengths are
    kept twice: on the CPU, where sub-tiles are planned without reading the device, and on the
    device, where padding reads them; so matching copies nothing to the device (a copy from
    host memory waits for the device)."""

    host_tensors = ("lengths",)

    vectors: torch.Tensor  # [tokens, hidden], unit rows
    weights: torch.Tensor  # float32 [tokens], summing to 1 (or 0) over each text
    offsets: torch.Tensor  # int64 [texts], on the device
    lengths: torch.Tensor  # int64 [texts], on the CPU
    device_lengths: torch.Tensor  # the same, on the device

    def __len__(self) -> int:
        return int(self.lengths.numel())

    def select(self, rows: torch.Tensor) -> TokenEmbeddings:
        """The texts at `rows` (a CPU int64 tensor), sharing storage; copies `rows` to the
        device, so it is for work outside the tile loop (the baseline's sample)."""
        on_device = rows.to(self.offsets.device)
        return TokenEmbeddings(self.vectors, self.weights, self.offsets[on_device], self.lengths[rows],
                               self.device_lengths[on_device])

    def block(self, start: int, stop: int) -> TokenEmbeddings:
        """Texts start..stop-1, as views: nothing is copied."""
        return TokenEmbeddings(self.vectors, self.weights, self.offsets[start:stop], self.lengths[start:stop],
                               self.device_lengths[start:stop])

    def padded(self, rows: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Vectors [n, width, hidden] and weights [n, width] of texts `rows` (device indices) no
        longer than `width`; padding repeats a text's first token with weight 0."""
        device = self.offsets.device
        position = torch.arange(max(width, 1), device=device)
        valid = position[None, :] < self.device_lengths[rows][:, None]
        index = self.offsets[rows][:, None] + torch.where(valid, position, 0)
        index = index.clamp_(max=max(self.vectors.shape[0] - 1, 0))
        weights = torch.where(valid, self.weights[index], 0.0)
        return self.vectors[index], weights

    def groups(self, max_tokens: int) -> list[tuple[torch.Tensor, int]]:
        """`length_groups` of these texts as (device row indices, longest length): the stable
        sort of the lengths, made on the host to plan and on the device to index (the same
        permutation: a stable sort of the same integers has one result)."""
        device_order = torch.argsort(self.device_lengths, stable=True)
        return [(device_order[first:stop], longest) for first, stop, longest in length_groups(self.lengths, max_tokens)[1]]


class BertScoreKernel(HostTensors, Kernel[TokenEmbeddings]):
    """BERTScore F1 of candidate vs training text, optionally idf-weighted and rescaled.

    model: Hugging Face name (already in the local cache) or local folder.
    layer: number of layers kept; None takes bert-score's tuned default for a model it knows.
    idf: weight tokens by idf over the training set. rescale: baseline rescaling (see module);
    on by default, because the paper's tau = 0.10 is a threshold on rescaled F.
    baseline_path: a LAYER,P,R,F baseline file; lang: language of bert-score's shipped files.
    batch_size: texts per forward pass, at most. allow_download: the model may come from the hub.
    precision: "float32", "float16" or "bfloat16" for the forward pass and the matching; None:
    float16 on CUDA, float32 on the CPU.
    The scorer's tokenizer is not used: the model brings its own.
    """

    host_tensors = ("_token_weight",)  # indexed by host token ids while batches are padded

    name = "bertscore"
    default_tau = 0.10
    uses_tokenizer = False
    prepares_ahead = False  # embeddings: large, made on the device
    # Kernel ridge beat top-k with this kernel on every development set, by 0.02 to 0.09 rho
    # (MiniLM: HUSE 0.301 vs 0.281, GUG 0.501 vs 0.415, MLQE 0.447 vs 0.369; bench/quality.md).
    default_estimator = "ridge"

    def __init__(
        self,
        *,
        tokenizer: Tokenizer,
        device: torch.device,
        model: str = DEFAULT_MODEL,
        layer: int | None = None,
        idf: bool = False,
        rescale: bool = True,
        baseline_path: str | None = None,
        lang: str = "en",
        batch_size: int = 64,
        allow_download: bool = False,
        precision: str | None = None,
    ) -> None:
        super().__init__(tokenizer=tokenizer, device=device)
        for option, value in (("idf", idf), ("rescale", rescale)):
            if not isinstance(value, bool):
                raise ValueError(f"{option} must be True or False, not {value!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
        if baseline_path is not None and not rescale:
            raise ValueError("baseline_path is given but rescale is False: set rescale=True")
        self.model_name = str(model)
        self.layer = default_layer(self.model_name) if layer is None else layer
        self.idf = idf
        self.rescale = rescale
        self.batch_size = batch_size
        if precision is None:
            precision = "float16" if self.device.type == "cuda" else "float32"
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        self.match_dtype: torch.dtype = getattr(torch, precision)
        self.hf_tokenizer, self.model, self.max_length = load_model(self.model_name, self.layer, allow_download)
        self.model.to(self.device)
        self._special_ids = [
            i for i in (self.hf_tokenizer.cls_token_id, self.hf_tokenizer.sep_token_id) if i is not None
        ]
        self.baseline: float | None = None
        self.baseline_source = "none"
        self._baseline_file = None
        if rescale:
            path = Path(baseline_path) if baseline_path is not None else shipped_baseline(lang, self.model_name)
            if path is not None:
                self.baseline = read_baseline(path, self.layer)
                self.baseline_source = f"file:{path.name}"
                self._baseline_file = path

    # -- encoding ------------------------------------------------------------------------

    def _fit(self, texts: list[str]) -> None:
        token_ids = self._token_ids(texts)
        self._token_weight = self._weights_per_vocabulary_id(token_ids)
        self._train = self._embed(token_ids)
        if self.rescale and self._baseline_file is None:
            self.baseline = self._estimate_baseline()
            sample = min(self.num_train, BASELINE_SAMPLE)
            self.baseline_source = f"estimated:sample={sample},seed={BASELINE_SEED}"

    def _encode(self, texts: Sequence[str]) -> TokenEmbeddings:
        return self._embed(self._token_ids(texts))

    def _encode_train(self, start: int, stop: int) -> TokenEmbeddings:
        return self._train.block(start, stop)

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with special tokens, truncated to the model's length (as bert-score's
        `sent_encode`: stripped text, a leading space for byte-level BPE tokenizers)."""
        from transformers import GPT2Tokenizer, RobertaTokenizer

        options = {"add_prefix_space": True} if isinstance(self.hf_tokenizer, (GPT2Tokenizer, RobertaTokenizer)) else {}
        stripped = [text.strip() for text in texts]
        if not stripped:
            return []
        return self.hf_tokenizer(
            stripped, add_special_tokens=True, truncation=True, max_length=self.max_length, **options
        )["input_ids"]

    def _weights_per_vocabulary_id(self, train_ids: list[list[int]]) -> torch.Tensor:
        """Float32 weight of every token id (CPU): idf over the training texts, computed in
        float64 as bert-score does, or 1 but 0 for [CLS]/[SEP]."""
        size = max([len(self.hf_tokenizer)] + [max(ids) + 1 for ids in train_ids if ids])
        if not self.idf:
            weight = torch.ones(size, dtype=torch.float32)
            weight[self._special_ids] = 0.0
            return weight
        present = [torch.unique(torch.tensor(ids, dtype=torch.int64)) for ids in train_ids]
        document_frequency = torch.bincount(torch.cat(present), minlength=size).to(torch.float64)
        return torch.log((len(train_ids) + 1) / (document_frequency + 1)).to(torch.float32)

    def _embed(self, token_ids: list[list[int]]) -> TokenEmbeddings:
        """Encode each distinct token sequence once, in batches of similar length."""
        distinct: dict[tuple[int, ...], int] = {}
        text_to_distinct = [distinct.setdefault(tuple(ids), len(distinct)) for ids in token_ids]
        sequences = list(distinct)
        distinct_lengths = torch.tensor([len(ids) for ids in sequences], dtype=torch.int64)
        vectors, weights = [], []
        offsets = torch.zeros(len(sequences), dtype=torch.int64)
        filled = 0
        order, bounds = length_groups(distinct_lengths, ENCODE_TOKENS, self.batch_size)
        for first, stop, _ in bounds:
            batch = order[first:stop].tolist()
            for k, (vector, weight) in zip(batch, self._forward([sequences[k] for k in batch])):
                offsets[k] = filled
                filled += vector.shape[0]
                vectors.append(vector)
                weights.append(weight)
        hidden = self.model.config.hidden_size
        lengths = distinct_lengths[text_to_distinct]
        return TokenEmbeddings(
            vectors=torch.cat(vectors) if vectors else torch.zeros(0, hidden, dtype=self.match_dtype, device=self.device),
            weights=torch.cat(weights) if weights else torch.zeros(0, device=self.device),
            offsets=offsets[text_to_distinct].to(self.device),
            lengths=lengths,
            device_lengths=lengths.to(self.device),
        )

    def _forward(self, batch: list[tuple[int, ...]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Unit token embeddings (match dtype) and normalised weights of one padded batch."""
        lengths = [len(ids) for ids in batch]
        width = max(max(lengths), 1)
        pad = self.hf_tokenizer.pad_token_id or 0
        ids = torch.full((len(batch), width), pad, dtype=torch.int64)
        mask = torch.zeros((len(batch), width), dtype=torch.int64)
        for row, sequence in enumerate(batch):
            ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.int64)
            mask[row, : len(sequence)] = 1
        token_weight = self._token_weight[ids] * mask
        total = token_weight.sum(dim=1, keepdim=True)
        token_weight = torch.where(total > 0, token_weight / total, 0.0).to(self.device)
        with torch.inference_mode(), torch.autocast(
            self.device.type, dtype=self.match_dtype, enabled=self.match_dtype != torch.float32
        ):
            hidden = self.model(ids.to(self.device), attention_mask=mask.to(self.device))[0].float()
        hidden = hidden / hidden.norm(dim=-1, keepdim=True)
        return [
            (hidden[row, :length].to(self.match_dtype), token_weight[row, :length])
            for row, length in enumerate(lengths)
        ]

    # -- matching ------------------------------------------------------------------------

    def tile(self, encoded: TokenEmbeddings, start: int, stop: int) -> torch.Tensor:
        with torch.inference_mode():
            scores = f_scores(encoded, self._train.block(start, stop))
            if self.baseline is not None:
                scores.sub_(self.baseline).div_(1 - self.baseline)
        return scores

    def pair_bytes(self) -> int:
        # The float64 tile, filled in place. The sub-tile workspace (a fixed number of token
        # pairs, see `subtile_elements`) does not grow with the tile.
        return 8

    def _estimate_baseline(self) -> float:
        """Mean unscaled F over ordered pairs of distinct texts in a seeded training sample."""
        if self.num_train < 2:
            raise ValueError(
                "rescale=True needs a baseline: give baseline_path, or at least 2 training texts "
                "to estimate one from"
            )
        sample = baseline_sample(self.num_train)
        texts = self._train.select(sample)
        scores = f_scores(texts, texts)
        off_diagonal = ~torch.eye(len(sample), dtype=torch.bool, device=scores.device)
        return float(scores[off_diagonal].mean())

    @property
    def bounded(self) -> bool:
        return not self.rescale  # rescaled F can fall below 0

    @property
    def similarity_error(self) -> float:
        """The matching stage's bound: a cosine of unit vectors over `hidden` dimensions summed
        in float32 in any order is within (hidden + 2) 2^-24; in a format of p significand bits
        the rounding of both vectors and of the cosine add 3u + 3u^2 + u^3 (u = 2^-p). P and R
        (weighted means of maxima) move no more, F = 2PR/(P+R) at most twice that, and rescaling
        stretches it by 1/|1 - b|. Not covered: the forward pass on another device's kernels,
        which no closed form bounds (the GPU check measures it)."""
        u = torch.finfo(self.match_dtype).eps / 2  # 2^-p
        rounding = 0.0 if self.match_dtype == torch.float32 else 3 * u + 3 * u * u + u**3
        cosine = (self.model.config.hidden_size + 2) * 2.0**-24 + rounding
        return 2 * cosine / (abs(1.0 - self.baseline) if self.baseline is not None else 1.0)

    @property
    def depends_on_training_set(self) -> bool:
        return self.idf or self.baseline_source.startswith("estimated")

    def settings(self) -> dict[str, str]:
        settings = {
            **super().settings(),
            "model": self.model_name,
            "layer": str(self.layer),
            "idf": "yes" if self.idf else "no",
            "rescale": "no",
            "dtype": str(self.match_dtype).removeprefix("torch."),
        }
        if self.baseline is not None:
            settings["rescale"] = f"{self.baseline_source},F={self.baseline:.6f}"
        return settings


def f_scores(candidates: TokenEmbeddings, train: TokenEmbeddings) -> torch.Tensor:
    """Unscaled BERTScore F [len(candidates), len(train)] in float64, sub-tile by sub-tile."""
    device = candidates.offsets.device
    scores = torch.zeros((len(candidates), len(train)), dtype=torch.float64, device=device)
    if candidates.vectors.shape[0] == 0 or train.vectors.shape[0] == 0:
        return scores
    budget = subtile_elements(device)
    for cand_rows, cand_width in candidates.groups(math.isqrt(budget)):
        cand_vectors, cand_weights = candidates.padded(cand_rows, cand_width)
        for train_rows, train_width in train.groups(max(budget // cand_weights.numel(), 1)):
            precision, recall = greedy_match(cand_vectors, cand_weights, *train.padded(train_rows, train_width))
            total = precision + recall
            f = torch.where(total != 0, 2 * precision * recall / total, 0.0)
            scores[cand_rows[:, None], train_rows[None, :]] = f
    return scores


def greedy_match(
    cand_vectors: torch.Tensor, cand_weights: torch.Tensor, train_vectors: torch.Tensor, train_weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """P and R [nc, nt] (float64) of every candidate/training pair: each token's best cosine on
    the other side, weighted. One product of all candidate tokens with all training tokens; the
    weighted sums run in float64 so that padding lengths (which depend on how texts were grouped)
    cannot change the rounding."""
    nc, lc, hidden = cand_vectors.shape
    nt, lt, _ = train_vectors.shape
    cosine = (cand_vectors.reshape(nc * lc, hidden) @ train_vectors.reshape(nt * lt, hidden).T).view(nc, lc, nt, lt)
    best_for_cand = cosine.amax(dim=3).double()  # [nc, lc, nt]
    best_for_train = cosine.amax(dim=1).double()  # [nc, nt, lt]
    precision = torch.einsum("cin,ci->cn", best_for_cand, cand_weights.double())
    recall = torch.einsum("cnj,nj->cn", best_for_train, train_weights.double())
    return precision, recall


def subtile_elements(device: torch.device) -> int:
    """Token-pair similarities per sub-tile: 16 MiB of float32 on the CPU (cache-friendly),
    256 MiB of float16 on a GPU (enough work per kernel launch)."""
    return 1 << (27 if device.type == "cuda" else 22)


def baseline_sample(num_train: int) -> torch.Tensor:
    """The training texts whose pairs estimate a missing baseline (seeded, at most 512)."""
    generator = torch.Generator().manual_seed(BASELINE_SEED)
    return torch.randperm(num_train, generator=generator)[:BASELINE_SAMPLE]


def length_groups(
    lengths: torch.Tensor, max_tokens: int, max_rows: int | None = None
) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
    """The stable order of `lengths` (a CPU tensor) and the ranges [first, stop) of it, with the
    longest length in each (at least 1), that form groups of similar length, to be padded to
    their longest: a group's padded size (rows x longest) stays within `max_tokens` and within
    PADDING_LIMIT times its real tokens, and it holds at most `max_rows` rows (at least one)."""
    order = torch.argsort(lengths, stable=True)
    sorted_lengths = lengths[order].clamp(min=1).tolist()
    bounds: list[tuple[int, int, int]] = []
    first, tokens = 0, 0
    for index, length in enumerate(sorted_lengths):
        rows = index - first + 1
        padded = rows * length
        too_many = max_rows is not None and rows > max_rows
        if rows > 1 and (padded > max_tokens or padded > PADDING_LIMIT * (tokens + length) or too_many):
            bounds.append((first, index, sorted_lengths[index - 1]))
            first, tokens = index, 0
        tokens += length
    if first < len(sorted_lengths):
        bounds.append((first, len(sorted_lengths), sorted_lengths[-1]))
    return order, bounds


# -- model, layer and baseline ---------------------------------------------------------


def default_layer(model: str) -> int:
    """bert-score's tuned layer for `model`; a model it does not know needs an explicit layer."""
    try:
        from bert_score.utils import model2layers
    except ImportError:
        model2layers = {}
    if model not in model2layers:
        if not Path(model).is_dir():  # say what is missing first: the model, not its layer
            raise ValueError(f"cannot load BERTScore model {model!r}: no such folder, and not a "
                             "model bert-score knows; give a local folder (with --layer)")
        raise ValueError(
            f"no default layer for BERTScore model {model!r}: bert-score tunes layers only for "
            "models it names; give the layer: --layer N on the command line, BertScore(layer=N) in "
            "Python (N = number of layers kept)"
        )
    return model2layers[model]


def unloadable(name: str, error: Exception) -> ValueError:
    """The refusal of a model that cannot be loaded from here, with the loader's reason."""
    return ValueError(f"cannot load BERTScore model {name!r}: give a local folder or a model already in the "
                      f"Hugging Face cache, or a hub name with --allow-download ({one_line(error)})")


def check_model(name: str, allow_download: bool = False) -> None:
    """Refuse, before any work, a model `load_model` could not load here: its configuration is
    read (not its weights: a second, not the minutes of a large model)."""
    from transformers import AutoConfig

    try:
        with hub_access(allow_download):
            AutoConfig.from_pretrained(name, local_files_only=not allow_download, trust_remote_code=False)
    except Exception as error:  # missing, or damaged: the load would fail the same way
        raise unloadable(name, error) from None


def load_model(name: str, layer: int, allow_download: bool = False):
    """Tokenizer, model cut to its first `layer` layers (eval mode), and the token limit.
    Only local folders and the Hugging Face cache unless `allow_download`; code that a folder
    ships is never run."""
    from transformers import AutoModel, AutoTokenizer

    try:
        with hub_access(allow_download), no_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(
                name, local_files_only=not allow_download, trust_remote_code=False)
            model = AutoModel.from_pretrained(
                name, local_files_only=not allow_download, trust_remote_code=False)
    except Exception as error:  # a damaged folder fails in many ways, each an input error
        raise unloadable(name, error) from None
    model.eval()
    if hasattr(model, "encoder") and hasattr(model, "decoder"):
        model = model.encoder
    keep_first_layers(model, layer, name)
    limit = min(tokenizer.model_max_length, getattr(model.config, "max_position_embeddings", math.inf))
    return tokenizer, model, int(limit)


def keep_first_layers(model, layer: int, name: str) -> None:
    """Drop every layer after the first `layer`, as bert-score does, so the model's output is
    that layer (with whatever final normalisation the architecture applies)."""
    if hasattr(model, "n_layers"):  # XLM keeps a layer count
        owner, attribute = model, "n_layers"
    elif hasattr(model, "encoder") and hasattr(model.encoder, "albert_layer_groups"):  # ALBERT too
        owner, attribute = model.encoder.config, "num_hidden_layers"
    else:
        owner, attribute = _layer_list(model, name)
    layers = getattr(owner, attribute)
    available = layers if isinstance(layers, int) else len(layers)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= available:
        raise ValueError(f"layer must be an integer from 0 to {available} for model {name!r}, not {layer!r}")
    setattr(owner, attribute, layer if isinstance(layers, int) else torch.nn.ModuleList(layers[:layer]))


def _layer_list(model, name: str) -> tuple[torch.nn.Module, str]:
    """The module holding the list of transformer layers, and that list's attribute name."""
    candidates = [
        (model, "layer"),  # XLNet
        (model, "block"),  # T5 encoder stack
        (getattr(model, "encoder", None), "block"),  # T5 encoder model
        (getattr(model, "encoder", None), "layer"),  # BERT, RoBERTa, ELECTRA, DeBERTa
        (getattr(model, "transformer", None), "layer"),  # DistilBERT
        (model, "layers"),  # BART-style encoders
    ]
    for owner, attribute in candidates:
        if owner is not None and isinstance(getattr(owner, attribute, None), torch.nn.ModuleList):
            return owner, attribute
    raise ValueError(f"cannot select a layer of model {name!r} ({type(model).__name__}): unknown architecture")


def shipped_baseline(lang: str, model: str) -> Path | None:
    """bert-score's baseline file for `lang` and `model`, if bert-score is installed and has one."""
    spec = find_spec("bert_score")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "rescale_baseline" / lang / f"{model}.tsv"
    return path if path.is_file() else None


def read_baseline(path: Path, layer: int) -> float:
    """The F baseline of `layer` from a bert-score baseline file (CSV with LAYER,P,R,F)."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as error:
        raise ValueError(f"cannot read baseline file {path}: {error}") from None
    for line, row in enumerate(rows, start=2):
        try:
            if int(row["LAYER"]) == layer:
                return float(row["F"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}, line {line}: expected numeric LAYER and F columns") from None
    raise ValueError(f"{path}: no baseline row for layer {layer}")
