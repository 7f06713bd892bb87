"""The documents' relative links resolve, their #anchors name headings, and the README stays a front door.

Run by ctest (`docs_links`). Every markdown link and image in README.md, CHANGELOG.md, docs/*.md, data/README.md and
notebooks/README.md that is not a URL must name a file or folder of the repository, and an `#anchor` (of the same
document, or of another markdown document) must be the slug GitHub gives one of that document's headings (or an
explicit `<a id>` / `<a name>`). Links inside fenced code blocks and code spans are not links and are skipped. The
README is at most 10 KiB (10,240 bytes): installation, the program's reference, benchmarks and history live in docs/
and CHANGELOG.md. No document names a path outside the repository (a relative path that climbs above its root, or an
absolute path beside it) or a tracker's issue number: the repository documents itself.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT_BYTES = 10_240


def documents() -> list[Path]:
    """The checked documents, in a fixed order."""
    fixed = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "data" / "README.md", ROOT / "notebooks" / "README.md"]
    return fixed + sorted((ROOT / "docs").glob("*.md"))


FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*(?:[ \t]#+[ \t]*)?$")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# [text](target) and ![alt](target), the text allowing one level of nested brackets; the target bare or in <...>,
# with an optional "title".
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)", re.MULTILINE)
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
RELATIVE_PATH = re.compile(r"(?<![\w./])(?:\.\./)+[\w.-]*")
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/[\w.-]+(?:/[\w.-]+)*")
# "issue 12", "issues #3", "#12" — except an upstream repository's issue cited as "GitHub #N" beside its name.
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+|(?<!GitHub )(?<![\w&/#])#\d+\b", re.IGNORECASE)


def outside_paths(document: Path, line: str) -> list[str]:
    """The paths in `line` that lead outside the repository: relative ones (from the document's folder) that climb
    above its root, and absolute ones under the folder that holds the repository."""
    found = [path for path in RELATIVE_PATH.findall(line)
             if not (document.parent / path).resolve().is_relative_to(ROOT)]
    beside = str(ROOT.parent) + "/"
    return found + [path for path in ABSOLUTE_PATH.findall(line)
                    if path.startswith(beside) and not Path(path).is_relative_to(ROOT)]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            continue
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        lines.append((number, line))
    return lines


def without_code_spans(line: str) -> str:
    """The line with its code spans blanked (their text is not markdown)."""
    return CODE_SPAN.sub(lambda match: " " * len(match.group(0)), line)


def heading_text(markdown: str) -> str:
    """The text GitHub renders for a heading's markdown: code spans keep their content, links and images their
    text, emphasis markers and HTML tags vanish."""
    parts, position = [], 0
    for match in CODE_SPAN.finditer(markdown):
        parts += [rendered_markup(markdown[position : match.start()]), match.group(2).strip()]
        position = match.end()
    parts.append(rendered_markup(markdown[position:]))
    return "".join(parts).strip()


def rendered_markup(markdown: str) -> str:
    """The text of markdown without code spans: links and images by their text, no emphasis markers or tags."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"(\*{1,3})(\S(?:.*?\S)?)\1", r"\2", text)


def github_slug(text: str) -> str:
    """GitHub's anchor of a heading's rendered text (github-slugger): lower case, every character removed but
    letters, marks, numbers, connector punctuation (`_`), spaces and hyphens, then each space a hyphen."""
    kept = [
        character
        for character in text.lower()
        if character in " -" or unicodedata.category(character)[0] in "LMN" or unicodedata.category(character) == "Pc"
    ]
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a markdown document: its headings' slugs (a repeated slug numbered -1, -2, … as GitHub
    does) and explicit HTML anchors."""
    text = path.read_text(encoding="utf-8")
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _, line in prose_lines(text):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(heading_text(match.group(2)))
        if slug in counts:
            counts[slug] += 1
            slug = f"{slug}-{counts[slug]}"
        else:
            counts[slug] = 0
        found.add(slug)
    return found


def link_targets(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link, image and reference definition outside code."""
    targets = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = without_code_spans(line)
        for pattern in (INLINE_LINK, REFERENCE_DEFINITION):
            for match in pattern.finditer(line):
                target = match.group(1)
                if target.startswith("<") and target.endswith(">"):
                    target = target[1:-1]
                targets.append((number, target))
    return targets


