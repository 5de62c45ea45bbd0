"""pyproject.toml: the GPU install is one extra that leaves torch to vLLM, kept in step with the llm
extra; the package builds without setuptools' deprecation warnings (offline: no build isolation)."""

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from conftest import SMOKE

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


def test_each_optional_module_is_brought_by_the_extra_its_hint_names():
    from ragen_envs.extras import MODULE_EXTRAS

    def normal(name: str) -> str:
        return name.lower().replace("-", "_")
    for module, extra in MODULE_EXTRAS.items():
        assert extra in EXTRAS, f"{module}: no extra {extra!r} in pyproject.toml"
        assert module in {normal(n) for n in names(extra)}, f"the {extra!r} extra does not list {module}"


def test_a_missing_torch_is_named_with_its_extra_by_the_trainer_and_the_cli():
    hint = 'it comes with the \'llm\' extra: pip install "ragen-envs[llm]"'
    script = ("import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
              "try:\n    from trainers import Trainer\nexcept ImportError as e:\n    print(e)\n"
              "from ragen_envs.cli.commands import main\n"
              f"sys.exit(main(['train', '--env', {SMOKE!r}, '--iterations', '1']))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert f"trainers.Trainer: torch is not installed; {hint}" in done.stdout, done.stderr
    assert done.returncode == 2 and hint in done.stderr and done.stderr.count("\n") == 1, done.stderr
