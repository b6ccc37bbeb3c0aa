"""Fuzz the ``.flow`` path: mutated flow files loaded, compiled and computed.

    python scripts/fuzz_flow.py                       # 10,000 cases, 2 workers
    python scripts/fuzz_flow.py --cases 500 --seed 7  # another sample
    python scripts/fuzz_flow.py --replay fuzz-out/flow/123-foreign-KeyError.flow

The corpus is real flows built with the Builder: the guide's MLP, a CNN, a mix of shape, index
and reduction ops, integer and boolean math, a learnable variable with Assign, and control flow
(recursion, a while loop, branches with free variables, function values, tuples). Each case
mutates one of them, in structure (names, shapes, dtypes, constant data, flags, attributes, op
types, links, functions and signatures, then saved with the writer) or in bytes (bit flips,
byte replacements, insertions, deletions, huge or negative counts), or both. A case loads the
file, compiles it (``myelin.control.compile`` when it has control flow) and computes every
cell (or every function with a signature) on random inputs. Outcomes are counted as
:mod:`fuzzing` says; every case that ends in a foreign exception, a crash, a hang or running out
of memory is saved into ``--out`` for ``--replay``.
"""

import os
import random
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzzing  # noqa: E402

HUGE = 2**31 - 1
DIMS = (0, -1, 1, 2, 3, 7, 64, 100_000, HUGE)
DTYPES = ("float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool",
          "", "bfloat16", "string", "function", "tuple")
ATTRIBUTE_VALUES = ("-1", "0", "1", "2", "3", "7", "-7", "2147483647", "-2147483648",
                    "99999999999999999999", "1.5", "nan", "", "abc", "[]", "[1,2]", "[-1]",
                    "[0,1,2,3]", "[1,1,1,1]", "[2147483647,1]", "1x2", "true", "[[],[]]",
                    "{\"tuple\": []}", "{\"tuple\": [\"float32\"]}", "[[\"float32\"],[]]",
                    "{}", "[1", "\u00e9")
ATTRIBUTE_NAMES = ("axis", "axes", "keepdims", "perm", "shape", "repeats", "pads", "strides",
                   "kernel_shape", "dilations", "group", "k", "depth", "dtype", "expr", "N",
                   "index", "function", "then_branch", "else_branch", "function_type",
                   "tuple_type", "sizes", "scales", "mode", "transpose_a", "transpose_b",
                   "input", "output", "batch_dims", "reduction", "direction")


