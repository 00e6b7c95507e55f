"""The pass framework: passes declare the facts they need and provide; the manager orders them.

A pass is any object with a `name`, a set of fact names it `needs`, a set it
`provides`, and `run(context) -> PassResult`. The manager links provider to
consumer in a networkx graph and runs the passes in topological order, so adding
a pass means writing it and listing it, never re-sorting a hand-kept sequence.
Wiring mistakes (a fact nobody provides, two providers, a cycle) are programmer
errors and raise `PassGraphError` when the manager is built.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, Sequence

import networkx as nx

from .. import ir
from ..layout import TileLayout
from ..plan import KernelPlan
from ..source import Diagnostic


class ProblemSize(NamedTuple):
    m: int
    n: int
    k: int

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


DEFAULT_PROBLEM = ProblemSize(4096, 4096, 4096)


@dataclass
class Context:
    """What every pass may read: the lowered plan, the launch size, ptxas's figures, earlier facts."""

    plan: KernelPlan
    problem: ProblemSize = DEFAULT_PROBLEM
    # build.PtxasResources.as_dict(): {registers, spill_stores, spill_loads, stack, static_smem}; None = not compiled
    ptxas: dict | None = None
    facts: dict[str, object] = field(default_factory=dict)
    # Whether warnings carry hints that cost analysis of their own (the bank pass's search for a better pad or
    # swizzle); the tuner's screening reads the facts only.
    hints: bool = True

    @property
    def spec(self) -> ir.KernelSpec:
        return self.plan.spec

    @property
    def layout(self) -> TileLayout:
        """The vector kernel's lowering, which the passes analyse."""
        return self.plan.layout

    def fact(self, name: str) -> object:
        return self.facts[name]


@dataclass(frozen=True)
class PassResult:
    facts: dict[str, object]  # exactly the pass's `provides`
    verdict: str  # one line, deterministic for a given spec, problem and ptxas input; "": nothing to say
    warnings: tuple[Diagnostic, ...] = ()


class Pass(Protocol):
    name: str
    needs: frozenset[str]
    provides: frozenset[str]

    def run(self, context: Context) -> PassResult: ...


@dataclass(frozen=True)
class PassOutcome:
    name: str
    verdict: str
    warnings: tuple[Diagnostic, ...]


class PassGraphError(RuntimeError):
    """The passes cannot be ordered: a fact has no provider or two, or needs form a cycle."""


class PassManager:
    def __init__(self, passes: Sequence[Pass]):
        self.passes = {p.name: p for p in passes}
        if len(self.passes) != len(passes):
            raise PassGraphError("two passes share a name")
        self.order = self._order()

    def _order(self) -> list[Pass]:
        provider: dict[str, str] = {}
        for p in self.passes.values():
            for fact in p.provides:
                if fact in provider:
                    raise PassGraphError(f"fact {fact!r} is provided by both {provider[fact]!r} and {p.name!r}")
                provider[fact] = p.name
        graph = nx.DiGraph()
        graph.add_nodes_from(self.passes)
        for p in self.passes.values():
            for fact in p.needs:
                if fact not in provider:
                    raise PassGraphError(f"pass {p.name!r} needs {fact!r}, which no pass provides")
                graph.add_edge(provider[fact], p.name)
        if not nx.is_directed_acyclic_graph(graph):
            cycle = " -> ".join(edge[0] for edge in nx.find_cycle(graph))
            raise PassGraphError(f"passes need each other in a cycle: {cycle}")
        # Ties keep the order the passes were given in, so verdicts come out in a stable, chosen order.
        listed = {name: index for index, name in enumerate(self.passes)}
        return [self.passes[name] for name in nx.lexicographical_topological_sort(graph, key=listed.__getitem__)]

    def run(self, context: Context) -> list[PassOutcome]:
        outcomes = []
        for p in self.order:
            result = p.run(context)
            if set(result.facts) != set(p.provides):
                raise PassGraphError(f"pass {p.name!r} returned facts {sorted(result.facts)}, "
                                     f"declared {sorted(p.provides)}")
            context.facts.update(result.facts)
            if result.verdict or result.warnings:  # a pass with nothing to say (fuse, unfused) is not listed
                outcomes.append(PassOutcome(p.name, result.verdict, result.warnings))
        return outcomes
