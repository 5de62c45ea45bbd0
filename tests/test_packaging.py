"""pyproject.toml: the GPU install is one extra that leaves torch to vLLM, kept in step with the llm
extra; the package builds without setuptools' deprecation warnings (offline: no build isolation)."""

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]


def names(extra: str) -> dict[str, str]:
    return {Requirement(r).name: str(Requirement(r).specifier) for r in EXTRAS[extra]}


def test_the_gpu_extra_is_the_llm_extra_without_the_cpu_torch_pin_plus_vllm_and_tensorboard():
    llm, gpu = names("llm"), names("gpu")
    assert llm["torch"] == "==2.13.0"  # the CPU machines' wheel: the llm extra keeps its pin
    assert "torch" not in gpu  # vLLM pins the torch it was built against; a second pin could not resolve
    assert {k: v for k, v in llm.items() if k != "torch"} == {k: v for k, v in gpu.items()
                                                              if k not in ("vllm", "tensorboard")}
    assert gpu["vllm"] == names("vllm")["vllm"] and gpu["tensorboard"] == names("tensorboard")["tensorboard"]


def test_the_diagnose_extra_leaves_torch_to_the_users_machine():
    diagnose, llm = names("diagnose"), names("llm")
    assert "torch" not in diagnose  # a training machine's own torch (CUDA or not) scores; no CPU pin over it
    assert {k: v for k, v in diagnose.items() if k in llm} == {k: llm[k] for k in diagnose if k in llm}
    assert {"pandas", "pyarrow"} <= set(diagnose)  # TRL's completions tables are parquet


def test_the_license_is_an_spdx_string_and_the_metadata_builds_without_warnings(tmp_path):
    assert PROJECT["license"] == "MIT"
    script = ("import warnings; warnings.simplefilter('error'); from setuptools import build_meta; "
              f"print(build_meta.prepare_metadata_for_build_editable({str(tmp_path)!r}))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    metadata = next(tmp_path.glob("*.dist-info")).joinpath("METADATA").read_text()
    assert "License-Expression: MIT" in metadata
    assert "Provides-Extra: gpu" in metadata and "Provides-Extra: tensorboard" in metadata