# The corpus.
def corpus():
    """The real flows mutated: name -> Flow."""
    import myelin

    flows = {}
    rng = np.random.default_rng(0)

    def build(name, make):
        flow = myelin.Flow()
        make(flow)
        flows[name] = flow

    def mlp(flow):
        f = myelin.Builder(flow, "f")
        x = f.var("x", myelin.DT_FLOAT, [1, 16])
        w = f.array("W", rng.random((16, 32), np.float32))
        b = f.array("b", rng.random(32, np.float32))
        f.softmax(f.relu(f.add(f.matmul(x, w), b)), name="y")

    def cnn(flow):
        f = myelin.Builder(flow, "cnn")
        x = f.var("x", myelin.DT_FLOAT, [1, 3, 8, 8])
        w = f.array("w", rng.random((4, 3, 3, 3), np.float32))
        y = f.op("Conv", [x, w], attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
        y = f.op("MaxPool", [f.relu(y)], attrs={"kernel_shape": [2, 2], "strides": [2, 2]})
        y = f.reshape(f.op("GlobalAveragePool", [y]), [1, 4])
        f.matmul(y, f.array("fc", rng.random((4, 3), np.float32)), name="logits")

    def shapes(flow):
        f = myelin.Builder(flow, "shapes")
        x = f.var("x", myelin.DT_FLOAT, [4, 6])
        ids = f.var("ids", myelin.DT_INT32, [3])
        t = f.transpose(x, [1, 0])
        parts = f.split(t, 2, axis=0)
        c = f.concat([parts[0], parts[1]], axis=1)
        s = f.slice(c, [0, 1], [2, 3])
        g = f.gather(x, ids)
        f.sum(f.reduce("Max", g, axis=1), name="gsum")
        f.op("CumSum", [s], attrs={"axis": 1}, name="cum")
        f.argmax(x, axis=1, name="best")
        f.op("Tile", [s], attrs={"repeats": [2, 1]}, name="tiled")
        f.op("Pad", [x], attrs={"pads": [1, 0, 1, 0]}, name="padded")
        f.op("TopK", [x], attrs={"k": 2}, name="top")
        f.layer_norm(x, name="normed")

    def integers(flow):
        f = myelin.Builder(flow, "ints")
        a = f.var("a", myelin.DT_INT32, [5])
        b = f.var("b", myelin.DT_INT32, [5])
        m = f.op("Mod", [a, f.add(b, f.const(np.int32(7)))])
        less = f.less(a, b)
        f.cond(less, m, f.mul(a, b), name="picked")
        f.op("OneHot", [f.op("Abs", [a]), f.const(np.array([0.0, 1.0], np.float32))],
             attrs={"depth": 4}, name="onehot")
        f.cast(f.op("Not", [less]), myelin.DT_FLOAT, name="flags")

    def training(flow):
        f = myelin.Builder(flow, "train")
        x = f.var("x", myelin.DT_FLOAT, [2, 4])
        w = f.var("w", myelin.DT_FLOAT, [4, 4])
        w.learnable = True
        y = f.tanh(f.matmul(x, w), name="y")
        f.assign(w, f.add(w, f.const(np.full((4, 4), 0.01, np.float32))))
        f.mean(y, name="m")

    def recursion(flow):
        f = myelin.Builder(flow, "fact")
        n = f.param("n", "float32")
        acc = f.param("acc", "float32", [3])
        f.returns(("float32", [3]))
        f.ret(f.if_else(f.less_equal(n, 1.0), lambda b: acc,
                        lambda b: b.call("fact", b.sub(n, 1.0), b.mul(acc, n))))

    def loop(flow):
        g = myelin.Builder(flow, "count")
        limit = g.param("limit", "int32")
        step = g.param("step", "float32", [2])
        total, i = g.while_loop(lambda b, i, s: b.less(i, limit),
                                lambda b, i, s: (b.add(i, 1), b.add(s, step)),
                                [g.const(0, "int32"), g.const(np.zeros(2, np.float32))])
        g.ret(i, total)

    def branches(flow):
        sq = myelin.Builder(flow, "square")
        v = sq.param("v", "float32", [2])
        sq.ret(sq.mul(v, v))
        h = myelin.Builder(flow, "higher")
        fn = h.function_param("g", "square")
        x = h.param("x", "float32", [2])
        flag = h.param("flag", "bool")
        once = h.call(fn, x)
        chosen = h.if_else(flag, lambda b: b.call(fn, once), lambda b: b.add(once, x))
        t = h.tuple(chosen, h.partial("square"))
        h.ret(h.tuple_get(t, 0), h.call(h.tuple_get(t, 1), x))

    for name, make in [("mlp", mlp), ("cnn", cnn), ("shapes", shapes), ("integers", integers),
                       ("training", training), ("recursion", recursion), ("loop", loop),
                       ("branches", branches)]:
        build(name, make)
    return flows


def corpus_files():
    """The corpus as files: (name, bytes) for every version that can hold each flow."""
    files = []
    for name, flow in corpus().items():
        signed = any(func.results is not None for func in flow.funcs.values())
        for version in (4, 5, 6) if signed else (3, 4, 5, 6):
            files.append((f"{name}-v{version}", flow.to_bytes(version)))
    return files


# Mutations.
def _pick(rng, items):
    items = list(items)
    return rng.choice(items) if items else None


def mutate_structure(flow, rng):
    """Change one thing in ``flow`` through its API; returns what was done."""
    from myelin.ops import registry

    var = _pick(rng, flow.vars.values())
    op = _pick(rng, flow.ops.values())
    func = _pick(rng, flow.funcs.values())
    kind = rng.randrange(16)
    if kind == 0 and var is not None:
        dims = list(var.shape)
        if dims and rng.random() < 0.7:
            dims[rng.randrange(len(dims))] = rng.choice(DIMS)
        elif dims and rng.random() < 0.5:
            dims.pop()
        else:
            dims.append(rng.choice(DIMS))
        var.shape = tuple(dims)
        if var.data is not None and rng.random() < 0.5:
            var.data = None
        return f"shape of {var.name} -> {dims}"
    if kind == 1 and var is not None:
        var.dtype = rng.choice(DTYPES)
        var.data = None if var.data is not None and rng.random() < 0.5 else var.data
        return f"dtype of {var.name} -> {var.dtype!r}"
    if kind == 2 and var is not None:
        if var.data is not None and rng.random() < 0.5:
            var.data = None
            return f"data of {var.name} removed"
        shape = tuple(rng.choice((0, 1, 2, 3)) for _ in range(rng.randrange(3)))
        var.data = np.asarray(np.random.default_rng(rng.randrange(1 << 30)).random(shape))
        var.dtype, var.shape = "float64", shape
        return f"data of {var.name} -> float64{list(shape)}"
    if kind == 3 and var is not None:
        var.flags ^= 1 << rng.randrange(8)
        return f"flags of {var.name} -> {int(var.flags)}"
    if kind in (4, 5) and op is not None:
        name = rng.choice(list(registry.lookup(op.type).attrs) if registry.find(op.type)
                          and registry.lookup(op.type).attrs and rng.random() < 0.7
                          else ATTRIBUTE_NAMES)
        if name in op.attrs and rng.random() < 0.3:
            del op.attrs[name]
            return f"attribute {name} of {op.name} removed"
        value = rng.choice(ATTRIBUTE_VALUES + tuple(flow.funcs))
        op.attrs[name] = value
        return f"attribute {name} of {op.name} -> {value!r}"
    if kind == 6 and op is not None:
        old, op.type = op.type, rng.choice(registry.types() + ["Bogus", ""])
        return f"type of {op.name} {old} -> {op.type}"
    if kind == 7 and op is not None and var is not None:
        if op.inputs and rng.random() < 0.6:
            index = rng.randrange(len(op.inputs))
            old = op.inputs[index]
            op.inputs[index] = var
            old.consumers.remove(op)
            var.consumers.append(op)
            return f"input {index} of {op.name} -> {var.name}"
        op.add_input(var)
        return f"input {var.name} added to {op.name}"
    if kind == 8 and op is not None and op.inputs:
        index = rng.randrange(len(op.inputs))
        op.remove_input(index)
        return f"input {index} of {op.name} removed"
    if kind == 9 and op is not None and var is not None:
        if op.outputs and rng.random() < 0.5:
            removed = rng.choice(op.outputs)
            op.remove_output(removed)
            return f"output {removed.name} of {op.name} removed"
        if var.producer is None:
            op.add_output(var)
            return f"output {var.name} added to {op.name}"
    if kind == 10 and func is not None:
        if func.results is not None and rng.random() < 0.5:
            if rng.random() < 0.5 and func.params:
                func.params.pop(rng.randrange(len(func.params)))
                return f"a parameter of {func.name} removed"
            if func.results:
                func.results.pop(rng.randrange(len(func.results)))
                return f"a result of {func.name} removed"
        if var is not None:
            if func.results is None:
                func.params, func.results = [], []
            (func.params if rng.random() < 0.5 else func.results).append(var)
            return f"{var.name} added to the signature of {func.name}"
    if kind == 11 and op is not None and func is not None and op.func is not func:
        if op.func is not None:
            op.func.ops.remove(op)
            op.func = None
        func.add(op)
        return f"{op.name} moved to {func.name}"
    if kind == 12 and op is not None:
        flow.delete_op(op)
        return f"{op.name} deleted"
    if kind == 13 and op is not None and len(op.inputs) > 1:
        op.inputs.reverse()
        return f"inputs of {op.name} reversed"
    if kind == 14 and var is not None:
        other = _pick(rng, flow.vars)
        if other != var.name and flow.var_named(var.name + "'") is None:
            flow.add_alias(var, other + "'" if rng.random() < 0.5 else var.name + "'")
            return f"alias added to {var.name}"
    if kind == 15 and op is not None and op.outputs:
        op.add_input(op.outputs[0])      # a cycle: the op reads what it writes
        return f"{op.name} reads its own output"
    return "nothing"


def mutate_bytes(data, rng):
    """``data`` changed at byte level a few times; returns (bytes, what was done)."""
    data = bytearray(data)
    done = []
    for _ in range(rng.randint(1, 3)):
        position = rng.randrange(len(data) + 1)
        kind = rng.randrange(6)
        if kind == 0 and position < len(data):
            data[position] ^= 1 << rng.randrange(8)
        elif kind == 1 and position < len(data):
            data[position] = rng.randrange(256)
        elif kind == 2:
            data[position:position] = rng.randbytes(rng.randint(1, 8))
        elif kind == 3:
            del data[position:position + rng.randint(1, 8)]
        elif kind == 4:
            end = min(len(data), position + rng.randint(1, 16))
            data[position:position] = data[position:end]
        else:
            data[position:position + 4] = struct.pack("<i", rng.choice(
                [HUGE, -1, 0, 1, 2, 3, 255, 1 << 16, 100_000]))
        done.append(f"{('flip', 'byte', 'insert', 'delete', 'repeat', 'int32')[kind]}@{position}")
    return bytes(data), "bytes " + " ".join(done)


def make_case(files, index, seed):
    """Case ``index`` of the run with ``seed``: a corpus file mutated."""
    from myelin.errors import MyelinError
    from myelin.flow import fileformat

    rng = random.Random(f"{seed}/{index}")
    name, data = rng.choice(files)
    version = struct.unpack_from("<i", data, 4)[0]
    done = []
    if rng.random() < 0.75:
        flow = fileformat.from_bytes(data)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            done.append(mutate_structure(flow, rng))
        try:
            data = fileformat.to_bytes(flow, version)
        except (MyelinError, ValueError, TypeError, KeyError) as error:
            done.append(f"(not writable: {type(error).__name__}; bytes instead)")
            data = files[[n for n, _ in files].index(name)][1]
    if not done or rng.random() < 0.3:
        data, what = mutate_bytes(data, rng)
        done.append(what)
    return fuzzing.Case(index, data, f"{name}: " + "; ".join(done))


# Running a case.
def _random_array(rng, dtype, shape):
    from myelin.flow import dtypes

    numpy_type = dtypes.to_numpy(dtype)
    if numpy_type.kind == "f":
        return rng.standard_normal(shape).astype(numpy_type)
    if numpy_type.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 4, shape).astype(numpy_type)


