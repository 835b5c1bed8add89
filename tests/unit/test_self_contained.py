"""The repository stands on its own: every citation points inside it.

- No tracked file cites a document that is not in the repository (the design notes and the
  behaviour summary the project started from). Code cites the behaviour reference,
  ``daemon/README.md``, by section number instead.
- Every ``daemon/README.md §N`` citation names a section that exists there as an anchor
  (``<a id="sN"></a>``), and every in-page link of that reference resolves.
- What users read explains itself: no help text, error message or README line cites a
  section number.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from sbctl.cli import docs
from sbctl.core import errors

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "daemon" / "README.md"
SECTION = "\u00a7"  # the section sign

# Built from pieces so that this file does not match itself.
_OUTSIDE = "|".join(
    [
        "SPEC" + " " + SECTION,
        "SPEC" + r"\.md",
        "DESIGN" + r"(\.md)? " + SECTION,
        "DESIGN" + r"\.md",
        "STYLE" + r"\.md",
        "STYLE" + r" \d",
        r"\.\./" + "shared",
    ]
)
OUTSIDE_CITATION = re.compile(_OUTSIDE)
NUMBER = r"\d+(?:\.\d+)*"
CITATION = re.compile(
    r"daemon/README\.md\s+"
    + SECTION
    + rf"\s*({NUMBER}(?:\s*(?:-|\u2013|,|and|or)\s*{SECTION}?\s*{NUMBER})*)"
)
ANCHOR = re.compile(r'<a id="s(' + NUMBER + r')"></a>')


def _tracked_text_files() -> list[tuple[str, str]]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if name.startswith(".ci/") or not path.is_file():
            continue
        try:
            files.append((name, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # binary data
    return files


def _anchors() -> set[str]:
    return set(ANCHOR.findall(REFERENCE.read_text(encoding="utf-8")))


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{name}:{lineno}: {line.strip()[:120]}"
        for name, text in _tracked_text_files()
        for lineno, line in enumerate(text.splitlines(), 1)
        if OUTSIDE_CITATION.search(line)
    ]
    assert not found, f"{len(found)} lines cite documents outside the repository:\n" + "\n".join(
        found[:40]
    )


def test_reference_citations_name_existing_sections() -> None:
    anchors = _anchors()
    assert {"0.1.4", "9.6", "21", "28"} <= anchors, "daemon/README.md lost its anchors"
    missing = []
    for name, text in _tracked_text_files():
        for match in CITATION.finditer(text):
            for number in re.findall(NUMBER, match.group(1)):
                if number not in anchors:
                    line = text.count("\n", 0, match.start()) + 1
                    missing.append(f"{name}:{line}: {SECTION}{number}")
    assert not missing, "citations of sections daemon/README.md does not have:\n" + "\n".join(
        missing
    )


def test_citation_pattern_reads_ranges_and_lists() -> None:
    text = f"see daemon/README.md {SECTION}0.1.5-0.1.7, {SECTION}16.2 and {SECTION}9"
    (match,) = CITATION.finditer(text)
    assert re.findall(NUMBER, match.group(1)) == ["0.1.5", "0.1.7", "16.2", "9"]


def test_reference_links_resolve() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    ids = _anchors() | set(re.findall(r'<a id="([a-z][\w.-]*)"></a>', text))
    targets = set(re.findall(r"\]\(#([^)]+)\)", text))
    broken = sorted(t for t in targets if t not in ids and t.removeprefix("s") not in ids)
    assert not broken, f"daemon/README.md links to anchors it does not have: {broken}"


def _github_slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _headings(file: Path) -> set[str]:
    text = file.read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # code blocks hold no headings
    slugs = {_github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", prose, flags=re.M)}
    return slugs | set(re.findall(r'<a id="([^"]+)"></a>', text))


def _broken_links(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    prose = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.M | re.S)
    broken = [f"#{a}" for a in re.findall(r"\]\(#([^)]+)\)", prose) if a not in _headings(doc)]
    for target in re.findall(r"\]\(([^#)][^)]*)\)", prose):
        path, _, anchor = target.partition("#")
        if target.startswith(("http://", "https://")):
            continue
        file = (doc.parent / path).resolve()
        missing = not file.exists()
        if not missing and anchor:
            numbered = file == REFERENCE and anchor.removeprefix("s") in _anchors()
            missing = anchor not in _headings(file) and not numbered
        if missing:
            broken.append(target)
    return broken


# The user docs: README, the guides `sbctl help` shows, and the development guide.
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "sbctl" / "guides").glob("*.md")),
    ROOT / "tests" / "README.md",
]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_doc_links_resolve(doc: Path) -> None:
    broken = _broken_links(doc)
    assert not broken, f"{doc.relative_to(ROOT)} links that go nowhere: {broken}"


def test_readme_cites_no_section_numbers() -> None:
    # sbctl/cli/REFERENCE.md is generated from the help texts, checked below.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if SECTION in line]
    assert not lines, "README.md cites section numbers:\n" + "\n".join(lines)


def _error_names() -> set[str]:
    return {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, Exception)
    }


def _error_texts() -> list[str]:
    """String literals passed to sbctl's error classes anywhere in sbctl/ and the daemon."""
    names = _error_names()
    found = []
    for folder in (ROOT / "sbctl", ROOT / "daemon" / "sbctld"):
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if called not in names:
                    continue
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    for part in ast.walk(arg):
                        if isinstance(part, ast.Constant) and isinstance(part.value, str):
                            rel = path.relative_to(ROOT)
                            found.append(f"{rel}:{part.lineno}: {part.value}")
    return found


def test_error_texts_are_found() -> None:
    # The scan below must see the daemon's messages, or it would pass checking nothing.
    texts = _error_texts()
    assert len(texts) > 100
    assert any("sbctld" in t and "does not exist" in t for t in texts)


def test_help_and_error_texts_cite_no_section_numbers() -> None:
    cited = []
    for node in docs.tree():
        for text in (node.help, node.short_help):
            if SECTION in text:
                cited.append(f"{node.command}: {text[:100]}")
        for param in (*node.options, *node.arguments):
            if SECTION in param.details:
                cited.append(f"{node.command} {param.synopsis}: {param.details[:100]}")
    cited += [text for text in _error_texts() if SECTION in text]
    assert not cited, "user-visible texts cite section numbers:\n" + "\n".join(cited)
