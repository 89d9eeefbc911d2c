"""A causal language model's log-probabilities of texts and of token ids, and its predicted
distributions summed over texts: what the fluency statistics and their unigram table are made of.

Any Hugging Face causal LM folder (GPT-2, Llama, SmolLM2...) or a GGUF file (converted once,
`files.py`) loads the same way, once a process per model, device and dtype. Every text is read
after one start token, so its first token has a probability too: `<|endoftext|>` where the
vocabulary has it (SmolLM2 declares a chat token, `<|im_start|>`, as its BOS, which measured worse
on GUG: Spearman 0.299 against 0.389), else the BOS, else the EOS. Texts are cut at MAX_TOKENS
tokens. Texts go in batches of similar length (sorted by token count, then by the tokens
themselves, so a batch does not depend on the order texts came in), of nearly one token count
each (LENGTH_BUCKET), right-padded, the padding left out of the sums; the log-softmax over the
vocabulary is taken for a bounded number of positions at a time, so memory stays bounded
whatever the vocabulary.
"""
from __future__ import annotations

import itertools
import json
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gpu_neighbors.core.inputs import SURROGATE
from gpu_neighbors.fluency.files import CONVERTED, ModelFiles, is_converted, staged
from gpu_neighbors.text.tokenizers import one_line

MAX_TOKENS = 256  # a text's tokens read; the rest is cut
BATCH_ROWS = 32  # texts per forward pass on the CPU (32 was faster than 128 there)
DEVICE_BATCH_ROWS = 512  # on an accelerator, where a pass of 32 short texts leaves it mostly idle (not yet measured)
LENGTH_BUCKET = 8  # texts batched together differ by fewer tokens than this (the rest is padding)
LOGIT_BYTES = 64 << 20  # float32 logits held at once by the chunked log-softmax on the CPU
DEVICE_LOGIT_BYTES = 1 << 30  # and on an accelerator
START_TOKENS = ("<|endoftext|>",)
REMEMBERED = 1 << 18  # texts whose statistics a process keeps (evaluation protocols refit on the same texts)
MASSES = 8  # sets of calibration texts whose summed distributions a process keeps (compare fits a scorer a kernel)
_LOADED: dict[tuple[str, str, torch.dtype], LanguageModel] = {}
_LOADING = threading.Lock()


