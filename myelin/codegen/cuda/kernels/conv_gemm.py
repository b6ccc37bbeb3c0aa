"""Larger convolutions as an implicit matrix product, tiled in shared memory.

Per group, ``Y[m, (n, p)] = sum_k W[m, k] X'[k, (n, p)]``: rows are the group's output
channels, columns the output positions of every image, and ``k`` runs over the group's input
channels times the kernel taps; row ``k`` of ``X'`` holds, for each column, the input element
that tap meets (zero in the padding). ``X'`` is never built: a block of :data:`THREADS` threads
computes a :data:`TILE_M` x :data:`TILE_N` tile of ``Y``, and for each slice of
:data:`TILE_K` rows of ``k`` it copies the weights' slice and gathers the ``X'`` slice into
shared memory (neighbouring threads on neighbouring columns, so the gathers are mostly
coalesced), then each thread accumulates a :data:`MICRO` x :data:`MICRO` register tile whose
rows and columns are :data:`SPREAD` apart (so the stores of a warp are coalesced). The bias and
a FusedConv's epilogue are applied in registers before the store, as in the direct kernel
(:func:`~.conv.output_lines`). :func:`large` decides when a convolution is worth a tile.
"""

import math

from myelin.codegen.cuda import cudatypes
from myelin.codegen.cuda.kernels.base import CudaKernel, Launch, Signature, kernel, unit_loop
from myelin.codegen.cuda.kernels.conv import geometry, output_lines, supported
from myelin.codegen.cuda.kernels.window import split
from myelin.plan.strides import contiguous_strides

MICRO = 4
SPREAD = 16                     # threads along each side of the block's thread grid
TILE_M = TILE_N = MICRO * SPREAD
TILE_K = 16
THREADS = SPREAD * SPREAD


def large(step):
    """True if the convolution fills at least half a tile's rows and a whole tile's columns
    and sums over at least one slice of ``k``."""
    g = geometry(step)
    rows = g.out_channels // g.group
    depth = g.in_channels // g.group * math.prod(g.kernel)
    return rows * 2 >= TILE_M and g.batch * math.prod(g.output) >= TILE_N and depth >= TILE_K


