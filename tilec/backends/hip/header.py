"""tilec's own HIP device header: MFMA wrappers, a bfloat16 storage type, vector types and small helpers.

It includes ``hip/hip_runtime.h`` only outside hiprtc (which predefines the HIP device API), and nothing else, so
one source compiles with ``hipcc`` and with hiprtc. The bfloat16 MFMA is ``v_mfma_f32_16x16x16bf16_1k`` (gfx90a;
gfx94x runs the same builtin as ``v_mfma_f32_16x16x16_bf16``); both take four 16-bit values of A and B and four
fp32 accumulators per lane.
"""

from tilec.backends.common_header import COMMON

HEADER = r"""
#if !defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h>
#endif
#ifndef INFINITY
#define INFINITY __builtin_inff()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif

namespace tl {

""" + COMMON + r"""

// bfloat16 storage: the high half of a float; from float rounded to nearest even (NaN stays NaN)
struct bf16 {
  unsigned short bits;
  bf16() = default;
  __host__ __device__ bf16(float f) {
    unsigned u = __builtin_bit_cast(unsigned, f);
    bits = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<unsigned short>((u >> 16) | 0x40u)
                                           : static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  __host__ __device__ operator float() const { return __builtin_bit_cast(float, static_cast<unsigned>(bits) << 16); }
};
// a double to bfloat16, rounded once: to float rounded to odd (an inexact result's last bit set; float's 24 bits
// keep the sticky bit), then to nearest even
__host__ __device__ inline bf16 bf16_rn(double d) {
  const float f = static_cast<float>(d);
  unsigned u = __builtin_bit_cast(unsigned, f);
  if (static_cast<double>(f) != d && d == d && !(u & 1u)) u += (d < 0 ? -d : d) > (f < 0 ? -f : f) ? 1u : ~0u;
  return bf16(__builtin_bit_cast(float, u));
}
// a float or double to an int as the interpreters (and NVIDIA's cvt.rzi) convert it: truncated, saturated to W (32
// bits, 64 for 64-bit types), NaN to 0, then the low bits of that for narrower types. C leaves a value out of range
// undefined, and hipcc's choices differed: half to int8 / int16 became v_cvt_i16_f16 (saturated at 16 bits), float
// to uint8 v_cvt_i32_f32 (-1 gave 255), float to int64 two 32-bit conversions (1e30 gave 0x7fffffff00000000)
template <class W, class F> __device__ __forceinline__ W f2i_sat(F x, F lo, F hi, W wlo, W whi) {
  return x != x ? W(0) : x <= lo ? wlo : x >= hi ? whi : static_cast<W>(x);
}
template <class T, class F> __device__ __forceinline__ T f2i(F x) {
  if (sizeof(T) == 8 && T(-1) < T(0))
    return static_cast<T>(f2i_sat(x, F(-9223372036854775808.0), F(9223372036854775808.0), -9223372036854775807ll - 1,
                                  9223372036854775807ll));
  if (sizeof(T) == 8) return static_cast<T>(f2i_sat(x, F(0), F(18446744073709551616.0), 0ull, ~0ull));
  if (T(-1) < T(0)) return static_cast<T>(f2i_sat(x, F(-2147483648.0), F(2147483648.0), -2147483647 - 1, 2147483647));
  return static_cast<T>(f2i_sat(x, F(0), F(4294967296.0), 0u, 4294967295u));
}
__device__ __forceinline__ bf16 operator+(bf16 a, bf16 b) { return bf16(float(a) + float(b)); }
__device__ __forceinline__ bf16 operator-(bf16 a, bf16 b) { return bf16(float(a) - float(b)); }
__device__ __forceinline__ bf16 operator*(bf16 a, bf16 b) { return bf16(float(a) * float(b)); }
__device__ __forceinline__ bf16 operator/(bf16 a, bf16 b) { return bf16(float(a) / float(b)); }
__device__ __forceinline__ bf16 operator-(bf16 a) {  // the sign flipped (it was float's -, a float result)
  bf16 r;
  r.bits = static_cast<unsigned short>(a.bits ^ 0x8000u);
  return r;
}

// atomic adds (the common header's atomic_add: atomicAdd, 8/16-bit ints by compare-and-swap); 16-bit floats, which
// HIP's atomicAdd lacks, by compare-and-swap of the 32-bit word holding them
template <class T> __device__ __forceinline__ void atomic_add_16(T* p, T v) {
  const unsigned long long at = reinterpret_cast<unsigned long long>(p);
  unsigned* word = reinterpret_cast<unsigned*>(at & ~3ull);
  const unsigned shift = (at & 2ull) ? 16u : 0u;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    const T sum = T(float(__builtin_bit_cast(T, static_cast<unsigned short>(assumed >> shift))) + float(v));
    const unsigned bits = __builtin_bit_cast(unsigned short, sum);
    old = atomicCAS(word, assumed, (assumed & ~(0xffffu << shift)) | (bits << shift));
  } while (old != assumed);
}
__device__ __forceinline__ void atomic_add(_Float16* p, _Float16 v) { atomic_add_16(p, v); }
__device__ __forceinline__ void atomic_add(bf16* p, bf16 v) { atomic_add_16(p, v); }

// vector moves: n elements of T (bf16 as its 16-bit pattern; bool as bytes: clang packs a bool vector in bits)
template <class T, int N> struct vec_of { typedef T type __attribute__((ext_vector_type(N))); };
template <int N> struct vec_of<bf16, N> { typedef unsigned short type __attribute__((ext_vector_type(N))); };
template <int N> struct vec_of<bool, N> { typedef unsigned char type __attribute__((ext_vector_type(N))); };
template <class T, int N> using vec = typename vec_of<T, N>::type;
typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
typedef short i16x4 __attribute__((ext_vector_type(4)));
typedef float f32x4 __attribute__((ext_vector_type(4)));

// MFMA 16x16x16, fp32 accumulators, one wavefront: lane l holds A[l%16][4(l/16)+v], B[4(l/16)+v][l%16] and
// C[4(l/16)+v][l%16] in element v of its 4-value registers
// C[c:c+4] is 16-byte aligned, A and B 8-byte aligned (register arrays are 16-byte aligned, offsets multiples of
// 4 values). Whole-vector accesses let the compiler keep the arrays in registers.
__device__ __forceinline__ void mfma_16x16x16_f16(float* c, const _Float16* a, const _Float16* b) {
  f32x4 C = *reinterpret_cast<const f32x4*>(c);
  C = __builtin_amdgcn_mfma_f32_16x16x16f16(*reinterpret_cast<const f16x4*>(a), *reinterpret_cast<const f16x4*>(b),
                                            C, 0, 0, 0);
  *reinterpret_cast<f32x4*>(c) = C;
}
__device__ __forceinline__ void mfma_16x16x16_bf16(float* c, const bf16* a, const bf16* b) {
  f32x4 C = *reinterpret_cast<const f32x4*>(c);
#if defined(__HIP_DEVICE_COMPILE__) && !(defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__))
#error "tilec: bfloat16 MFMA needs gfx90a or gfx94x"
#endif
  C = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(*reinterpret_cast<const i16x4*>(a), *reinterpret_cast<const i16x4*>(b),
                                                C, 0, 0, 0);
  *reinterpret_cast<f32x4*>(c) = C;
}

}  // namespace tl
"""
