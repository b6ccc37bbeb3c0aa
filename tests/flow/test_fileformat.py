"""Tests of .flow files: round trips for versions 3 to 6, hand-built files, malformed input."""

import io
import os
import struct
import time

import numpy as np
import pytest

from myelin.errors import FlowError, FlowFormatError, MyelinError
from myelin.flow import fileformat
from myelin.flow.graph import Flow, FuncFlags, OpFlags, VarFlags

VERSIONS = [3, 4, 5, 6]


# ------------------------------------------------------------------------------------------
# A rich flow built with the IR API, and a structural comparison.

def build_flow(blobs=True):
    """A flow using every feature of the format (blobs only when ``blobs``)."""
    flow = Flow()
    flow.flags = 5
    w = flow.var("w", data=np.arange(12, dtype=np.float32).reshape(3, 4))
    w.flags |= VarFlags.LEARNABLE
    w.attrs["init"] = "normal"
    flow.add_alias(w, "weights")
    flow.add_alias(w, "W")
    idx = flow.var("idx", data=np.array([[1, -2], [3, 4]], dtype=np.int64))
    mask = flow.var("mask", data=np.array([True, False, True]))
    half = flow.var("half", data=np.array(1.5, dtype=np.float16))
    x = flow.var("x", "float32", [-1, 3])
    x.ref = True
    x.is_input = True
    h = flow.var("h:0", "float32", [-1, 4])
    h.attrs.update({"note": "hidden", "unicode": "ünï ✓"})
    top = flow.var("top:0", "int32", [-1])
    top_i = flow.var("top:1", "int32", [-1, 2])
    top_i.flags |= VarFlags.OUT | VarFlags(1 << 20)  # an unknown bit is kept as well
    untyped = flow.var("untyped", "", [])
    g = flow.var("g:0", "float32", [3, 4])
    g.nogradient = True

    main = flow.func("main")
    main.flags = FuncFlags.BACKPROP
    train = flow.func("train")
    train.training = True
    matmul = flow.op("h", "MatMul", main, [x, w], [h], {"transpose_b": False, "alpha": 1.0})
    matmul.nogradient = True
    flow.op("top", "TopK", main, [h, idx, mask], [top, top_i], {"k": 2, "axes": [0, 1]})
    flow.op("grad", "Gradient", train, [h, half], [g])
    flow.op("noop", "NoOp", None, [untyped], [])
    flow.cnx("state", [x, h]).flags = 3
    flow.cnx("empty")
    if blobs:
        lexicon = flow.blob("lexicon", "dict")
        lexicon.attrs["entries"] = 3
        lexicon.data = b"a\x00b\x00c\x00"
        lexicon.flags = 9
        flow.blob("empty", "")
    return flow


def flow_differences(a, b, version=6):
    """What differs between flows ``a`` and ``b`` among what ``version`` can hold (a list)."""
    found = []

    def check(what, x, y):
        if x != y:
            found.append(f"{what}: {x!r} != {y!r}")

    def names(objs):
        return [o.name for o in objs]

    check("flow flags", a.flags if version >= 5 else 0, b.flags)
    check("variables", list(a.vars), list(b.vars))
    for name in set(a.vars) & set(b.vars):
        u, v = a.vars[name], b.vars[name]
        check(f"{name} aliases", fileformat.stored_aliases(u), fileformat.stored_aliases(v))
        check(f"{name} dtype", u.dtype, v.dtype)
        check(f"{name} shape", u.shape, v.shape)
        var_flags = u.flags if version >= 5 else u.flags & VarFlags.REF
        check(f"{name} flags", int(var_flags), int(v.flags))
        check(f"{name} attrs", dict(u.attrs) if version >= 6 else {}, dict(v.attrs))
        check(f"{name} producer", u.producer and u.producer.name, v.producer and v.producer.name)
        check(f"{name} consumers", names(u.consumers), names(v.consumers))
        if u.data is None or v.data is None:
            check(f"{name} data", u.data, v.data)
        else:
            check(f"{name} data dtype", u.data.dtype, v.data.dtype)
            check(f"{name} data shape", u.data.shape, v.data.shape)
            check(f"{name} data bytes", u.data.tobytes(), v.data.tobytes())
    check("operations", list(a.ops), list(b.ops))
    for name in set(a.ops) & set(b.ops):
        p, q = a.ops[name], b.ops[name]
        check(f"{name} type", p.type, q.type)
        check(f"{name} inputs", names(p.inputs), names(q.inputs))
        check(f"{name} outputs", names(p.outputs), names(q.outputs))
        check(f"{name} attrs", dict(p.attrs), dict(q.attrs))
        check(f"{name} flags", int(p.flags) if version >= 5 else 0, int(q.flags))
        check(f"{name} func", p.func and p.func.name, q.func and q.func.name)
    check("functions", list(a.funcs), list(b.funcs))
    for name in set(a.funcs) & set(b.funcs):
        check(f"{name} ops", names(a.funcs[name].ops), names(b.funcs[name].ops))
        check(f"{name} flags", int(a.funcs[name].flags) if version >= 5 else 0,
              int(b.funcs[name].flags))
    check("connectors", list(a.cnxs), list(b.cnxs))
    for name in set(a.cnxs) & set(b.cnxs):
        check(f"{name} links", names(a.cnxs[name].links), names(b.cnxs[name].links))
        check(f"{name} flags", a.cnxs[name].flags if version >= 5 else 0, b.cnxs[name].flags)
    check("blobs", list(a.blobs) if version >= 4 else [], list(b.blobs))
    for name in set(a.blobs) & set(b.blobs):
        x, y = a.blobs[name], b.blobs[name]
        check(f"{name} type", x.type, y.type)
        check(f"{name} attrs", dict(x.attrs), dict(y.attrs))
        check(f"{name} data", bytes(x.data), bytes(y.data))
        check(f"{name} flags", x.flags if version >= 5 else 0, y.flags)
    return found


