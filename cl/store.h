// How float tensors and weights sit in global memory. With precision="fp32" they are float; with "fp16" the
// host builds every program with -DKUIPER_HALF and they are half, half the bytes to move. Kernels compute in
// float either way (accumulating a K=4608 dot product in half would lose about three digits): LOAD widens a
// stored element to float, STORE rounds a float to the storage type, to nearest even. vload_half and
// vstore_half are core OpenCL, so half storage needs no cl_khr_fp16 (NVIDIA's driver does not report it).
//
//   __global const store_t* x        a float tensor, whatever the precision
//   float v = LOAD(x, i);            element i
//   STORE(y, i, v);                  element i := v
//   float4 v4 = LOAD4(x, i);         elements 4i .. 4i+3 (STORE4 alike)
//   float8 v8 = LOAD8(x, i);         elements i .. i+7 (STORE8 alike), for CPU kernels
#ifndef KUIPER_STORE_H
#define KUIPER_STORE_H

#ifdef KUIPER_HALF
#define store_t half
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half((v), (i), (p))
#define LOAD4(p, i) vload_half4((i), (p))
#define STORE4(p, i, v) vstore_half4((v), (i), (p))
#else
#define store_t float
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#define LOAD4(p, i) vload4((i), (p))
#define STORE4(p, i, v) vstore4((v), (i), (p))
#endif

// Eight consecutive elements as a float8, for CPU kernels: PoCL merges the scalar loads into one vector load
// (vload8 would stay a call), and the stores of a float8's lanes into one vector store.
#define LOAD8(p, i) (float8)(LOAD(p, (i)), LOAD(p, (i) + 1), LOAD(p, (i) + 2), LOAD(p, (i) + 3), LOAD(p, (i) + 4), \
                             LOAD(p, (i) + 5), LOAD(p, (i) + 6), LOAD(p, (i) + 7))
#define STORE8(p, i, v)                                                                                       \
    do {                                                                                                      \
        const float8 lanes_ = (v);                                                                            \
        STORE(p, (i), lanes_.s0); STORE(p, (i) + 1, lanes_.s1); STORE(p, (i) + 2, lanes_.s2);                 \
        STORE(p, (i) + 3, lanes_.s3); STORE(p, (i) + 4, lanes_.s4); STORE(p, (i) + 5, lanes_.s5);             \
        STORE(p, (i) + 6, lanes_.s6); STORE(p, (i) + 7, lanes_.s7);                                           \
    } while (0)

#endif
