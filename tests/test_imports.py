"""Imports go downward only: tools, then the pipeline, then the IR (tests/import_graph.py holds the layer table
and draws the graph), with no cycle, counting the loads the source names as strings (the path registry's)."""
import networkx as nx
import pytest

import import_graph
from import_graph import LAYERS, build, floors, largest_loop, layer_of, module_files, upward


@pytest.fixture(scope="module")
def graph():
    return build()


def test_every_module_has_a_layer():
    assert [module for module in module_files() if layer_of(module) is None] == []


def test_every_layer_entry_names_a_module():
    modules = set(module_files())
    stale = [entry for entries in LAYERS.values() for entry in entries
             if not any(module == entry or module.startswith(entry + ".") for module in modules)]
    assert stale == []


def test_no_module_imports_from_a_higher_layer(graph):
    arrows = [f"{a} ({graph.nodes[a]['layer']}) -> {b} ({graph.nodes[b]['layer']}), {graph.edges[a, b]['kind']}"
              for a, b in upward(graph)]
    assert not arrows, "imports that run up the layers:\n" + "\n".join(arrows)


def test_no_import_cycle_counting_the_dynamic_loads(graph):
    cycles = [sorted(component) for component in nx.strongly_connected_components(graph) if len(component) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_the_graph_holds_the_registry_loads_and_the_imports_inside_functions(graph):
    """What the checks above read is there: each registered path is a dynamic edge of the registry, the
    CLI's tools are loaded by name, and an import made inside a function is an edge."""
    registry = graph["gemmdsl.paths"]
    assert {"gemmdsl.paths.wgmma.path", "gemmdsl.paths.fma.path"} <= set(registry)
    assert registry["gemmdsl.paths.wgmma.path"]["kind"] == "dynamic"
    assert graph.edges["gemmdsl.cli", "gemmdsl.tune_cli"]["kind"] == "dynamic"
    assert graph.edges["gemmdsl.tune.screen", "gemmdsl.analysis"]["kind"] == "function"  # predict imports it
    assert floors(graph) > 3


def write_package(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / "gemmdsl" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_builder_sees_function_level_relative_and_registry_imports(tmp_path, monkeypatch):
    """On a small package: `from . import x` inside a function, a registry's module list, a parent package's
    own imports; an upward import and the loop the registry closes are found."""
    write_package(tmp_path, {
        "__init__.py": "",
        "ir.py": "def late():\n    from . import bench\n",
        "bench.py": "",
        "plan.py": "from .paths import path_of\n",
        "paths/__init__.py": "from .. import ir\nREGISTERED = ('gemmdsl.paths.toy.path',)\ndef path_of(): pass\n",
        "paths/toy/__init__.py": "",
        "paths/toy/path.py": "from ...plan import KernelPlan\n",
        "cli.py": "import gemmdsl.paths.toy.path\n",
    })
    monkeypatch.setitem(LAYERS, "ir", ("gemmdsl.ir",))
    monkeypatch.setitem(LAYERS, "pipeline", ("gemmdsl.plan", "gemmdsl.paths"))
    monkeypatch.setitem(LAYERS, "tools", ("gemmdsl", "gemmdsl.cli", "gemmdsl.bench"))
    small = build(tmp_path)
    assert small.edges["gemmdsl.ir", "gemmdsl.bench"]["kind"] == "function"
    assert small.edges["gemmdsl.paths", "gemmdsl.paths.toy.path"]["kind"] == "dynamic"
    assert small.has_edge("gemmdsl.cli", "gemmdsl.ir")  # what gemmdsl.paths imports runs first
    assert upward(small) == [("gemmdsl.ir", "gemmdsl.bench")]
    assert largest_loop(small) == {"gemmdsl.plan", "gemmdsl.paths", "gemmdsl.paths.toy.path"}
    assert largest_loop(build(tmp_path, dynamic=False)) == set()


def test_the_figures_script_prints_both_graphs(capsys):
    assert import_graph.main([]) == 0
    out = capsys.readouterr().out
    assert "with the dynamic loads: modules" in out and "static imports only: modules" in out
