"""The documentation keeps up with the code: every section and key the parser accepts is documented,
the project's text names no work-tracking items, and the README and docs/ link only to files that exist."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemmdsl import parser, targets

ROOT = Path(__file__).resolve().parent.parent
LANGUAGE = ROOT / "docs" / "language.md"


def language_words() -> set[str]:
    """Every section name (`smem a` for a labelled one) and key the parser's schema accepts,
    and every target name, as the spec writes them."""
    words: set[str] = set()
    for name, section in parser.SECTIONS.items():
        words.update([f"{name} {label}" for label in section.labels] or [name])
        words.update(section.keys)
    words.update(f"sm_{sm}" for sm in targets.ARCHS)
    words.update(f"sm_{sm}a" for sm in targets.ARCH_SPECIFIC)
    return words


def undocumented(words: set[str], text: str) -> set[str]:
    """The words that the text never shows as code (`word`)."""
    quoted = set(re.findall(r"`([^`\n]+)`", text))
    return {word for word in words if word not in quoted}


def test_every_section_and_key_is_documented():
    missing = undocumented(language_words(), LANGUAGE.read_text())
    assert not missing, f"docs/language.md does not document: {sorted(missing)}"


def test_the_key_check_notices_a_missing_key():
    """Drop one key's mentions from the page: the check must name it."""
    text = LANGUAGE.read_text()
    for word in ("fma_order", "warpgroups", "smem b", "sm_90a"):
        assert word in language_words()
        assert undocumented(language_words(), text.replace(f"`{word}`", word)) == {word}


def test_the_schema_reaches_the_wgmma_keys():
    """The key set is read from the parser's table, which holds every path's keys."""
    assert {"warpgroups", "producer", "store", "swizzle", "copy", "schedule", "batch"} <= language_words()


# Built from pieces so that this file does not match itself.
WORK_ITEM = re.compile(r"\bsess" + r"ions?\b|\biss" + r"ue #?\d+", re.IGNORECASE)
# pytest's own fixture scope, which the word names in tests/conftest.py: not a work item.
PYTEST_SCOPE = 'scope="' + "sess" + 'ion"'
SCANNED = ["README.md", "docs", "gemmdsl", "specs", "examples", "scripts", "tests", ".ci", "grammar",
           "pyproject.toml"]


def project_text_files() -> list[Path]:
    files: list[Path] = []
    for entry in SCANNED:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for candidate in candidates:
            if "__pycache__" in candidate.parts:
                continue
            try:
                candidate.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # binary files hold no prose
            files.append(candidate)
    return files


def test_no_text_names_a_work_item():
    hits = []
    for path in project_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if WORK_ITEM.search(line.replace(PYTEST_SCOPE, "")):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, "text names a work item:\n" + "\n".join(hits)


@pytest.mark.parametrize("line", ["Measured in " + "sess" + "ion 13.", "(" + "Iss" + "ue #11)",
                                  "see " + "iss" + "ue 5's targets", "two " + "sess" + "ions"])
def test_the_work_item_pattern_matches(line):
    assert WORK_ITEM.search(line)


@pytest.mark.parametrize("line", ["issue slots 49.7%", "the issue rate", "possession"])
def test_the_work_item_pattern_spares_ordinary_words(line):
    assert not WORK_ITEM.search(line)


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines; the reference belongs in docs/"


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or an anchor in the page itself
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"


# --- the catalogue, the index and counts --------------------------------------------------------

SPECS = ROOT / "specs"
CATALOGUE = ROOT / "docs" / "specs.md"


def shipped_names() -> set[str]:
    return {path.stem for path in SPECS.iterdir() if path.suffix in (".gemm", ".gemmf")}


def catalogued_names(text: str) -> set[str]:
    """The names in the first column of the catalogue's tables."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
    return names


def test_every_shipped_spec_is_in_the_catalogue():
    missing = shipped_names() - catalogued_names(CATALOGUE.read_text())
    assert not missing, f"docs/specs.md does not list: {sorted(missing)}"


def test_every_catalogued_name_is_a_shipped_spec():
    unknown = catalogued_names(CATALOGUE.read_text()) - shipped_names()
    assert not unknown, f"docs/specs.md lists specs that specs/ does not hold: {sorted(unknown)}"


def test_the_catalogue_check_notices_a_missing_spec():
    text = CATALOGUE.read_text().replace("| `zigzag` |", "| zigzag |")
    assert shipped_names() - catalogued_names(text) == {"zigzag"}


INDEX = ROOT / "docs" / "README.md"


def test_every_docs_page_is_in_the_index():
    linked = {target.split("#")[0] for target in LINK.findall(INDEX.read_text())}
    pages = {path.name for path in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert not pages - linked, f"docs/README.md does not index: {sorted(pages - linked)}"


# "specs/ holds 92 of them": a count of the shipped files, which goes stale with the next spec.
SPEC_COUNT = re.compile(r"`specs/` (?:holds|has|ships|contains) (\d+)")


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_counts_the_shipped_specs(page):
    counts = SPEC_COUNT.findall(" ".join(page.read_text().split()))
    assert not counts, f"{page.relative_to(ROOT)} counts the files of specs/ ({counts}); name the catalogue instead"
