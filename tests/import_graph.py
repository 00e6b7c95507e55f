"""The package's import graph, drawn from its source, and the layer table it is held to.

    python tests/import_graph.py          # the figures: modules, floors, upward arrows, the largest loop
    python tests/import_graph.py --list   # also each upward arrow and the loop's modules

An edge A -> B means that running A can import B: a module-level or function-level `import` or
`from ... import` (relative or absolute; `from . import x` names the module x), and the loads the source
spells as strings instead: a registry's module list (`paths.REGISTERED`), the CLI's table of tool modules,
a worker's "module:Name" reference, the package's lazy names (`gemmdsl.LAZY`) and the code a subprocess runs
(`-c "from gemmdsl.x import ..."`). Imports under `if TYPE_CHECKING:` run nowhere and are not edges.

The house has three layers, each importing only its own layer and those below (tests/test_imports.py):

    tools     what a user runs: the CLI, the GPU runtime, verify, bench, profile, tune, check, the Python API
    pipeline  source -> IR -> plan -> passes -> C: parser, validate, lowering, paths, passes, emit, compiler
    ir        the data every stage reads: the IR and its fuse ops, source positions, expressions and the launch
              rules built of them, targets and the GPU profiles, errors
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "gemmdsl"

# layer -> the modules on it, bottom layer first; a package's name covers its submodules, except gemmdsl's own
# (the package's public face, gemmdsl/__init__.py). tests/test_imports.py fails on a module no entry covers.
LAYERS = {
    "ir": ("gemmdsl.errors", "gemmdsl.source", "gemmdsl.ir", "gemmdsl.expr", "gemmdsl.rule", "gemmdsl.targets",
           "gemmdsl.precisions", "gemmdsl.file_kinds", "gemmdsl.cache_root", "gemmdsl.shape_sets", "gemmdsl.version",
           "gemmdsl.ncu_counters", "gemmdsl.gpu_profile", "gemmdsl.value_readers", "gemmdsl.fuse_ops",
           "gemmdsl.quant_layout"),
    "pipeline": ("gemmdsl.parser", "gemmdsl.validate", "gemmdsl.validate_fuse", "gemmdsl.validate_quant",
                 "gemmdsl.frontend",
                 "gemmdsl.layout", "gemmdsl.mma_layout", "gemmdsl.abi", "gemmdsl.launch_plan", "gemmdsl.plan",
                 "gemmdsl.schedule", "gemmdsl.grouped_schedule", "gemmdsl.paths", "gemmdsl.passes",
                 "gemmdsl.analysis", "gemmdsl.cycles", "gemmdsl.cost_model", "gemmdsl.emit", "gemmdsl.emitter",
                 "gemmdsl.fuse_reference", "gemmdsl.family", "gemmdsl.compiler", "gemmdsl.build", "gemmdsl.prediction",
                 "gemmdsl.quant_reference"),
    "tools": ("gemmdsl", "gemmdsl.api", "gemmdsl.cli", "gemmdsl.check", "gemmdsl.runtime", "gemmdsl.tensor_maps",
              "gemmdsl.arrays", "gemmdsl.devices", "gemmdsl.call_plan", "gemmdsl.load_cache",
              "gemmdsl.fuse_operands", "gemmdsl.grouped_call", "gemmdsl.family_kernel", "gemmdsl.verify",
              "gemmdsl.bench", "gemmdsl.bench_fuse", "gemmdsl.grouped_bench", "gemmdsl.profile", "gemmdsl.tune",
              "gemmdsl.tune_cli", "gemmdsl.tune_db", "gemmdsl.tune_family", "gemmdsl.tune_workers", "gemmdsl.calibrate",
              "gemmdsl.calibrate_kernels", "gemmdsl.quantize",
              "gemmdsl.quantize_cli", "gemmdsl.quant_check", "gemmdsl.quant_operands", "gemmdsl.quant_bench"),
}
LEVEL = {layer: level for level, layer in enumerate(LAYERS)}


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the package (a package is its __init__.py)."""
    files = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def layer_of(module: str) -> str | None:
    """The layer whose entry is `module` or the package holding it (the longest entry wins)."""
    best = None
    for layer, entries in LAYERS.items():
        for entry in entries:
            covers = module == entry or (entry != PACKAGE and module.startswith(entry + "."))
            if covers and (best is None or len(entry) > len(best[1])):
                best = (layer, entry)
    return best[0] if best else None


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _runtime_nodes(tree: ast.AST):
    """Every node of `tree` except those under `if TYPE_CHECKING:` and docstrings."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                stack.extend(child.orelse)
            elif not _is_docstring(node, child):
                stack.append(child)


def _is_docstring(parent: ast.AST, child: ast.AST) -> bool:
    body = getattr(parent, "body", None)
    return (isinstance(body, list) and body and child is body[0] and isinstance(child, ast.Expr)
            and isinstance(child.value, ast.Constant) and isinstance(child.value.value, str))


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads from."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[:len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


SUBPROCESS_IMPORT = re.compile(r"\b(?:from|import)\s+(gemmdsl(?:\.\w+)*)")


def _string_loads(text: str, known: set[str]) -> set[str]:
    """Modules a string names for a dynamic load: "gemmdsl.x", "gemmdsl.x:Name", or code run by a subprocess."""
    name = text.partition(":")[0]
    found = {name} if name in known and name != PACKAGE else set()
    return found | {match for match in SUBPROCESS_IMPORT.findall(text) if match in known}


def _lazy_names(tree: ast.Module) -> set[str]:
    """The package's lazy names: the string values of its module-level LAZY table (gemmdsl/__init__.py)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAZY" for t in node.targets):
            return {f"{PACKAGE}.{const.value}" for const in ast.walk(node.value)
                    if isinstance(const, ast.Constant) and isinstance(const.value, str)
                    and f"{PACKAGE}.{const.value}" in module_files()}
    return set()


