"""Launching cl/gemm.cl: C = A @ B (+ bias) for Linear, Conv2d and ConvTranspose2d on OpenCL.

Every product is row-major with a leading dimension per matrix, and one launch covers a stack of them:
product z is group z % groups of batch item z // groups, and each matrix of it starts at
offset + group * group_stride + item * item_stride elements into its buffer. A `Matrix` names one
operand that way.

Two kernels compute it (see cl/gemm.cl), each in several block or tile sizes. Every (kernel, size) pair is a
variant (kuiper/opencl/tuning.py): a layer picks one per input shape, by `Gemm.rule` or by measurement.

* "cpu MBxNB" runs `gemm_cpu`: no local memory, register blocks of MB x NB outputs in float16 vectors.
  PoCL runs a work-group's work-items in a loop on one core, dimension 0 innermost, so the host sizes
  work-groups as cache blocks: their work-items share the same columns of B while those are in the core's
  cache, and walk down the rows of A. The rule gives CPUs (`rt.is_cpu`) the widest block the product fills
  among those the compiler's vector registers hold (`Gemm.cpu_blocks`), 6 rows tall, or for a plain product
  of few rows 8, 4 or 2 (`Gemm.cpu_rows`).
* "cpu 6xNB taps", for a convolution on CPUs, runs `gemm_cpu` on the input itself: cl/conv.cl's pad_planes
  first writes the input with its padding and its rows and columns split by the stride, where every row of
  im2col's matrix that one block of outputs reads is NB consecutive floats at an offset of its own (the `taps`
  table), so no column matrix is written and read back. The rule takes it wherever a block of TAPS_MIN_BLOCK
  fits and the kernel's windows overlap.
* "gpu TMxTN" runs `gemm_gpu`: tiles staged in local memory with register blocking, within the kernel's
  and the device's largest work-group. For a convolution it reads B as implicit im2col straight from the
  input images (`Gemm(..., kernel_size)`): on a GPU, writing and reading back the column matrix would take a
  large share of ResNet-18's time. The rule gives other devices the tiles `_gpu_tiles` picks by the product's
  shape (see GPU_TILES).

  A product with too few tiles to keep every compute unit busy (a 7x7 layer at batch 1: 32 tiles of 32 x 32
  for a GPU of over a hundred units, each looping over K = 4608) is split along K (`_slices`): each slice of K
  computes its partial tiles, and `gemm_sum` adds them up, then the bias and the epilogue.

* "gemv" runs `gemv` (cl/gemv.cl) for a plain product of few rows (a decode step: one row per sequence), where
  a tile of gemm_gpu would compute mostly rows that are not there: work-items stream B's rows as float4, every
  row of A multiplied into each value read, and a work-group adds up its slices of K in local memory. The rule
  takes it on GPUs for products of at most GEMV_MAX_ROWS rows (kuiper/opencl/gemv.py launches it).

* "mma TMxTN" runs `gemm_mma` (cl/gemm_mma.cl) on NVIDIA tensor cores, through inline PTX (mma.sync on half
  or TF32 inputs, float sums), with gemm_gpu's arguments and implicit im2col. Only with half storage
  (precision="fp16") or at precision="tf32" on a GPU that has them (devices.tensor_cores), where the product
  has a tile for every compute unit.

A fused operator's epilogue (kuiper/layers/fused.py) runs in the kernel that stores C when it has the shape
a `KernelEpilogue` takes: at most one residual sum, then at most one activation. Each value then gets the
other tensor added and the activation applied in registers, where separate kernels would read and write the
whole output once per step.

The constants below are set by timing single products and whole models on each driver (benchmarks/resnet18.py,
benchmarks/zoo.py, `kuiper run --profile`); docs/tuning.md keeps the measurements.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

from kuiper.core.cpuinfo import cpu_flags
from kuiper.opencl.devices import INTEL_CPU_PLATFORM, configured_target, tensor_cores
from kuiper.opencl.gemv import GEMV, GEMV_MAX_ROWS, Gemv
from kuiper.opencl.runtime import round_up
from kuiper.core.variants import Variant, Variants


#: gemm_cpu's register block: MB rows by NV vectors of VN columns
CPU_ROWS = 6
#: ... or, for a plain product (no convolution's), these: a block computes all its rows, so 16 rows in blocks of 6
#: compute 18 and one row computes 6, while the time follows the rows computed (a decode step's Linears,
#: docs/tuning.md). The rule takes the height of least cost (`Gemm.cpu_rows`).
SHORT_ROWS = (8, 4, 2)
#: ... a height above CPU_ROWS only for products of at most this many rows (a step of a few dozen sequences, whose
#: blocks each read B once), on Intel's CPU runtime where 32-column blocks are the widest: there 8 x 32 blocks ran
#: faster than 4 x 32 at 16 and 32 rows, on PoCL slower (docs/tuning.md)
TALL_ROWS_MAX = 48
#: blocks of at most this many rows of a plain product read B as two streams, the two halves of K side by side,
#: where K is at least STREAMS_MIN_K (cl/gemm.cl's -DSTREAMS): such products (a decode step's, a classifier's at
#: batch 1) stream B from memory, and a core's prefetchers serve two streams faster than one (docs/tuning.md)
STREAM_ROWS = 2
STREAMS_MIN_K = 512
#: a block's cost beside its rows, in rows (loads of B and the launch of its work-item): weighed against the rows
#: a taller block computes in vain, it keeps 6 where 4 saves little (64 rows: 66 computed, 11 blocks against 16)
ROW_BLOCK_COST = 1
#: (columns per block, NV, VN) from widest to narrowest; a product narrower than a block uses the next.
#: LLVM splits a float16 into two 256-bit halves on x86, so 6 x 32 keeps its 24 accumulators in registers only
#: where the compiler targets AVX-512 (32 vector registers); with AVX2's 16 it spills, and the rule takes
#: 6 x 16 (12 accumulators) as widest (`Gemm.cpu_blocks`).
CPU_BLOCKS = ((32, 2, 16), (16, 1, 16), (4, 1, 4), (1, 1, 1))
#: gemm_cpu's work-groups in blocks, (columns, rows), largest first: one column block wide, so that a group's
#: work-items all read one block of B's columns (in the core's L1 or L2) and walk down A. Only these few sizes:
#: PoCL compiles a kernel again for every new work-group size it is launched with, which takes seconds.
CPU_GROUPS = ((1, 32), (1, 8), (1, 2), (1, 1))
#: ... but a product of fewer than this many row blocks (M < 67: 64 channels and fewer) first tries a group as
#: wide as the product is short: (16, 2) or (32, 1). Intel's runtime pays for each work-group, and a (1, 32)
#: group over 3 row blocks runs only 3 work-items; PoCL runs a group's idle work-items at no cost.
FEW_ROW_BLOCKS = 12

#: the rule runs a convolution's GEMM on its padded input (the "taps" variants) on CPUs wherever a block of this
#: many columns fits along the rows its blocks run on (Conv2d.taps_row: an output row, or a phase plane's padded
#: grid), so that no column matrix is written and read back
TAPS_MIN_BLOCK = 16
#: ... with the widest block that computes at most this share more columns a row than the block that computes
#: fewest (a row's last block slides back, recomputing columns): wider blocks are faster per column. ResNet-18's
#: stem, rows of 112, gets 7 blocks of 16 rather than 4 of 32 (128 columns).
TAPS_SLACK = 1 / 8

#: a layer's column matrix (im2col's, or ConvTranspose2d's taps) holds at most this many bytes; a batch
#: whose columns need more is processed in chunks of items
COLUMN_BYTES = 64 << 20

#: gemm_gpu's tile configurations, largest first: (TM, TN, TK, RM, RN), work-group (TN/RN, TM/RM). Measured on
#: a GPU, 128 x 128 tiles win only where the product fills them and has a tile for every compute unit; 64 x 64
#: wins elsewhere (see Gemm._gpu_tiles). 32 x 32 (64 work-items) serves devices whose work-groups stop below 256.
GPU_TILES = ((128, 128, 8, 8, 8), (64, 64, 16, 4, 4), (32, 32, 16, 4, 4))

#: gemm_mma's tiles (cl/gemm_mma.cl), largest first: (warps along M, warps along N, products of 16 rows and of 8
#: columns per warp), so TM x TN = 16 * WARPS_M * MI x 8 * WARPS_N * NI. Taken at MMA_PRECISIONS on a device that
#: has tensor cores (devices.tensor_cores), the largest whose rows the product fills, more than half its columns,
#: with a tile for every other compute unit at least; a product with fewer keeps gemm_gpu, whose split-K fills the
#: device. Where Winograd's rule takes a 3x3 convolution it runs F(2x2) with these tiles (kuiper/opencl/winograd.py).
MMA_TILES = ((2, 4, 4, 4), (2, 2, 2, 4))
#: ... except a product of a few rows (more than gemv takes) and a K no longer than this, which the smallest tile
#: computes however few its tiles: tensor cores outrun gemm_gpu there even with most of the device idle, while
#: a long K on few tiles serializes (docs/opencl-kernels.md#tensor-cores-on-nvidia)
MMA_SHORT_K = 1024
#: the precisions gemm_mma multiplies at: half storage, and float storage rounded to TF32 (cl/gemm_mma.cl)
MMA_PRECISIONS = ("fp16", "tf32")

#: split-K: enough work-groups for this many per compute unit, each slice summing at least SPLIT_SPAN of K
#: (a thinner slice would move more partial sums than it computes)
SPLIT_GROUPS_PER_UNIT = 4
SPLIT_SPAN = 256


class Matrix(NamedTuple):
    """One operand of a stacked GEMM: where product (group, item) finds its matrix in `buffer`."""

    buffer: object
    ld: int                 # leading dimension: elements from one row to the next
    group: int = 0          # elements from one group's matrix to the next
    item: int = 0           # elements from one batch item's matrices to the next
    offset: int = 0         # where product (0, 0) starts


NO_BIAS, ROW_BIAS, COLUMN_BIAS = 0, 1, 2


class KernelEpilogue(NamedTuple):
    """A fused operator's steps as the GEMM applies them to each value it stores: add input `add` of the fused
    operator (a tensor shaped like the output), then the activation layer `act` (an element-wise layer with an
    OpenCL formula in cl/activations.h). None where there is no such step. Or `glu`: the columns come in pairs
    of 16 of a gate and 16 of an up projection, and each pair stores the 16 values silu(gate) * up
    (kuiper/opencl/gated.py); only gemm_cpu's 32-column blocks do that."""

    add: int | None = None
    act: object = None
    glu: bool = False

    @classmethod
    def of(cls, steps: list) -> "KernelEpilogue | None":
        """The steps as a kernel epilogue, or None when they have another shape (two sums, a sum after the
        activation, an activation with no OpenCL formula)."""
        adds = [step.extra for step in steps if step.extra is not None]
        acts = [step.layer for step in steps if step.extra is None]
        if len(adds) > 1 or len(acts) > 1 or (adds and acts and steps[0].extra is None):
            return None
        if acts and getattr(acts[0], "cl_function", None) is None:
            return None
        return cls(adds[0] if adds else None, acts[0] if acts else None)

    @property
    def options(self) -> list:
        return (["-DADD"] if self.add is not None else []) + ([f"-DACT=act_{self.act.cl_function}"] if self.act else []) \
            + (["-DGLU"] if self.glu else [])

    def args(self, inputs: list, output) -> tuple:
        """The kernels' (residual, act_a, act_b) for a forward: `inputs` are the fused operator's."""
        residual = inputs[self.add].buffer if self.add is not None else output.buffer
        a, b = self.act.cl_params() if self.act else (0.0, 0.0)
        return residual, float(a), float(b)


