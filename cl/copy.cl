// Data movement: copy between two strided views of the same shape, behind every layer that only moves
// elements (kuiper/opencl/strided.py). Strides are signed: 0 reads an element again (expand, repeat), a
// negative one walks back from the offset (flip).
//
// T is an unsigned integer as wide as the element (-DT=uint for float32, -DT=ulong for int64 ...): the
// bits are moved, never converted, so one program serves every dtype of that size and NaNs pass unchanged.
// The host merges dims that are contiguous on both sides, leaving `rank` of them (1 to 6); sizes and
// strides are arguments, so one program serves every shape. Slot 0 holds the outermost dim, slots 7-rank
// to 5 the inner ones in order; the slots between are unused. On GPUs, work-item i handles element i of the
// shape in row-major order: consecutive work-items write consecutive elements whenever the destination's
// innermost stride is 1, which the callers arrange. On CPUs (-DROWS), runs of rows: see the kernel, and
// transpose_tiles for a copy that is contiguous on each side along a different dim.
#include "lanes.h"

// peel coordinate k off the remaining row-major index r and move both offsets along dim k
#define STEP(k)                  \
    {                            \
        const int c = r % n##k;  \
        r /= n##k;               \
        d += c * ds##k;          \
        s += c * ss##k;          \
    }

__kernel OWN_LANES void strided_copy(__global T* restrict dst, const int dst_offset,
                           __global const T* restrict src, const int src_offset, const int n, const int rank,
                           const int n1, const int n2, const int n3, const int n4, const int n5,
                           const int ds0, const int ds1, const int ds2, const int ds3, const int ds4,
                           const int ds5, const int ss0, const int ss1, const int ss2, const int ss3,
                           const int ss4, const int ss5, const int span) {
#ifdef ROWS
    // CPUs: work-item (j, row) copies run j of `span` elements of innermost row `row` (of slot 5, or of the one
    // dim when rank is 1): the divisions find the row, once per run, and the loop along it is one PoCL
    // vectorizes (a division per element makes permutes many times slower there)
    const int j = get_global_id(0);
    int r = get_global_id(1), d = dst_offset, s = src_offset, inner = n, dd = ds0, sd = ss0;
    if (rank > 1) {
        inner = n5, dd = ds5, sd = ss5;
        if (rank > 2) STEP(4)
        if (rank > 3) STEP(3)
        if (rank > 4) STEP(2)
        if (rank > 5) STEP(1)
        d += r * ds0;
        s += r * ss0;
    }
    const int end = min(inner, (j + 1) * span);
    if (dd == 1 && sd == 1) {  // rows contiguous on both sides, the usual case: a loop Intel's runtime vectorizes
        for (int k = j * span; k < end; ++k) dst[d + k] = src[s + k];
    } else {
        for (int k = j * span; k < end; ++k) dst[d + k * dd] = src[s + k * sd];
    }
#else
    const int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    int r = i, d = dst_offset, s = src_offset;
    // only the dims the copy has: a division is the dearest step here, and `rank` is the same for every
    // work-item, so these branches never diverge
    if (rank > 1) STEP(5)
    if (rank > 2) STEP(4)
    if (rank > 3) STEP(3)
    if (rank > 4) STEP(2)
    if (rank > 5) STEP(1)
    // i < n, so what is left of r is the outermost coordinate (its size is not needed)
    d += r * ds0;
    s += r * ss0;
    dst[d] = src[s];
#endif
}

#if defined(ROWS) && defined(TILES)  // TILES: elements of at most 4 bytes (kuiper/opencl/strided.py: TILE)
#define JOIN2(a, b) a##b
#define JOIN(a, b) JOIN2(a, b)
#define T8 JOIN(T, 8)
// element c of each of the tile's eight source rows: the tile's row c of the destination
#define COLUMN(c) (T8)(r[0].c, r[1].c, r[2].c, r[3].c, r[4].c, r[5].c, r[6].c, r[7].c)

// CPUs: a copy contiguous on the source along one dim (a: `along` elements) and on the destination along
// another (b: `across` elements), as NCHW <-> NHWC permutes are. Element (a, b) of batch item z moves from
// src[src_offset + z * src_item + b * src_pitch + a] to dst[dst_offset + z * dst_item + a * dst_pitch + b].
// Work-item (i, j, z) moves the 8 x 8 tile at a = 8i, b = 8j: eight vector reads along the source's rows,
// their lanes regrouped in registers, eight vector writes along the destination's. An element per read, as
// strided_copy walks, costs several times as long (docs/opencl-kernels.md). Edge tiles go element by element.
__kernel OWN_LANES void transpose_tiles(__global T* restrict dst, const int dst_offset,
                                        __global const T* restrict src, const int src_offset, const int along,
                                        const int across, const int src_pitch, const int dst_pitch,
                                        const int src_item, const int dst_item) {
    const int a0 = get_global_id(0) * 8, b0 = get_global_id(1) * 8, z = get_global_id(2);
    src += src_offset + z * src_item;
    dst += dst_offset + z * dst_item;
    if (a0 + 8 <= along && b0 + 8 <= across) {
        T8 r[8];
        #pragma unroll
        for (int i = 0; i < 8; ++i) r[i] = vload8(0, src + (b0 + i) * src_pitch + a0);
        __global T* to = dst + a0 * dst_pitch + b0;
        vstore8(COLUMN(s0), 0, to);
        vstore8(COLUMN(s1), 0, to + dst_pitch);
        vstore8(COLUMN(s2), 0, to + 2 * dst_pitch);
        vstore8(COLUMN(s3), 0, to + 3 * dst_pitch);
        vstore8(COLUMN(s4), 0, to + 4 * dst_pitch);
        vstore8(COLUMN(s5), 0, to + 5 * dst_pitch);
        vstore8(COLUMN(s6), 0, to + 6 * dst_pitch);
        vstore8(COLUMN(s7), 0, to + 7 * dst_pitch);
        return;
    }
    for (int a = a0; a < min(along, a0 + 8); ++a) {
        for (int b = b0; b < min(across, b0 + 8); ++b) {
            dst[a * dst_pitch + b] = src[b * src_pitch + a];
        }
    }
}
#endif