@dataclass
class LanguageModel:
    """A loaded causal LM and its tokenizer; `start_id` begins every text."""

    files: ModelFiles
    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    start_id: int
    remembered: dict[tuple[int, ...], float] = field(default_factory=dict, repr=False)
    masses: dict[tuple[tuple[int, ...], ...], tuple[torch.Tensor, int]] = field(default_factory=dict, repr=False)
    _vocab: dict[str, int] | None = field(default=None, repr=False)

    @classmethod
    def load(cls, files: ModelFiles, device: torch.device, dtype: torch.dtype) -> LanguageModel:
        """The model of `files` on `device` in `dtype`, loaded once a process."""
        key = (files.sha256, str(device), dtype)
        with _LOADING:
            if key not in _LOADED:
                _LOADED[key] = cls._read(files, device, dtype)
            return _LOADED[key]

    @classmethod
    def _read(cls, files: ModelFiles, device: torch.device, dtype: torch.dtype) -> LanguageModel:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from gpu_neighbors.text.hub import hub_access, no_progress_bars

        converted = files.is_gguf and is_converted(files.folder)  # what fails then is the converted copy
        try:
            with hub_access(False), no_progress_bars():
                prepare(files)
                tokenizer = AutoTokenizer.from_pretrained(files.folder)
                model = AutoModelForCausalLM.from_pretrained(files.folder, dtype=dtype)
        except ImportError:  # gguf or accelerate not installed: transformers says which
            raise
        except Exception as error:  # a damaged file or folder fails in many ways, each an input error
            what = (f"its converted copy {files.folder} cannot be loaded ({one_line(error)}): remove that folder, "
                    "and the next load converts the file again") if converted else f"cannot be loaded ({one_line(error)})"
            raise ValueError(f"fluency model {files.source}: {what}") from None
        model = model.to(device).eval()  # type: ignore[arg-type]
        model.requires_grad_(False)
        return cls(files, model, tokenizer, device, dtype, start_token(tokenizer))

    def batch_rows(self) -> int:
        """Texts per forward pass: few on the CPU, many on an accelerator; the statistics do not
        depend on it (rounded: `statistics`)."""
        return BATCH_ROWS if self.device.type == "cpu" else DEVICE_BATCH_ROWS

    @property
    def vocabulary_size(self) -> int:
        """The number of token ids the model predicts (its output layer's rows)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    def vocabulary(self) -> dict[str, int]:
        if self._vocab is None:
            self._vocab = dict(self.tokenizer.get_vocab())
        return self._vocab

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, the start token first, cut at MAX_TOKENS tokens after it; a
        lone surrogate, which the tokenizer cannot take, is read as U+FFFD."""
        texts = [SURROGATE.sub("\ufffd", text) for text in texts]
        encoded = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        return [[self.start_id, *ids[:MAX_TOKENS]] for ids in encoded]

    def text_log_probs(self, texts: Sequence[str], unigram: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(sum of the token log-probabilities, token count, sum of the tokens' `unigram`
        log-probabilities: None without a table) of each text, float64, int64 and float64 on the
        model's device; a text without a token has sums 0 and count 0. Each distinct text is
        computed once a process (`remembered`, `_remember`)."""
        rows = [tuple(row) for row in self.tokenize(texts)]
        self._remember({row for row in rows if row not in self.remembered})
        sums = torch.tensor([self.remembered[row] for row in rows], dtype=torch.float64, device=self.device)
        counts = torch.tensor([len(row) - 1 for row in rows], dtype=torch.int64, device=self.device)
        return sums, counts, unigram_sums(rows, unigram, self.device)

    def token_mass(self, texts: Sequence[str]) -> tuple[torch.Tensor, int]:
        """The model's predicted distributions summed over every token position of the distinct
        `texts` (float64 [vocabulary] on the host) and the number of positions: what
        `part.unigram_table` is made of. The texts' sums are remembered on the way, and the result
        for the same distinct texts too (`masses`: every scorer `compare` fits calibrates on the
        same texts). (While a chunk's probabilities are summed, their float64 copy holds twice
        LOGIT_BYTES.)"""
        rows = {tuple(row) for row in self.tokenize(texts)}
        key = tuple(sorted(rows))
        if key not in self.masses:
            mass = torch.zeros(self.vocabulary_size, dtype=torch.float64, device=self.device)
            self._remember(rows, mass)
            if len(self.masses) >= MASSES:
                self.masses.clear()
            self.masses[key] = (mass.cpu(), sum(len(row) - 1 for row in rows))
        return self.masses[key]

    def _remember(self, rows: set[tuple[int, ...]], mass: torch.Tensor | None = None) -> None:
        """The distinct `rows`' sums of log-probabilities into `remembered` (`mass` gaining their
        distributions, where given), in batches of texts of nearly one token count, in an order
        that does not depend on the order they came in (right-padded, which a causal model's
        tokens never see; one count per batch was 8x slower on the CPU, batches being too small)."""
        if len(self.remembered) + len(rows) > REMEMBERED:
            self.remembered.clear()
        ordered = sorted(rows, key=lambda row: (len(row), row))
        batch = self.batch_rows()
        for _, group in itertools.groupby(ordered, key=lambda row: -(-len(row) // LENGTH_BUCKET)):
            similar = list(group)
            for first in range(0, len(similar), batch):
                chosen = similar[first : first + batch]
                width = len(chosen[-1])
                ids = torch.tensor([[*row, *(self.start_id,) * (width - len(row))] for row in chosen],
                                   dtype=torch.int64, device=self.device)
                kept = torch.arange(width, device=self.device)[None, :] < torch.tensor(
                    [len(row) for row in chosen], device=self.device)[:, None]
                self.remembered.update(zip(chosen, self.sequence_log_probs(ids, kept, mass).tolist()))

    def id_log_probs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, unigram: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """`text_log_probs` of token ids of this model's tokenizer [rows, width], padded on
        either side, on their device with no host synchronisation: each row's kept tokens are
        moved to its front, in their order (so padding on the left reads as padding on the right,
        which a causal model's tokens never see: no attention mask is needed), the start token is
        put before them, and they are cut at MAX_TOKENS tokens, as a text's are."""
        front = torch.argsort((attention_mask == 0).to(torch.int8), dim=1, stable=True)
        ids = input_ids.gather(1, front)[:, :MAX_TOKENS]
        kept = attention_mask.gather(1, front)[:, :MAX_TOKENS].to(torch.bool)
        start = torch.full((ids.shape[0], 1), self.start_id, dtype=ids.dtype, device=ids.device)
        ids = on(torch.cat([start, ids.masked_fill(~kept, self.start_id)], dim=1), self.device)
        kept = on(torch.cat([torch.ones_like(kept[:, :1]), kept], dim=1), self.device)
        batch = self.batch_rows()
        parts = [self.sequence_log_probs(ids[first : first + batch], kept[first : first + batch])
                 for first in range(0, ids.shape[0], batch)]
        sums = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64, device=self.device)
        counts = on(kept.sum(dim=1) - 1, input_ids.device)
        if unigram is None:
            return on(sums, input_ids.device), counts, None
        # the table's values are multiples of 2^-10: their sums are exact, in any order
        unigrams = on(unigram, ids.device)[ids[:, 1:]].masked_fill(~kept[:, 1:], 0.0).sum(dim=1)
        return on(sums, input_ids.device), counts, on(unigrams, input_ids.device)

    @torch.inference_mode()
    def sequence_log_probs(self, ids: torch.Tensor, kept: torch.Tensor,
                           mass: torch.Tensor | None = None) -> torch.Tensor:
        """float64 [rows]: the sum over each row's tokens after the first of log p(token | the
        tokens before it), the positions where `kept` is false (padding at a row's end) left
        out. `mass` (float64 [vocabulary]), where given, gains each kept position's predicted
        distribution."""
        hidden = self.model.base_model(input_ids=ids, attention_mask=causal_mask(ids, self.dtype),
                                       use_cache=False).last_hidden_state[:, :-1]
        targets, kept = ids[:, 1:], kept[:, 1:]
        head = self.model.get_output_embeddings()
        rows, positions = targets.shape
        held = LOGIT_BYTES if self.device.type == "cpu" else DEVICE_LOGIT_BYTES
        step = max(1, held // (4 * head.weight.shape[0] * max(rows, 1)))
        total = torch.zeros(rows, dtype=torch.float64, device=ids.device)
        for first in range(0, positions, step):
            logs = head(hidden[:, first : first + step].contiguous()).float().log_softmax(dim=-1)
            picked = logs.gather(-1, targets[:, first : first + step, None])[..., 0]
            total = total + picked.masked_fill(~kept[:, first : first + step], 0.0).to(torch.float64).sum(dim=1)
            if mass is not None:
                probabilities = logs.exp_().masked_fill_(~kept[:, first : first + step, None], 0.0)
                mass += probabilities.sum(dim=(0, 1), dtype=torch.float64)
        return total


def unigram_sums(rows: list[tuple[int, ...]], unigram: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """float64 [rows]: the sum of `unigram`'s values (on the host) over each row's tokens after
    the start token; None without a table."""
    if unigram is None:
        return None
    if not rows:
        return torch.zeros(0, dtype=torch.float64, device=device)
    tokens = torch.tensor([token for row in rows for token in row[1:]], dtype=torch.int64)
    owner = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor([len(row) - 1 for row in rows]))
    sums = torch.zeros(len(rows), dtype=torch.float64).index_add_(0, owner, unigram[tokens])
    return on(sums, device)


def causal_mask(ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The causal mask as the 4-D additive mask [rows, 1, width, width] that transformers uses as
    given: built here, it spares the checks (packed sequences, all-ones masks) by which
    transformers would otherwise make the host wait for the device."""
    width = ids.shape[1]
    blocked = torch.ones((width, width), dtype=torch.bool, device=ids.device).triu(1)
    mask = torch.zeros((width, width), dtype=dtype, device=ids.device).masked_fill(blocked, torch.finfo(dtype).min)
    return mask[None, None].expand(ids.shape[0], 1, width, width)


def on(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` on `device`, moved only where it is elsewhere."""
    return tensor if tensor.device == device else tensor.to(device)


def start_token(tokenizer: Any) -> int:
    """The id every text starts after (see the module's docstring)."""
    vocabulary = tokenizer.get_vocab()
    for token in START_TOKENS:
        if token in vocabulary:
            return int(vocabulary[token])
    for candidate in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    raise ValueError("the fluency model's tokenizer has no <|endoftext|>, BOS or EOS token to start texts with")


def prepare(files: ModelFiles) -> None:
    """A GGUF model converted into its plain folder, once a machine (nothing to do otherwise)."""
    if files.is_gguf and not is_converted(files.folder):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' notes on de-quantising
            convert(files)


def convert(files: ModelFiles) -> None:
    """De-quantise the GGUF file of `files` once and keep it as a plain folder (`files.folder`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(files.source.parent, gguf_file=files.source.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(files.source.parent, gguf_file=files.source.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    with staged(files.folder) as staging:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / CONVERTED).write_text(json.dumps({"source": files.name, "sha256": files.sha256}) + "\n")
