"""Every Python block of the READMEs and the docs pages (README.md, docs/**/*.md, benchmarks/README.md,
benchmarks/results/**/README.md) runs as written, in a fresh process and a scratch folder, or starts with a
visible ``# not run here: WHY`` line; such a block must still compile, and every ragen-envs module and name
it uses must exist. A block written twice (README.md's tour repeats blocks of its docs pages) runs once.

The pages a library user reads (README.md, docs/) run against the package as a user installs it: a wheel
built from this checkout, installed into a fresh virtual environment outside the repository (its
dependencies taken from this one's, so nothing is fetched). The benchmarks' pages are about this
repository (their scripts are not in the package) and run from the checkout."""

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# globs, so a page added later is covered without touching this file
READMES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md",
           *sorted((ROOT / "benchmarks" / "results").rglob("README.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
MARK = "# not run here:"
OURS = ("ragen_envs", "trainers")


def found():
    """(where, code) of every Python block, where as PAGE:LINE (the block's first line of code)."""
    for readme in READMES:
        text = readme.read_text()
        for match in BLOCK.finditer(text):
            line = text[:match.start()].count("\n") + 2
            yield f"{readme.relative_to(ROOT)}:{line}", match.group(1)


def blocks():
    seen = set()
    for where, code in found():
        if code not in seen:  # the same block on two pages runs once, under its first page's name
            seen.add(code)
            yield pytest.param(code, id=where)


BLOCKS = list(blocks())


def test_the_readmes_have_python_blocks():
    assert len(BLOCKS) >= 5  # the pattern finds them (a block never seen is never tested)
    pages = {where.rsplit(":", 1)[0] for where, _ in found()}
    # the pages with Python blocks are read: the docs pages' blocks are found, not only README.md's
    assert {"README.md", "docs/envs.md", "docs/agent.md", "docs/training.md", "docs/integrations.md"} <= pages


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory) -> str:
    """The python of a fresh virtual environment, outside the repository, holding the wheel built from this
    checkout (pip, no index); the wheel's dependencies are this environment's site-packages, appended to its
    path by a .pth file (whose own .pth files, such as the editable install's finder, Python does not read)."""
    import shutil
    import site
    import sysconfig

    where = tmp_path_factory.mktemp("wheel")
    source = where / "source"  # a copy of what the wheel is built from: a build in the checkout writes build/
    for name in ("ragen_envs", "trainers"):  # and *.egg-info there, which another test's build may be using
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(where / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, capture_output=True, timeout=300)
    python = str(where / "venv" / "bin" / "python")
    wheel = next((where / "dist").glob("ragen_envs-*.whl"))
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    Path(purelib, "ragen_envs_deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    return python


def library_page(code: str) -> bool:
    """Whether the block's first page is one a library user reads (README.md, docs/), not the benchmarks'."""
    return not next(where for where, c in found() if c == code).startswith("benchmarks/")


@pytest.mark.parametrize("code", BLOCKS)
def test_a_readme_block_runs_as_written(code, tmp_path, request):
    if code.startswith(MARK):
        assert code.splitlines()[0][len(MARK):].strip(), "the marker says why the block cannot run here"
        check_names(code)
        return
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if library_page(code):
        python = request.getfixturevalue("wheel_python")
        env.pop("PYTHONPATH", None)
        where = subprocess.run([python, "-c", "import ragen_envs, trainers; print(ragen_envs.__file__, "
                                "trainers.__file__)"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert where.stdout.split() and all(not Path(f).is_relative_to(ROOT) for f in where.stdout.split()), \
            (where.stdout, where.stderr)  # the installed wheel's, not the checkout's
    else:
        python, env["PYTHONPATH"] = sys.executable, str(ROOT)
    done = subprocess.run([python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def check_names(code: str) -> None:
    """The block compiles; each of our modules it imports exists, and each name it takes from one of them
    (``from m import x`` or ``m.x``) is defined there."""
    tree = ast.parse(code)
    modules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update({a.name: [] for a in node.names if a.name.startswith(OURS)})
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(OURS):
            modules.setdefault(node.module, []).extend(a.name for a in node.names)
    for node in ast.walk(tree):  # ragen_envs.integrations.skyrl.dataset_rows(...)
        if isinstance(node, ast.Attribute):
            dotted = ast.unparse(node)
            for module in modules:
                if dotted.startswith(module + ".") and "." not in dotted[len(module) + 1:]:
                    modules[module].append(dotted[len(module) + 1:])
    for module, names in modules.items():
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"no module {module}"
        source = Path(spec.origin).read_text()
        for name in names:  # defined there (its framework may be missing here, so the module is not imported)
            submodule = spec.submodule_search_locations and importlib.util.find_spec(f"{module}.{name}")
            # a lazy package (ragen_envs.diagnose) names its exports in a {"name": "module"} table
            assert submodule or re.search(rf'^(def|class) {name}\b|^{name} =|import .*\b{name}\b|^\s+"{name}": "',
                                          source, re.M), f"{module} has no {name}"


def test_the_check_of_a_block_not_run_can_fail():
    check_names("import ragen_envs.integrations.skyrl\nragen_envs.integrations.skyrl.dataset_rows('x', 1)")
    with pytest.raises(AssertionError, match="has no datset_rows"):
        check_names("import ragen_envs.integrations.skyrl\nragen_envs.integrations.skyrl.datset_rows('x', 1)")
    with pytest.raises(AssertionError, match="no module ragen_envs.integrations.nope"):
        check_names("from ragen_envs.integrations.nope import x")
    with pytest.raises(SyntaxError):
        check_names("import ragen_envs.(")
    check_names("from ragen_envs.diagnose import RolloutLog")  # a lazy export
    with pytest.raises(AssertionError, match="has no RolloutLogs"):
        check_names("from ragen_envs.diagnose import RolloutLogs")
