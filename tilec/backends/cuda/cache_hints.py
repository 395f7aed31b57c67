"""L2 cache-eviction hints of ``T.copy(..., eviction_policy=...)`` in CUDA source (sm_80 and up).

The lowering marks a hinted copy's global accesses (:attr:`~tilec.lower.tir.MemRef.hint`, ``Write.hint``,
``TmaLoad.hint``, ``TmaStoreBox.hint``; cp.async copies take none, :func:`tilec.lower.ops.hint_global_accesses`
says why); they are emitted with the PTX ``.L2::cache_hint`` qualifier and a 64-bit cache policy made by
``createpolicy.fractional.L2::<priority>.b64 policy, 1.0`` (every line the access touches gets the priority). The
device functions are printed on first use, so kernels without hints keep their source. Loads and stores are ``asm
volatile`` with a memory clobber: the compiler keeps them where the plain accesses were, ordered against barriers
and other memory operations.
"""

from __future__ import annotations

from typing import Any

_POLICY = ("__device__ __forceinline__ unsigned long long policy_{h}() {{\n"
           "  unsigned long long p;\n"
           '  asm("createpolicy.fractional.L2::{h}.b64 %0, 1.0;" : "=l"(p));\n'
           "  return p;\n"
           "}}\n")

# one access of sizeof(T) bytes (1, 2, 4, 8 or 16): its bits through the integer registers of that size
_LD = """template <class T> __device__ __forceinline__ T ld_hint(const T* p, unsigned long long pol) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16, "");
  T v;
  if constexpr (sizeof(T) == 16) {
    uint4 r;
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol) : "memory");
    memcpy(&v, &r, 16);
  } else if constexpr (sizeof(T) == 8) {
    unsigned long long r;
    asm volatile("ld.global.L2::cache_hint.u64 %0, [%1], %2;" : "=l"(r) : "l"(p), "l"(pol) : "memory");
    memcpy(&v, &r, 8);
  } else if constexpr (sizeof(T) == 4) {
    unsigned r;
    asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r) : "l"(p), "l"(pol) : "memory");
    memcpy(&v, &r, 4);
  } else {
    unsigned short r;
    asm volatile("ld.global.L2::cache_hint.u%3 %0, [%1], %2;" : "=h"(r) : "l"(p), "l"(pol), "n"(sizeof(T) * 8)
                 : "memory");
    if constexpr (sizeof(T) == 2) {
      memcpy(&v, &r, 2);
    } else {
      const unsigned char b = static_cast<unsigned char>(r);
      memcpy(&v, &b, 1);
    }
  }
  return v;
}
"""

_ST = """template <class T> __device__ __forceinline__ void st_hint(T* p, T v, unsigned long long pol) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16, "");
  if constexpr (sizeof(T) == 16) {
    uint4 r;
    memcpy(&r, &v, 16);
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                 :: "l"(p), "r"(r.x), "r"(r.y), "r"(r.z), "r"(r.w), "l"(pol) : "memory");
  } else if constexpr (sizeof(T) == 8) {
    unsigned long long r;
    memcpy(&r, &v, 8);
    asm volatile("st.global.L2::cache_hint.u64 [%0], %1, %2;" :: "l"(p), "l"(r), "l"(pol) : "memory");
  } else if constexpr (sizeof(T) == 4) {
    unsigned r;
    memcpy(&r, &v, 4);
    asm volatile("st.global.L2::cache_hint.u32 [%0], %1, %2;" :: "l"(p), "r"(r), "l"(pol) : "memory");
  } else if constexpr (sizeof(T) == 2) {
    unsigned short r;
    memcpy(&r, &v, 2);
    asm volatile("st.global.L2::cache_hint.u16 [%0], %1, %2;" :: "l"(p), "h"(r), "l"(pol) : "memory");
  } else {
    unsigned char b;
    memcpy(&b, &v, 1);
    const unsigned short r = b;
    asm volatile("st.global.L2::cache_hint.u8 [%0], %1, %2;" :: "l"(p), "h"(r), "l"(pol) : "memory");
  }
}
"""

def policy(e: Any, hint: str) -> str:
    """The C expression of the cache policy of ``hint`` (``evict_first`` / ``evict_last``)."""
    return e.helper(f"policy_{hint}", _POLICY.format(h=hint)) + "()"


def load(e: Any, ctype: str, address: str, hint: str) -> str:
    """A load of one ``ctype`` from global ``address`` (a pointer to ``ctype``) with the hint."""
    return f"{e.helper('ld_hint', _LD)}<{ctype}>({address}, {policy(e, hint)})"


def store(e: Any, ctype: str, address: str, value: str, hint: str) -> str:
    """The statement storing ``value`` (a ``ctype``) to global ``address`` with the hint."""
    return f"{e.helper('st_hint', _ST)}<{ctype}>({address}, {value}, {policy(e, hint)});"

