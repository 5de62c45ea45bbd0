"""Checkpoint folders: ``checkpoint-<iteration>`` holding the model and tokenizer (transformers
format, so ``ragen eval --model`` takes it), ``trainer.pt`` (optimizer, value head) and
``trainer_state.json`` (iteration, rollout calls, ``RLState``, model, config). A folder is written beside
its final name and renamed, so it is complete or absent. A LoRA run's (``trainers.lora``) holds the merged
model there and its adapter in ``adapter/`` (adapter_config.json, adapter_model.safetensors: peft's format).

``validate`` checks a checkpoint before any model is loaded (files present, state readable, the same
algorithm and model); every problem is one ``ValueError`` line naming the folder and what is wrong."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ragen_envs.diagnose import mi
from trainers import lora

STATE_FILE = "trainer_state.json"
TENSORS_FILE = "trainer.pt"
WEIGHTS_FILE = "model.safetensors"
REQUIRED = ("config.json", WEIGHTS_FILE, TENSORS_FILE, STATE_FILE)
STATE_KEYS = ("iteration", "calls", "mi_ema", "config")
NAME = re.compile(r"checkpoint-(\d+)$")


@dataclass
class RLState:
    """What RL training carries from one iteration to the next besides the weights, the optimizer and the
    rollout seeds; a checkpoint keeps all of it but the filter's streak, which restarts on resume."""
    kl_coef: float  # the in-reward KL's coefficient, which an adaptive controller moves
    mi_emas: dict = field(default_factory=mi.scope_emas)  # the MI proxies' running means, by scope
    empty_filter_streak: int = 0  # iterations in a row in which the filter kept nothing

    def state_dict(self) -> dict:
        return {"mi_ema": {name: ema.state_dict() for name, ema in self.mi_emas.items()}, "kl_coef": self.kl_coef}

    def load_state_dict(self, state: dict, adaptive_kl: bool) -> None:
        """Continue from a checkpoint's ``state``; the KL coefficient only where an adaptive controller moves
        it (checkpoints from before it lack it)."""
        if adaptive_kl:
            self.kl_coef = state.get("kl_coef", self.kl_coef)
        for name, ema_state in state["mi_ema"].items():
            if name in self.mi_emas:
                self.mi_emas[name].load_state_dict(ema_state)


def save(output_dir: Path, iteration: int, model, tokenizer, tensors: dict, meta: dict,
         keep: int | None = None, state_dict: dict | None = None) -> Path:
    """Write ``checkpoint-<iteration>``; with ``keep``, then delete all but the newest ``keep``.
    ``tokenizer``: or a vision-language model's processor (its image processor's config too).
    ``state_dict``: the weights to write (a sharded model's gathered ones; default: the model's)."""
    path = output_dir / f"checkpoint-{iteration}"
    tmp = output_dir / f".checkpoint-{iteration}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if lora.adapted(model):  # the adapter in adapter/, and the merged model, which loads as a plain one
        state = model.state_dict() if state_dict is None else state_dict
        lora.save_adapter(tmp, model, state)
        state_dict = lora.merged(model, state)
    model.save_pretrained(tmp, state_dict=state_dict)
    tokenizer.save_pretrained(tmp)
    torch.save(tensors, tmp / TENSORS_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(meta, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    if keep:
        for old in all_checkpoints(output_dir)[:-keep]:
            shutil.rmtree(old)
    return path


def all_checkpoints(output_dir: Path) -> list[Path]:
    """Complete checkpoint folders, oldest first."""
    if not output_dir.is_dir():
        return []
    found = [p for p in output_dir.iterdir() if p.is_dir() and NAME.match(p.name)]
    return sorted(found, key=lambda p: int(NAME.match(p.name).group(1)))


def size_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def find(output_dir: Path, where: str) -> Path:
    """The checkpoint folder named by ``where``: a path, or "latest" in ``output_dir``."""
    if where != "latest":
        path = Path(where)
        if not path.is_dir():
            raise ValueError(f"no checkpoint folder at {path}")
        return path
    found = all_checkpoints(output_dir)
    if not found:
        raise ValueError(f"no checkpoint-* in {output_dir} to resume from")
    return found[-1]


def validate(path: Path, algorithm: str, model_name: str | None) -> dict:
    """The checkpoint's state, after checking it can resume this run; a ValueError says what is wrong."""
    missing = [name for name in REQUIRED if not (path / name).is_file()]
    if missing:
        raise ValueError(f"checkpoint {path} is incomplete: {', '.join(missing)} missing")
    try:
        meta = json.loads((path / STATE_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"checkpoint {path}: {STATE_FILE} is unreadable ({error})") from None
    if not isinstance(meta, dict) or any(key not in meta for key in STATE_KEYS):
        raise ValueError(f"checkpoint {path}: {STATE_FILE} lacks {', '.join(STATE_KEYS)}")
    saved = meta["config"].get("algorithm") if isinstance(meta["config"], dict) else None
    if saved != algorithm:
        raise ValueError(f"checkpoint {path} was trained with --algorithm {saved}, this run uses {algorithm}")
    adapter = [f"{lora.ADAPTER_DIR}/{name}" for name in (lora.CONFIG_FILE, lora.ADAPTER_FILE)] \
        if meta["config"].get("lora_rank") else []
    missing = [name for name in adapter if not (path / name).is_file()]
    if missing:
        raise ValueError(f"checkpoint {path} is incomplete: {', '.join(missing)} missing (a LoRA run's adapter)")
    if "model" in meta and meta["model"] != model_name:
        raise ValueError(f"checkpoint {path} continues model {meta['model'] or 'default'}, this run starts "
                         f"from {model_name or 'default'}: pass the same --model")
    try:
        from safetensors import safe_open

        with safe_open(str(path / WEIGHTS_FILE), framework="pt"):
            pass
    except Exception as error:  # safetensors raises its own error types
        raise ValueError(f"checkpoint {path}: {WEIGHTS_FILE} is unreadable ({error})") from None
    return meta


def load(path: Path, model) -> dict:
    """Load the weights into ``model``; return the optimizer/value-head tensors."""
    from safetensors.torch import load_file

    weights = load_file(str(path / WEIGHTS_FILE))
    try:
        if lora.adapted(model):  # only the adapter trained: the base weights are the initial model's
            lora.load_adapter(path, model, weights)
            missing, unexpected = [], []
        else:
            missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as error:  # shape mismatches
        raise ValueError(f"checkpoint {path} does not fit the model: {str(error).splitlines()[-1].strip()}") \
            from None
    if unexpected or any("lm_head" not in m for m in missing):  # tied lm_head may be absent
        raise ValueError(f"checkpoint {path} does not fit the model: {missing[:3]} {unexpected[:3]}")
    try:
        return torch.load(path / TENSORS_FILE, weights_only=False)
    except Exception as error:  # a truncated or foreign file
        raise ValueError(f"checkpoint {path}: {TENSORS_FILE} is unreadable ({error})") from None
