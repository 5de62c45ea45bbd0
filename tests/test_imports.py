"""Imports run one way: envs never import the agent or the trainers, the agent never imports the
trainers, and the envs load neither torch nor transformers (env servers install the envs alone)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _modules(folder: Path, skip=()):
    return [p for p in folder.rglob("*.py") if not any(part in p.parts for part in skip)]


# Outside these, ragen_envs holds environments and their shared code.
NOT_ENVS = ("agent", "integrations")
NOT_ENV_FILES = {"cli.py", "cli_args.py"}


@pytest.mark.parametrize("path", [p for p in _modules(ROOT / "ragen_envs", NOT_ENVS) if p.name not in NOT_ENV_FILES],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_envs_import_neither_agent_nor_trainers(path):
    bad = {m for m in _imports(path) if m.startswith(("ragen_envs.agent", "trainers", "torch", "transformers"))}
    assert not bad, f"{path} imports {bad}"


@pytest.mark.parametrize("path", _modules(ROOT / "ragen_envs" / "agent"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_agent_never_imports_the_trainers(path):
    assert not {m for m in _imports(path) if m.startswith("trainers")}, path


def test_import_and_make_load_no_torch():
    script = ("import json, sys, gymnasium as gym, ragen_envs\n"
              "for env_id in ragen_envs.ENVIRONMENTS:\n"
              "    kwargs = {'sandbox': 'rlimit'} if env_id == 'Ragen/DeepCoder-v0' else {}\n"
              "    env = gym.make(env_id, **kwargs); env.reset(seed=0); env.step('x')\n"
              "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
              "('torch', 'transformers', 'trainers', 'fastapi', 'uvicorn', 'httpx', 'ray') "
              "or m.startswith('ragen_envs.agent'))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                                       text=True).stdout)
    assert loaded == []


def test_the_cli_parses_and_lists_without_torch():
    # `ragen list` and building every command's flags stay light; only running a model loads torch,
    # and only running the server loads its web stack.
    script = ("import json, sys; from ragen_envs.cli import main, parse; main(['list']);"
              "[parse([c, '--env', 'Ragen/Sokoban-v0']) for c in ('eval', 'train', 'serve')];"
              "print(json.dumps(any(m in sys.modules for m in ('torch', 'fastapi', 'uvicorn'))))")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    assert out.splitlines()[-1] == "false"
