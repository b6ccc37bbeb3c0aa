"""Recurrent ONNX ops: RNN, GRU and LSTM, unrolled over the time steps.

The sequence length is concrete at import, so each node becomes a chain of per-step ops: the
input projection ``X W^T + bias`` of every step is one MatMul before the loop, and each step
adds ``H R^T`` and applies the gates with element-wise ops (fusion merges them into a few
loops). Directions forward, reverse and bidirectional; the ``activations`` attribute (with
``activation_alpha``/``activation_beta``), ``clip``, ``layout`` (opset 14), GRU's
``linear_before_reset`` and LSTM's ``input_forget`` and peepholes ``P``.

``sequence_lens`` is read as a constant (the importer specializes on it when it is a graph
input). Steps past a sequence's length keep its state and give zeros in ``Y``; the reverse
direction reads each sequence backwards from its own last step, as ONNX Runtime does.
"""

import numpy as np

from myelin.errors import LimitError
from myelin.importers.onnx.converters import converter

# Each step is code of its own, and compiling takes time growing with the square of the steps
# (150 steps of a small LSTM: 37 s): longer sequences raise LimitError.
MAX_STEPS = 256

# Activation name (lower case) -> (default alpha, default beta); None: takes no such value.
_ACTIVATION_PARAMS = {
    "relu": (None, None), "tanh": (None, None), "sigmoid": (None, None),
    "affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
    "softsign": (None, None), "softplus": (None, None),
}


class _Activation:
    def __init__(self, name, alpha, beta):
        self.name, self.alpha, self.beta = name, alpha, beta

    def __call__(self, ctx, x):
        def c(value):
            return ctx.const(value, x.dtype)
        name, alpha, beta = self.name, self.alpha, self.beta
        if name in ("relu", "tanh", "sigmoid", "softsign", "softplus"):
            return ctx.op({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid",
                           "softsign": "Softsign", "softplus": "Softplus"}[name], [x])
        if name == "affine":
            return ctx.op("Add", [ctx.op("Mul", [x, c(alpha)]), c(beta)])
        if name == "leakyrelu":
            negative = ctx.op("Less", [x, c(0)])
            return ctx.op("Cond", [negative, ctx.op("Mul", [x, c(alpha)]), x])
        if name == "thresholdedrelu":
            return ctx.op("Cond", [ctx.op("Greater", [x, c(alpha)]), x, c(0)])
        if name == "scaledtanh":
            return ctx.op("Mul", [ctx.op("Tanh", [ctx.op("Mul", [x, c(beta)])]), c(alpha)])
        if name == "hardsigmoid":
            linear = ctx.op("Add", [ctx.op("Mul", [x, c(alpha)]), c(beta)])
            return ctx.op("Minimum", [ctx.op("Maximum", [linear, c(0)]), c(1)])
        if name == "elu":
            negative = ctx.op("Less", [x, c(0)])
            scaled = ctx.op("Mul", [ctx.op("Sub", [ctx.op("Exp", [x]), c(1)]), c(alpha)])
            return ctx.op("Cond", [negative, scaled, x])
        raise AssertionError(name)


def _activations(ctx, defaults, directions):
    """The activation functions of each direction: a list per direction of ``len(defaults)``.

    ``activation_alpha``/``activation_beta`` are consumed in order by the activations that
    take such a value; those not given keep the defaults of the ONNX op of that name.
    """
    names = list(ctx.attr("activations", []) or [])
    if not names:
        names = list(defaults) * directions
    elif len(names) == len(defaults) and directions == 2:
        names = names * 2
    if len(names) != len(defaults) * directions:
        raise ctx.error(f"{len(names)} activations given, {len(defaults) * directions} needed")
    alphas = list(ctx.attr("activation_alpha", []) or [])
    betas = list(ctx.attr("activation_beta", []) or [])
    functions = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATION_PARAMS:
            raise ctx.error(f"unknown activation {name!r}")
        alpha, beta = _ACTIVATION_PARAMS[key]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        functions.append(_Activation(key, alpha, beta))
    count = len(defaults)
    return [functions[d * count:(d + 1) * count] for d in range(directions)]