def broken_link(document: Path, target: str) -> str | None:
    """Why `target`, linked from `document`, does not resolve; None when it does (or is a URL)."""
    if URL_SCHEME.match(target):
        return None
    location, _, fragment = target.partition("#")
    if location.startswith("/"):
        return "an absolute path (link relative to the document)"
    resolved = (document.parent / unquote(location)).resolve() if location else document
    if not resolved.is_relative_to(ROOT):
        return f"{resolved} is outside the repository"
    if not resolved.exists():
        return f"{resolved.relative_to(ROOT)} does not exist"
    if not fragment:
        return None
    if resolved.suffix != ".md" or not resolved.is_file():
        return f"an anchor into {resolved.relative_to(ROOT)}, which is not a markdown document"
    if unquote(fragment) not in anchors(resolved):
        return f"no heading of {resolved.relative_to(ROOT)} has the anchor #{fragment}"
    return None


DOCUMENTS = documents()
IDS = [str(path.relative_to(ROOT)) for path in DOCUMENTS]


def test_the_documents_exist():
    missing = [name for name, path in zip(IDS, DOCUMENTS) if not path.is_file()]
    assert not missing, f"missing documents: {missing}"
    assert len(DOCUMENTS) > 4, "docs/ holds no markdown document"


@pytest.mark.parametrize("document", DOCUMENTS, ids=IDS)
def test_relative_links_and_anchors_resolve(document: Path):
    problems = []
    for number, target in link_targets(document):
        reason = broken_link(document, target)
        if reason:
            problems.append(f"{document.relative_to(ROOT)}:{number}: ({target}): {reason}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("document", DOCUMENTS, ids=IDS)
def test_no_outside_paths_or_issue_numbers(document: Path):
    text = document.read_text(encoding="utf-8")
    problems = [
        f"{document.relative_to(ROOT)}:{number}: a path outside the repository: {path}"
        for number, line in enumerate(text.splitlines(), start=1)
        for path in outside_paths(document, line)
    ]
    problems += [
        f"{document.relative_to(ROOT)}:{number}: an issue number: {match.group(0)!r}"
        for number, line in prose_lines(text)
        for match in ISSUE_NUMBER.finditer(without_code_spans(line))
    ]
    assert not problems, "\n".join(problems)


def test_readme_is_a_front_door():
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_LIMIT_BYTES, (
        f"README.md is {size} bytes, above {README_LIMIT_BYTES}: move reference material into docs/ or CHANGELOG.md"
    )


# The checker's own rules, on cases whose answer is known.


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("## 2. Results (output), HDF5", "2-results-output-hdf5"),
        ("### 2.1 `/sweep` (`nystrom sweep`)", "21-sweep-nystrom-sweep"),
        ("## 2. Generalized (non-symmetric) Nyström — PnP-Nystra", "2-generalized-non-symmetric-nyström--pnp-nystra"),
        ("## Dumping your own model: `dump_attention.py`", "dumping-your-own-model-dump_attentionpy"),
        ("## 5. Using the library from C++", "5-using-the-library-from-c"),
        ("### 2.2 `/spectra/<layer>/` (`nystrom spectrum`)", "22-spectralayer-nystrom-spectrum"),
        ("## **Bold** and [a link](x.md) ##", "bold-and-a-link"),
    ],
)
def test_github_slugs(heading: str, slug: str):
    match = HEADING.match(heading)
    assert match is not None
    assert github_slug(heading_text(match.group(2))) == slug


def test_links_in_code_are_not_links_and_repeated_headings_are_numbered(tmp_path: Path):
    document = tmp_path / "x.md"
    document.write_text(
        "# A\n\n## A\n\n```sh\n[not](missing.md)\n```\n\n`[nor](missing.md)` [yes](x.md#a-1) ![i](<x.md>)\n",
        encoding="utf-8",
    )
    assert anchors(document) == {"a", "a-1"}
    assert [target for _, target in link_targets(document)] == ["x.md#a-1", "x.md"]


def test_broken_links_are_found():
    readme = ROOT / "README.md"
    assert broken_link(readme, "https://example.org/x#y") is None
    assert broken_link(readme, "docs/README.md") is None
    assert "does not exist" in broken_link(readme, "docs/no-such-document.md")
    assert "anchor" in broken_link(readme, "docs/README.md#no-such-heading")
    assert "outside" in broken_link(readme, "../outside.md")
    assert "absolute" in broken_link(readme, "/docs/README.md")


@pytest.mark.parametrize(
    ("line", "flagged"),
    [("fixed in issue 12", True), ("see #34", True), ("the mlpen/Nystromformer repository, GitHub #3", False),
     ("`#include <x>`", False), ("[a](b.md#c)", False), ("see ../notes/plan.md", True),
     ("see docs/../lib/src", False), ("in " + str(ROOT.parent / "notes"), True), ("in " + str(ROOT / "lib"), False),
     ("`/usr/local/cuda`", False)],
)
def test_issue_numbers_and_outside_paths_are_found(line: str, flagged: bool):
    found = bool(ISSUE_NUMBER.search(without_code_spans(line))) or bool(outside_paths(ROOT / "README.md", line))
    assert found == flagged
