"""pyproject.toml: torch a range for users (pinned only by this project's constraints.txt), the GPU install
the llm extra plus vLLM; the package builds without setuptools' deprecation warnings (offline: no build
isolation); a missing optional module is named with its extra."""

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


def test_torch_is_a_range_for_users_and_pinned_only_in_this_projects_installs():
    llm, gpu = names("llm"), names("gpu")
    assert llm["torch"] == ">=2.4"  # a user's install takes their platform's torch (vLLM's, on a GPU)
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text().splitlines()  # this project's CPU wheel
    makefile = (ROOT / "Makefile").read_text()
    assert "install -q --no-compile -c constraints.txt -e" in makefile  # make test / make demo install under it
    assert "-c ../../constraints.txt -r" in makefile  # and each framework's venv
    # the gpu extra is the llm extra, not a copy of its list, plus vLLM and TensorBoard
    assert [Requirement(r).extras for r in EXTRAS["gpu"] if Requirement(r).name == PROJECT["name"]] == [{"llm"}]
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


def test_the_trainers_names_are_served_under_ragen_envs_and_load_only_when_asked_for():
    script = ("import sys, ragen_envs.training as t\n"
              "print('trainers' in sys.modules, t.trainers_shadowed())\n"
              "from ragen_envs.training import TrainerConfig\n"
              "import trainers\n"
              "print(TrainerConfig is trainers.TrainerConfig, 'torch' in sys.modules)\n"
              "try:\n    t.nothing\nexcept AttributeError as e:\n    print('TrainerConfig' in str(e))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "None", "True", "False", "True"], done.stderr


def test_a_trainers_folder_that_hides_the_package_is_named_by_the_library_and_the_cli(tmp_path):
    (tmp_path / "trainers").mkdir()
    (tmp_path / "trainers" / "__init__.py").write_text("")  # a user's own package of that name, in the cwd
    script = ("try:\n    from ragen_envs.training import Trainer\nexcept ImportError as e:\n    print(e)\n"
              "import sys; from ragen_envs.cli.commands import main\n"
              f"sys.exit(main(['train', '--env', {SMOKE!r}, '--iterations', '1']))")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    said = f"'trainers' is imported from {tmp_path.resolve() / 'trainers' / '__init__.py'}, not from ragen-envs"
    assert done.stdout.startswith(f"ragen_envs.training.Trainer: {said}"), (done.stdout, done.stderr)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_every_install_line_the_package_prints_comes_from_install_hint():
    """A message an installed package prints names the extra through ``extras.install_hint`` (the index and a
    clone alike), never a hand-written line: string constants only, docstrings and comments aside."""
    import ast

    written = []
    for path in [*(ROOT / "ragen_envs").rglob("*.py"), *(ROOT / "trainers").rglob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                text = node.value
                if "ragen-envs[" in text or "pip install -e" in text or "make test" in text:
                    written.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text[:60]!r}")
    written = [w for w in written if not w.startswith("ragen_envs/extras.py:")]
    assert written == []