NO_EPILOGUE = KernelEpilogue()


def tile_count(tile: tuple, m: int, n: int, stack: int) -> int:
    """How many work-groups of `tile` (TM, TN, ...) cover `stack` products of m x n."""
    return -(-m // tile[0]) * -(-n // tile[1]) * stack


def mma_dims(tile: tuple) -> tuple:
    """(TM, TN) of a gemm_mma tile (MMA_TILES)."""
    warps_m, warps_n, mi, ni = tile
    return 16 * warps_m * mi, 8 * warps_n * ni


def mma_name(tile: tuple) -> str:
    return "mma {}x{}".format(*mma_dims(tile))


def cpu_name(width: int, taps: bool = False, rows: int = CPU_ROWS) -> str:
    return f"cpu {rows}x{width}" + (" taps" if taps else "")


def gpu_name(tile: tuple) -> str:
    return f"gpu {tile[0]}x{tile[1]}"


class Gemm:
    """The GEMM variants one layer uses on one runtime, by name in `variants`: "cpu MBxNB" for each block of
    CPU_BLOCKS (MB = CPU_ROWS, also SHORT_ROWS without a kernel_size) and "gpu TMxTN" for each tile of GPU_TILES,
    their kernels built on first use. `variant` "cpu" or "gpu" keeps one family (tests run the GPU kernel on
    PoCL too: it must be right everywhere, only slower there); None keeps both, and the rule takes the device's.

    With a convolution's `kernel_size` (kh, kw), the GPU variants are built for implicit im2col (the set
    `implicit`): B is then the stack of input images and each call passes the convolution's `image` geometry.
    The CPU blocks come a second time as "cpu 6xNB taps" (the set `taps`): B is then the stack of padded
    inputs (pad_planes') and `image` the taps kernel's own arguments (see __call__).
    Every kernel applies `epilogue` (a KernelEpilogue) to what it stores."""

    def __init__(self, rt, variant: str | None = None, kernel_size: tuple | None = None,
                 epilogue: KernelEpilogue = NO_EPILOGUE):
        self.rt = rt
        self.kernel_size = kernel_size
        self.epilogue = epilogue
        self._split_kernels = {}  # tile -> gemm_gpu built for split-K, on first need
        self._sum_kernel = None
        self.heights = (CPU_ROWS,) if kernel_size is not None else (CPU_ROWS, *SHORT_ROWS)
        # a GLU epilogue pairs two 16-column vectors: the 32-column blocks of gemm_cpu alone, on any device
        self.blocks = CPU_BLOCKS[:1] if epilogue.glu else CPU_BLOCKS
        cpu = [Variant(cpu_name(block[0], taps, rows), partial(self._cpu_kernel, rows, block, taps),
                       partial(self._cpu_launch, rows, block[0]))
               for taps in ((False, True) if kernel_size is not None else (False,)) for rows in self.heights
               for block in self.blocks]
        gpu = [Variant(gpu_name(tile), partial(self._gpu_kernel, tile), partial(self._gpu_launch, tile))
               for tile in GPU_TILES] if not epilogue.glu else []
        # a variant's kernels by the copies the operands allow (_mma_launch), built on first need
        mma = [Variant(mma_name(tile), dict, partial(self._mma_launch, tile)) for tile in MMA_TILES] \
            if self._has_mma() and not epilogue.glu else []
        self.gemv = Gemv(rt, epilogue, self._fits) if kernel_size is None and not epilogue.glu else None
        gemv = [Variant(GEMV, None, self._gemv_launch)] if self.gemv else []
        self.variants = {v.name: v for v in cpu + gpu + mma + gemv}
        self.implicit = frozenset(gpu + mma if kernel_size is not None else ())
        self.mma = [v.name for v in mma]
        self.taps = frozenset(v for v in cpu if v.name.endswith(" taps"))
        self._tiles = None
        self.family = "cpu" if epilogue.glu else variant
        # with no tile whose work-group this device runs, the CPU kernel, which has no such need, stands in
        if variant == "gpu" and not self.tiles:
            self.family = "cpu"

    # ---- choosing -----------------------------------------------------------------------------------
    @property
    def tiles(self) -> list:
        """The GPU_TILES whose work-group this device runs, found on first need (that builds their kernels)."""
        if self._tiles is None:
            self._tiles = [tile for tile in GPU_TILES if self._runs(tile)]
        return self._tiles

    def _has_mma(self) -> bool:
        return self.rt.precision in MMA_PRECISIONS and not self.rt.is_cpu and tensor_cores(self.rt.device)

    def _runs(self, tile) -> bool:
        tm, tn, _, rm, rn = tile
        return self._fits(self.variants[gpu_name(tile)].kernel(), (tn // rn) * (tm // rm))

    def _fits(self, kernel, group: int) -> bool:
        """Whether this device runs `kernel` in work-groups of `group` work-items."""
        import pyopencl as cl

        limit = min(self.rt.device.max_work_group_size,
                    kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.rt.device))
        return group <= limit

    def rule(self, m: int, n: int, stack: int, row: int = 0, k: int | None = None) -> str:
        """The variant for `stack` products (m, k) @ (k, n) by rule: on CPUs gemm_cpu with the widest block no
        wider than n, or for a convolution whose taps blocks run along rows of `row` columns (0 where the taps
        variants do not apply) a taps variant from TAPS_MIN_BLOCK columns (see there); elsewhere gemm_gpu with
        the tiles of _gpu_tiles (gemm_cpu where the device runs none), or gemv for a plain product of at most
        GEMV_MAX_ROWS rows; on tensor cores gemm_mma (MMA_TILES, MMA_SHORT_K: k, where a layer's K is fixed)."""
        family = self.family or ("cpu" if self.rt.is_cpu else "gpu")
        if family == "gpu" and m <= GEMV_MAX_ROWS and self.gemv and self.gemv.runs:
            return GEMV
        if family == "gpu" and self.mma:
            units = self.rt.device.max_compute_units
            for tile in MMA_TILES:
                tm, tn = mma_dims(tile)
                if m >= tm and 2 * n > tn and 2 * tile_count((tm, tn), m, n, stack) >= units:
                    return mma_name(tile)
            if k is not None and k <= MMA_SHORT_K and m > GEMV_MAX_ROWS:
                return mma_name(MMA_TILES[-1])
        if family == "gpu" and self.tiles:
            return gpu_name(self._gpu_tiles(m, n, stack))
        if self.taps and row >= TAPS_MIN_BLOCK:
            # the widest block that computes few more columns a row than the block that computes the fewest
            computed = {width: -(-row // width) * width  # columns a row, the last block sliding back
                        for width, *_ in self.cpu_blocks if TAPS_MIN_BLOCK <= width <= row}
            fewest = min(computed.values())
            return cpu_name(max(w for w, columns in computed.items() if columns <= fewest * (1 + TAPS_SLACK)), True)
        return cpu_name(next(block[0] for block in self.cpu_blocks if block[0] <= n), rows=self.cpu_rows(m))

    def cpu_rows(self, m: int) -> int:
        """gemm_cpu's rows a block for a product of m rows: the height whose blocks cost least (ROW_BLOCK_COST),
        the taller of two that cost the same; above CPU_ROWS only as TALL_ROWS_MAX says."""
        tall = (m <= TALL_ROWS_MAX and self.cpu_blocks[0][0] == CPU_BLOCKS[0][0]
                and self.rt.device.platform.name == INTEL_CPU_PLATFORM)
        heights = [rows for rows in self.heights if rows <= CPU_ROWS or tall]
        return min(heights, key=lambda rows: (-(-m // rows) * (rows + ROW_BLOCK_COST), -rows))

    @property
    def cpu_blocks(self) -> tuple:
        """The CPU_BLOCKS the rule takes on this device: the 32-column one only where the kernel compiler
        targets AVX-512 (see CPU_BLOCKS); measurement (KUIPER_TUNING=measure) still tries them all. Intel's
        runtime, which does not say, compiles for the CPU it runs on: there the CPU's flags decide, unless
        CL_CONFIG_CPU_TARGET_ARCH names another target (devices.configured_target), whose instruction sets then
        decide as they do for PoCL."""
        features = self.rt.target_features
        if not features and self.rt.is_cpu:
            configured = configured_target(self.rt.device)
            features = cpu_flags() if configured is None else configured
        return self.blocks if "avx512f" in features else CPU_BLOCKS[1:]

    def candidates(self, n: int, row: int = 0) -> list:
        """The variants able to compute products n columns wide, of a convolution's output rows `row` pixels wide
        (0: none for the taps variants): gemm_cpu's blocks no wider (the kernel needs N, or a row, >= its block)
        and the tiles the device runs."""
        cpu = [cpu_name(block[0], taps, rows) for taps, width in ((False, n), (True, row if self.taps else 0))
               for rows in (self.heights if not taps else (CPU_ROWS,)) for block in self.blocks
               if block[0] <= width] if self.family != "gpu" else []
        gpu = [gpu_name(tile) for tile in self.tiles] + self.mma if self.family != "cpu" else []
        return cpu + gpu + ([GEMV] if self.family != "cpu" and self.gemv and self.gemv.runs else [])

    def choices(self, dims, *files, others=(), k: int | None = None) -> Variants:
        """A layer's choice among these variants per input shape, for a layer whose input shapes make GEMMs of
        dims(shapes) = (m, n, stack), or (m, n, stack, row) for a convolution (see rule); `files` names its
        other kernel files, which its time depends on too; k: the products' K, where the layer fixes it.

        others: other ways to compute the layer (kuiper/opencl/winograd.py's WinogradConv,
        kuiper/opencl/conv_pixels.py's PixelConv), more candidates: each one's `variants`, built from its
        kernel `file`, those of other.candidates(shapes) for these shapes. The rule takes the first
        other.preferred(shapes) that names one, else the GEMM's."""
        variants, files = [*self.variants.values()], ["gemm.cl", *(["gemm_mma.cl"] if self.mma else []),
                                                      *(["gemv.cl"] if self.kernel_size is None else []), *files]
        for other in others:
            variants += other.variants
            files.append(other.file)

        def rule(shapes):
            return next(filter(None, (other.preferred(shapes) for other in others)), None) \
                or self.rule(*dims(shapes), k=k)

        def candidates(shapes):
            _, n, _, *row = dims(shapes)
            return self.candidates(n, *row) + [name for other in others for name in other.candidates(shapes)]
        return Variants(self.rt, files, variants, rule=rule, candidates=candidates)

    # ---- kernels ------------------------------------------------------------------------------------
    def _cpu_kernel(self, rows: int, block, taps: bool):
        _, nv, vn = block
        streams = [f"-DSTREAMS={STREAMS_MIN_K}"] if rows <= STREAM_ROWS and not taps else []
        return self.rt.kernel("gemm.cl", "gemm_cpu", [f"-DMB={rows}", f"-DNV={nv}", f"-DVN={vn}", *streams,
                                                      *(["-DTAPS"] if taps else []), *self.epilogue.options])

    def _gpu_kernel(self, tile, split: bool = False):
        tm, tn, tk, rm, rn = tile
        options = [f"-DTM={tm}", f"-DTN={tn}", f"-DTK={tk}", f"-DRM={rm}", f"-DRN={rn}", *self._image_options]
        # the split kernel stores partial sums: the epilogue is gemm_sum's
        options += ["-DSPLIT"] if split else self.epilogue.options
        return self.rt.kernel("gemm.cl", "gemm_gpu", options)

    def _mma_kernel(self, tile, copies: tuple = ()):
        """gemm_mma in `tile`, with the 16-byte copies named in `copies` ("VEC_A", "VEC_B")."""
        warps_m, warps_n, mi, ni = tile
        return self.rt.kernel("gemm_mma.cl", "gemm_mma", [f"-DWARPS_M={warps_m}", f"-DWARPS_N={warps_n}",
                                                          f"-DMI={mi}", f"-DNI={ni}", *self._image_options,
                                                          *(f"-D{c}" for c in copies), *self.epilogue.options])

    @property
    def _image_options(self) -> list:
        """The kernels' options for implicit im2col of this Gemm's convolution (none for a plain product)."""
        return [] if self.kernel_size is None else [f"-DKH={self.kernel_size[0]}", f"-DKW={self.kernel_size[1]}"]

    # ---- launching ----------------------------------------------------------------------------------
    def __call__(self, q, m: int, n: int, k: int, c: Matrix, a: Matrix, b: Matrix, *, groups: int = 1,
                 items: int = 1, bias=None, bias_mode: int = NO_BIAS, image: tuple = (), variant: Variant = None,
                 epilogue: tuple = None):
        """Enqueue C = A @ B (+ bias) for `items` x `groups` products of (m, k) @ (k, n); returns the event.

        bias: a buffer of groups x m values (ROW_BIAS) or groups x n values (COLUMN_BIAS).
        image: for a variant in `implicit`, the geometry of the convolution whose im2col B stands for: (height,
        width, out_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w); for one in `taps`, (the taps
        table, rows of blocks, columns a row, the padded input's floats from one row to the next, grid_pitch,
        grid_w): see cl/gemm.cl and Conv2d._taps_opencl.
        variant: one of `variants` (a layer's choice for its input shape); None: the rule's for this product.
        epilogue: the (residual, act_a, act_b) of this Gemm's epilogue for this call (KernelEpilogue.args)."""
        stack = items * groups
        residual, act_a, act_b = epilogue or (c.buffer, 0.0, 0.0)
        args = (c.buffer, a.buffer, b.buffer, a.buffer if bias is None else bias, bias_mode, residual, act_a, act_b,
                m, n, k, a.ld, b.ld, c.ld, groups, a.offset, b.offset, c.offset, a.group, b.group, c.group, a.item,
                b.item, c.item)
        variant = variant or self.variants[self.rule(m, n, stack)]
        return variant(q, m, n, stack, args, image)

    def _cpu_launch(self, rows: int, width: int, q, kernel, m: int, n: int, stack: int, args: tuple, image: tuple):
        # a taps variant's blocks: those of each row (image[1] rows of image[2] columns)
        blocks = (image[1] * -(-image[2] // width) if image else -(-n // width), -(-m // rows))
        local = self._cpu_group(*blocks, stack)
        return q.run(kernel, (round_up(blocks[0], local[0]), round_up(blocks[1], local[1]), stack), (*local, 1),
                     *args, *image)

    def _gpu_launch(self, tile: tuple, q, kernel, m: int, n: int, stack: int, args: tuple, image: tuple):
        tm, tn, tk, rm, rn = tile
        local = (tn // rn, tm // rm)
        grid = (-(-n // tn) * local[0], -(-m // tm) * local[1])
        k = args[10]
        slices = self._slices(tile_count(tile, m, n, stack), k, SPLIT_SPAN)
        if slices == 1:
            return q.run(kernel, (*grid, stack), (*local, 1), *args, *image)
        span = round_up(-(-k // slices), tk)
        slices = -(-k // span)
        partial = q.scratch("split-K sums", 4 * slices * stack * m * n)
        split = self._split_kernels.get(tile) or self._split_kernels.setdefault(tile, self._gpu_kernel(tile, True))
        q.run(split, (*grid, stack * slices), (*local, 1), *args, *image, slices, span, partial)
        return self._sum(q, args, m, n, stack, slices, partial)

    def _gemv_launch(self, q, _, m: int, n: int, stack: int, args: tuple, image: tuple):
        return self.gemv(q, m, n, stack, args, self._slices, self._sum)

    def _sum(self, q, args: tuple, m: int, n: int, stack: int, slices: int, partial):
        """Enqueue gemm_sum: C = the `slices` partial products in `partial` added up, bias and epilogue applied."""
        if self._sum_kernel is None:
            self._sum_kernel = self.rt.kernel("gemm.cl", "gemm_sum", self.epilogue.options)
        c, bias, bias_mode, residual, act_a, act_b = args[0], *args[3:8]
        return q.run(self._sum_kernel, (round_up(n, 32), round_up(m, 4), stack), None, c, partial, bias, bias_mode,
                     residual, act_a, act_b, m, n, args[13], slices, *args[14:])

    def _mma_launch(self, tile, q, kernels: dict, m: int, n: int, stack: int, args: tuple, image: tuple):
        (tm, tn), threads = mma_dims(tile), 32 * tile[0] * tile[1]
        # an operand is copied 16 bytes at a time where its rows (and N for B) and every matrix's offset are
        # multiples of 16 bytes (implicit im2col's B never); A's rows may end mid-vector (K any)
        vec = 16 // self.rt.storage.itemsize
        a = args[11], args[15], args[18], args[21]  # lda, the offset, the group and item strides
        b = n, args[12], args[16], args[19], args[22]
        copies = tuple(name for name, sizes in (("VEC_A", a), ("VEC_B", () if image else b))
                       if sizes and all(v % vec == 0 for v in sizes))
        kernel = kernels.get(copies) or kernels.setdefault(copies, self._mma_kernel(tile, copies))
        return q.run(kernel, (-(-n // tn) * threads, -(-m // tm), stack), (threads, 1, 1), *args, *image)

    def _slices(self, groups: int, k: int, span: int) -> int:
        """How many slices of K a product of `groups` work-groups is split into: 1 when they fill the device, else
        enough for SPLIT_GROUPS_PER_UNIT work-groups per compute unit, each summing at least `span` of K."""
        wanted = SPLIT_GROUPS_PER_UNIT * self.rt.device.max_compute_units
        return max(1, min(-(-wanted // groups), k // span))

    def _cpu_group(self, column_blocks: int, row_blocks: int, stack: int) -> tuple:
        """The largest of CPU_GROUPS that gives every core a few groups (the global size is rounded up to it: the
        work-items past the product return at once); for a product of few row blocks, a wide group first."""
        wanted = 4 * self.rt.device.max_compute_units
        wide = () if row_blocks >= FEW_ROW_BLOCKS else ((16, 2),) if row_blocks >= 2 else ((32, 1),)
        for x, y in wide + CPU_GROUPS:
            if -(-column_blocks // x) * -(-row_blocks // y) * stack >= wanted:
                return x, y
        return CPU_GROUPS[-1]

    def _gpu_tiles(self, m: int, n: int, stack: int) -> tuple:
        """The largest usable tiles that the product fills more than half of, with one tile for every compute
        unit; else the smallest."""
        units = self.rt.device.max_compute_units
        for tile in self.tiles:
            if 2 * m > tile[0] and 2 * n > tile[1] and tile_count(tile, m, n, stack) >= units:
                return tile
        return self.tiles[-1]


def column_chunks(q, items: int, item_elements: int) -> tuple:
    """The runtime's "columns" scratch buffer (Enqueuer.scratch), and [(first item, item count)] in chunks whose
    column matrices (item_elements floats per item) fit COLUMN_BYTES, the buffer large enough for one chunk."""
    per_chunk = max(1, min(items, COLUMN_BYTES // (4 * item_elements)))
    buffer = q.scratch("columns", 4 * per_chunk * item_elements)
    return buffer, [(first, min(per_chunk, items - first)) for first in range(0, items, per_chunk)]
