"""Drawing the computational graph of a tensor: `to_dot` (Graphviz DOT text) and `draw`.

    dot = ndl.viz.to_dot(loss, params=model)     # plain text, needs nothing installed
    ndl.viz.draw(loss, "graph.svg", params=model)  # needs `pip install needle[viz]` and `dot`

The graph is the one `backward()` walks from the tensor: one box per op (its class and scalar
attributes, e.g. `MulScalar(2.0)`), one ellipse per leaf (its name in `params`, shape, dtype
and kind), and one edge per input, in input order. Only graph structure, shapes and dtypes are
read (values only with `show_values`), so every device works and nothing is computed.
"""

from __future__ import annotations

import inspect
import os
import shutil
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .autograd import Op, TensorTuple, Value, find_topo_sort
from .nn.module import Module, Parameter

__all__ = ["to_dot", "draw", "op_label", "MAX_NODES"]

MAX_NODES = 500  # beyond this many nodes, to_dot keeps those nearest the output
SHARED_USES = 4  # a leaf feeding more ops than this gets a stub beside each of them
MAX_SPAN = 12  # and so does an op feeding one more than this many levels above it
FORMATS = ("svg", "png", "pdf")
VIZ_HINT = "pip install needle[viz] (or: pip install graphviz)"
DOT_HINT = "apt-get install graphviz (macOS: brew install graphviz)"


def to_dot(tensor: Value, *, show_shapes: bool = True, show_values: bool = False,
           params: Module | Mapping[str, Value] | None = None,
           max_nodes: int | None = MAX_NODES) -> str:
    """Graphviz DOT source of the graph that `backward()` walks from `tensor` (deterministic)."""
    if not isinstance(tensor, Value):
        raise TypeError(f"to_dot: expected a needle Tensor, got {type(tensor).__name__}")
    if max_nodes is not None and (isinstance(max_nodes, bool) or not isinstance(max_nodes, int)
                                  or max_nodes < 1):
        raise ValueError(f"to_dot: max_nodes must be an int >= 1 or None, got {max_nodes!r}")
    names = _names(params)
    order = find_topo_sort([tensor])
    total = len(order)
    kept = _nearest(tensor, max_nodes) if max_nodes is not None and total > max_nodes else None
    if kept is not None:
        order = [node for node in order if node in kept]
    lines = ["digraph needle {", "  graph [ordering=in];",
             "  node [fontname=Helvetica, fontsize=10];"]
    lines += _Writer(order, tensor, names, show_shapes, show_values).lines()
    if kept is not None:
        note = f"{total - len(order)} more nodes left out (max_nodes={max_nodes})"
        lines.append(f'  more [label="{note}", shape=note, style=dashed];')
    return "\n".join(lines + ["}"]) + "\n"


