// Padding (kuiper/layers/pad.py). T is an unsigned integer as wide as the element (-DT=uint for float32):
// elements are moved as bits, as in cl/copy.cl, so one program serves every dtype of that size.

// Constant padding's first step: every element of y becomes `value` (the element's bits); a strided copy
// then puts the input in its place.
__kernel void fill(__global T* restrict y, const T value, const int count) {
    const int i = get_global_id(0);
    if (i < count) {
        y[i] = value;
    }
}

#define REFLECT 1
#define REPLICATE 2
#define CIRCULAR 3

// The input position that output position i + before reads along a dim of n input and `size` output
// elements, in mode MODE (-DMODE): source_positions in pad.py, for one position.
inline int source(const int i, const int n, const int size, const int before) {
#if MODE == REFLECT
    const int mirrored = abs(i);  // before the start: mirrored about element 0
    return mirrored < n ? mirrored : 2 * (n - 1) - mirrored;
#elif MODE == REPLICATE
    return clamp(i, 0, n - 1);
#else
    // circular: the part [start, stop) left after any crop repeats
    const int start = max(0, -before);
    const int period = min(n, size - before) - start;
    return start + ((i - start) % period + period) % period;
#endif
}

// Reflect, replicate or circular padding of the last three dims: y is (outer, o0, o1, o2), x is
// (outer, n0, n1, n2), and dim k is padded by b_k in front (the rest at its end). One work-item per output
// element, in order, so that consecutive work-items write consecutive elements. count = outer * o0 * o1 * o2.
__kernel void pad(__global T* restrict y, __global const T* restrict x, const int count,
                  const int o0, const int o1, const int o2, const int n0, const int n1, const int n2,
                  const int b0, const int b1, const int b2) {
    const int i = get_global_id(0);
    if (i >= count) {
        return;
    }
    int r = i;
    const int p2 = r % o2;
    r /= o2;
    const int p1 = r % o1;
    r /= o1;
    const int p0 = r % o0;
    r /= o0;  // what is left is the index over the outer dims
    const int s0 = source(p0 - b0, n0, o0, b0);
    const int s1 = source(p1 - b1, n1, o1, b1);
    const int s2 = source(p2 - b2, n2, o2, b2);
    y[i] = x[((r * n0 + s0) * n1 + s1) * n2 + s2];
}