class _Recurrence:
    """What the three ops share: inputs in [seq, batch, ...] layout, per-direction weights,
    the input projection, the time order and masks of each step, and assembling outputs."""

    def __init__(self, ctx, gates, default_activations):
        self.ctx = ctx
        x = ctx.input(0)
        if len(x.shape) != 3:
            raise ctx.error(f"input X must be 3-D, not of shape {list(x.shape)}")
        self.layout = ctx.attr("layout", 0) if ctx.opset >= 14 else 0
        if self.layout:
            x = ctx.op("Transpose", [x], {"perm": [1, 0, 2]})
        self.x = x
        self.dtype = x.dtype
        self.seq, self.batch, self.input_size = x.shape
        if self.seq > MAX_STEPS:
            raise LimitError(f"node {ctx.name} ({ctx.op_type}): {self.seq} time steps; myelin "
                             f"unrolls recurrences of at most {MAX_STEPS} steps")
        w, r = ctx.input(1), ctx.input(2)
        if w.rank != 3 or r.rank != 3:
            raise ctx.error(f"W and R must be 3-D, not of shapes {list(w.shape)} and "
                            f"{list(r.shape)}")
        self.directions = w.shape[0]
        direction = ctx.attr("direction", "forward")
        expected = 2 if direction == "bidirectional" else 1
        if direction not in ("forward", "reverse", "bidirectional") or \
                self.directions != expected:
            raise ctx.error(f"direction {direction!r} with {self.directions} weight sets")
        self.reverse = [False, True] if direction == "bidirectional" else \
            [direction == "reverse"]
        self.hidden = r.shape[-1]
        if ctx.attr("hidden_size", self.hidden) != self.hidden:
            raise ctx.error(f"hidden_size {ctx.attr('hidden_size')} does not fit R of shape "
                            f"{list(r.shape)}")
        self.gates = gates
        self._check_shapes()
        self.clip = ctx.attr("clip", None)
        self.activations = _activations(ctx, default_activations, self.directions)
        lengths = ctx.ints(4)
        if lengths is not None and len(lengths) != self.batch:
            raise ctx.error(f"sequence_lens has {len(lengths)} entries for batch {self.batch}")
        if lengths is not None and all(n >= self.seq for n in lengths):
            lengths = None
        self.lengths = None if lengths is None else [max(0, min(n, self.seq)) for n in lengths]

    def _check_shapes(self):
        """ShapeError unless the weights, bias, initial states and peepholes given have the
        shapes of the directions, gates, hidden and input sizes and the batch."""
        dirs, rows, hidden = self.directions, self.gates * self.hidden, self.hidden
        state = (self.batch, dirs, hidden) if self.layout else (dirs, self.batch, hidden)
        expected = {1: ("W", (dirs, rows, self.input_size)), 2: ("R", (dirs, rows, hidden)),
                    3: ("B", (dirs, 2 * rows)), 5: ("initial_h", state)}
        if self.gates == 4:
            expected.update({6: ("initial_c", state), 7: ("P", (dirs, 3 * hidden))})
        for index, (name, shape) in expected.items():
            if self.ctx.has(index) and self.ctx.input(index).shape != shape:
                raise self.ctx.error(f"input {name} has shape "
                                     f"{list(self.ctx.input(index).shape)}, not {list(shape)}")

    # Small helpers.
    def c(self, value):
        return self.ctx.const(value, self.dtype)

    def op(self, op_type, inputs, attrs=None):
        return self.ctx.op(op_type, inputs, attrs)

    def slice(self, var, begins, sizes):
        return self.op("Slice", [var, self.ctx.const(begins, "int32"),
                                 self.ctx.const(sizes, "int32")])

    def columns(self, var, start, count):
        """Columns [start, start + count) of a [rows, n] matrix."""
        if start == 0 and count == var.shape[1]:
            return var
        return self.slice(var, [0, start], [var.shape[0], count])

    def direction_part(self, var, d):
        """Entry ``d`` of the leading num_directions axis, without that axis."""
        shape = var.shape[1:]
        part = var if var.shape[0] == 1 else self.slice(var, [d] + [0] * len(shape),
                                                        [1] + list(shape))
        return self.ctx.reshape(part, shape)

    def clipped(self, var):
        if self.clip is None:
            return var
        var = self.op("Maximum", [var, self.c(-self.clip)])
        return self.op("Minimum", [var, self.c(self.clip)])

    def initial_state(self, index, d):
        """Input ``index`` (initial_h or initial_c) of direction d as [batch, hidden]."""
        ctx = self.ctx
        if not ctx.has(index):
            return self.c(np.zeros((self.batch, self.hidden)))
        state = ctx.input(index)
        if self.layout:
            state = self.op("Transpose", [state], {"perm": [1, 0, 2]})
        return self.direction_part(state, d)

    def weights(self, d):
        """(W, R, Wb, Rb) of direction d: [G*H, I], [G*H, H], [G*H] or None, [G*H] or None."""
        ctx = self.ctx
        w = self.direction_part(ctx.input(1), d)
        r = self.direction_part(ctx.input(2), d)
        if not ctx.has(3):
            return w, r, None, None
        b = self.direction_part(ctx.input(3), d)
        size = self.gates * self.hidden
        return w, r, self.slice(b, [0], [size]), self.slice(b, [size], [size])

    # Time order.
    def order(self, d):
        """Per step s of direction d: the row indices [batch] of X it reads (s*batch + b form)
        when sequences have their own lengths, else the time index; and the step's mask."""
        steps = []
        for s in range(self.seq):
            if self.lengths is None:
                t = self.seq - 1 - s if self.reverse[d] else s
                steps.append((t, None))
                continue
            valid = np.array([s < n for n in self.lengths]).reshape(self.batch, 1)
            steps.append((s, valid))
        return steps

    def gather_index(self, d):
        """Rows of the flattened [seq*batch] sequence each step reads: for the reverse
        direction with sequence lengths, step s of sequence b reads time n_b - 1 - s."""
        index = np.arange(self.seq * self.batch).reshape(self.seq, self.batch)
        if self.reverse[d]:
            for b, n in enumerate(self.lengths):
                index[:n, b] = index[:n, b][::-1]
        return index

    def projection(self, d, w, bias):
        """X W^T + bias of direction d as [seq, batch, G*H] in step order."""
        x = self.ctx.reshape(self.x, (self.seq * self.batch, self.input_size))
        if self.lengths is not None and self.reverse[d]:
            x = self.op("Gather", [x, self.ctx.const(self.gather_index(d).reshape(-1),
                                                     "int64")])
        xw = self.op("MatMul", [x, w], {"transpose_b": True})
        if bias is not None:
            xw = self.op("Add", [xw, bias])
        return xw

    def step_rows(self, xw, t):
        """Rows of time step t of a [seq*batch, n] matrix."""
        if self.seq == 1:
            return xw
        return self.slice(xw, [t * self.batch, 0], [self.batch, xw.shape[1]])

    def unroll(self, d, xw, states, step):
        """Apply ``step(rows, states) -> states`` (states[0] is H) over the steps of direction
        d. Returns (outputs per time index as [batch, hidden] vars, final states)."""
        outputs = [None] * self.seq
        zeros = None
        for s, (t, valid) in enumerate(self.order(d)):
            new = step(self.step_rows(xw, t), states)
            if valid is None:
                states = new
                outputs[t] = new[0]
                continue
            mask = self.ctx.const(valid)
            if zeros is None:
                zeros = self.c(np.zeros((self.batch, self.hidden)))
            outputs[t] = self.op("Cond", [mask, new[0], zeros])
            states = [self.op("Cond", [mask, n, o]) for n, o in zip(new, states)]
        if self.lengths is not None and self.reverse[d]:
            stacked = self.op("Concat", outputs + [self.ctx.const(0, "int32")],
                              {"N": len(outputs)}) if len(outputs) > 1 else outputs[0]
            stacked = self.op("Gather", [stacked, self.ctx.const(
                self.gather_index(d).reshape(-1), "int64")])
            outputs = [self.step_rows(stacked, t) for t in range(self.seq)]
        if self.lengths is not None and 0 in self.lengths:
            # An empty sequence has zero final states (ONNX Runtime), not the initial ones.
            nonempty = self.ctx.const(np.array([n > 0 for n in self.lengths]).reshape(-1, 1))
            states = [self.op("Cond", [nonempty, state, zeros]) for state in states]
        return outputs, states

    def outputs(self, per_direction, finals):
        """The node's outputs: Y [seq, dirs, batch, hidden] and the final states
        [dirs, batch, hidden] (in layout 1: [batch, seq, dirs, hidden], [batch, dirs, hidden])."""
        ctx = self.ctx
        results = []
        if ctx.num_outputs > 0 and ctx.node.output[0]:
            parts = []
            for t in range(self.seq):
                for d in range(self.directions):
                    parts.append(ctx.reshape(per_direction[d][t], (1, 1, self.batch,
                                                                   self.hidden)))
            y = self._concat(parts, (self.seq, self.directions, self.batch, self.hidden))
            if self.layout:
                y = self.op("Transpose", [y], {"perm": [2, 0, 1, 3]})
            results.append(y)
        else:
            results.append(None)
        for k in range(len(finals[0])):
            if ctx.num_outputs > k + 1 and ctx.node.output[k + 1]:
                parts = [ctx.reshape(finals[d][k], (1, self.batch, self.hidden))
                         for d in range(self.directions)]
                state = self._concat(parts, (self.directions, self.batch, self.hidden))
                if self.layout:
                    state = self.op("Transpose", [state], {"perm": [1, 0, 2]})
                results.append(state)
            else:
                results.append(None)
        return results[:max(1, ctx.num_outputs)]

    def _concat(self, parts, shape):
        if len(parts) == 1:
            return self.ctx.reshape(parts[0], shape)
        flat = [self.ctx.reshape(p, (1, int(np.prod(p.shape)))) for p in parts]
        joined = self.op("Concat", flat + [self.ctx.const(0, "int32")], {"N": len(flat)})
        return self.ctx.reshape(joined, shape)


