"""Emit the native function of a cell: every step's kernel inline in one LLVM function.

The function is ``i32 <symbol>(ptr instance)``; tensors in the instance are addressed at
constant offsets from ``instance``, globals at their absolute addresses. It returns 0, or
1 + the position of the step that found bad input at run time (an index out of range, see
:meth:`EmitContext.fail_if`); the runtime turns that into an InputError naming the step.
"""

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil
from myelin.codegen.llvm.kernels import EmitContext
from myelin.errors import CompileError, MyelinError


def emit_cell(module, symbol, steps, target, instance_alignment, threads=1, arrays=None):
    """Add the function ``symbol`` computing ``steps`` to ``module``; kernels may split work
    over ``threads`` and add compile-time arrays (packed weights) to ``arrays``."""
    irutil.set_target(module, target)
    function = ir.Function(module, ir.FunctionType(irutil.I32, [irutil.PTR]), symbol)
    instance = function.args[0]
    instance.name = "instance"
    instance.add_attribute("noalias")
    function.attributes.add("nounwind")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    ctx = EmitContext(builder, target, instance, instance_alignment, threads, arrays)
    for position, step in enumerate(steps):
        ctx.status = position + 1
        if step.noop:
            continue
        # Each step starts in a fresh block, named after it, for readable IR dumps.
        block = function.append_basic_block(_block_name(step.name))
        builder.branch(block)
        builder.position_at_end(block)
        try:
            step.kernel.emit(ctx, step)
        except MyelinError:
            raise
        except Exception as error:
            raise CompileError(f"kernel {step.kernel.kernel_name(step)} failed on step "
                               f"{step.name} ({step.type}): {error}") from error
    builder.ret(ir.Constant(irutil.I32, 0))
    return function


def _block_name(name):
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name)
