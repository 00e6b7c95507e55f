"""The pipeline's modules do not branch on the instruction family: what differs between FMA, mma.sync, wgmma and
FP8 wgmma is asked of the spec's path (gemmdsl/paths), which declares what it supports. An ast scan of the
pipeline's shared modules, in every form such a branch has taken:

- a test of `mma is None` or `mma is not None` (no `mma` section: the FMA path);
- `isinstance` on a layout or shape type (MmaLayout, KernelLayout, WgmmaShape...);
- a name of a family (wgmma, mma_sync) in code: a flag, a gate, a family's function; in parser.py also fp8,
  whose keys and defaults the paths declare.

Strings and comments are not code: a diagnostic may still say "applies to wgmma specs only"."""
from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gemmdsl"
PIPELINE = sorted([*(PACKAGE / name for name in (
    "parser.py", "validate.py", "ir.py", "layout.py", "plan.py", "cycles.py", "schedule.py", "launch_plan.py",
    "tensor_maps.py", "grouped_schedule.py")), *(PACKAGE / "passes").glob("*.py"), *(PACKAGE / "emit").glob("*.py")])

FAMILY = re.compile(r"wgmma|mma_sync", re.IGNORECASE)
FRONT_END_FAMILY = re.compile(r"wgmma|mma_sync|fp8", re.IGNORECASE)
FAMILY_TYPE = re.compile(r"(Layout|Shape)$")

# What may name a family outside its package, (module, name) -> mentions: the IR's type of Hopper's instruction
# shape, which the wgmma path's own syntax reads into (`shape_syntax`). It gates no key and picks no default: the
# path whose `takes` accepts ir.WgmmaShape does.
ALLOWED = Counter({
    ("gemmdsl/ir.py", "WgmmaShape"): 2,  # the class, and MmaTile.shape's type
})


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _identifier(node: ast.AST) -> str:
    if isinstance(node, (ast.Name, ast.Attribute)):
        return _name(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.keyword):
        return node.arg or ""
    return ""


def family_branches(source: str, front_end: bool = False) -> list[tuple[int, str, str]]:
    """(line, form, what) of each branch on the instruction family in a module's source: form is `mma is None`,
    `isinstance` or `name`; what is the code or the name."""
    family = FRONT_END_FAMILY if front_end else FAMILY
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Compare) and _name(node.left) == "mma"
                and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
                and any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators)):
            found.append((node.lineno, "mma is None", ast.unparse(node)))
        elif isinstance(node, ast.Call) and _name(node.func) == "isinstance" and len(node.args) == 2:
            types = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(FAMILY_TYPE.search(_name(t)) for t in types):
                found.append((node.lineno, "isinstance", ast.unparse(node)))
        elif family.search(_identifier(node)):
            found.append((node.lineno, "name", _identifier(node)))
    return sorted(found)


def pipeline_branches() -> dict[str, list[tuple[int, str, str]]]:
    return {module.relative_to(ROOT).as_posix(): family_branches(module.read_text(), module.name == "parser.py")
            for module in PIPELINE}


def test_the_scan_finds_each_form_of_a_branch():
    source = ("def wgmma_member_model(layout):\n"
              "    if spec.mma is None or mma is not None:\n"
              "        return isinstance(layout, MmaLayout) or isinstance(shape, (int, ir.WgmmaShape))\n"
              "    return mma.wgmma or layout.fp8\n")
    found = family_branches(source)
    assert [form for _, form, _ in found].count("mma is None") == 2
    assert [form for _, form, _ in found].count("isinstance") == 2
    assert {what for _, form, what in found if form == "name"} == {"wgmma_member_model", "WgmmaShape", "wgmma"}
    assert "fp8" in {what for _, _, what in family_branches(source, front_end=True)}
    assert not family_branches('error("applies to wgmma specs only")  # a wgmma spec\n')


def test_the_pipeline_does_not_branch_on_the_instruction_family():
    branches = pipeline_branches()
    assert len(branches) >= 30 and all(PACKAGE / "paths" not in module.parents for module in PIPELINE)
    names = Counter((module, what) for module, found in branches.items() for _, form, what in found if form == "name")
    unexpected = [f"{module}:{line}: {form}: {what}" for module, found in branches.items()
                  for line, form, what in found if form != "name" or (module, what) not in ALLOWED]
    assert not unexpected, ("shared pipeline code branches on an instruction family; ask the spec's path "
                            "(gemmdsl/paths) instead:\n" + "\n".join(unexpected))
    assert names == ALLOWED, "the allowed names moved: keep ALLOWED exact"
