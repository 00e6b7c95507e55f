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


# The project's text says what is, filed by topic. These name a work item (a session, an issue number),
# a change over time ("in this round", "used to", "before the change", "once had", "no longer",
# "previously", "until now", "now" set against an earlier state), or the unpublished write-ups the
# first specs followed ("seed 004": name the technique instead). A phrase may break across lines and
# comment markers. Measurement dates in tables are fine: no pattern reads dates.
GAP = r"(?:\s|//|#)+"


def phrase(*words: str) -> str:
    return r"\b" + GAP.join(words) + r"\b"


DIARY = {
    "a work session": r"\bsessions?\b",
    "an issue number": r"\bissue #?\d+",
    "a round of work": phrase("(?:this|that|last|next|previous|earlier|later)", "rounds?"),
    "used to": r"\bused(?<!\bis used)(?<!\bare used)(?<!\bwas used)(?<!\bwere used)(?<!\bbe used)(?<!\bbeen used)"
               r"(?<!\bnot used)" + GAP + r"to\b",
    "the change": phrase("(?:before|after|since|until)", "(?:the|this|that)", "(?:changes?|fix)"),
    "once had": phrase("once", "(?:had|was|were|did|took|ran)"),
    "no longer": phrase("no", "longer"),
    "previously": r"\bpreviously\b",
    "until now": phrase("until", "now"),
    # not code: `.now(`, `(now`, `'now'`, `now;`, `now - start`
    "now, against an earlier state": r"\bnow\b(?<![.'\"(]now)(?![ \t]*[-;('\"])",
    "a seed write-up": r"\bseeds?(?:[- ]\d{3}\b|'s\b|" + GAP + r"(?:articles?|ladder|teach)\b)|\bthe" + GAP + r"seeds\b",
}
# Matched against the lowered text: faster than re.IGNORECASE over a few megabytes.
DIARY_PATTERN = re.compile("|".join(f"(?P<g{index}>{pattern})" for index, pattern in enumerate(DIARY.values())))
DATA_SUFFIXES = (".json", ".svg")  # measurements and plots, no prose
# Hits that mean a moment of a running program, not a change of the code: (file, the hit's line holds).
ALLOWED = {
    ("tests/conftest.py", 'scope="session"'),  # pytest's fixture scope
    ("gemmdsl/emit/pipeline.py", "is no longer read"),  # emitted: the stage within the k-loop
    ("gemmdsl/emit/epilogue.py", "stages are no longer read"),  # emitted: after the main loop
    ("gemmdsl/runtime/driver.py", "launches on now on"),  # the current stream at the call
    ("gemmdsl/runtime/binaries.py", "now) at its present version"),  # the compiler chosen at the call
    ("gemmdsl/runtime/kernel.py", "Built and loaded now"),  # at construction
}
SCANNED = ["README.md", "docs", "gemmdsl", "specs", "examples", "scripts", "tests", ".ci", "grammar",
           "pyproject.toml"]


def project_text_files() -> list[Path]:
    files: list[Path] = []
    for entry in SCANNED:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for candidate in candidates:
            if "__pycache__" in candidate.parts or candidate == Path(__file__).resolve():
                continue  # this file holds the patterns and their examples
            try:
                candidate.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # binary files hold no prose
            files.append(candidate)
    return files


def diary_hits(name: str, text: str) -> list[str]:
    """`file:line: 'words' (what they are): the line` for each hit outside ALLOWED."""
    lines = text.splitlines()
    hits = []
    for match in DIARY_PATTERN.finditer(text.lower()):
        number = text.count("\n", 0, match.start()) + 1
        line = lines[number - 1]
        if any(name == allowed_file and words in line for allowed_file, words in ALLOWED):
            continue
        kind = list(DIARY)[int(match.lastgroup[1:])]
        hits.append(f"{name}:{number}: {' '.join(match.group().split())!r} ({kind}): {line.strip()[:100]}")
    return hits


def test_no_text_reads_like_a_diary():
    hits = [hit for path in project_text_files() if path.suffix not in DATA_SUFFIXES
            for hit in diary_hits(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))]
    assert not hits, ("text that tracks work or time instead of saying what is (reword it by topic; "
                      "the patterns are DIARY in tests/test_docs.py):\n" + "\n".join(hits))


@pytest.mark.parametrize("line", [
    "Measured in session 13.", "(Issue #11)", "see issue 5's targets", "two sessions",
    "it was not probed in this round", "over the previous rounds", "it used to leave the helpers out",
    "measured before the\n  changes", "after the change, 3% faster", "as `fuse_pair` once\n  had",
    "3xTF32 no longer refuses", "previously dropped", "until now", "the family now holds",
    "Now both members are", "// Seed 004, sgemm_v3", "Seed 000 §5.2 (1)", "seeds 002/003",
    "the seed's column order", "The seeds teach", "the seed-004 kernel", "the seed article's",
    "ranked first now)",
])
def test_the_diary_pattern_matches(line):
    assert diary_hits("x.md", line)


@pytest.mark.parametrize("line", [
    "issue slots 49.7%", "the issue rate", "possession", "two alternating rounds", "rounds up to 8",
    "the ring's round trip", "medians of 7 rounds of 300 calls", "the held-out half was not used to choose",
    "it is used to pick", "beta * the old value", "`--seed 0`", "seed 2, nvcc 13.0", "seeded sizes",
    "datetime.now(timezone.utc)", "DEFAULT (strftime('%Y', 'now'))", "unsigned long long start, now;",
    'asm volatile("..." : "=l"(now));', "} while (now - start < ns);", "known", "nowhere", "snow",
    "measured on 2026-11-26", "the change of layout",
])
def test_the_diary_pattern_spares_ordinary_words(line):
    assert not diary_hits("x.md", line)


def test_an_allowed_hit_is_allowed_only_in_its_file():
    line = "// the pipeline's stages are no longer read"
    assert not diary_hits("gemmdsl/emit/epilogue.py", line)
    assert diary_hits("gemmdsl/emit/copy.py", line)


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