class ConvGemmKernel(CudaKernel):
    """``Conv`` and ``FusedConv`` that are :func:`large`, as a tiled implicit matrix product."""

    name = "ConvGemm"

    def supports(self, step, target):
        return supported(step) and large(step)

    def kernel_name(self, step):
        return f"{step.type}Gemm"

    def generate(self, step, names):
        g = geometry(step)
        x, w, y = step.inputs[0], step.inputs[1], step.outputs[0]
        cg, mg = g.in_channels // g.group, g.out_channels // g.group
        plane, in_plane, ksize = math.prod(g.output), math.prod(g.input), math.prod(g.kernel)
        depth, columns = cg * ksize, g.batch * plane
        row_tiles, column_tiles = -(-mg // TILE_M), -(-columns // TILE_N)
        tiles = g.group * row_tiles * column_tiles
        dtype = y.dtype
        ctype = cudatypes.compute(dtype)
        zero = cudatypes.literal(0, dtype)
        signature = Signature()
        xp, wp = signature.pointer(x), signature.pointer(w)
        in_strides = contiguous_strides(g.input)

        body = [f"__shared__ {ctype} ws[{TILE_K}][{TILE_M}];",
                f"__shared__ {ctype} xs[{TILE_K}][{TILE_N}];",
                f"const int tx = threadIdx.x % {SPREAD}, ty = threadIdx.x / {SPREAD};"]
        body += unit_loop("tile", tiles, THREADS, THREADS)
        tile = [f"const int64_t n0 = tile % {column_tiles}LL * {TILE_N}LL;",
                f"const int64_t tq = tile / {column_tiles}LL;",
                f"const int64_t m0 = tq % {row_tiles}LL * {TILE_M}LL;",
                f"const int64_t grp = tq / {row_tiles}LL;"]
        # The column this thread gathers for X': its image, window starts and validity.
        per_column = THREADS // TILE_N
        tile += [f"const int64_t gcol = n0 + threadIdx.x % {TILE_N};",
                 f"const bool gvalid = gcol < {columns}LL;",
                 f"const int64_t gpix = gcol % {plane}LL;",
                 f"const int64_t gimg = gcol / {plane}LL;"]
        position_lines, positions = split("gpix", g.output, "o")
        tile += position_lines
        tile += [f"const int64_t s{a} = {positions[a]} * {g.strides[a]}LL - {g.pads_begin[a]}LL;"
                 for a in range(g.rank)]
        tile += [f"const int64_t gbase = (gimg * {g.in_channels}LL + grp * {cg}LL) * "
                 f"{in_plane}LL;",
                 f"const int64_t wrow = (grp * {mg}LL + m0) * {depth}LL;"]
        tile += [f"{ctype} acc[{MICRO}][{MICRO}];",
                 f"for (int i = 0; i < {MICRO}; ++i)",
                 f"  for (int j = 0; j < {MICRO}; ++j) acc[i][j] = {zero};",
                 f"for (int64_t k0 = 0; k0 < {depth}LL; k0 += {TILE_K}) {{"]
        # Weights: consecutive threads read consecutive k of one row.
        weights = [f"for (int e = threadIdx.x; e < {TILE_K * TILE_M}; e += {THREADS}) {{",
                   f"  const int kk = e % {TILE_K}, mm = e / {TILE_K};",
                   "  const int64_t k = k0 + kk;",
                   f"  ws[kk][mm] = m0 + mm < {mg}LL && k < {depth}LL ? "
                   f"{cudatypes.load(w.dtype, f'{wp}[wrow + mm * {depth}LL + k]')} : {zero};",
                   "}"]
        tap_lines, taps = split("tap", g.kernel, "t")
        inside = " && ".join([f"(uint64_t)i{a} < {g.input[a]}ULL" for a in range(g.rank)])
        offset = " + ".join(f"i{a} * {in_strides[a]}LL" for a in range(g.rank))
        gather = [f"for (int kk = threadIdx.x / {TILE_N}; kk < {TILE_K}; kk += {per_column}) {{",
                  "  const int64_t k = k0 + kk;",
                  f"  {ctype} value = {zero};",
                  f"  if (gvalid && k < {depth}LL) {{",
                  f"    const int64_t c = k / {ksize}LL, tap = k % {ksize}LL;"]
        gather += ["    " + line for line in tap_lines]
        gather += [f"    const int64_t i{a} = s{a} + {taps[a]} * {g.dilations[a]}LL;"
                   for a in range(g.rank)]
        gather += [f"    if ({inside}) value = "
                   f"{cudatypes.load(x.dtype, f'{xp}[gbase + c * {in_plane}LL + {offset}]')};",
                   "  }", f"  xs[kk][threadIdx.x % {TILE_N}] = value;", "}"]
        product = ["__syncthreads();",
                   f"for (int kk = 0; kk < {TILE_K}; ++kk) {{",
                   f"  {ctype} a[{MICRO}], b[{MICRO}];",
                   f"  for (int i = 0; i < {MICRO}; ++i) a[i] = ws[kk][ty + i * {SPREAD}];",
                   f"  for (int j = 0; j < {MICRO}; ++j) b[j] = xs[kk][tx + j * {SPREAD}];",
                   f"  for (int i = 0; i < {MICRO}; ++i)",
                   f"    for (int j = 0; j < {MICRO}; ++j) acc[i][j] += a[i] * b[j];",
                   "}", "__syncthreads();   // the tiles are free again"]
        tile += ["  " + line for line in weights + gather + product] + ["}"]
        store = output_lines(step, signature, "acc[i][j]", f"(img * {g.out_channels}LL + m) * "
                             f"{plane}LL + pix", "m")
        tile += [f"for (int i = 0; i < {MICRO}; ++i) {{",
                 f"  if (m0 + ty + i * {SPREAD} >= {mg}LL) break;",
                 f"  const int64_t m = grp * {mg}LL + m0 + ty + i * {SPREAD};",
                 f"  for (int j = 0; j < {MICRO}; ++j) {{",
                 f"    const int64_t col = n0 + tx + j * {SPREAD};",
                 f"    if (col >= {columns}LL) break;",
                 f"    const int64_t img = col / {plane}LL, pix = col % {plane}LL;"]
        tile += ["    " + line for line in store] + ["  }", "}"]
        body += ["  " + line for line in tile] + ["}"]
        return [kernel(names.unique(f"{step.type}_{step.name}"), step, signature, body,
                       Launch(tiles, THREADS, THREADS))]
