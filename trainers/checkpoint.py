"""Checkpoint folders: ``checkpoint-<iteration>`` holding the model and tokenizer (transformers
format, so ``ragen eval --model`` takes it), ``trainer.pt`` (optimizer, value head) and
``trainer_state.json`` (iteration, rollout calls, MI EMA, config). A folder is written beside its
final name and renamed, so it is complete or absent."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

STATE_FILE = "trainer_state.json"
TENSORS_FILE = "trainer.pt"


def save(output_dir: Path, iteration: int, model, tokenizer, tensors: dict, meta: dict) -> Path:
    path = output_dir / f"checkpoint-{iteration}"
    tmp = output_dir / f".checkpoint-{iteration}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save(tensors, tmp / TENSORS_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(meta, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


def find(output_dir: Path, where: str) -> Path:
    """The checkpoint folder named by ``where``: a path, or "latest" in ``output_dir``."""
    path = Path(where)
    if where == "latest":
        found = sorted(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        if not found:
            raise FileNotFoundError(f"no checkpoint-* in {output_dir} to resume from")
        path = found[-1]
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint (no {STATE_FILE})")
    return path


def load(path: Path, model) -> tuple[dict, dict]:
    """Load the weights into ``model``; return (tensors, meta)."""
    from safetensors.torch import load_file

    weights = load_file(str(path / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or any("lm_head" not in m for m in missing):  # tied lm_head may be absent
        raise ValueError(f"checkpoint {path} does not fit the model: {missing[:3]} {unexpected[:3]}")
    tensors = torch.load(path / TENSORS_FILE, weights_only=False)
    meta = json.loads((path / STATE_FILE).read_text())
    return tensors, meta
