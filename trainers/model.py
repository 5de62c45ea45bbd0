"""The model a trainer updates, set up the same way for RL (``Trainer``) and SFT (``warm_start``): the
embedded default or a path or id loaded, fp32 master weights on the device, the bottom layers frozen
(``freeze.py``); and whether its passes autocast to bf16."""

from __future__ import annotations

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


def use_bf16(setting: str, device: torch.device) -> bool:
    """``mixed_precision``: "bf16", "no", or "auto" (bf16 on a GPU that has it or a CPU with native bf16
    instructions; elsewhere fp32, which is faster there)."""
    if setting != "auto":
        return setting == "bf16"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
