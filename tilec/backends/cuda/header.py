"""tilec's own CUDA device header (no CUTLASS, no CuTe): tensor-core, ldmatrix, cp.async and small helpers."""

from tilec.backends.common_header import COMMON

HEADER = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

namespace tl {

""" + COMMON + r"""
// a double to bfloat16, rounded once (cvt.rn.bf16.f64 on sm_90; before it, through float rounded to odd)
__device__ __forceinline__ __nv_bfloat16 bf16_rn(double d) { return __double2bfloat16(d); }

// exp2 / log2 on the special-function unit (the PTX approximations, within 2 ulp; denormal results flush to 0)
__device__ __forceinline__ float exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// mma.sync m16n8k16, fp32 accumulators; A: 8 halves, B: 4 halves, C: 4 floats per thread (PTX order)
__device__ __forceinline__ void mma_m16n8k16_f16(float* c, const half* a, const half* b) {
  const unsigned* A = reinterpret_cast<const unsigned*>(a);
  const unsigned* B = reinterpret_cast<const unsigned*>(b);
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));
}
__device__ __forceinline__ void mma_m16n8k16_bf16(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b) {
  const unsigned* A = reinterpret_cast<const unsigned*>(a);
  const unsigned* B = reinterpret_cast<const unsigned*>(b);
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));
}

template <class T> __device__ __forceinline__ unsigned smem_addr(const T* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
template <class T> __device__ __forceinline__ void ldmatrix_x1(T* d, const T* p) {
  unsigned* r = reinterpret_cast<unsigned*>(d);
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(smem_addr(p)));
}
template <class T> __device__ __forceinline__ void ldmatrix_x2(T* d, const T* p) {
  unsigned* r = reinterpret_cast<unsigned*>(d);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
template <class T> __device__ __forceinline__ void ldmatrix_x4(T* d, const T* p) {
  unsigned* r = reinterpret_cast<unsigned*>(d);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
template <class T> __device__ __forceinline__ void ldmatrix_x1_trans(T* d, const T* p) {
  unsigned* r = reinterpret_cast<unsigned*>(d);
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(smem_addr(p)));
}
template <class T> __device__ __forceinline__ void ldmatrix_x2_trans(T* d, const T* p) {
  unsigned* r = reinterpret_cast<unsigned*>(d);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
template <class T> __device__ __forceinline__ void ldmatrix_x4_trans(T* d, const T* p) {
  unsigned* r = reinterpret_cast<unsigned*>(d);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// wgmma matrix descriptor: start address, leading / stride byte offsets (all >> 4) and the swizzle mode. Shared
// memory lies below 256 KB, so the start address field (bits 0-13) of base + byte_off (16-byte aligned, >= 0) is
// the base's plus byte_off >> 4 with no carry: the base's descriptor stays loop-invariant, one add per wgmma
__device__ __forceinline__ unsigned long long wgmma_desc(const void* base, int byte_off, int lbo, int sbo, int mode) {
  const unsigned lo = (((smem_addr(base) & 0x3FFFF) >> 4) | (((lbo & 0x3FFFF) >> 4) << 16)) +
                      (static_cast<unsigned>(byte_off) >> 4);
  const unsigned hi = ((sbo & 0x3FFFF) >> 4) | (static_cast<unsigned>(mode) << 30);
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

// cp.async: N bytes global -> shared; when pred is false the destination is zero-filled and nothing is read
template <int N> __device__ __forceinline__ void cp_async(void* dst, const void* src, bool pred) {
  const int src_size = pred ? N : 0;
  if (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_addr(dst)), "l"(src),
                 "r"(src_size));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(smem_addr(dst)), "l"(src), "n"(N),
                 "r"(src_size));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}

}  // namespace tl
"""
