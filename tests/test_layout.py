"""README.md's Layout (the code block under ``## Layout``) names every module: each package folder of
``ragen_envs/`` and ``trainers/`` (every folder with an ``__init__.py``) has an entry naming each of its
``.py`` files but ``__init__.py`` and ``__main__.py``; every ``benchmarks/*/*.py`` is named; and every file or
folder the Layout names is there (no stale names).

How the block reads: an entry starts at a line whose first word is a folder (``name/``) indented less than
the first entry's description; the lines indented further continue it. A folder at column 0 is a path from the
repository root (``ragen_envs/remote/``); an indented one sits in the last entry indented less
(``  agent/`` under ``ragen_envs/``, ``    backends/`` under ``  agent/``). Every bare file name in an
entry's text (``x.py``, ``x.sh``, ``x.md``; not one written after a ``/``) and every bare folder name
(``x/``) belongs to that entry's folder, but inside ``sub/ (...)``, whose names belong to the subfolder
``sub/``. The words at the right end of some lines (the layers) name nothing."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ragen_envs", "trainers")  # every module of every package folder under these is named
SCRIPTS = ("benchmarks/speed", "benchmarks/studies", "benchmarks/audits")  # every *.py directly in these is named
UNNAMED = {"__init__.py", "__main__.py"}
BLOCK = re.compile(r"^## Layout\n.*?^```[^\n]*\n(.*?)^```", re.S | re.M)
HEAD = re.compile(r"( *)(\S+/)(?: +(.*))?$")
FILE = re.compile(r"(?<![\w/.-])[\w-]+\.(?:py|sh|md)\b")
FOLDER = re.compile(r"(?<![\w/.-])(\w+)/(?=[\s,;:)]|$)")
SUBFOLDER = re.compile(r"(?<![\w/.-])(\w+)/ \(")


def layout_block(readme: str) -> str:
    match = BLOCK.search(readme)
    assert match, "README.md has a ## Layout section with a code block"
    return match.group(1)


def parse_layout(block: str) -> dict[str, set[str]]:
    """{folder path ending in "/": the names its entry gives (files, and subfolders ending in "/")}."""
    entries: list[tuple[str, list[str]]] = []  # (folder, its text lines)
    stack: list[tuple[int, str]] = []  # (indent, folder) of the entries that may hold an indented one
    column = None
    for number, line in enumerate(block.splitlines(), 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if column is not None and indent >= column:
            if not entries:
                raise ValueError(f"Layout line {number}: a continuation before any entry")
            entries[-1][1].append(line.strip())
            continue
        head = HEAD.match(line)
        if not head:
            raise ValueError(f"Layout line {number}: neither a folder entry nor indented as a continuation")
        if column is None:
            if not head.group(3):
                raise ValueError(f"Layout line {number}: the first entry sets the description's column")
            column = head.start(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if indent and not stack:
            raise ValueError(f"Layout line {number}: an indented folder with no entry above it")
        folder = (stack[-1][1] if indent else "") + head.group(2)
        stack.append((indent, folder))
        entries.append((folder, [head.group(3) or ""]))
    layout: dict[str, set[str]] = {}
    for folder, lines in entries:
        text = " ".join(lines)
        while match := SUBFOLDER.search(text):  # sub/ (...: a.py, b.py): the names are sub/'s
            end = closing(text, match.end() - 1)
            layout.setdefault(folder + match.group(1) + "/", set()).update(names(text[match.end():end]))
            text = text[:match.start()] + match.group(1) + "/" + text[end + 1:]
        layout.setdefault(folder, set()).update(names(text))
    return layout


def closing(text: str, start: int) -> int:
    """The index of the parenthesis closing the one at ``start``."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise ValueError(f"Layout: unclosed parenthesis in {text[start:start + 60]!r}")


def names(text: str) -> set[str]:
    return set(FILE.findall(text)) | {name + "/" for name in FOLDER.findall(text)}


def layout_problems(layout: dict[str, set[str]], root: Path = ROOT, packages=PACKAGES,
                    scripts=SCRIPTS) -> list[str]:
    """What the Layout gets wrong about the tree at ``root``, one line each; [] when nothing."""
    problems = []
    for package in packages:
        for init in sorted((root / package).rglob("__init__.py")):
            folder = init.parent.relative_to(root).as_posix() + "/"
            if folder not in layout:
                problems.append(f"{folder}: a package with no entry")
                continue
            problems += [f"{folder}{module.name}: not named" for module in sorted(init.parent.glob("*.py"))
                         if module.name not in UNNAMED and module.name not in layout[folder]]
    for folder in scripts:
        named = layout.get(folder + "/", set())
        problems += [f"{folder}/{script.name}: not named" for script in sorted((root / folder).glob("*.py"))
                     if script.name not in named]
    for folder, given in sorted(layout.items()):
        if not (root / folder).is_dir():
            problems.append(f"{folder}: no such folder")
            continue
        for name in sorted(given):
            path = root / folder / name
            if not (path.is_dir() if name.endswith("/") else path.is_file()):
                problems.append(f"{folder}{name}: named, not there")
    return problems


def test_the_layout_names_every_module_and_only_what_is_there():
    layout = parse_layout(layout_block((ROOT / "README.md").read_text()))
    assert {"ragen_envs/", "trainers/", "ragen_envs/agent/backends/", "benchmarks/"} <= set(layout)
    assert layout_problems(layout) == []


def test_the_parser_reads_nesting_continuations_and_a_subfolder_in_parentheses():
    block = """\
pkg/          a.py (the first, see x.txt), b.py,                 the layer
              c.py (more; Ragen/Env-v0, DDP/FSDP)
  sub/        d.py
    deep/     e.py, f.py                                         on top
  other/      g.py (see pkg/a.py)
pkg/far/      server/ (`serve`: h.py, i.py), j.py
tests/        one/, two/
"""
    assert parse_layout(block) == {
        "pkg/": {"a.py", "b.py", "c.py"}, "pkg/sub/": {"d.py"}, "pkg/sub/deep/": {"e.py", "f.py"},
        "pkg/other/": {"g.py"}, "pkg/far/": {"server/", "j.py"}, "pkg/far/server/": {"h.py", "i.py"},
        "tests/": {"one/", "two/"}}


def test_the_check_reports_a_missing_module_a_stale_name_and_a_package_without_entry(tmp_path):
    for path in ("pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/sub/__init__.py",
                 "pkg/sub/c.py", "pkg/__main__.py", "lib/__init__.py", "lib/t.py",
                 "bench/run.py", "bench/other.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    block = """\
pkg/          a.py (the one), gone.py
lib/            t.py, sub/
bench/          run.py; README.md
"""
    assert sorted(layout_problems(parse_layout(block), tmp_path, ("pkg", "lib"), ("bench",))) == sorted([
        "pkg/b.py: not named", "pkg/sub/: a package with no entry", "bench/other.py: not named",
        "bench/README.md: named, not there", "pkg/gone.py: named, not there",
        "lib/sub/: named, not there"])
    fixed = """\
pkg/          a.py (the one), b.py
  sub/               c.py
lib/            t.py
bench/          run.py, other.py
"""
    assert layout_problems(parse_layout(fixed), tmp_path, ("pkg", "lib"), ("bench",)) == []
