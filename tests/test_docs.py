"""The README stays the five-minute path (issue 28): it opens with exactly the two set-up commands, `make demo`
and `make test`, in its first code block; CI runs its test command; it stays under 12 KB, the reference living
in docs/; and every relative link of the README and docs/*.md names a file that exists and, with a #fragment,
a heading of that file (GitHub's anchors)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped (word characters, '-' and ' ' kept), spaces to '-';
    a repeated heading gets -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#{1,6} +(.*?) *#*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_readme_opens_with_the_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    block = FENCE.search(text).group(0).splitlines()[1:-1]
    assert [line.split()[:2] for line in block] == [["make", "demo"], ["make", "test"]]
    assert "make test" in (ROOT / ".ci" / "run").read_text().split("# PyTorch/XLA")[0]


def test_readme_is_short():
    assert (ROOT / "README.md").stat().st_size < 12 * 1024


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    bad = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif frag and frag not in anchors(dest):
            bad.append(f"{target}: no heading #{frag} in {dest.relative_to(ROOT)}")
    assert not bad, "\n".join(bad)


ARCH = ROOT / "docs" / "architecture.md"


def test_architecture_page_is_a_short_map_of_every_package():
    """docs/architecture.md stays a maintainer's map (the detail lives in module docstrings): at most 10,500 bytes,
    no issue numbers, and every package folder under src/stepscope named on it in backquotes (`record/tracing/`)."""
    text = ARCH.read_text()
    assert ARCH.stat().st_size <= 10_500
    assert not re.search(r"\b[Ii]ssues? #?\d+|#\d+\b", text)
    src = ROOT / "src" / "stepscope"
    pkgs = sorted(p.parent.relative_to(src).as_posix() for p in src.rglob("__init__.py") if p.parent != src)
    assert pkgs, "no packages found"
    missing = [p for p in pkgs if f"`{p}/`" not in text]
    assert not missing, f"packages the architecture page does not name: {missing}"
