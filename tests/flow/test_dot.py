"""GraphViz pictures of flows: every op a node, names escaped, DOT that GraphViz reads, SVG and
HTML pages."""

import re
import shutil
import subprocess

import numpy as np
import pytest

import myelin
from jitcheck import guide_flow
from myelin.errors import MyelinError
from myelin.flow import dot

# DOT's tokens, as GraphViz reads them: quoted strings (\" and \\ are kept as pairs), HTML-like
# strings (here nested one level deep), names, numbers and punctuation.
_TOKEN = re.compile(r'\s+|"(?:[^"\\]|\\.)*"|<(?:[^<>]|<[^<>]*>)*>|[A-Za-z_]\w*|-?\d+(?:\.\d+)?'
                    r'|->|[{}\[\];,=]')


def read_dot(text):
    """(node ids, edges as (tail, head) ids) of DOT ``text``; fails where it does not tokenize
    or its braces and brackets do not balance."""
    tokens, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        assert match, f"no DOT token at {text[position:position + 40]!r}"
        if not match.group().isspace():
            tokens.append(match.group())
        position = match.end()
    for opening, closing in ("{}", "[]"):
        assert tokens.count(opening) == tokens.count(closing)

    def unquote(token):
        assert token.startswith('"'), token
        return re.sub(r'\\(["\\])', r"\1", token[1:-1])

    nodes = [unquote(tokens[i]) for i in range(1, len(tokens) - 1)
             if tokens[i].startswith('"') and tokens[i + 1] == "[" and tokens[i - 1] != "->"]
    edges = [(unquote(tokens[i - 1]), unquote(tokens[i + 1]))
             for i, token in enumerate(tokens) if token == "->"]
    return nodes, edges


def odd_flow():
    """Two ops and their variables with quotes, backslashes and HTML characters in their names."""
    flow = myelin.Flow()
    f = flow.func("f")
    x = flow.var('f/x "in"', "float32", [2, 3])
    y = flow.var("f/y\\", "float32", [2, 3])
    z = flow.var("f/<z> & co", "float32", [2, 3])
    flow.op('f/say "hi" \\', "Neg", f, [x], [y]).attrs["note"] = '"<b>"'
    flow.op("f/two\\", "Relu", f, [y], [z])
    flow.infer_inputs_and_outputs()
    return flow


def test_every_op_is_a_node_and_edges_carry_types():
    flow, *_ = guide_flow(np.random.default_rng())
    optimized = myelin.Compiler().compile(flow).flow
    nodes, edges = read_dot(dot.compare({"input": flow, "optimized": optimized}, "guide"))
    for caption, drawn in (("input", flow), ("optimized", optimized)):
        ops = {node.split(":", 2)[2] for node in nodes if node.startswith(f"{caption}:op:")}
        assert ops == set(drawn.ops) and len(ops) > 1
    assert len(set(nodes)) == len(nodes)
    assert {"input:var:f/x", "input:var:f/W", "optimized:var:f/y"} <= set(nodes)
    assert set(node for edge in edges for node in edge) <= set(nodes)
    assert ("input:var:f/x", "input:op:f/MatMul") in edges

    text = dot.to_dot(flow)
    assert flow.to_dot() == text
    assert '"op:f/MatMul" -> "op:f/Add" [label=<float32[1x256]>];' in text
    assert '"var:f/W" [shape=note' in text          # constants are small notes
    assert "@0=Relu(Add(%0,%1))" in dot.to_dot(optimized)    # fused recipes are shown


def test_names_are_escaped():
    flow = odd_flow()
    text = dot.to_dot(flow, title='odd "flow"')
    nodes, edges = read_dot(text)
    assert sorted(nodes) == sorted(['op:f/say "hi" \\', "op:f/two\\", 'var:f/x "in"',
                                    "var:f/<z> & co"])
    assert ("op:f/say \"hi\" \\", "op:f/two\\") in edges
    assert "<b>f/&lt;z&gt; &amp; co</b>" in text and "note=&quot;&lt;b&gt;&quot;" in text
    assert "label=<<b>odd &quot;flow&quot;</b>>" in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="GraphViz is not installed")
def test_graphviz_reads_the_pictures():
    flow, *_ = guide_flow(np.random.default_rng())
    optimized = myelin.Compiler().compile(flow).flow
    for text in (dot.compare({"input": flow, "optimized": optimized}), dot.to_dot(odd_flow())):
        svg = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True,
                             check=True).stdout
        assert "<svg" in svg
    assert "f/Calculate" in dot.to_svg(dot.to_dot(optimized))


def fake_dot(tmp_path, monkeypatch, script):
    """Put a program called dot that runs shell ``script`` first on $PATH."""
    program = tmp_path / "bin" / "dot"
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(program.parent))


def test_svg_and_html(tmp_path, monkeypatch):
    text = dot.to_dot(odd_flow())
    monkeypatch.setenv("PATH", str(tmp_path))          # no dot there
    assert dot.to_svg(text) is None
    page = dot.to_html(text, title="odd <flow>")
    assert "<title>odd &lt;flow&gt;</title>" in page
    assert "<pre>digraph {" in page and "&quot;op:f/two\\\\&quot;" in page

    fake_dot(tmp_path, monkeypatch, "cat > /dev/null; echo '<?xml version=\"1.0\"?>'; "
                                    "echo '<svg><g>drawn</g></svg>'")
    svg = dot.to_svg(text)
    assert svg.startswith("<?xml")
    page = dot.to_html(text, svg)
    assert "<svg><g>drawn</g></svg>" in page and "<?xml" not in page and "<pre>" not in page


def test_a_failing_dot_is_an_error(tmp_path, monkeypatch):
    fake_dot(tmp_path, monkeypatch, "echo 'Error: syntax error in line 1' >&2; exit 1")
    with pytest.raises(MyelinError, match="dot failed .status 1.: Error: syntax error"):
        dot.to_svg("digraph {")