def flows_equal(a, b, version=6):
    """True if flows ``a`` and ``b`` agree on everything ``version`` can hold."""
    return not flow_differences(a, b, version)


# ------------------------------------------------------------------------------------------
# Round trips through the writer.

@pytest.mark.parametrize("version", VERSIONS)
def test_round_trip(version):
    flow = build_flow(blobs=version >= 4)
    data = flow.to_bytes(version)
    loaded = Flow.from_bytes(data)
    assert flow_differences(flow, loaded, version) == []
    assert loaded.to_bytes(version) == data
    assert Flow.from_bytes(loaded.to_bytes(version)).to_bytes(version) == data


@pytest.mark.parametrize("version", VERSIONS)
def test_save_and_load_path_and_file_objects(tmp_path, version):
    flow = build_flow(blobs=version >= 4)
    path = tmp_path / "model.flow"
    flow.save(path, version)
    assert path.read_bytes() == flow.to_bytes(version)
    assert os.listdir(tmp_path) == ["model.flow"]  # no temporary file left behind
    assert flows_equal(flow, Flow.load(path), version)
    assert flows_equal(flow, Flow.load(str(path)), version)
    buffer = io.BytesIO()
    fileformat.save(flow, buffer, version)
    assert buffer.getvalue() == path.read_bytes()
    buffer.seek(0)
    assert flows_equal(flow, Flow.load(buffer), version)
    assert flows_equal(flow, fileformat.load(memoryview(buffer.getvalue())), version)


def test_save_replaces_existing_file(tmp_path):
    path = tmp_path / "model.flow"
    path.write_bytes(b"old contents")
    build_flow().save(str(path))
    assert path.read_bytes() == build_flow().to_bytes()


def test_failed_save_keeps_existing_file(tmp_path):
    path = tmp_path / "model.flow"
    path.write_bytes(b"old contents")
    flow = build_flow()
    flow.vars["w"].data = np.zeros(5, dtype=np.float32)  # 5 elements for shape [3, 4]
    with pytest.raises(FlowError, match="5 elements"):
        flow.save(path)
    assert path.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["model.flow"]


def test_default_version_is_6():
    flow = build_flow()
    assert flow.to_bytes() == fileformat.to_bytes(flow, 6)
    assert struct.unpack_from("<2i", flow.to_bytes()) == (0x776F6C66, 6)
    assert flow.to_bytes()[:4] == b"flow"


def test_op_name_becomes_alias_of_first_output():
    loaded = Flow.from_bytes(build_flow().to_bytes())
    assert loaded.var_named("h") is loaded.vars["h:0"]
    assert loaded.var_named("top") is loaded.vars["top:0"]
    assert loaded.vars["top:1"].aliases == []
    assert loaded.vars["h:0"].aliases == ["h"]
    assert fileformat.stored_aliases(loaded.vars["h:0"]) == []
    assert loaded.vars["w"].aliases == ["weights", "W"]
    assert loaded.var_named("grad") is loaded.vars["g:0"]
    assert loaded.var_named("noop") is None  # no outputs


def test_op_name_alias_not_added_when_name_is_taken():
    flow = Flow()
    y = flow.var("y", "float32", [2])
    z = flow.var("z", "float32", [2])
    flow.add_alias(z, "op2")
    flow.op("y", "Identity", None, [], [y])
    flow.op("op2", "Identity", None, [y], [flow.var("out", "float32", [2])])
    loaded = Flow.from_bytes(flow.to_bytes())
    assert loaded.vars["y"].aliases == []
    assert loaded.vars["out"].aliases == []
    assert loaded.var_named("op2") is loaded.vars["z"]
    assert loaded.to_bytes() == flow.to_bytes()


def test_explicit_op_name_alias_round_trips_byte_exactly():
    """SLING writes the aliases it added on load; such a file must round-trip too."""
    flow = Flow()
    x = flow.var("x", "float32", [2])
    y = flow.var("y:0", "float32", [2])
    flow.add_alias(y, "first")
    flow.add_alias(y, "y")  # listed explicitly, before another alias
    flow.add_alias(y, "last")
    flow.op("y", "Relu", flow.func("f"), [x], [y])
    data = flow.to_bytes()
    loaded = Flow.from_bytes(data)
    assert loaded.vars["y:0"].aliases == ["first", "y", "last"]
    assert fileformat.stored_aliases(loaded.vars["y:0"]) == ["first", "y", "last"]
    assert loaded.to_bytes() == data