def _stronger(old: str | None, new: str) -> str:
    """An import at module level outranks one inside a function, which outranks a dynamic load."""
    return min(filter(None, (old, new)), key=KINDS.index)


KINDS = ("module", "function", "dynamic")


def imports_of(module: str, path: Path, known: set[str]) -> dict[str, str]:
    """The package's modules `module` imports -> how: "module" (at import time), "function" (an import inside
    a function) or "dynamic" (a load named by a string)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: dict[str, str] = {}
    late = {id(node) for function in ast.walk(tree) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)}
    for node in _runtime_nodes(tree):
        how = "function" if id(node) in late else "module"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    found[alias.name] = _stronger(found.get(alias.name), how)
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    found[target] = _stronger(found.get(target), how)  # `from . import x`: the module x
                elif base in known:
                    found[base] = _stronger(found.get(base), how)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for target in _string_loads(node.value, known):
                found.setdefault(target, "dynamic")
    if module == PACKAGE:
        for target in _lazy_names(tree):
            found.setdefault(target, "dynamic")
    found.pop(module, None)
    return found


def build(root: Path = ROOT, dynamic: bool = True) -> nx.DiGraph:
    """The import graph: a node per module (attribute `layer`), an edge per import (attribute `kind`).

    Importing `a.b.c` first runs the packages `a.b` (and `a`) above it: an import of a module is also an
    import, of the same kind, of what its packages import at module level. The package gemmdsl itself, which
    every module is in, imports only its errors at module level."""
    files = module_files(root)
    direct = {module: imports_of(module, path, set(files)) for module, path in files.items()}
    graph = nx.DiGraph()
    for module in files:
        graph.add_node(module, layer=layer_of(module))
    for module in files:
        for target, kind in direct[module].items():
            if not dynamic and kind == "dynamic":
                continue
            graph.add_edge(module, target, kind=kind)
            for package in _packages_above(target, module):
                for parent_import, parent_kind in direct[package].items():
                    if parent_kind == "module" and parent_import != module and not graph.has_edge(module, parent_import):
                        graph.add_edge(module, parent_import, kind=kind)
    return graph


def _packages_above(target: str, importer: str) -> list[str]:
    """The packages below gemmdsl that importing `target` runs first, leaving out those `importer` is in
    (already running when it imports)."""
    parts = target.split(".")
    above = [".".join(parts[:end]) for end in range(2, len(parts))]
    return [package for package in above if not importer.startswith(package + ".")]


def upward(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """The edges from a module to one on a higher layer."""
    return sorted((a, b) for a, b in graph.edges
                  if graph.nodes[a]["layer"] and graph.nodes[b]["layer"]
                  and LEVEL[graph.nodes[b]["layer"]] > LEVEL[graph.nodes[a]["layer"]])


def floors(graph: nx.DiGraph) -> int:
    """How many floors the longest-path layering has, a loop of modules counted as one floor."""
    return nx.dag_longest_path_length(nx.condensation(graph)) + 1 if graph else 0


def largest_loop(graph: nx.DiGraph) -> set[str]:
    """The largest strongly connected component of more than one module (empty if none)."""
    loops = [component for component in nx.strongly_connected_components(graph) if len(component) > 1]
    return max(loops, key=len, default=set())


def late_arrows_up(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """The imports made after import time (inside a function, or dynamic) that point to a module on the same
    floor or higher, the floors drawn from the imports made at import time alone: what a deferred import hides."""
    eager = nx.DiGraph([(a, b) for a, b, kind in graph.edges(data="kind") if kind == "module"])
    eager.add_nodes_from(graph)
    level = {}
    condensed = nx.condensation(eager)
    for node in reversed(list(nx.topological_sort(condensed))):
        level[node] = 1 + max((level[succ] for succ in condensed.successors(node)), default=-1)
    floor = {module: level[condensed.graph["mapping"][module]] for module in graph}
    return sorted((a, b) for a, b, kind in graph.edges(data="kind") if kind != "module" and floor[b] >= floor[a])


def figures(graph: nx.DiGraph) -> dict[str, int]:
    return {"modules": graph.number_of_nodes(), "edges": graph.number_of_edges(), "floors": floors(graph),
            "upward arrows": len(upward(graph)), "late arrows up": len(late_arrows_up(graph)),
            "largest loop": len(largest_loop(graph)),
            "loops": sum(1 for c in nx.strongly_connected_components(graph) if len(c) > 1)}


def main(argv: list[str]) -> int:
    for title, dynamic in (("with the dynamic loads", True), ("static imports only", False)):
        graph = build(dynamic=dynamic)
        print(f"{title}: " + ", ".join(f"{name} {value}" for name, value in figures(graph).items()))
        if "--list" in argv:
            for a, b in upward(graph):
                print(f"  up: {a} ({graph.nodes[a]['layer']}) -> {b} ({graph.nodes[b]['layer']})")
            loop = largest_loop(graph)
            if loop:
                print("  largest loop: " + " ".join(sorted(loop)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
