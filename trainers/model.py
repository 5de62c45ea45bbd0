"""The model a trainer updates, set up the same way for RL (``Trainer``) and SFT (``warm_start``): the
embedded default or a path or id loaded, fp32 master weights on the device, the bottom layers frozen
(``freeze.py``); whether its passes autocast to bf16; and gradient checkpointing for the update."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from trainers.freeze import freeze_bottom


def prepare_model(model, tokenizer, device, freeze_layers: int = 0):
    """(model, tokenizer): ``model`` a path or id, a loaded causal LM (then ``tokenizer`` is needed), or
    None for the default; moved to ``device`` in fp32 with its bottom ``freeze_layers`` frozen."""
    from ragen_envs.agent.default_model import load_model

    if model is None or isinstance(model, (str, Path)):
        model, tokenizer = load_model(model, torch.float32, tokenizer)
    if tokenizer is None:
        raise ValueError("pass the tokenizer together with a loaded model")
    model = model.to(device).float()
    freeze_bottom(model, freeze_layers)
    return model, tokenizer


def model_name(model) -> str | None:
    """What a run records as its model: the path or id given, a loaded model's name, None for the default."""
    if model is None or isinstance(model, (str, Path)):
        return None if model is None else str(model)
    return getattr(model.config, "_name_or_path", None)


# On a CPU with native bf16 (AMX), autocasting pays only where matmuls dominate a pass: measured here, one
# GRPO update of SmolLM2-135M (width 576) took 20 s in bf16 and 33 s in fp32, of the 0.6M-parameter
# organism (width 128) 1.6 s in bf16 and 0.7 s in fp32 (benchmarks/speed/vs_trl.py, 2 cores).
CPU_BF16_MIN_WIDTH = 512


def use_bf16(setting: str, device: torch.device, model=None) -> bool:
    """``mixed_precision``: "bf16", "no", or "auto": bf16 on a GPU that has it, or on a CPU with native bf16
    instructions for a ``model`` at least CPU_BF16_MIN_WIDTH wide (None: any); elsewhere fp32, faster there."""
    if setting != "auto":
        return setting == "bf16"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return ("avx512_bf16" in flags or "amx_bf16" in flags) and width(model) >= CPU_BF16_MIN_WIDTH


def width(model) -> float:
    """A model's hidden size (its text model's, for a vision-language model); infinite where unknown."""
    config = getattr(model, "config", model)
    if config is None:
        return float("inf")
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "hidden_size", None) or float("inf")


@contextmanager
def checkpointing(model, on: bool):
    """With ``on``, the block's training-mode forwards keep only each decoder layer's input and recompute
    the rest in the backward pass (Hugging Face's gradient checkpointing, non-reentrant: frozen layers,
    DDP and FSDP2 need no special case) and build no KV cache. Switched on at the first such block and
    left on (turning it off and on again adds an input hook each time); Hugging Face checkpoints only
    training-mode passes with gradients, so rollouts and scoring are unchanged. A model without
    checkpointing support is a ValueError."""
    if not on:
        yield
        return
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"gradient_checkpointing: {type(model).__name__} does not support it (Hugging Face's "
                         "supports_gradient_checkpointing is off); train without --gradient-checkpointing")
    if not is_checkpointing(model):
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name; 4's is deprecated there
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    use_cache, config.use_cache = config.use_cache, False  # a cache would keep what checkpointing drops
    try:
        yield
    finally:
        config.use_cache = use_cache  # the checkpoint's config.json keeps the model's own setting


def is_checkpointing(model) -> bool:
    """Whether gradient checkpointing is on in any of ``model``'s layers."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
