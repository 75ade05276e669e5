"""Tiny Hugging Face models and tokenizers built from a config with a fixed seed (no downloads,
no committed weights): a byte-level BPE tokenizer with a ChatML template, and random Llama or
Qwen3 causal LMs over it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Like Qwen3's template: assistant turns before the last user message lose their <think> block.
QWEN3_LIKE = (
    "{% set ns = namespace(last=-1) %}"
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}{% set c = m.content %}"
    "{% if m.role == 'assistant' and loop.index0 < ns.last and '</think>' in c %}"
    "{% set c = c.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ c }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "You are a helpful assistant. Play tic-tac-toe: mark X at row 1 column 2.",
    "<think>I should take the centre.</think> I play the centre square.",
    "The quick brown fox jumps over the lazy dog 0123456789 times!",
    "user assistant system reflect on the previous attempt and try again",
]


def build_tokenizer(out: Path, template: str = CHATML, vocab: int = 320) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    fast.chat_template = template
    fast.save_pretrained(str(out))
    return fast


def build_model(out: Path, arch: str = "llama", template: str = CHATML, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out, template)
    common: dict[str, Any] = dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    if arch == "llama":
        model: Any = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=hidden // 4, **common))
    else:
        raise ValueError(arch)
    model.save_pretrained(str(out))
    return out


def unknown_architecture(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"model_type": "no-such-architecture", "vocab_size": 10}))
    return out
