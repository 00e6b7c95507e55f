"""The tools (the modules on the tools layer of tests/import_graph.py: check, profile, tune, bench, verify, the
runtime...) never branch on an instruction family: they read what the spec's path supplies (its `facts`,
gemmdsl/paths/facts.py) and what the launch metadata says. The scan reads each module's syntax tree, so an
aliased import, an attribute or a string key is found as well as a plain name."""
import ast
import re
from pathlib import Path

import pytest

from import_graph import ROOT, layer_of, module_files

# The instruction families' own words: a name, attribute, key or comparison that holds one is a fork the path
# object should answer.
FAMILY = re.compile(r"wgmma|fp8|mma_sync|tcgen05|gmma", re.IGNORECASE)


def family_names() -> set[str]:
    """The registered paths' names (gemmdsl.paths.REGISTERED's `name`s): comparing with one is a fork."""
    from gemmdsl.paths import registered

    return {path.name for path in registered()}


def layout_types() -> set[str]:
    """The classes the lowerings define (layout.py, mma_layout.py and each path's package): an isinstance
    check on one of them asks which path lowered the plan."""
    sources = [ROOT / "gemmdsl" / "layout.py", ROOT / "gemmdsl" / "mma_layout.py",
               *(ROOT / "gemmdsl" / "paths").rglob("*.py")]
    return {node.name for source in sources for node in ast.walk(ast.parse(source.read_text()))
            if isinstance(node, ast.ClassDef)}


def _names(node: ast.AST) -> list[str]:
    """The identifiers `node` itself spells: a name, an attribute, a definition, an import, a keyword."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.name.rsplit(".", 1)[-1], node.asname or ""]
    if isinstance(node, ast.keyword):
        return [node.arg or ""]
    if isinstance(node, ast.arg):
        return [node.arg]
    return []


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def family_branches(source: str, paths: set[str], layouts: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each fork on an instruction family in `source`: a family-named identifier or string
    key (`wgmma_report`, `facts["wgmma_bound"]`, `p.wgmma`), `spec.mma is None` (FMA or not), an isinstance
    check on a lowering's class, a comparison of a `.name` with a registered path's (`path.name == "wgmma"`).
    A math unit (`comparison.unit == "fma"`: what multiplies, and which library is the reference) is data of
    the launch metadata, not a path."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        found += [(line, f"family name {name}") for name in _names(node) if FAMILY.search(name)]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\w+", node.value) \
                and FAMILY.search(node.value):
            found.append((line, f"family key {node.value!r}"))
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(side, ast.Attribute) and side.attr == "mma" for side in sides) \
                    and any(_is_none(side) for side in sides):
                found.append((line, f"`{ast.unparse(node)}`"))
            if any(isinstance(side, ast.Attribute) and side.attr == "name" for side in sides):
                named = [side.value for side in sides if isinstance(side, ast.Constant) and side.value in paths]
                found += [(line, f"compares with the path name {name!r}") for name in named]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2:
            types = {part.id if isinstance(part, ast.Name) else getattr(part, "attr", "")
                     for part in ast.walk(node.args[1]) if isinstance(part, (ast.Name, ast.Attribute))}
            found += [(line, f"isinstance on the lowering class {name}") for name in sorted(types & layouts)]
    return sorted(set(found))


# `gemmdsl calibrate` measures each instruction's rate on the GPU for the profile the cycle model reads
# (gpu_profile.py), as targets.py states each instruction's datasheet rate: per instruction by design, its
# probes name the instruction they time. Nothing else may.
HARDWARE_PROBES = {"gemmdsl.calibrate", "gemmdsl.calibrate_kernels"}


def tool_modules() -> list[Path]:
    return [path for module, path in module_files().items() if layer_of(module) == "tools"
            and module not in HARDWARE_PROBES and ROOT / "gemmdsl" / "paths" not in path.parents]


def test_the_tools_do_not_branch_on_an_instruction_family():
    paths, layouts = family_names(), layout_types()
    forks = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in tool_modules()
             for line, what in family_branches(path.read_text(), paths, layouts)]
    assert not forks, "the tools branch on an instruction family; ask the path's facts:\n" + "\n".join(forks)


@pytest.mark.parametrize("code, what", [
    ("def wgmma_report(a): pass", "family name wgmma_report"),
    ("from .profile import WGMMA_NCU_METRICS as metrics", "family name WGMMA_NCU_METRICS"),
    ("x = p.wgmma", "family name wgmma"),
    ("bound = analysis.facts['wgmma_bound']", "family key 'wgmma_bound'"),
    ("f(mma_sync=True)", "family name mma_sync"),
    ("if spec.mma is None: pass", "`spec.mma is None`"),
    ("if None is not spec.mma: pass", "`None is not spec.mma`"),
    ("if isinstance(layout, (TileLayout, paths.WgmmaLayout)): pass", "isinstance on the lowering class WgmmaLayout"),
    ("if plan.path.name == 'mma_sync': pass", "compares with the path name 'mma_sync'"),
])
def test_the_scan_finds_each_form_of_a_family_branch(code, what):
    assert what in [found for _, found in family_branches(code, family_names(), layout_types())]


def test_the_scan_passes_what_is_not_a_family_branch():
    code = ("facts = analysis.path.facts\nrows = facts.comparisons(analysis)\nif spec.problem.grouped: pass\n"
            "text = 'a wgmma kernel'  # prose in a message\nisinstance(value, int)\npeak = compared.unit == 'fma'")
    assert family_branches(code, family_names(), layout_types()) == []