def test_aliases_added_after_load_are_saved():
    loaded = Flow.from_bytes(build_flow().to_bytes())
    h = loaded.vars["h:0"]
    loaded.add_alias(h, "hidden")
    assert fileformat.stored_aliases(h) == ["hidden"]
    again = Flow.from_bytes(loaded.to_bytes())
    assert again.vars["h:0"].aliases == ["hidden", "h"]
    assert again.to_bytes() == loaded.to_bytes()


def test_implicit_alias_is_written_once_its_op_is_gone():
    loaded = Flow.from_bytes(build_flow().to_bytes())
    h = loaded.vars["h:0"]
    loaded.delete_op(loaded.ops["h"])
    assert fileformat.stored_aliases(h) == ["h"]
    assert Flow.from_bytes(loaded.to_bytes()).var_named("h") is not None


def test_loaded_data_are_writable_copies():
    data = bytearray(build_flow().to_bytes())
    loaded = Flow.from_bytes(data)
    w = loaded.vars["w"]
    assert w.data.flags.writeable and w.data.flags.c_contiguous
    assert not np.shares_memory(w.data, np.frombuffer(data, np.uint8))
    np.testing.assert_array_equal(w.data, np.arange(12, dtype=np.float32).reshape(3, 4))
    w.data[0, 0] = 100
    data[:] = bytes(len(data))
    assert loaded.vars["idx"].data[0, 1] == -2
    assert loaded.vars["mask"].data.dtype == np.bool_
    assert loaded.vars["half"].data.dtype == np.float16
    assert loaded.blobs["lexicon"].data == b"a\x00b\x00c\x00"


def test_load_into_existing_flow():
    data = build_flow().to_bytes()
    flow = Flow()
    flow.batch_size = 8
    assert flow.load(data) is flow
    assert flows_equal(build_flow(), flow)
    assert flow.batch_size == 8
    assert flow.vars["x"].shape == (-1, 3)  # dynamic dimensions are kept, not batch-sized
    with pytest.raises(FlowError, match="empty flow"):
        flow.load(data)
    with pytest.raises(FlowError, match="empty flow"):
        fileformat.from_bytes(data, flow)


def test_failed_load_leaves_flow_empty():
    data = build_flow().to_bytes()
    flow = Flow()
    with pytest.raises(FlowFormatError):
        flow.load(data[:-3])
    assert not (flow.vars or flow.ops or flow.funcs or flow.cnxs or flow.blobs or flow.flags)
    assert flow.var_named("weights") is None
    flow.load(data)
    assert flows_equal(build_flow(), flow)


def test_load_and_from_bytes_are_usable_on_the_class():
    data = build_flow().to_bytes()
    assert isinstance(Flow.load(data), Flow)
    assert isinstance(Flow.from_bytes(data), Flow)
    assert "load" in Flow.load.__name__ and "empty" in Flow.load.__doc__


@pytest.mark.parametrize("source", [3, 4, 5, 6])
@pytest.mark.parametrize("target", [3, 4, 5, 6])
def test_convert_between_versions(source, target):
    """Loading, saving as another version and reloading keeps what both versions hold."""
    blobs = min(source, target) >= 4
    original = build_flow(blobs=blobs)
    loaded = Flow.from_bytes(original.to_bytes(source))
    converted = Flow.from_bytes(loaded.to_bytes(target))
    assert flow_differences(original, converted, min(source, target)) == []
    assert converted.to_bytes(target) == loaded.to_bytes(target)


def test_old_versions_drop_what_they_cannot_hold():
    flow = build_flow(blobs=False)
    v4 = Flow.from_bytes(flow.to_bytes(4))
    assert v4.flags == 0 and v4.vars["h:0"].attrs == {} and v4.vars["w"].flags == 0
    assert v4.vars["x"].flags == VarFlags.REF  # REF survives as "&float32"
    assert v4.ops["h"].flags == 0 and v4.funcs["main"].flags == 0 and v4.cnxs["state"].flags == 0
    assert b"&float32" in flow.to_bytes(4)
    assert b"&float32" not in flow.to_bytes(5)
    v5 = Flow.from_bytes(flow.to_bytes(5))
    assert v5.vars["h:0"].attrs == {} and v5.vars["w"].learnable and v5.flags == 5


def test_version_3_cannot_hold_blobs():
    with pytest.raises(FlowError, match="version 3 cannot hold blobs.*lexicon"):
        build_flow().to_bytes(3)


def test_min_sizes_match_the_smallest_objects():
    for version in VERSIONS:
        sizes = fileformat.min_sizes(version)
        base = len(Flow().to_bytes(version))
        for kind, make in [("var", lambda f: f.var("", "")),
                           ("op", lambda f: f.op("", "")),
                           ("func", lambda f: f.func("")),
                           ("cnx", lambda f: f.cnx("")),
                           ("blob", lambda f: f.blob(""))]:
            if kind == "blob" and version < 4:
                continue
            flow = Flow()
            make(flow)
            assert len(flow.to_bytes(version)) - base == sizes[kind], (version, kind)


# ------------------------------------------------------------------------------------------
# Hand-built files, written the way SLING writes them (independent of the writer).

