"""A model organism: a small decoder built from scratch for the envs, to study training dynamics on a CPU.

    from trainers.config import OrganismArchitecture, organism_sft
    from trainers.organism import from_scratch
    from_scratch(["Ragen/FrozenLakeCoord-v0"], organism_sft(output_dir="runs/organism"), OrganismArchitecture())

Its tokenizer is a byte-level BPE learnt from the envs' own text (the prompts, observations and oracle
replies of ``corpus_episodes`` demonstrated episodes per env, played as the warm start plays them:
``sft.oracle_texts``). Merges may cross spaces, so the env's fixed phrases become a few tokens (sequences
2-3x shorter than word-level, which is what bounds a step's time), while a coordinate pair ``(r, c)``, any
other digit and each of the env's action names are always tokens of their own: a position or a move is then
the same token in an observation, a reasoning and an answer, which a decoder this small learns to copy (on
held-out FrozenLakeCoord maps, 0.66 of greedy replies state the player's position right; 0.25 when each
digit is a token, about 0.1 when a pair's pieces merge with their neighbours). Any text still round-trips
exactly (a word-level vocabulary would lose what it never saw). The chat markers are special tokens;
``<think>``, ``</think>``, ``<answer>`` and ``</answer>`` are whole tokens that decoding keeps.

Its model is a Llama-style decoder of ``layers`` x ``width`` (about 0.6M parameters with the default
sizes), randomly initialised from the seed, then trained on the envs' oracle demonstrations by the
warm start (``sft.py``: the same prompts, chat template, ``<think>`` prefill and imperfect turns) with
``ORGANISM_SFT``'s settings (with the env's own, ``env_settings.ORGANISM_SFT_PARTS``), every layer trained. The
result is an ordinary model folder that ``ragen eval/train --model`` load (and, as any Llama folder, the
vLLM backend: not tried here).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ragen_envs.agent import ChatEnv
from trainers.config import OrganismArchitecture, SFTConfig, organism_sft
from trainers.metrics import ORGANISM, WARM_START_FILE
from trainers.sft import oracle_texts, reused, warm_start

SPECIAL = ["<pad>", "<|im_start|>", "<|im_end|>"]
TAGS = ["<think>", "</think>", "<answer>", "</answer>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def action_words(env_ids: list[str]) -> list[str]:
    """The envs' action names (of finite action sets), each a token of its own in the organism's vocabulary."""
    words = set()
    for env_id in env_ids:
        chat = ChatEnv(env_id)
        words.update(chat.valid_actions or ())
        chat.close()
    return sorted(words)


def build_tokenizer(texts, vocab_size: int, words: list[str] = ()):
    """A byte-level BPE tokenizer learnt from ``texts``, with the chat template and tags (see above);
    each of ``words`` is kept whole."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    whole = "".join(rf"\b{re.escape(w)}\b|" for w in sorted(words, key=len, reverse=True))
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(whole + r"\(\d+, \d+\)|\d"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>",
                                        bos_token="<|im_start|>")
    tokenizer.add_tokens(TAGS)  # whole tokens, kept when special tokens are skipped
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer, config: OrganismArchitecture, seed: int):
    """A randomly initialised Llama-style decoder for ``tokenizer`` (fp32, tied embeddings)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=config.width, intermediate_size=3 * config.width,
        num_hidden_layers=config.layers, num_attention_heads=config.heads,
        num_key_value_heads=max(config.heads // 2, 1), max_position_embeddings=config.max_context,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id))
    model.config._name_or_path = organism_name(config)
    return model


def organism_name(config: OrganismArchitecture) -> str:
    """What the warm start records as the organism's model, so a cached organism is reused only for the
    same sizes."""
    return ORGANISM + json.dumps(asdict(config), sort_keys=True)


def from_scratch(env_ids: list[str], sft: SFTConfig | None = None, organism: OrganismArchitecture | None = None,
                 device: str = "cpu") -> dict:
    """Build the organism's tokenizer and model for ``env_ids`` and train it on their demonstrations
    (``warm_start`` with every layer trained), saved to ``sft.output_dir``; by default with
    ``organism_sft(env_ids)`` into ``organism_dir``. Deterministic for ``sft.seed``; a folder holding the same
    build is reused."""
    # the default folder is a cache: an organism made with other settings (an older catalogue's) is replaced
    sft = replace(sft or organism_sft(env_ids, output_dir=str(organism_dir(env_ids)), overwrite_output_dir=True),
                  freeze_layers=0)
    organism = organism or OrganismArchitecture()
    cached = reused(organism_name(organism), env_ids, sft)  # before learning a tokenizer it would not need
    if cached is not None:
        return cached
    tokenizer = build_tokenizer(oracle_texts(env_ids, sft, organism.corpus_episodes), organism.vocab_size,
                                action_words(env_ids))
    model = build_model(tokenizer, organism, sft.seed)
    return warm_start(model, env_ids, sft, tokenizer=tokenizer, device=device)


def is_organism(path) -> bool:
    """Whether the model folder ``path`` holds a model organism (its warm start's record says so)."""
    try:
        record = json.loads((Path(path) / WARM_START_FILE).read_text())
    except (OSError, ValueError):
        return False
    return str(record.get("model") or "").startswith(ORGANISM)


def organism_dir(env_ids: list[str]) -> Path:
    """Where ``make demo`` and the findings scripts keep the default organism of ``env_ids``: the user
    cache, beside the warm starts."""
    from ragen_envs.agent.default_model import cache_dir

    return cache_dir() / "organism" / "+".join(e.split("/")[-1].lower() for e in env_ids)


def default_organism(env_ids: list[str]) -> str:
    """The default organism of ``env_ids`` (built on first use, about 3 minutes on 2 cores), as a path."""
    from_scratch(env_ids)
    return str(organism_dir(env_ids))
