/* mlp_math.h - the arithmetic of train_mlp's layers, written once for the
 * CPU trainer (C) and the GPU trainer (CUDA device code, mlp_cuda.cu), so
 * that both compute the same bits: the NCCL backend's run of a plan can then
 * be compared with the MPI backend's run of the same plan byte for byte.
 *
 * Every fp32 operation is one correctly rounded IEEE operation and is never
 * contracted into a fused multiply-add: the C build is ISO C11 (GCC's
 * default there is -ffp-contract=off, and x86-64 has no FMA without -m
 * flags), and device code uses the _rn intrinsics, which nvcc never fuses.
 * The activation is a rational function shaped like tanh - libm's tanhf and
 * CUDA's differ in the last bit:
 *   act(x) = x (27 + x^2) / (27 + 9 x^2)  for |x| < 3,  sign(x) beyond;
 * it is 1 with slope 0 at 3, and act'(x) = (x^2 - 9)^2 / (9 (3 + x^2)^2). */
#ifndef FP_MLP_MATH_H
#define FP_MLP_MATH_H

#ifdef __CUDACC__
#define MLP_HD static __host__ __device__ __forceinline__
#else
#define MLP_HD static inline
#endif

#ifdef __CUDA_ARCH__
#define MLP_ADD(a, b) __fadd_rn((a), (b))
#define MLP_SUB(a, b) __fsub_rn((a), (b))
#define MLP_MUL(a, b) __fmul_rn((a), (b))
#define MLP_DIV(a, b) __fdiv_rn((a), (b))
#else
#define MLP_ADD(a, b) ((float)(a) + (float)(b))
#define MLP_SUB(a, b) ((float)(a) - (float)(b))
#define MLP_MUL(a, b) ((float)(a) * (float)(b))
#define MLP_DIV(a, b) ((float)(a) / (float)(b))
#endif

MLP_HD float mlp_act(float x) {
  if (x >= 3.0f) return 1.0f;
  if (x <= -3.0f) return -1.0f;
  float x2 = MLP_MUL(x, x);
  return MLP_DIV(MLP_MUL(x, MLP_ADD(27.0f, x2)), MLP_ADD(27.0f, MLP_MUL(9.0f, x2)));
}

MLP_HD float mlp_dact(float x) {
  if (x >= 3.0f || x <= -3.0f) return 0.0f;
  float x2 = MLP_MUL(x, x), q = MLP_SUB(x2, 9.0f), d = MLP_ADD(3.0f, x2);
  return MLP_DIV(MLP_MUL(q, q), MLP_MUL(9.0f, MLP_MUL(d, d)));
}

#endif