def i32(*values):
    return struct.pack(f"<{len(values)}i", *values)


def u32(value):
    return struct.pack("<I", value)


def u64(value):
    return struct.pack("<Q", value)


def s(text):
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return i32(len(raw)) + raw


def strs(*texts):
    return i32(len(texts)) + b"".join(s(t) for t in texts)


def attr_list(pairs):
    return i32(len(pairs)) + b"".join(s(k) + s(v) for k, v in pairs)


def flags(version, value):
    return u32(value) if version >= 5 else b""


def var(version, fl, name, aliases, dtype, shape, attrs=(), data=b""):
    return (flags(version, fl) + s(name) + strs(*aliases) + s(dtype) + i32(len(shape), *shape)
            + (attr_list(attrs) if version >= 6 else b"") + u64(len(data)) + data)


def op(version, fl, name, type_, inputs, outputs, attrs=()):
    return (flags(version, fl) + s(name) + s(type_) + strs(*inputs) + strs(*outputs)
            + attr_list(attrs))


def named_list(version, fl, name, members):
    return flags(version, fl) + s(name) + strs(*members)


def blob(version, fl, name, type_, attrs, data):
    return flags(version, fl) + s(name) + s(type_) + attr_list(attrs) + u64(len(data)) + data


def flow_file(version, vars=(), ops=(), funcs=(), cnxs=(), blobs=(), fl=0, magic=0x776F6C66):
    out = i32(magic, version) + flags(version, fl)
    for items in (vars, ops, funcs, cnxs) + ((blobs,) if version >= 4 else ()):
        out += i32(len(items)) + b"".join(items)
    return out