def draw(tensor: Value, path: str | os.PathLike, **options: Any) -> Path:
    """Render the graph of `tensor` to `path` (.svg, .png or .pdf) with Graphviz; the path."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ValueError(f"draw: {path}: name a .svg, .png or .pdf file (found {path.suffix!r})")
    source = to_dot(tensor, **options)
    try:
        import graphviz
    except ImportError:
        missing = "" if shutil.which("dot") else f"; the `dot` program is missing too: {DOT_HINT}"
        raise RuntimeError(f"draw: the graphviz Python package is not installed: {VIZ_HINT}"
                           f"{missing}") from None
    try:
        data = graphviz.Source(source).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RuntimeError("draw: the Graphviz `dot` program is not installed (or not on "
                           f"PATH): {DOT_HINT}") from None
    except graphviz.CalledProcessError as e:
        raise RuntimeError(f"draw: dot failed rendering {path}: {e.stderr!r}") from None
    path.write_bytes(data)
    return path


class _Writer:
    """The node and edge statements of the kept nodes `order` (topological) of one graph.

    `dot` takes minutes to place a graph with many long edges (an RNN's weights feed every
    time step; every step's output feeds one final stack). So an edge from a leaf that feeds
    more than SHARED_USES ops, or from an op more than MAX_SPAN levels below the op it feeds,
    is drawn as a dotted stub `#k ...` beside that op, and its source is tagged `#k`. Inputs
    left out beyond max_nodes come from the `more` note, or, when there are many, from one `...`
    stub beside each op that reads them (so at most max_nodes stubs).
    """

    def __init__(self, order: list[Value], root: Value, names: dict, show_shapes: bool,
                 show_values: bool) -> None:
        self.order, self.root, self.names = order, root, names
        self.show = (show_shapes, show_values)
        self.ids = {node: f"n{i}" for i, node in enumerate(order)}
        self.uses: dict[Value | None, int] = {}  # None: the inputs left out
        depth: dict[Value, int] = {}
        for node in order:
            depth[node] = 1 + max((depth[x] for x in node.inputs if x in depth), default=-1)
            for x in node.inputs:
                key = x if x in self.ids else None
                self.uses[key] = self.uses.get(key, 0) + 1
        self.stubbed: set[tuple[Value | None, Value]] = set()
        for node in order:
            for x in node.inputs:
                key = x if x in self.ids else None
                if (self.uses[key] > SHARED_USES and (key is None or x.op is None)
                        or key is not None and x.op is not None  # (a leaf sits by its op)
                        and depth[node] - depth[x] > MAX_SPAN):
                    self.stubbed.add((key, node))
        tagged = {x for x, _ in self.stubbed if x is not None}
        self.tags = {x: i + 1 for i, x in enumerate(n for n in order if n in tagged)}
        self.stubs = 0
        self.dots: set[Value] = set()  # the kept nodes given their `...` stub so far

    def lines(self) -> list[str]:
        """Node statements in topological order, then the edges grouped by node."""
        nodes, edges = [], []
        for node in self.order:
            tag = self.tags.get(node)
            note = None if tag is None else f"#{tag}: feeds {self.uses[node]} ops"
            bold = ", penwidth=2" if node is self.root else ""
            attributes = _attributes(node, self.names, *self.show, note)
            nodes.append(f"  {self.ids[node]} [{attributes}{bold}];")
            for x in node.inputs:
                source = self.source(x, node, nodes)
                if source is not None:
                    edges.append(f"  {source} -> {self.ids[node]};")
        return nodes + edges

    def source(self, x: Value, node: Value, nodes: list[str]) -> str | None:
        """Where the edge from input `x` to `node` starts: x, a new stub of it, or `more`;
        None for a second left-out input of `node` (one `...` stub stands for them all)."""
        key = x if x in self.ids else None
        if (key, node) not in self.stubbed:
            return self.ids.get(x, "more")
        if key is None:
            if node in self.dots:
                return None
            self.dots.add(node)
        self.stubs += 1
        stub = f"s{self.stubs}"
        if key is None:
            nodes.append(f'  {stub} [label="...", shape=plaintext];')
        else:
            text = _escape(f"#{self.tags[x]} {self.title(x)}")
            shape = "box" if x.op is not None else "ellipse"
            nodes.append(f'  {stub} [label="{text}", shape={shape}, style=dotted];')
        return stub

    def title(self, node: Value) -> str:
        """The first line of a node's label: its op, or a leaf's name or kind."""
        if node.op is not None:
            return op_label(node.op)
        return self.names[id(node)][0] if id(node) in self.names else _kind(node)


def _names(params: Module | Mapping[str, Value] | None) -> dict[int, tuple[str, str]]:
    """id(tensor) -> (dotted name, kind) for the parameters and buffers of `params`."""
    if params is None:
        return {}
    if isinstance(params, Module):
        named = [(n, p, "parameter") for n, p in params.named_parameters()]
        named += [(n, b, "buffer") for n, b in params.named_buffers()]
    elif isinstance(params, Mapping):
        named = [(str(n), t, None) for n, t in params.items()]
    else:
        raise TypeError(f"to_dot: params must be a Module or a mapping of names to tensors, "
                        f"got {type(params).__name__}")
    names: dict[int, tuple[str, str]] = {}
    for name, value, kind in named:
        names.setdefault(id(value), (name, kind or _kind(value)))
    return names


def _kind(leaf: Value) -> str:
    """What a leaf is, in a word or two."""
    if isinstance(leaf, Parameter):
        return "parameter"
    return "requires grad" if leaf.requires_grad else "constant"


def _nearest(root: Value, limit: int) -> set[Value]:
    """The `limit` nodes nearest `root` (breadth first over the inputs, in input order)."""
    kept, queue = {root}, deque([root])
    while queue and len(kept) < limit:
        for x in queue.popleft().inputs:
            if x not in kept and len(kept) < limit:
                kept.add(x)
                queue.append(x)
    return kept


def _attributes(node: Value, names: dict, show_shapes: bool, show_values: bool,
                note: str | None = None) -> str:
    """The DOT attributes of one node: its label (`note` last) and its style."""
    lines, style = [], ""
    if node.op is not None:
        lines.append(op_label(node.op))
    elif id(node) in names:
        lines.append(names[id(node)][0])
    if show_shapes:
        lines.append(_shape_text(node))
    if show_values:
        lines.append(_values_text(node))
    if node.op is None:
        kind = names[id(node)][1] if id(node) in names else _kind(node)
        lines.append(kind)
        style = {"parameter": ", style=filled, fillcolor=lightblue",
                 "buffer": ", style=filled, fillcolor=lightgrey",
                 "constant": ", style=dashed"}.get(kind, "")
    if note is not None:
        lines.append(note)
    shape = "box" if node.op is not None else "ellipse"
    return f'label="{_escape(chr(10).join(lines))}", shape={shape}{style}'


def op_label(op: Op) -> str:
    """An op's class and its scalar attributes, as a call: `MulScalar(2.0)`, `MatMul`."""
    shown, signature = [], _init_parameters(type(op))
    for key, value in vars(op).items():
        if key.startswith("_"):
            continue
        text = _plain_text(value)
        parameter = signature.get(key)
        if text is None or (parameter is not None and parameter.default is not parameter.empty
                            and _same(value, parameter.default)):
            continue
        first = parameter is not None and next(iter(signature)) == key
        positional = first and parameter.default is parameter.empty
        shown.append(text if positional else f"{key}={text}")
    name = type(op).__name__
    return f"{name}({', '.join(shown)})" if shown else name


_SIGNATURES: dict[type, dict[str, inspect.Parameter]] = {}


def _init_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The named parameters of `cls.__init__` (cached: to_dot meets each op class often)."""
    found = _SIGNATURES.get(cls)
    if found is None:
        found = {}
        if cls.__init__ is not object.__init__:
            params = list(inspect.signature(cls.__init__).parameters.values())[1:]
            found = {p.name: p for p in params
                     if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        _SIGNATURES[cls] = found
    return found


def _same(value: Any, default: Any) -> bool:
    """Whether an attribute still holds its constructor default (then it is not shown)."""
    return type(value) is type(default) and value == default


def _plain_text(value: Any) -> str | None:
    """Python-literal text of a scalar, slice or tuple of them; None for anything else."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return repr(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value)  # numpy float64 too, without its `np.float64(...)`
    if isinstance(value, slice):
        parts = [_plain_text(p) for p in (value.start, value.stop, value.step)]
        if any(p is None for p in parts):
            return None
        text = ":".join("" if p == "None" else p for p in parts)
        return text[:-1] if value.step is None else text
    if value is Ellipsis:
        return "..."
    if isinstance(value, (tuple, list)) and len(value) <= 8:
        parts = [_plain_text(v) for v in value]
        if any(p is None for p in parts):
            return None
        inner = ", ".join(parts) + ("," if len(parts) == 1 and isinstance(value, tuple) else "")
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return None


def _shape_text(node: Value) -> str:
    """`(2, 3) float32`, read from the cached array; a TensorTuple lists its parts."""
    data = node._array
    if data is None:
        return "not computed yet"
    arrays = data if isinstance(node, TensorTuple) else (data,)
    parts = [f"{tuple(int(s) for s in a.shape)} {node.device.public_dtype(a.dtype)}"
             for a in arrays]
    return ", ".join(parts) if len(parts) < 4 else f"{len(parts)} tensors: {parts[0]}, ..."


def _values_text(node: Value, limit: int = 6) -> str:
    """The first few values (a host copy: the one thing that reads data)."""
    data = node._array
    if data is None or isinstance(node, TensorTuple):
        return "values: -"
    flat = node.device.to_numpy(data).reshape(-1)
    values = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat[:limit].tolist()]
    return f"values: [{', '.join(values)}{', ...' if flat.shape[0] > limit else ''}]"


def _escape(text: str) -> str:
    """A DOT double-quoted string's content: backslashes, quotes and newlines escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

