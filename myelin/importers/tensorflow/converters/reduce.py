"""TensorFlow reductions: Sum, Mean, Max, Min, Prod, All, Any over constant axes, and
ArgMax/ArgMin."""

from myelin.importers.tensorflow.converters import converter

_REDUCTIONS = {"Sum": "Sum", "Mean": "Mean", "Max": "Max", "Min": "Min", "Prod": "Product",
               "All": "All", "Any": "Any"}


def _reduction(op_type):
    def convert(ctx):
        x = ctx.input(0)
        axes = sorted({a % x.rank for a in ctx.ints(1)}) if x.rank else []
        if not axes:
            return x          # TensorFlow reduces over no axis: the input itself
        return ctx.op(op_type, [x], {"axis": axes, "keepdims": ctx.attr("keep_dims", False)
                                     or None})
    return convert


for _tf_type, _myelin_type in _REDUCTIONS.items():
    converter(_tf_type)(_reduction(_myelin_type))


@converter("ArgMax", "ArgMin")
def _arg(ctx):
    x = ctx.input(0)
    (axis,) = ctx.ints(1)
    return ctx.op(ctx.op_type, [x], {"axis": axis % x.rank,
                                     "dtype": ctx.dtype("output_type", "int64")})
