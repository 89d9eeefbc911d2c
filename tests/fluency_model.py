"""A tiny random Llama and its word-level tokenizer, built in a folder from a config (no
download): the fluency tests' model. Its judgments mean nothing, but every path that a real
causal LM takes (tokenizer, start token, batches, chunked log-softmax, saving by digest) runs."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

START = "<|endoftext|>"


def tiny_model(folder: Path, texts: Iterable[str], seed: int = 0) -> Path:
    """A causal LM folder in `folder` whose vocabulary is the words of `texts`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(list(texts), trainers.WordLevelTrainer(special_tokens=[START, "[UNK]"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=START, unk_token="[UNK]", pad_token=START)
    config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=512, tie_word_embeddings=True)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