INPUT_ELEMENTS = 1 << 20   # larger inputs are not filled (the instance is zeros)


def run_case(data, seed):
    """Load, compile and compute the flow file ``data`` (random inputs from ``seed``)."""
    import myelin
    import myelin.control
    from myelin.ops.control import is_control, is_value

    rng = np.random.default_rng(seed)
    flow = myelin.Flow.from_bytes(data)
    if any(is_control(op) for op in flow.ops.values()):
        program = myelin.control.compile(flow, cache=False)
        for func in flow.funcs.values():
            if func.results is None or func.name not in program.entries:
                continue
            if any(is_value(p) or p.elements > INPUT_ELEMENTS for p in func.params):
                continue
            args = [_random_array(rng, p.dtype, p.shape) for p in func.params]
            with fuzzing.running_program():
                program.run(func.name, *args)
        return
    network = myelin.Compiler(cache=False).compile(flow)
    for cell in network.cells:
        instance = cell.instance()
        for name in cell.inputs:
            spec = cell.spec(name)
            if spec.elements <= INPUT_ELEMENTS:
                instance[name] = _random_array(rng, spec.dtype, spec.shape)
        instance.compute()


def main():
    parser = fuzzing.arguments(__doc__.split("\n\n")[0], 10_000, "fuzz-out/flow")
    args = parser.parse_args()
    if args.replay:
        fuzzing.replay(run_case, args.replay)
        return
    files = corpus_files()
    cases = (make_case(files, index, args.seed) for index in range(args.cases))
    tally = fuzzing.campaign(f"mutated .flow files (seed {args.seed})", cases,
                             "fuzz_flow:run_case", ".flow", args.workers, args.timeout,
                             args.out, args.verbose)
    sys.exit(1 if tally.defects else 0)


if __name__ == "__main__":
    main()