@converter("RNN")
def _rnn(ctx):
    """Ht = f(Xt Wi^T + Ht-1 Ri^T + Wbi + Rbi)."""
    rec = _Recurrence(ctx, 1, ["Tanh"])
    per_direction, finals = [], []
    for d in range(rec.directions):
        w, r, wb, rb = rec.weights(d)
        bias = None if wb is None else rec.op("Add", [wb, rb])
        xw = rec.projection(d, w, bias)
        (f,) = rec.activations[d]

        def step(rows, states, r=r, f=f):
            (h,) = states
            pre = rec.op("Add", [rows, rec.op("MatMul", [h, r], {"transpose_b": True})])
            return [f(ctx, rec.clipped(pre))]

        outputs, states = rec.unroll(d, xw, [rec.initial_state(5, d)], step)
        per_direction.append(outputs)
        finals.append(states)
    return rec.outputs(per_direction, finals)


@converter("GRU")
def _gru(ctx):
    """zt = f(Xt Wz^T + Ht-1 Rz^T + Wbz + Rbz), rt likewise with r;
    ht = g(Xt Wh^T + (rt . Ht-1) Rh^T + Rbh + Wbh), or with linear_before_reset
    ht = g(Xt Wh^T + rt . (Ht-1 Rh^T + Rbh) + Wbh); Ht = (1 - zt) . ht + zt . Ht-1."""
    rec = _Recurrence(ctx, 3, ["Sigmoid", "Tanh"])
    hidden = rec.hidden
    linear_before_reset = ctx.attr("linear_before_reset", 0)
    per_direction, finals = [], []
    for d in range(rec.directions):
        w, r, wb, rb = rec.weights(d)
        rbh = None
        if wb is None:
            bias = None
        elif linear_before_reset:
            rbh = rec.slice(rb, [2 * hidden], [hidden])
            zr = rec.slice(rb, [0], [2 * hidden])
            rb_zr = rec.op("Concat", [zr, rec.c(np.zeros(hidden)), ctx.const(0, "int32")],
                           {"N": 2})
            bias = rec.op("Add", [wb, rb_zr])
        else:
            bias = rec.op("Add", [wb, rb])
        xw = rec.projection(d, w, bias)
        r_zr = rec.slice(r, [0, 0], [2 * hidden, hidden])
        r_h = rec.slice(r, [2 * hidden, 0], [hidden, hidden])
        f, g = rec.activations[d]

        def step(rows, states, r=r, r_zr=r_zr, r_h=r_h, rbh=rbh, f=f, g=g):
            (h,) = states
            if linear_before_reset:
                hr = rec.op("MatMul", [h, r], {"transpose_b": True})
                zr = rec.op("Add", [rec.columns(rows, 0, 2 * hidden),
                                    rec.columns(hr, 0, 2 * hidden)])
            else:
                zr = rec.op("Add", [rec.columns(rows, 0, 2 * hidden),
                                    rec.op("MatMul", [h, r_zr], {"transpose_b": True})])
            zr = f(ctx, rec.clipped(zr))
            z, reset = rec.columns(zr, 0, hidden), rec.columns(zr, hidden, hidden)
            if linear_before_reset:
                recurrent = rec.columns(hr, 2 * hidden, hidden)
                if rbh is not None:
                    recurrent = rec.op("Add", [recurrent, rbh])
                recurrent = rec.op("Mul", [reset, recurrent])
            else:
                recurrent = rec.op("MatMul", [rec.op("Mul", [reset, h]), r_h],
                                   {"transpose_b": True})
            candidate = g(ctx, rec.clipped(rec.op("Add", [rec.columns(rows, 2 * hidden, hidden),
                                                          recurrent])))
            # (1 - z) . candidate + z . h = candidate + z . (h - candidate)
            new = rec.op("Add", [candidate, rec.op("Mul", [z, rec.op("Sub", [h, candidate])])])
            return [new]

        outputs, states = rec.unroll(d, xw, [rec.initial_state(5, d)], step)
        per_direction.append(outputs)
        finals.append(states)
    return rec.outputs(per_direction, finals)


