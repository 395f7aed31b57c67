"""The fused tile dataflow graph (FTG): tile ops as nodes, data dependencies as edges.

:class:`FTG` wraps a ``networkx.DiGraph``. Node ids are ``n0, n1, ...`` in program order; each node has the
attributes ``op`` (the IR node), ``kind``, ``label``, ``line``, ``reads``/``writes`` (tuples of
:class:`Access`) and ``loops`` (the enclosing loops, outermost first, as :class:`LoopCtx`). Each edge has
``deps``: a list of :class:`Dep` (buffer, RAW/WAR/WAW, and the loop that carries it, if any).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import networkx as nx

from tilec.ir.buffer import Buffer
from tilec.ir.printer import Names, expr_str


@dataclass(frozen=True)
class Access:
    """One buffer a node reads or writes; ``text`` is the region or element pattern as written."""

    buffer: Buffer
    text: str
    full: bool  # the whole buffer is written, unconditionally (a write that kills earlier values)


@dataclass(frozen=True)
class LoopCtx:
    var: str
    kind: str
    extent: str
    num_stages: int | None
    node: Any  # the For statement

    def __str__(self) -> str:
        stages = f", num_stages={self.num_stages}" if self.num_stages is not None else ""
        return f"{self.var}: {self.kind}({self.extent}{stages})"


@dataclass(frozen=True)
class Dep:
    buffer: Buffer
    kind: str  # "RAW", "WAR" or "WAW"
    carried_by: str | None = None  # the loop variable, for a dependency from one iteration to the next

    def text(self, names: Names | None = None) -> str:
        """``RAW x (carried by k)``, the buffer named by ``names`` (the FTG's: as the dump's nodes name it)."""
        carried = f" (carried by {self.carried_by})" if self.carried_by else ""
        return f"{self.kind} {names(self.buffer) if names else self.buffer.name}{carried}"

    def __str__(self) -> str:
        return self.text()


class FTG:
    """A fused tile dataflow graph. ``graph`` is the ``networkx.DiGraph``; ``str(ftg)`` a readable dump."""

    def __init__(self, name: str, graph: nx.DiGraph, buffers: list[Buffer], names: Names) -> None:
        self.name = name
        self.graph = graph
        self.buffers = buffers
        self.names = names
        self.layouts: dict[Buffer, Any] = {}

    @property
    def nodes(self) -> list[str]:
        return list(self.graph.nodes)

    def node(self, nid: str) -> dict[str, Any]:
        return self.graph.nodes[nid]

    def ops(self, kind: str | None = None) -> list[str]:
        """Node ids in program order, optionally only those of one kind (``"copy"``, ``"gemm"``, ...)."""
        return [n for n, d in self.graph.nodes(data=True) if kind is None or d["kind"] == kind]

    def deps(self, u: str, v: str) -> list[Dep]:
        return self.graph.edges[u, v]["deps"] if self.graph.has_edge(u, v) else []

    def edges(self) -> list[tuple[str, str, Dep]]:
        """Every dependency as (source, destination, dep)."""
        return [(u, v, d) for u, v, data in self.graph.edges(data=True) for d in data["deps"]]

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for _, d in self.graph.nodes(data=True):
            kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in kinds.items())
        return f"FTG {self.name}: {self.graph.number_of_nodes()} tile ops ({parts}), {len(self.edges())} dependencies"

    def _widths(self, *keys: str) -> list[int]:
        """The width of each column: its longest entry among the nodes (node ids for "id")."""
        nodes = self.graph.nodes(data=True)
        return [max((len(n if k == "id" else d[k]) for n, d in nodes), default=0) for k in keys]

    def rows(self) -> list[str]:
        """One line a node, as ``kernel.report()`` lists them: id, kind, where and label, in aligned columns (a node
        without a label ends at its where)."""
        wn, wk, ww = self._widths("id", "kind", "where")
        return [f"  {n:<{wn}} {d['kind']:<{wk}} {d['where'] + ':':<{ww + 1}} {d['label']}" if d["label"] else
                f"  {n:<{wn}} {d['kind']:<{wk}} {d['where']}" for n, d in self.graph.nodes(data=True)]

    def __str__(self) -> str:
        lines = [self.summary()]
        wn, wk, width = self._widths("id", "kind", "label")
        for n, d in self.graph.nodes(data=True):
            loops = " in " + ", ".join(str(lp) for lp in d["loops"]) if d["loops"] else ""
            lines.append(f"  {n:<{max(wn, 4)}} {d['kind']:<{max(wk, 10)}} {d['label']:<{width}}  {d['where']}{loops}")
        lines.append("dependencies:")
        for u, v, dep in self.edges():
            lines.append(f"  {u} -> {v}  {dep.text(self.names)}")
        lines.append("buffers:")
        for b in self.buffers:
            shape = "(" + ", ".join(expr_str(s, self.names) for s in b.shape) + ")"
            layout = f"  layout {self.layouts[b]}" if b in self.layouts else ""
            lines.append(f"  {self.names(b):<12} {b.scope:<9} {str(b.dtype):<12} {shape}{layout}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<{self.summary()}>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def to_dot(self) -> str:
        """Graphviz source: loops as clusters, loop-carried dependencies dashed."""
        out = [f'digraph "{self.name}" {{', "  node [shape=box, fontname=monospace, fontsize=10];"]
        clusters: dict[int, tuple[str, list[str]]] = {}
        for n, d in self.graph.nodes(data=True):
            text = _dot_escape(f"{n}: {d['kind']}\\n{d['label']}\\n{d['where']}")
            decl = f'  {n} [label="{text}"];'
            if d["loops"]:
                inner = d["loops"][-1]
                clusters.setdefault(id(inner.node), (_dot_escape(str(inner)), []))[1].append(decl)
            else:
                out.append(decl)
        for i, (label, decls) in enumerate(clusters.values()):
            out.append(f'  subgraph cluster_{i} {{ label="{label}";')
            out.extend("  " + s for s in decls)
            out.append("  }")
        for u, v, data in self.graph.edges(data=True):
            deps = data["deps"]
            style = "dashed" if all(d.carried_by for d in deps) else "solid"
            label = _dot_escape(", ".join(d.text(self.names) for d in deps))
            out.append(f'  {u} -> {v} [label="{label}", style={style}, fontsize=9];')
        out.append("}")
        return "\n".join(out)

    def to_json(self) -> str:
        """The graph as JSON: ``{"name", "nodes": [...], "edges": [...], "buffers": [...]}``."""
        nodes = [{"id": n, "kind": d["kind"], "label": d["label"], "line": d["line"], "where": d["where"],
                  "reads": [a.text for a in d["reads"]], "writes": [a.text for a in d["writes"]],
                  "loops": [str(lp) for lp in d["loops"]]} for n, d in self.graph.nodes(data=True)]
        edges = [{"src": u, "dst": v, "deps": [{"buffer": self.names(dp.buffer), "kind": dp.kind,
                                                 "carried_by": dp.carried_by} for dp in data["deps"]]}
                 for u, v, data in self.graph.edges(data=True)]
        bufs = [{"name": self.names(b), "scope": b.scope, "dtype": str(b.dtype),
                 "shape": [expr_str(s, self.names) for s in b.shape]} for b in self.buffers]
        return json.dumps({"name": self.name, "nodes": nodes, "edges": edges, "buffers": bufs}, indent=1)

    def to_svg(self) -> str | None:
        """SVG rendered by Graphviz's ``dot``, or None when ``dot`` is not installed."""
        dot = shutil.which("dot")
        if dot is None:
            return None
        res = subprocess.run([dot, "-Tsvg"], input=self.to_dot(), capture_output=True, text=True, timeout=30)
        return res.stdout if res.returncode == 0 else None

    def _repr_svg_(self) -> str | None:  # notebooks: SVG when Graphviz is present, the text dump otherwise
        return self.to_svg()


def _dot_escape(s: str) -> str:
    return s.replace('"', '\\"')
