"""Imports run one way, as the folders show: the env contract and its helpers (``ragen_envs/*.py``) at
the bottom, the envs (``ragen_envs/<env>/``) above them, the agent (``ragen_envs/agent/``) above the
envs with the public diagnosis of template collapse (``ragen_envs/diagnose/``), the trainers
(``trainers/``) above the agent, and on top the command line, running envs
elsewhere, the adapters and the trainers' names re-served under ``ragen_envs`` (``ragen_envs/cli/``,
``remote/``, ``integrations/``, ``training.py``). No module imports
from a layer above its own, and below the agent nothing loads torch or transformers (env servers
install the envs alone)."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEFAULT

ROOT = Path(__file__).parent.parent
TOP = ("cli", "remote", "integrations", "training")
AGENT = ("agent", "diagnose")  # the diagnosis of template collapse works on the agent's policies, no trainer
LAYERS = ["contract", "envs", "agent", "trainers", "top"]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def layer(module: str) -> str | None:
    """The layer of a module of this project (None: not ours)."""
    parts = module.split(".")
    if parts[0] == "trainers":
        return "trainers"
    if parts[0] != "ragen_envs":
        return None
    if len(parts) > 1 and parts[1] in TOP:
        return "top"
    if len(parts) == 1 or (ROOT / "ragen_envs" / f"{parts[1]}.py").is_file():
        return "contract"
    return "agent" if parts[1] in AGENT else "envs"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


SOURCES = sorted([*(ROOT / "ragen_envs").rglob("*.py"), *(ROOT / "trainers").rglob("*.py")])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_from_a_layer_above_its_own(path):
    own = LAYERS.index(layer(_module_name(path)))
    above = {m for m in _imports(path) if layer(m) and LAYERS.index(layer(m)) > own}
    assert not above, f"{path.relative_to(ROOT)} ({LAYERS[own]}) imports {above}"
    if own < LAYERS.index("agent"):
        heavy = {m for m in _imports(path) if m.split(".")[0] in ("torch", "transformers")}
        assert not heavy, f"{path.relative_to(ROOT)} imports {heavy}"


def test_the_layers_are_the_folders():
    assert layer("ragen_envs.base") == layer("ragen_envs.grid") == "contract"
    assert layer("ragen_envs.sokoban.env") == "envs" and layer("ragen_envs.agent.rollout") == "agent"
    assert layer("ragen_envs.diagnose") == layer("ragen_envs.diagnose.mi") == "agent"
    assert layer("trainers.trainer") == "trainers" and layer("ragen_envs.remote.server.app") == "top"
    assert layer("ragen_envs.training") == "top"


def test_import_and_make_load_no_torch():
    script = ("import json, sys, gymnasium as gym, ragen_envs\n"
              "for env_id in ragen_envs.ENVIRONMENTS:\n"
              "    kwargs = ragen_envs.ENVIRONMENTS[env_id].without_system\n"
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
              f"[parse([c, '--env', {DEFAULT!r}]) for c in ('eval', 'train', 'serve')];"
              "print(json.dumps(any(m in sys.modules for m in ('torch', 'fastapi', 'uvicorn'))))")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    assert out.splitlines()[-1] == "false"


# A path in a docstring or comment that starts at one of these folders names a file of this project
OWN_ROOTS = ("ragen_envs", "trainers", "benchmarks", "tests", ".ci")
# whole paths only: one that goes on with a pattern (test_<name>.py, *.md, a Makefile's test_$$fw.py) is not
# matched at all
PATH = re.compile(r"(?<![\w/.-])((?:%s)/[\w./-]*\w)(?![\w/<*{$-]|\.[\w/<*{$-])" % "|".join(map(re.escape, OWN_ROOTS)))


def test_every_path_the_code_and_readmes_name_exists():
    """Stale paths mislead a newcomer: every project path written in the code, pyproject, Makefile and the
    READMEs and docs/ exists (a pattern with <name> or * and generated results are left out)."""
    root = Path(__file__).resolve().parents[1]
    files = [p for d in OWN_ROOTS[:4] for p in (root / d).rglob("*.py")]
    files += [root / n for n in ("pyproject.toml", "Makefile", "README.md", "benchmarks/README.md")]
    files += sorted((root / "docs").rglob("*.md"))
    missing = sorted({(str(f.relative_to(root)), m.group(1)) for f in files for m in PATH.finditer(f.read_text())
                      if "results/" not in m.group(1) and not (root / m.group(1)).exists()})
    assert missing == []
