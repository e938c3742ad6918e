"""ndl.viz: DOT text of a tensor's graph (golden, written by hand), limits, and drawing."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
from needle import viz

# ((x * 2.0 + w) / x).sum(axes=(1,)) - c, written out by hand: nodes in the order backward()
# finishes them (inputs first, left to right), edges grouped by node in input order. `- c`
# of a constant c is `+ (-c)`, and -c (needing no gradient) is recorded as a constant leaf.
GOLDEN = """\
digraph needle {
  graph [ordering=in];
  node [fontname=Helvetica, fontsize=10];
  n0 [label="x\\n(2, 3) float32\\nrequires grad", shape=ellipse];
  n1 [label="MulScalar(2.0)\\n(2, 3) float32", shape=box];
  n2 [label="w\\n(3,) float32\\nparameter", shape=ellipse, style=filled, fillcolor=lightblue];
  n3 [label="EWiseAdd\\n(2, 3) float32", shape=box];
  n4 [label="EWiseDiv\\n(2, 3) float32", shape=box];
  n5 [label="Summation(axes=(1,))\\n(2,) float32", shape=box];
  n6 [label="(2,) float32\\nconstant", shape=ellipse, style=dashed];
  n7 [label="EWiseAdd\\n(2,) float32", shape=box, penwidth=2];
  n0 -> n1;
  n1 -> n3;
  n2 -> n3;
  n3 -> n4;
  n0 -> n4;
  n4 -> n5;
  n5 -> n7;
  n6 -> n7;
}
"""


def expression(device):
    x = ndl.Tensor([[1, 2, 3], [4, 5, 6]], device=device, dtype="float32")
    w = ndl.nn.Parameter([1, 2, 3], device=device, dtype="float32")
    c = ndl.Tensor([1, 1], device=device, dtype="float32", requires_grad=False)
    return ((x * 2.0 + w) / x).sum(axes=(1,)) - c, {"x": x, "w": w}


def chain(n: int) -> ndl.Tensor:
    """A graph of exactly `n` nodes: one leaf and n - 1 MulScalar ops (on the cpu)."""
    y = ndl.Tensor([1.0], device=ndl.cpu(), dtype="float32")
    for _ in range(n - 1):
        y = y * 1.0
    return y


def node_lines(dot: str) -> list[str]:
    return [line for line in dot.splitlines() if " [label=" in line]


def test_dot_of_a_small_expression_matches_the_golden_text(device):
    y, names = expression(device)
    assert viz.to_dot(y, params=names) == GOLDEN


def test_dot_is_deterministic_and_reads_no_values(device):
    (y1, n1), (y2, n2) = expression(device), expression(device)
    assert viz.to_dot(y1, params=n1) == viz.to_dot(y1, params=n1) == viz.to_dot(y2, params=n2)
    assert "values" not in viz.to_dot(y1)


def test_edges_follow_input_order(device):
    a = ndl.Tensor([1.0], device=device, dtype="float32")
    b = ndl.Tensor([2.0], device=device, dtype="float32")
    assert viz.to_dot(a / b).endswith("  n0 -> n2;\n  n1 -> n2;\n}\n")
    # b is reached first now, so it is n0: a (n1) still feeds the op first
    assert viz.to_dot(ndl.ops.divide(b * 1.0, a)).endswith(
        "  n0 -> n1;\n  n1 -> n3;\n  n2 -> n3;\n}\n")


@pytest.mark.parametrize("op, label", [
    (ndl.ops.MulScalar(2.0), "MulScalar(2.0)"),
    (ndl.ops.PowerScalar(np.float64(3)), "PowerScalar(3.0)"),
    (ndl.ops.MatMul(), "MatMul"),
    (ndl.ops.MatMul(transpose_b=True), "MatMul(transpose_b=True)"),
    (ndl.ops.Summation(), "Summation"),
    (ndl.ops.Summation((0, 2)), "Summation(axes=(0, 2))"),
    (ndl.ops.Reshape((1, 6)), "Reshape((1, 6))"),
    (ndl.ops.GetItem((0, slice(1, 3), slice(None, None, 2))), "GetItem((0, 1:3, ::2))"),
    (ndl.ops.EWiseAdd(), "EWiseAdd"),
])
def test_op_labels_show_class_and_scalar_attributes(op, label):
    assert viz.op_label(op) == label


def test_leaves_are_named_after_module_attributes(device):
    np.random.seed(0)
    model = ndl.nn.Sequential(ndl.nn.Linear(3, 2, device=device),
                              ndl.nn.BatchNorm1d(2, device=device)).eval()
    x = ndl.Tensor(np.ones((4, 3)), device=device, dtype="float32", requires_grad=False)
    dot = viz.to_dot(model(x), params=model)
    for name in ("modules.0.weight", "modules.0.bias", "modules.1.weight", "modules.1.bias"):
        assert f'[label="{name}\\n' in dot and dot.count(f'"{name}\\n') == 1
    assert '"modules.0.weight\\n(3, 2) float32\\nparameter", shape=ellipse, style=filled' in dot
    assert '"modules.1.running_mean\\n(2,) float32\\nbuffer"' in dot  # eval mode reads it
    assert '"(4, 3) float32\\nconstant", shape=ellipse, style=dashed' in dot  # the data


def test_show_shapes_off_and_show_values_on(device):
    y, names = expression(device)
    bare = viz.to_dot(y, show_shapes=False, params=names)
    assert "float32" not in bare and '[label="MulScalar(2.0)", shape=box]' in bare
    valued = viz.to_dot(y, show_values=True, params=names)
    assert '"x\\n(2, 3) float32\\nvalues: [1, 2, 3, 4, 5, 6]\\nrequires grad"' in valued
    # rows: (3 + 3 + 3) - 1 = 8 and (9/4 + 12/5 + 15/6) - 1 = 6.15
    assert '"EWiseAdd\\n(2,) float32\\nvalues: [8, 6.15]", shape=box' in valued


def test_tuple_values_show_every_part(device):
    x = ndl.Tensor(np.ones((2, 3)), device=device, dtype="float32")
    first, _ = ndl.ops.split(x, axis=0)
    dot = viz.to_dot(first)
    assert '"Split(0)\\n(3,) float32, (3,) float32", shape=box' in dot
    assert '"TupleGetItem(0)\\n(3,) float32", shape=box, penwidth=2' in dot


def test_beyond_max_nodes_it_keeps_those_nearest_the_output_and_counts_the_rest():
    y = chain(21)
    dot = viz.to_dot(y, max_nodes=5)
    assert len(node_lines(dot)) == 5 + 1  # five kept, one note
    assert '  more [label="16 more nodes left out (max_nodes=5)", shape=note' in dot
    assert "  more -> n0;" in dot and "  n3 -> n4;" in dot and "penwidth=2" in dot
    assert viz.to_dot(y, max_nodes=21) == viz.to_dot(y, max_nodes=None)
    assert "more" not in viz.to_dot(y, max_nodes=None)


@pytest.mark.parametrize("uses", [viz.SHARED_USES, viz.SHARED_USES + 1])
def test_a_node_feeding_many_ops_gets_a_stub_beside_each(uses, device):
    # long edges from one node to every time step take `dot` minutes to place
    w = ndl.nn.Parameter([2.0], device=device, dtype="float32")
    y = w
    for _ in range(uses - 1):
        y = y * w
    dot = viz.to_dot(y, params={"w": w})
    w_line = '  n0 [label="w\\n(1,) float32\\nparameter", shape=ellipse, style=filled, ' \
             'fillcolor=lightblue];'
    if uses == viz.SHARED_USES:
        assert w_line in dot and "  n0 -> n1;\n  n0 -> n1;\n  n1 -> n2;\n  n0 -> n2;" in dot
        assert "#1" not in dot and "style=dotted" not in dot
    else:  # w is tagged #1; the first product takes it twice, as stubs s1 and s2
        tagged = w_line.replace("parameter", "parameter\\n#1: feeds 5 ops")
        stubs = [f'  s{k} [label="#1 w", shape=ellipse, style=dotted];' for k in range(1, 6)]
        assert tagged in dot and all(stub in dot for stub in stubs)
        assert "  s1 -> n1;\n  s2 -> n1;\n  n1 -> n2;\n  s3 -> n2;" in dot
        assert " n0 -> " not in dot
    assert len(node_lines(dot)) == uses + (uses if uses > viz.SHARED_USES else 0)


@pytest.mark.parametrize("levels", [viz.MAX_SPAN, viz.MAX_SPAN + 1])
def test_an_edge_spanning_many_levels_becomes_a_stub(levels):
    # h = exp(x) feeds relu(relu(...)) and, `levels` levels above it, the final sum
    h = ndl.exp(ndl.Tensor([1.0], device=ndl.cpu(), dtype="float32"))
    y = h
    for _ in range(levels - 1):
        y = ndl.relu(y)
    last = levels + 1  # x, h and the levels - 1 relus come first: the sum is n{last}
    dot = viz.to_dot(y + h)
    if levels <= viz.MAX_SPAN:
        assert f"  n1 -> n{last};" in dot and "style=dotted" not in dot
    else:
        assert '  n1 [label="Exp\\n(1,) float32\\n#1: feeds 2 ops", shape=box];' in dot
        assert '  s1 [label="#1 Exp", shape=box, style=dotted];' in dot
        assert f"  s1 -> n{last};" in dot and "  n1 -> n2;" in dot


def test_a_leaf_feeding_one_deep_op_keeps_its_edge():
    # only ops far below are stubbed: a leaf has depth 0 but dot places it beside its op
    x = ndl.Tensor([1.0], device=ndl.cpu(), dtype="float32")
    w = ndl.nn.Parameter([2.0], device=ndl.cpu(), dtype="float32")
    y = x
    for _ in range(viz.MAX_SPAN + 1):
        y = ndl.relu(y)
    dot = viz.to_dot(y * w, params={"w": w})
    last = viz.MAX_SPAN + 3  # x, the relus, w, then the product
    assert f"  n{last - 1} -> n{last};" in dot and "style=dotted" not in dot and "#1" not in dot


def test_a_node_with_many_left_out_inputs_gets_one_stub():
    # a stack of 3000 products keeps max_nodes nodes: at most one `...` stub beside each
    # (one per left-out input drew thousands)
    ys = [ndl.Tensor([1.0], device=ndl.cpu(), dtype="float32") * 2.0 for _ in range(3000)]
    dot = viz.to_dot(ndl.ops.stack(ys, 0).sum(), max_nodes=50)
    stubs = dot.count('[label="...", shape=plaintext];')
    assert 1 <= stubs <= 50 and len(node_lines(dot)) == 50 + stubs + 1
    tuple_of_all = re.search(r'  (n\d+) \[label="MakeTensorTuple', dot).group(1)
    assert len(re.findall(rf"  s\d+ -> {tuple_of_all};", dot)) == 1  # (2,953 left out)


def test_many_left_out_inputs_come_from_stubs():
    # the 6 products read x, cut off at max_nodes=8: six `...` stubs and the note
    x = ndl.exp(ndl.Tensor([1.0], device=ndl.cpu(), dtype="float32"))
    y = ndl.ops.add_n(*[x * float(k) for k in range(1, 7)])
    dot = viz.to_dot(y, max_nodes=7)
    assert dot.count('[label="...", shape=plaintext];') == 6 and " more -> " not in dot
    assert '  more [label="2 more nodes left out (max_nodes=7)", shape=note' in dot


def test_ten_thousand_nodes():
    # speed is measured in benchmarks/viz.py; here: every node, no recursion limit
    y = chain(10_000)
    assert len(node_lines(viz.to_dot(y, max_nodes=None))) == 10_000
    dot = viz.to_dot(y)  # the default limit
    assert len(node_lines(dot)) == viz.MAX_NODES + 1
    assert "9500 more nodes left out (max_nodes=500)" in dot


@pytest.mark.parametrize("call, error, message", [
    (lambda y: viz.to_dot(np.ones(2)), TypeError, "expected a needle Tensor, got ndarray"),
    (lambda y: viz.to_dot(y, max_nodes=0), ValueError, "max_nodes must be an int >= 1"),
    (lambda y: viz.to_dot(y, params=[y]), TypeError, "params must be a Module or a mapping"),
    (lambda y: viz.draw(y, "graph.jpg"), ValueError, "name a .svg, .png or .pdf file"),
])
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(".", r"\.")):
        call(chain(2))


def test_import_needle_imports_no_drawing_library():
    code = ("import sys, needle; needle.viz.to_dot(needle.Tensor([1.0]) * 2.0); "
            "print(sorted(m for m in ('matplotlib', 'graphviz') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# ----- drawing ---------------------------------------------------------------------------------


def needs_graphviz() -> None:
    """Skip, naming what is missing, unless the graphviz package and `dot` are installed."""
    try:
        import graphviz  # noqa: F401
    except ImportError:
        pytest.skip(f"the graphviz Python package is not installed ({viz.VIZ_HINT})")
    if shutil.which("dot") is None:
        pytest.skip(f"the Graphviz `dot` program is not installed ({viz.DOT_HINT})")


@pytest.mark.parametrize("suffix, magic", [(".svg", b"<svg"), (".png", b"\x89PNG\r\n\x1a\n")])
def test_draw_renders_svg_and_png(suffix, magic, tmp_path):
    needs_graphviz()
    y, names = expression(ndl.cpu())
    path = viz.draw(y, tmp_path / f"graph{suffix}", params=names)
    data = path.read_bytes()
    assert path == tmp_path / f"graph{suffix}" and magic in data[:400]
    if suffix == ".svg":
        assert b"MulScalar(2.0)" in data and b"Summation(axes=(1,))" in data
        assert data.count(b'class="node"') == 8 and data.count(b'class="edge"') == 8


def test_draw_without_the_graphviz_package_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz fails
    with pytest.raises(RuntimeError, match=r"graphviz Python package is not installed: "
                                           r"pip install needle\[viz\]"):
        viz.draw(chain(2), tmp_path / "graph.svg")
    assert not (tmp_path / "graph.svg").exists()


def test_draw_without_dot_says_how_to_install_it(tmp_path, monkeypatch):
    pytest.importorskip("graphviz", reason=f"the graphviz Python package is not installed "
                                           f"({viz.VIZ_HINT})")
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on it
    with pytest.raises(RuntimeError, match="`dot` program is not installed .*: apt-get install "
                                           "graphviz"):
        viz.draw(chain(2), tmp_path / "graph.png")
    assert not (tmp_path / "graph.png").exists()
