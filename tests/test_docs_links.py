"""Every relative link in README.md and docs/ names a file that exists, and an anchor it names is a
heading of that file (as GitHub spells a heading's anchor) or an explicit `<a id>`."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    found = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-"))
    return found


def broken(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL, not a file of this repository
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading or id {anchor!r} in {dest.name}")
    return bad


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = {str(p.relative_to(ROOT)): broken(p) for p in PAGES}
    assert {page: bad for page, bad in problems.items() if bad} == {}


def test_a_missing_page_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# B page\n\n## What `runs`\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#what-runs) [gone](c.md) [no anchor](b.md#nope) [web](https://x.y/z) [self](#top)\n")
    assert broken(page) == ["c.md: no such file", "b.md#nope: no heading or id 'nope' in b.md",
                            "#top: no heading or id 'top' in a.md"]