@converter("LSTM")
def _lstm(ctx):
    """Gates i, o, f, c in that order in W, R and B; peepholes P are i, o, f:
    it = f(Xt Wi^T + Ht-1 Ri^T + Pi . Ct-1 + Wbi + Rbi), ft likewise (1 - it with
    input_forget), ct = g(Xt Wc^T + Ht-1 Rc^T + Wbc + Rbc), Ct = ft . Ct-1 + it . ct,
    ot = f(Xt Wo^T + Ht-1 Ro^T + Po . Ct + Wbo + Rbo), Ht = ot . h(Ct)."""
    rec = _Recurrence(ctx, 4, ["Sigmoid", "Tanh", "Tanh"])
    hidden = rec.hidden
    input_forget = ctx.attr("input_forget", 0)
    per_direction, finals = [], []
    for d in range(rec.directions):
        w, r, wb, rb = rec.weights(d)
        bias = None if wb is None else rec.op("Add", [wb, rb])
        xw = rec.projection(d, w, bias)
        peepholes = None
        if ctx.has(7):
            p = rec.direction_part(ctx.input(7), d)
            peepholes = [rec.slice(p, [k * hidden], [hidden]) for k in range(3)]
        f, g, h_act = rec.activations[d]

        def step(rows, states, r=r, peepholes=peepholes, f=f, g=g, h_act=h_act):
            h, c = states
            pre = rec.op("Add", [rows, rec.op("MatMul", [h, r], {"transpose_b": True})])

            def gate(k):
                return rec.columns(pre, k * hidden, hidden)

            def peep(x, k, cell):
                if peepholes is None:
                    return x
                return rec.op("Add", [x, rec.op("Mul", [peepholes[k], cell])])

            i = f(ctx, rec.clipped(peep(gate(0), 0, c)))
            if input_forget:
                forget = rec.op("Sub", [rec.c(1), i])
            else:
                forget = f(ctx, rec.clipped(peep(gate(2), 2, c)))
            cell_in = g(ctx, rec.clipped(gate(3)))
            new_c = rec.op("Add", [rec.op("Mul", [forget, c]), rec.op("Mul", [i, cell_in])])
            o = f(ctx, rec.clipped(peep(gate(1), 1, new_c)))
            new_h = rec.op("Mul", [o, h_act(ctx, new_c)])
            return [new_h, new_c]

        states = [rec.initial_state(5, d), rec.initial_state(6, d)]
        outputs, states = rec.unroll(d, xw, states, step)
        per_direction.append(outputs)
        finals.append(states)
    return rec.outputs(per_direction, finals)
