"""The fixed text of every CUDA module: its support header and its prelude.

A module's source begins with ``#include "myelin_cuda.h"``. NVRTC gets :data:`HEADER` under
that name: what CUDA's own headers would give and NVRTC has none of without a CUDA toolkit
(fixed-width integer types, ``__half`` and its conversions, done by PTX instructions). Then
comes :data:`PRELUDE`: myelin's helpers shared by the kernels (integer division and
remainders as the reference defines them, shifts), plain CUDA C++ that uses only the
header's names and CUDA's math library.
"""

HEADER_NAME = "myelin_cuda.h"

HEADER = r"""// myelin_cuda.h: types CUDA's headers would declare (NVRTC has none without a toolkit).
#pragma once
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

struct __align__(2) __half { unsigned short x; };

__device__ __forceinline__ float __half2float(__half h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x));
  return f;
}

__device__ __forceinline__ __half __float2half_rn(float f) {
  __half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
  return h;
}
"""

PRELUDE = r"""#include "myelin_cuda.h"

// Integer division truncating toward zero; x / 0 is 0 and MIN / -1 wraps to MIN.
template <class T, class W> __device__ __forceinline__ T my_idiv(T x, T y) {
  if (y == 0) return 0;
  if ((T)-1 < (T)0 && y == (T)-1) return (T)((W)0 - (W)x);
  return (T)(x / y);
}

// Integer remainder with the sign of the divisor (fmod: of the dividend); x mod 0 is 0.
template <class T> __device__ __forceinline__ T my_imod(T x, T y, bool fmod) {
  if (y == 0 || ((T)-1 < (T)0 && y == (T)-1)) return 0;
  T r = (T)(x % y);
  if (!fmod && r != 0 && ((r < 0) != (y < 0))) r = (T)(r + y);
  return r;
}

// Float remainder with the sign of the divisor (np.mod); a zero one takes y's sign.
__device__ __forceinline__ float my_mod(float x, float y) {
  float r = fmodf(x, y);
  if (r == 0.0f) return copysignf(0.0f, y);
  return ((r < 0.0f) != (y < 0.0f)) ? r + y : r;
}

__device__ __forceinline__ double my_mod(double x, double y) {
  double r = fmod(x, y);
  if (r == 0.0) return copysign(0.0, y);
  return ((r < 0.0) != (y < 0.0)) ? r + y : r;
}

// Shifts: an amount outside [0, bits) gives 0, or -1 for a negative x shifted right.
template <class T, class W> __device__ __forceinline__ T my_shift_left(T x, T y) {
  return (W)y >= (W)(8 * sizeof(T)) ? (T)0 : (T)((W)x << (W)y);
}

template <class T, class W> __device__ __forceinline__ T my_shift_right(T x, T y) {
  const W bits = 8 * sizeof(T);
  if ((T)-1 < (T)0) return (T)(x >> ((W)y >= bits ? bits - 1 : (W)y));
  return (W)y >= bits ? (T)0 : (T)(x >> y);
}
"""
