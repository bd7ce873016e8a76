"""Every relative link in the README and in ``docs/**/*.md`` points at a file or folder inside this
repository that exists (and a ``#fragment`` on a Markdown file at one of its headings).

A clone holds only the repository: a link that climbs out of it (``../shared/DESIGN.md``) or names
a file that is not there is a dead link for every reader. Links are read the way a Markdown renderer
finds them: inline links and images ``[text](target)``, reference definitions ``[id]: target`` and
HTML ``href``/``src`` attributes, outside fenced code blocks and code spans. Absolute URLs
(``https:``, ``mailto:``) are not checked here: tests make no outside requests.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.support.paths import REPO

ROOT = REPO

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]+(?:\([^\s()]*\)[^\s()]*)*)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)")
_HTML = re.compile(r"""<(?:a|img|source)\b[^>]*?\s(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}: {self.target}"


def markdown_files(root: Path = ROOT) -> list[Path]:
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [f for f in files if f.is_file()]


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with code spans blanked out."""
    fence = ""
    for number, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = ""
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, _CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)


def links(path: Path) -> list[Link]:
    found: list[Link] = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        targets = [m.group(1) for m in _INLINE.finditer(line)]
        targets += [m.group(1) for m in _REFERENCE.finditer(line)]
        targets += [m.group(1) for m in _HTML.finditer(line)]
        found += [Link(path, number, t.strip("<>")) for t in targets]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def problem(link: Link, root: Path = ROOT) -> str | None:
    """Why ``link`` is broken, or None when it is fine (or an absolute URL, not checked)."""
    parts = urlsplit(link.target)
    if parts.scheme or parts.netloc:
        return None
    if link.target.startswith("/"):
        return "an absolute path: GitHub resolves it against the repository, a clone against /; write it relative"
    path = unquote(parts.path)
    target = (link.source.parent / path).resolve() if path else link.source
    if not target.is_relative_to(root.resolve()):
        return f"points outside the repository ({target}): link a file in the repository or inline the text"
    if not target.exists():
        return f"no such file or folder: {target.relative_to(root.resolve())}"
    if parts.fragment and target.suffix == ".md" and unquote(parts.fragment).lower() not in anchors(target):
        return f"no heading #{parts.fragment} in {target.relative_to(root.resolve())}"
    return None


def test_there_are_links_to_check() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files
    assert sum(len(links(f)) for f in files) >= 5


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_stay_in_the_repository_and_exist(path: Path) -> None:
    broken = [f"{link}  ← {why}" for link in links(path) if (why := problem(link)) is not None]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_checker_catches_escapes_missing_files_and_bad_anchors(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "guide.md").write_text("# Guide\n\n## Set up (Debian)\n\nsee [top](../README.md#intro)\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "DESIGN.md").write_text("# outside\n")
    readme = repo / "README.md"
    readme.write_text(
        "# Intro\n\n"
        "See [`../shared/DESIGN.md`](../shared/DESIGN.md) and [gone](docs/gone.md).\n"
        "Fine: [guide](docs/guide.md#set-up-debian), [self](#intro), <https://example.com>, "
        "[web](https://example.com/x), ![img](docs/guide.md).\n"
        "Bad anchor: [guide](docs/guide.md#nope). Ref:\n\n"
        "[ref]: ../shared/DESIGN.md\n\n"
        'Code is not a link: `[x](../nope.md)` <a href="docs/missing.md">html</a>\n\n'
        "```\n[y](../also-not-a-link.md)\n```\n"
    )
    found = links(readme)
    assert [lk.target for lk in found] == [
        "../shared/DESIGN.md",
        "docs/gone.md",
        "docs/guide.md#set-up-debian",
        "#intro",
        "https://example.com/x",
        "docs/guide.md",
        "docs/guide.md#nope",
        "../shared/DESIGN.md",
        "docs/missing.md",
    ]
    verdicts = {lk.target: problem(lk, root=repo) for lk in found}
    assert "outside the repository" in (verdicts["../shared/DESIGN.md"] or "")
    assert "no such file" in (verdicts["docs/gone.md"] or "")
    assert "no such file" in (verdicts["docs/missing.md"] or "")
    assert "no heading #nope" in (verdicts["docs/guide.md#nope"] or "")
    for fine in ("docs/guide.md#set-up-debian", "#intro", "https://example.com/x", "docs/guide.md"):
        assert verdicts[fine] is None, (fine, verdicts[fine])
    assert [problem(lk, root=repo) for lk in links(repo / "docs" / "guide.md")] == [None]
