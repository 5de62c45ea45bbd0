"""LoRA for the RL trainer (``lora_rank`` > 0; RAGEN's ``lora.*``): low-rank adapters in the model's
linear layers, and only they train.

The adapters are injected into the Hugging Face model in place (``peft.inject_adapter_in_model``), not
wrapped in a ``PeftModel``: the scorers, the rollout policy and the MI scorer keep calling the model
itself (``base_model``, ``get_output_embeddings``, ``config``, ``generate``). Around it:
- the KL reference is the same model with its adapters off (``trainers.scoring.BaseModelScorer``), which is the initial
  model, since the base weights never train: no second copy is held (RAGEN's ``ref_in_actor``);
- another engine (vLLM) and a checkpoint's ``model.safetensors`` get the merged weights W + (alpha/r) B A
  under the base model's own names (``merged``), computed from a state dict, the live model untouched;
- a checkpoint also holds the adapter as peft writes it, in its own ``adapter/`` folder (``save_adapter``;
  ``PeftModel.from_pretrained(base, checkpoint / "adapter")`` loads it), and resume loads it back
  (``load_adapter``). Not beside model.safetensors: transformers' ``from_pretrained`` would then load the
  merged model and apply the adapter over it a second time.
peft is imported only here, and only when LoRA is on.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from ragen_envs.extras import install_hint
from trainers.freeze import freeze_bottom

ADAPTER = "default"  # peft's adapter name
PEFT_PREFIX = "base_model.model."  # a PeftModel's prefix of the keys in its adapter file
ADAPTER_DIR = "adapter"  # a checkpoint's subfolder
CONFIG_FILE = "adapter_config.json"
ADAPTER_FILE = "adapter_model.safetensors"


def _peft():
    try:
        import peft
    except ImportError:
        raise ImportError(f"lora_rank > 0 (--lora-rank) needs peft, which is not installed: {install_hint('lora')}") \
            from None
    return peft


def adapted(model) -> bool:
    """Whether ``model`` carries peft adapters (``add_adapters`` sets ``peft_config``); imports nothing."""
    return bool(getattr(model, "peft_config", None))


def add_adapters(model, config) -> None:
    """Inject LoRA adapters (``config``: a ``TrainerConfig``, its ``lora`` settings) into ``model`` in place and
    freeze everything else; adapters in the bottom ``freeze_layers`` stay frozen too. lora_A is drawn
    from the run's seed, so every rank and every resume draws the same, without moving torch's global
    RNG; lora_B starts at 0, so the adapted model starts as the base model."""
    peft = _peft()
    names = [n.strip() for n in config.lora.target_modules.split(",") if n.strip()]
    # the LM head (tied to the embeddings in small models) stays the base model's, as with "all-linear"
    output = model.get_output_embeddings()
    head = next((name for name, m in model.named_modules() if m is output), None) if output is not None else None
    if head and any(head == n or head.endswith(f".{n}") for n in names):
        raise ValueError(f"lora_target_modules adapts the linear layers below the LM head, not {head!r} "
                         f"(lora_target_modules={config.lora.target_modules!r})")
    settings = peft.LoraConfig(r=config.lora.rank, lora_alpha=config.lora.alpha, lora_dropout=0.0, bias="none",
                               target_modules="all-linear" if names == ["all-linear"] else names)
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.rollout.seed)
        peft.inject_adapter_in_model(settings, model, adapter_name=ADAPTER)
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
    other = [name for name, m in layers if not isinstance(m, peft.tuners.lora.Linear)]
    if other:  # merged() folds linear layers only
        raise ValueError(f"lora_target_modules adapts linear layers; {other[:3]} are not "
                         f"(lora_target_modules={config.lora.target_modules!r})")
    freeze_bottom(model, config.freeze_layers)


@contextmanager
def adapters_off(model):
    """``model`` with its adapters off for the block: the base model. peft's switch sets requires_grad on
    the adapters, so every flag is put back as it was (a frozen layer's adapter stays frozen)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)
        for p, flag in flags:
            p.requires_grad_(flag)


def _scales(model) -> dict[str, float]:
    """Adapted module name -> its scale alpha / r."""
    from peft.tuners.lora import LoraLayer

    return {name: m.scaling[ADAPTER] for name, m in model.named_modules() if isinstance(m, LoraLayer)}


@torch.no_grad()
def merged(model, state: dict) -> dict:
    """``state`` (the adapted ``model``'s state dict, or its gathered full tensors) as the plain model's:
    each adapted layer's weight W + (B @ A) * alpha / r under the layer's own name, the adapters dropped.
    New tensors where merged; the model is left as it is."""
    scales = _scales(model)
    out = {}
    for key, value in state.items():
        module, inside, rest = key.partition(".base_layer.")
        if inside and module in scales:
            if rest == "weight":
                a, b = (state[f"{module}.lora_{x}.{ADAPTER}.weight"].to(value) for x in "AB")
                value = value + (b @ a) * scales[module]  # peft's own order (get_delta_weight, merge)
            out[f"{module}.{rest}"] = value
        elif key.partition(".lora_")[0] not in scales:
            out[key] = value
    return out


def save_adapter(folder: Path, model, state: dict) -> None:
    """The adapter of ``state`` (as ``merged`` takes it) in ``folder``/adapter, as ``PeftModel.save_pretrained``
    writes it: adapter_config.json and adapter_model.safetensors."""
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(folder) / ADAPTER_DIR
    out.mkdir(exist_ok=True)
    tensors = get_peft_model_state_dict(model, state_dict=state, adapter_name=ADAPTER)
    save_file({PEFT_PREFIX + k: v.detach().cpu().contiguous() for k, v in tensors.items()},
              str(out / ADAPTER_FILE), metadata={"format": "pt"})
    model.peft_config[ADAPTER].save_pretrained(str(out))


def load_adapter(folder: Path, model, weights: dict) -> None:
    """The adapter saved in ``folder``/adapter into ``model``; ``weights``: the folder's merged model, which the
    base model with that adapter must give (else the run resumes another base model). A ValueError
    says what does not fit."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(folder) / ADAPTER_DIR / ADAPTER_FILE
    if not path.is_file():
        raise ValueError(f"checkpoint {folder} holds no LoRA adapter ({ADAPTER_DIR}/{ADAPTER_FILE}): it was "
                         f"trained without lora_rank; resume it with --lora-rank 0")
    tensors = {k.removeprefix(PEFT_PREFIX): v for k, v in load_file(str(path)).items()}
    try:
        result = set_peft_model_state_dict(model, tensors, adapter_name=ADAPTER)
    except RuntimeError as error:  # shape mismatches: another rank
        raise ValueError(f"checkpoint {folder}: its adapter does not fit this model and lora_rank "
                         f"({str(error).splitlines()[-1].strip()})") from None
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if missing or result.unexpected_keys:
        raise ValueError(f"checkpoint {folder}: its adapter does not fit this model's lora_target_modules "
                         f"(missing {missing[:3]}, unexpected {result.unexpected_keys[:3]})")
    ours = {k: v.cpu() for k, v in merged(model, model.state_dict()).items()}
    differ = [k for k, v in weights.items()
              if k in ours and not torch.allclose(ours[k], v.to(ours[k]), rtol=1e-4, atol=1e-6)]
    if differ:
        raise ValueError(f"checkpoint {folder} was trained from another base model ({differ[:3]} differ from "
                         f"this one's with its adapter): pass the run's initial --model")
