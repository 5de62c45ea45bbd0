"""The docs site (mkdocs.yml, docs/) builds with warnings as errors and renders every page, and every relative
link of README.md and docs/ resolves: the file exists and an ``#anchor`` names a heading of that page, by the
slug rule of MkDocs' table of contents (checked here against the ids of the built pages)."""

import importlib.util
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
LINKED = [ROOT / "README.md", *PAGES]  # the pages whose links are checked

FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.S | re.M)
# inline code: a run of backticks to the next run of the same length, within a paragraph
CODE = re.compile(r"(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n).)+?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)  # http:, https:, mailto:, ...

MKDOCS = importlib.util.find_spec("mkdocs") is not None and importlib.util.find_spec("material") is not None
needs_mkdocs = pytest.mark.skipif(not MKDOCS, reason="mkdocs and mkdocs-material are not installed "
                                  "(the dev extra has them: make test, or pip install -e '.[dev]')")


def prose(text: str) -> str:
    """The text outside code blocks and inline code, where links and headings live."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs' toc writes it (Python-Markdown's slugify of the heading's rendered text):
    inline markup dropped, ASCII only, punctuation dropped, lowercase, runs of spaces and hyphens to one hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text.replace("`", ""))
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated one gets _1, _2, ... as toc numbers them."""
    seen: set[str] = set()
    for match in HEADING.finditer(FENCE.sub("", page.read_text())):
        base = name = slug(match.group(2))
        n = 0
        while name in seen:
            n += 1
            name = f"{base}_{n}"
        seen.add(name)
    return seen


def broken_links(pages, docs: Path = DOCS) -> list[str]:
    """'PAGE: TARGET (why)' for each relative link of the pages that does not resolve: a missing file, an
    anchor no heading of the target page has, or (from a page under docs) a file outside docs, which the
    site cannot link to."""
    problems = []
    for page in pages:
        for match in LINK.finditer(prose(page.read_text())):
            target = match.group(1)
            if EXTERNAL.match(target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page.resolve()
            if not file.exists():
                problems.append(f"{page.name}: {target} (no such file)")
            elif page.resolve().is_relative_to(docs.resolve()) and not file.is_relative_to(docs.resolve()):
                problems.append(f"{page.name}: {target} (outside {docs.name}/: write the path as code)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                problems.append(f"{page.name}: {target} (no heading #{anchor} in {file.name})")
    return problems


def test_there_are_docs_pages_and_links_to_check():
    names = {p.name for p in PAGES}
    assert {"index.md", "envs.md", "agent.md", "training.md", "sandbox.md", "server.md", "vision.md",
            "integrations.md", "install.md"} <= names
    readme_links = [m.group(1) for m in LINK.finditer(prose((ROOT / "README.md").read_text()))]
    assert {f"docs/{n}" for n in names} <= {t.partition("#")[0] for t in readme_links}  # README links each page


def test_every_relative_link_resolves():
    assert broken_links(LINKED) == []


def test_the_link_check_can_fail(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "outside.md").write_text("# Outside\n")
    (docs / "b.md").write_text("# The page: `ragen serve`, RemoteEnv\n\n## Scores as RAGEN's\n\n## Scores as RAGEN's\n")
    (docs / "a.md").write_text(
        "[ok](b.md) [ok](b.md#the-page-ragen-serve-remoteenv) [ok](b.md#scores-as-ragens_1) [web](https://x.y/z)\n"
        "`[in code](gone.md)`\n\n```\n[in a block](gone.md)\n```\n"
        "[gone](gone.md) [bad anchor](b.md#scores-as-ragen) [out](../outside.md) [self](#nope)\n")
    assert broken_links([docs / "a.md"], docs) == [
        "a.md: gone.md (no such file)",
        "a.md: b.md#scores-as-ragen (no heading #scores-as-ragen in b.md)",
        "a.md: ../outside.md (outside docs/: write the path as code)",
        "a.md: #nope (no heading #nope in a.md)",
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return done, out


def built(out: Path, page: Path) -> Path:
    """Where MkDocs writes a page (directory URLs: docs/envs.md -> envs/index.html)."""
    rel = page.relative_to(DOCS).with_suffix("")
    return out / ("index.html" if rel.name == "index" else rel / "index.html")


@needs_mkdocs
def test_the_site_builds_with_warnings_as_errors_and_renders_every_page(site):
    done, out = site
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for page in PAGES:
        html = built(out, page)
        assert html.exists(), f"{page.name} was not rendered (is it in mkdocs.yml's nav?)"
        title = HEADING.search(page.read_text()).group(2)
        assert f'id="{slug(title)}"' in html.read_text(), f"{page.name}: its title is not in {html}"
    assert not list(out.rglob("*.md")), "a page was copied as a file, not rendered"


@needs_mkdocs
def test_the_slug_rule_is_the_one_mkdocs_used(site):
    done, out = site
    assert done.returncode == 0, done.stderr[-3000:]
    for page in PAGES:
        ids = set(re.findall(r'\bid="([^"]+)"', built(out, page).read_text()))
        assert anchors(page) <= ids, f"{page.name}: headings whose anchor is not {sorted(anchors(page) - ids)}"


def test_the_env_table_is_the_catalogue():
    # Regenerate with: ragen list --markdown
    from ragen_envs.registry import env_table

    assert env_table() in (DOCS / "envs.md").read_text()


def test_the_argument_bounds_table_is_the_envs():
    # Regenerate with: python -c "from ragen_envs.registry import bounds_table; print(bounds_table())"
    from ragen_envs.registry import bounds_table

    assert bounds_table() in (DOCS / "envs.md").read_text()
