"""Shared code does not branch on an operand kind's name: what differs between a vector, a scalar, a matrix and a
k-loop operand is asked of the kind (gemmdsl/fuse_ops/kinds.py). An ast scan of every module outside fuse_ops/
for a comparison of a `.kind` (or `.kind.name`) with a string, or of anything called `kind` with a registered
kind's name, in each form such a test takes (`==`, `!=`, `in` a tuple, list or set of strings).

NumPy's `dtype.kind` (a type's one-letter code) is not an operand's kind and is left alone."""
from __future__ import annotations

import ast
from pathlib import Path

from gemmdsl.fuse_ops.kinds import K_LOOP, MATRIX, SCALAR, VECTOR

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gemmdsl"
KIND_NAMES = {kind.name for kind in (VECTOR, SCALAR, MATRIX, K_LOOP)}


def _strings(node: ast.AST) -> list[str]:
    """The string constants a comparison's side is: one, or those of a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def _kind_attribute(node: ast.AST) -> bool:
    """`x.kind` or `x.kind.name`, but for NumPy's `dtype.kind`."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        node = node.value
    return (isinstance(node, ast.Attribute) and node.attr == "kind"
            and "dtype" not in ast.unparse(node.value))


def _named_kind(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "kind"


def kind_branches(source: str) -> list[tuple[int, str]]:
    """(line, code) of each comparison of an operand's kind with a string in a module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        strings = [s for side in sides for s in _strings(side)]
        if (any(_kind_attribute(side) for side in sides) and strings) or \
                (any(_named_kind(side) for side in sides) and KIND_NAMES & set(strings)):
            found.append((node.lineno, ast.unparse(node)))
    return found


def shared_modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "fuse_ops" not in path.relative_to(PACKAGE).parts)


def test_the_scan_finds_each_form_of_a_branch():
    source = "\n".join([
        'a = operand.kind == "vector"',
        'b = operand.kind != "k_loop"',
        'c = "matrix" == operands[0].kind',
        'd = operand.kind.name in ("scalar", "vector")',
        'e = kind == "scalar"',
        'f = kind in {"matrix"}',
        # not operand kinds: NumPy's type codes, another enum, a local `kind` of another vocabulary
        'g = numpy.dtype(t).kind == "V"',
        'h = dtype.kind in "biufc"',
        'i = raster.kind is ir.RasterKind.ROW',
        'j = kind == "load"',
    ])
    assert [line for line, _ in kind_branches(source)] == [1, 2, 3, 4, 5, 6]


def test_shared_code_asks_the_kind_not_its_name():
    found = {path.relative_to(ROOT).as_posix(): branches for path in shared_modules()
             if (branches := kind_branches(path.read_text()))}
    assert not found, f"branches on an operand kind's name outside gemmdsl/fuse_ops/ (ask the kind instead): {found}"