def sling_file(version):
    """A file as SLING writes it, with every kind of object and field."""
    v = version
    weights = np.array([[1, 2], [3, 4]], dtype="<f4").tobytes()
    ref = "&float32" if v < 5 else "float32"
    return flow_file(
        v,
        vars=[
            var(v, VarFlags.LEARNABLE, "w", ["weights"], "float32", [2, 2],
                [("init", "normal"), ("scale", "0.5")], weights),
            var(v, VarFlags.REF | VarFlags.IN | (1 << 31), "x", [], ref, [-1, 2]),
            var(v, VarFlags.OUT, "y:0", [], "float32", [-1, 2]),
            var(v, 0, "count", [], "int64", [], data=u64(7)),
            var(v, 0, "t", [], "", [0, 5]),
            var(v, 0, "b16", [], "bfloat16", [3], data=b"\x80\x3f\x00\x40\x40\x40"),
        ],
        ops=[op(v, OpFlags.NOGRADIENT, "y", "MatMul", ["x", "w"], ["y:0"],
                [("transpose_b", "1"), ("name", "ü")]),
             op(v, 0, "z", "Shape", ["y:0", "count"], ["t"])],
        funcs=[named_list(v, FuncFlags.TRAINING | FuncFlags.BACKPROP, "f", ["y", "z"]),
               named_list(v, 0, "g", [])],
        cnxs=[named_list(v, 2, "c", ["x", "y:0"])],
        blobs=[blob(v, 4, "lex", "dict", [("size", "3")], b"abc"), blob(v, 0, "nil", "", [], b"")],
        fl=0x55,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_hand_built_file(version):
    data = sling_file(version)
    flow = Flow.from_bytes(data)
    assert list(flow.vars) == ["w", "x", "y:0", "count", "t", "b16"]
    w, x, y, count, t, b16 = flow.vars.values()
    assert (w.dtype, w.shape, w.aliases) == ("float32", (2, 2), ["weights"])
    np.testing.assert_array_equal(w.data, [[1, 2], [3, 4]])
    assert w.data.dtype == np.float32
    assert (x.dtype, x.shape, x.ref, x.constant) == ("float32", (-1, 2), True, False)
    assert y.aliases == ["y"] and flow.var_named("y") is y
    assert t.aliases == ["z"] and t.dtype == "" and t.shape == (0, 5)
    assert count.data.dtype == np.int64 and count.data.shape == () and int(count.data) == 7
    assert b16.dtype == "bfloat16" and b16.data.dtype.name == "bfloat16"  # ml_dtypes'
    assert b16.data.view(np.uint16).tolist() == [0x3F80, 0x4000, 0x4040]
    assert b16.data.astype(np.float32).tolist() == [1, 2, 3]
    if version >= 5:
        assert flow.flags == 0x55
        assert w.flags == VarFlags.LEARNABLE and w.learnable
        assert int(x.flags) == VarFlags.REF | VarFlags.IN | (1 << 31)
        assert y.is_output and flow.ops["y"].nogradient
        assert flow.funcs["f"].training and flow.funcs["f"].backprop
        assert flow.cnxs["c"].flags == 2 and flow.blobs["lex"].flags == 4
    else:
        assert flow.flags == 0 and w.flags == 0 and x.flags == VarFlags.REF
    assert dict(w.attrs) == ({"init": "normal", "scale": "0.5"} if version >= 6 else {})
    matmul = flow.ops["y"]
    assert matmul.type == "MatMul" and matmul.inputs == [x, w] and matmul.outputs == [y]
    assert dict(matmul.attrs) == {"transpose_b": "1", "name": "ü"}
    assert matmul.attrs.get_bool("transpose_b") is True
    assert x.consumers == [matmul] and w.consumers == [matmul] and y.producer is matmul
    assert y.consumers == [flow.ops["z"]] and t.producer is flow.ops["z"]
    assert [o.name for o in flow.funcs["f"].ops] == ["y", "z"] and flow.funcs["g"].ops == []
    assert matmul.func is flow.funcs["f"]
    assert flow.cnxs["c"].links == [x, y]
    if version >= 4:
        assert list(flow.blobs) == ["lex", "nil"]
        lex = flow.blobs["lex"]
        assert (lex.type, dict(lex.attrs), lex.data) == ("dict", {"size": "3"}, b"abc")
    else:
        assert flow.blobs == {}
    assert flow.to_bytes(version) == data


@pytest.mark.parametrize("version", VERSIONS)
def test_hand_built_file_listing_op_name_alias(version):
    """SLING saves the op-name aliases its reader added: such files round-trip as they are."""
    v = version
    data = flow_file(v, vars=[var(v, 0, "x", [], "float32", [2]),
                              var(v, 0, "y:0", ["y", "out"], "float32", [2]),
                              var(v, 0, "z:0", ["zed", "z"], "float32", [2])],
                     ops=[op(v, 0, "y", "Relu", ["x"], ["y:0"]),
                          op(v, 0, "z", "Relu", ["y:0"], ["z:0"])])
    flow = Flow.from_bytes(data)
    assert flow.vars["y:0"].aliases == ["y", "out"] and flow.vars["z:0"].aliases == ["zed", "z"]
    assert flow.ops["z"].inputs == [flow.vars["y:0"]]
    assert flow.to_bytes(version) == data


@pytest.mark.parametrize("version", VERSIONS)
def test_type_spellings_are_kept(version):
    v = version
    data = flow_file(v, vars=[var(v, 0, "a", [], "float", [1], data=b"\0\0\x80\x3f"),
                              var(v, 0, "b", [], "int", []),
                              var(v, 0, "c", [], "double", []),
                              var(v, 0, "d", [], "void", []),
                              var(v, 0, "e", [], "", []),
                              var(v, 0, "f", [], "&int", [])])
    flow = Flow.from_bytes(data)
    assert [x.dtype for x in flow.vars.values()] == ["float32", "int32", "float64", "", "", "int32"]
    assert flow.vars["a"].data.tolist() == [1.0]
    assert flow.vars["f"].ref
    if version < 5:
        assert flow.to_bytes(version) == data
    flow.vars["b"].dtype = "int64"  # a changed type is written canonically
    flow.vars["d"].dtype = "float32"
    again = flow.to_bytes(version)
    assert s("int64") in again and s("void") not in again
    assert s("float") in again and s("double") in again
    assert again.count(s("int")) == (1 if version >= 5 else 0)  # "&int" is written "int" in v5


@pytest.mark.parametrize("version", [5, 6])
def test_ref_prefix_accepted_in_new_versions(version):
    data = flow_file(version, vars=[var(version, 0, "x", [], "&float32", [2])])
    x = Flow.from_bytes(data).vars["x"]
    assert x.ref and x.dtype == "float32"
    # Written the v5 way: REF in the flags word and the type without "&".
    assert Flow.from_bytes(data).to_bytes(version) == flow_file(
        version, vars=[var(version, VarFlags.REF, "x", [], "float32", [2])])


def test_alias_may_be_another_variables_name():
    """Flow.add_alias allows it, so the file may hold it whichever variable comes first."""
    flow = Flow()
    a = flow.var("a", "float32", [])
    b = flow.var("b", "float32", [])
    flow.add_alias(a, "b")
    flow.add_alias(b, "a")
    flow.add_alias(b, "shared")
    flow.add_alias(a, "shared")
    data = flow.to_bytes()
    loaded = Flow.from_bytes(data)
    assert loaded.vars["a"].aliases == ["b", "shared"]
    assert loaded.vars["b"].aliases == ["a", "shared"]
    assert loaded.var_named("b") is loaded.vars["b"]
    # A shared alias finds the first variable in the file that lists it, as in SLING.
    assert loaded.var_named("shared") is loaded.vars["a"]
    assert loaded.to_bytes() == data


def test_names_are_looked_up_by_alias_too():
    v = 6
    data = flow_file(v, vars=[var(v, 0, "a:0", ["a0"], "float32", []),
                              var(v, 0, "b:0", [], "float32", []),
                              var(v, 0, "c:0", [], "float32", [])],
                     ops=[op(v, 0, "b", "Neg", ["a0"], ["b:0"]),
                          op(v, 0, "c", "Neg", ["b"], ["c:0"])],
                     cnxs=[named_list(v, 0, "k", ["a0", "c"])])
    flow = Flow.from_bytes(data)
    a, b, c = flow.vars.values()
    assert flow.ops["b"].inputs == [a] and flow.ops["c"].inputs == [b]
    assert flow.cnxs["k"].links == [a, c]


@pytest.mark.parametrize("dtype, raw_dtype, size", [
    ("string", np.uint64, 8), ("qint8", np.uint8, 1), ("quint16", np.uint16, 2),
    ("qint32", np.uint32, 4), ("resource", np.uint8, 1)])
def test_types_numpy_lacks_keep_raw_bits(dtype, raw_dtype, size):
    raw = bytes(range(2 * size))
    data = flow_file(6, vars=[var(6, 0, "v", [], dtype, [2, 1], data=raw)])
    v = Flow.from_bytes(data).vars["v"]
    assert v.dtype == dtype and v.data.dtype == raw_dtype and v.data.shape == (2, 1)
    assert Flow.from_bytes(data).to_bytes() == data


def test_empty_constant_reads_as_no_constant():
    flow = Flow()
    flow.var("e", data=np.zeros((0, 3), dtype=np.float32))
    loaded = Flow.from_bytes(flow.to_bytes())
    assert loaded.vars["e"].shape == (0, 3) and loaded.vars["e"].data is None
    assert loaded.to_bytes() == flow.to_bytes()


# ------------------------------------------------------------------------------------------
# Malformed files: each fault raises FlowFormatError naming it and its offset.

HEADER6 = i32(0x776F6C66, 6, 0)


def load_error(data):
    with pytest.raises(FlowFormatError) as info:
        Flow.from_bytes(data)
    error = info.value
    assert isinstance(error, MyelinError) and isinstance(error, ValueError)
    assert error.offset is not None and f"offset {error.offset}" in str(error)
    return error


def test_error_bad_magic():
    error = load_error(b"wolf" + i32(6, 0, 0, 0, 0, 0, 0))
    assert "not a flow file" in str(error) and error.offset == 0


@pytest.mark.parametrize("version", [0, 2, 7, -1, 1 << 30])
def test_error_unknown_version(version):
    error = load_error(i32(0x776F6C66, version) + bytes(24))
    assert f"unsupported flow file version {version}" in str(error) and error.offset == 4


@pytest.mark.parametrize("data", [b"", b"fl", b"flow", b"flow\x06\x00"])
def test_error_truncated_header(data):
    assert "unexpected end of file" in str(load_error(data))


def test_error_truncated_everywhere():
    for version in VERSIONS:
        data = sling_file(version)
        for end in range(len(data)):
            error = load_error(data[:end])
            assert "unexpected end of file" in str(error) or "left in the file" in str(error)
            assert error.offset <= end


def test_error_truncated_constant_data():
    error = load_error(HEADER6 + i32(1) + var(6, 0, "w", [], "float32", [4], data=bytes(16))[:-4])
    assert "data of variable 'w' has 16 bytes, only 12 left" in str(error)


def test_error_string_longer_than_file():
    data = HEADER6 + i32(1) + i32(0) + i32(1000) + b"name" + bytes(40)
    error = load_error(data)
    assert "length of variable name 1000" in str(error) and "only 44 left" in str(error)
    assert error.offset == 20


@pytest.mark.parametrize("position, what", [(12, "variable count"), (16, "operation count"),
                                            (20, "function count"), (24, "connector count"),
                                            (28, "blob count")])
def test_error_negative_count(position, what):
    data = bytearray(HEADER6 + i32(0, 0, 0, 0, 0))
    data[position:position + 4] = i32(-1)
    error = load_error(bytes(data))
    assert f"negative {what} -1" in str(error) and error.offset == position


def test_error_negative_string_length():
    error = load_error(HEADER6 + i32(1, 0, -5) + bytes(40))
    assert "negative length of variable name -5" in str(error)


@pytest.mark.parametrize("count_at", [12, 16, 20, 24, 28])
def test_error_huge_count_fails_at_once(count_at):
    data = bytearray(HEADER6 + i32(0, 0, 0, 0, 0) + bytes(10))
    data[count_at:count_at + 4] = i32(2**31 - 1)
    start = time.perf_counter()
    error = load_error(bytes(data))
    assert time.perf_counter() - start < 0.1
    assert "2147483647 needs at least" in str(error) and error.offset == count_at


SECTIONS = ["vars", "ops", "funcs", "cnxs", "blobs"]


@pytest.mark.parametrize("section, prefix, what", [
    ("vars", u32(0) + s("v"), "alias count of variable 'v'"),
    ("vars", u32(0) + s("v") + strs() + s("float32"), "rank of variable 'v'"),
    ("vars", u32(0) + s("v") + strs() + s("float32") + i32(0), "attribute count of variable 'v'"),
    ("ops", u32(0) + s("o") + s("T"), "input count of operation 'o'"),
    ("ops", u32(0) + s("o") + s("T") + strs(), "output count of operation 'o'"),
    ("ops", u32(0) + s("o") + s("T") + strs() + strs(), "attribute count of operation 'o'"),
    ("funcs", u32(0) + s("f"), "operation count of function 'f'"),
    ("cnxs", u32(0) + s("c"), "link count of connector 'c'"),
    ("blobs", u32(0) + s("b") + s(""), "attribute count of blob 'b'"),
])
def test_error_huge_inner_count(section, prefix, what):
    data = HEADER6 + i32(0) * SECTIONS.index(section) + i32(1) + prefix + i32(2**31 - 1)
    error = load_error(data + bytes(30))
    assert f"{what} 2147483647 needs at least" in str(error)
    assert error.offset == len(data) - 4


def test_error_huge_data_size():
    item = var(6, 0, "v", [], "float32", [])[:-8] + u64(2**64 - 1)
    error = load_error(HEADER6 + i32(1) + item + i32(0, 0, 0, 0))
    assert f"data of variable 'v' has {2**64 - 1} bytes, only 16 left" in str(error)
    item = blob(6, 0, "b", "", [], b"")[:-8] + u64(2**63)
    assert "data of blob 'b' has" in str(load_error(HEADER6 + i32(0, 0, 0, 0, 1) + item))


def test_error_unknown_dtype():
    item = var(6, 0, "v", ["alias"], "float33", [2])
    error = load_error(HEADER6 + i32(1) + item + i32(0, 0, 0, 0))
    assert "variable 'v' has unknown data type 'float33'" in str(error)
    assert error.offset == len(HEADER6) + 4 + 4 + len(s("v")) + len(strs("alias"))
    assert "unknown data type 'uint64x'" in str(
        load_error(HEADER6 + i32(1) + var(6, 0, "v", [], "&uint64x", []) + i32(0, 0, 0, 0)))


def test_error_dimension_below_minus_one():
    error = load_error(HEADER6 + i32(1) + var(6, 0, "v", [], "float32", [2, -2]) + i32(0, 0, 0, 0))
    assert "variable 'v' has invalid dimension -2" in str(error)


@pytest.mark.parametrize("dtype, shape, nbytes, message", [
    ("float32", [2, 2], 12, "has 12 bytes of data, which do not fit float32 shape [2, 2]"),
    ("float32", [2, 2], 20, "has 20 bytes of data, which do not fit"),
    ("float64", [], 4, "do not fit float64 shape []"),
    ("int8", [0, 4], 4, "do not fit int8 shape [0, 4]"),
    ("float32", [2**31 - 1] * 8, 8, "do not fit"),
    ("", [2], 8, "constant 'v' has data but no type"),
    ("void", [2], 8, "constant 'v' has data but no type"),
    ("float32", [-1, 2], 8, "constant 'v' has dynamic dimensions [-1, 2]"),
])
def test_error_constant_data_does_not_match(dtype, shape, nbytes, message):
    item = var(6, 0, "v", [], dtype, shape, data=bytes(nbytes))
    assert message in str(load_error(HEADER6 + i32(1) + item + i32(0, 0, 0, 0)))


def simple_vars(*names):
    return [var(6, 0, name, [], "float32", [1]) for name in names]


@pytest.mark.parametrize("ops, funcs, cnxs, missing, message", [
    ([op(6, 0, "o", "T", ["a", "nope"], [])], [], [], "nope",
     "operation 'o' has unknown input 'nope'"),
    ([op(6, 0, "o", "T", [], ["b", "gone"])], [], [], "gone",
     "operation 'o' has unknown output 'gone'"),
    ([op(6, 0, "o", "T", [], [])], [named_list(6, 0, "f", ["o", "p"])], [], "p",
     "function 'f' has unknown operation 'p'"),
    ([], [], [named_list(6, 0, "c", ["a", "zz"])], "zz",
     "connector 'c' has unknown link 'zz'"),
])
def test_error_unknown_reference(ops, funcs, cnxs, missing, message):
    data = flow_file(6, vars=simple_vars("a", "b"), ops=ops, funcs=funcs, cnxs=cnxs)
    error = load_error(data)
    assert message in str(error)
    assert data[error.offset:error.offset + 4 + len(missing)] == s(missing)


@pytest.mark.parametrize("kwargs, message", [
    (dict(vars=simple_vars("a", "a")), "duplicate name: variable a already exists"),
    (dict(vars=[var(6, 0, "a", ["b", "b"], "float32", [])], ), "lists alias 'b' twice"),
    (dict(vars=[var(6, 0, "a", ["a"], "float32", [])], ), "lists its own name as an alias"),
    (dict(ops=[op(6, 0, "o", "T", [], []), op(6, 0, "o", "U", [], [])]),
     "duplicate name: operation o already exists"),
    (dict(funcs=[named_list(6, 0, "f", []), named_list(6, 0, "f", [])]),
     "duplicate name: function f already exists"),
    (dict(cnxs=[named_list(6, 0, "c", []), named_list(6, 0, "c", [])]),
     "duplicate name: connector c already exists"),
    (dict(blobs=[blob(6, 0, "b", "", [], b""), blob(6, 0, "b", "", [], b"")]),
     "duplicate name: blob b already exists"),
    (dict(vars=simple_vars("a"),
          ops=[op(6, 0, "o", "T", [], ["a"]), op(6, 0, "p", "T", [], ["a"])]),
     "variable a already has producer o"),
    (dict(vars=simple_vars("a"), ops=[op(6, 0, "o", "T", [], ["a", "a"])]),
     "variable a already has producer o"),
    (dict(ops=[op(6, 0, "o", "T", [], [])], funcs=[named_list(6, 0, "f", ["o"]),
                                                   named_list(6, 0, "g", ["o"])]),
     "operation 'o' of function 'g' already belongs to function 'f'"),
    (dict(ops=[op(6, 0, "o", "T", [], [])], funcs=[named_list(6, 0, "f", ["o", "o"])]),
     "operation 'o' of function 'f' already belongs to function 'f'"),
    (dict(vars=simple_vars("a"), cnxs=[named_list(6, 0, "c", ["a", "a"])]),
     "connector 'c' links variable 'a' twice"),
    (dict(ops=[op(6, 0, "o", "T", [], [], [("k", "1"), ("k", "2")])]),
     "operation 'o' has attribute 'k' twice"),
    (dict(vars=[var(6, 0, "v", [], "float32", [], [("k", "1"), ("k", "1")])]),
     "variable 'v' has attribute 'k' twice"),
    (dict(blobs=[blob(6, 0, "b", "", [("k", ""), ("k", "")], b"")]),
     "blob 'b' has attribute 'k' twice"),
])
def test_error_duplicates(kwargs, message):
    assert message in str(load_error(flow_file(6, **kwargs)))


def test_error_invalid_utf8():
    data = flow_file(6, vars=[var(6, 0, b"ab\xffc", [], "float32", [])])
    error = load_error(data)
    assert "variable name is not valid UTF-8" in str(error)
    assert data[error.offset] == 0xFF
    error = load_error(flow_file(6, ops=[op(6, 0, "o", b"\xed\xa0\x80", [], [])]))
    assert "type of operation 'o' is not valid UTF-8" in str(error)


def test_error_trailing_garbage():
    for version in VERSIONS:
        data = sling_file(version)
        error = load_error(data + b"\0")
        assert "1 bytes of trailing garbage" in str(error) and error.offset == len(data)


# ------------------------------------------------------------------------------------------
# Errors when writing.

@pytest.mark.parametrize("version", [2, 7, -1, "6", 6.0, None, True])
def test_write_error_unknown_version(version):
    with pytest.raises(FlowError, match="cannot write flow file version"):
        build_flow().to_bytes(version)


def test_write_errors_name_the_problem():
    def error(change):
        flow = build_flow()
        change(flow)
        with pytest.raises(FlowError) as info:
            flow.to_bytes()
        assert isinstance(info.value, ValueError)
        return str(info.value)

    assert "variable name must be a str, not int" in error(
        lambda f: setattr(f.vars["w"], "name", 5))
    assert "alias of variable 'w' must be a str" in error(
        lambda f: f.vars["w"].aliases.append(b"raw"))
    assert "attribute 'x' of operation 'h' must be a str" in error(
        lambda f: dict.__setitem__(f.ops["h"].attrs, "x", 1))
    assert "cannot be encoded as UTF-8" in error(lambda f: setattr(f.ops["h"], "type", "\udc80"))
    assert "constant 'w' of type float32 holds float64 data" in error(
        lambda f: setattr(f.vars["w"], "data", np.zeros((3, 4))))
    assert "constant 'w' has 5 elements but shape [3, 4] needs 12" in error(
        lambda f: setattr(f.vars["w"], "data", np.zeros(5, np.float32)))
    assert "constant 'w' has dynamic dimensions" in error(
        lambda f: setattr(f.vars["w"], "shape", (-1, 4)))
    assert "variable 'x' has invalid dimension -3" in error(
        lambda f: setattr(f.vars["x"], "shape", (-3,)))
    assert "unknown or non-canonical data type 'float'" in error(
        lambda f: setattr(f.vars["x"], "dtype", "float"))
    assert "flags of variable 'x' must be an unsigned 32-bit integer" in error(
        lambda f: setattr(f.vars["x"], "flags", -1))
    assert "input of operation 'h' 'x' is not registered under its name" in error(
        lambda f: f.ops["h"].inputs.__setitem__(0, Flow().var("x")))
    assert "variable 'renamed' is not registered under its name" in error(
        lambda f: setattr(f.vars["w"], "name", "renamed"))
    assert "operation 'h' lists output 'h:0', whose producer is None" in error(
        lambda f: setattr(f.vars["h:0"], "producer", None))
    assert "function 'main' lists operation 'grad', which belongs to 'train'" in error(
        lambda f: f.funcs["main"].ops.append(f.ops["grad"]))
    assert "function 'main' lists an operation twice" in error(
        lambda f: f.funcs["main"].ops.append(f.ops["h"]))
    assert "connector 'state' links a variable twice" in error(
        lambda f: f.cnxs["state"].links.append(f.vars["x"]))
    assert "repeated aliases" in error(lambda f: f.vars["w"].aliases.append("w"))
    assert "data of blob 'lexicon' must be bytes-like, not str" in error(
        lambda f: setattr(f.blobs["lexicon"], "data", "text"))


def test_write_accepts_any_buffer_as_blob_data():
    flow = Flow()
    flow.blob("b").data = np.arange(4, dtype="<u2")[::2]  # not contiguous
    assert Flow.from_bytes(flow.to_bytes()).blobs["b"].data == b"\0\0\2\0"
    flow.blobs["b"].data = bytearray(b"xyz")
    assert Flow.from_bytes(flow.to_bytes()).blobs["b"].data == b"xyz"
