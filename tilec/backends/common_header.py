"""Device helpers both backends' headers share (inside their ``namespace tl``): min/max with fminf/fmaxf for
floats, floor division and modulo (the IR's ``//`` and ``%`` on possibly negative operands), sigmoid, the
vector of values ``Vec``, ``bits`` (narrow values packed into a word) and atomic adds."""

COMMON = r"""
template <class T> __device__ __forceinline__ T min(T a, T b) { return a < b ? a : b; }
template <class T> __device__ __forceinline__ T max(T a, T b) { return a < b ? b : a; }
template <> __device__ __forceinline__ float min<float>(float a, float b) { return fminf(a, b); }
template <> __device__ __forceinline__ float max<float>(float a, float b) { return fmaxf(a, b); }
template <> __device__ __forceinline__ double min<double>(double a, double b) { return fmin(a, b); }
template <> __device__ __forceinline__ double max<double>(double a, double b) { return fmax(a, b); }

__device__ __forceinline__ int floordiv(int a, int b) {
  int q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ int floormod(int a, int b) { return a - floordiv(a, b) * b; }
__device__ __forceinline__ long long floordiv(long long a, long long b) {
  long long q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long floormod(long long a, long long b) { return a - floordiv(a, b) * b; }
// Python's a // b and a % b on floats, exactly (numpy's divmod: floor(a / b) rounds up where the quotient
// rounds to a whole number, 1.0 // 0.1 giving 10 for 9); b == 0 gives a / b and NaN, as numpy does
template <class F> __device__ __forceinline__ F ffloormod(F a, F b) {  // float and double
  F m = fmod(a, b);
  if (b == F(0)) return m;
  if (m != F(0)) return ((b < F(0)) != (m < F(0))) ? m + b : m;
  return copysign(F(0), b);
}
template <class F> __device__ __forceinline__ F ffloordiv(F a, F b) {
  if (b == F(0)) return a / b;
  F m = fmod(a, b), d = (a - m) / b;
  if (m != F(0) && ((b < F(0)) != (m < F(0)))) d -= F(1);
  if (d == F(0)) return copysign(F(0), a / b);
  F f = floor(d);
  return d - f > F(0.5) ? f + F(1) : f;
}
// a << n and a >> n as the interpreters compute them (numpy's): a count outside [0, bits of T) shifts every bit
// out (0, or -1 for a negative value shifted right), where C leaves it undefined and GPUs differ (NVIDIA clamps
// the count, AMD masks it); the emitter calls these for counts that are not constants in range
template <class T, class S> __device__ __forceinline__ T shl(T a, S n) {
  return static_cast<unsigned long long>(n) < sizeof(T) * 8u
             ? static_cast<T>(static_cast<unsigned long long>(a) << static_cast<unsigned>(n)) : T(0);
}
template <class T, class S> __device__ __forceinline__ T shr(T a, S n) {
  return static_cast<T>(static_cast<unsigned long long>(n) < sizeof(T) * 8u ? a >> static_cast<unsigned>(n)
                                                                            : (a >> (sizeof(T) * 8u - 1u)) >> 1);
}
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
// N values of T moved by one access (a vector store of values computed in registers)
template <class T, int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };
// the bits of N narrow values as one word W (the first value in the low bits)
template <class W, class T, int N> __device__ __forceinline__ W bits(Vec<T, N> v) {
  static_assert(sizeof(W) == sizeof(T) * N, "a word of N values");
  union { Vec<T, N> v; W w; } u{v};  // no memcpy: NVRTC has none
  return u.w;
}

// atomic adds: atomicAdd; 8- and 16-bit ints (neither CUDA's nor HIP's atomicAdd has them) by compare-and-swap of
// the 32-bit word holding them, wrapping: the low bits of the 32-bit sum
template <class T> __device__ __forceinline__ void atomic_add(T* p, T v) { atomicAdd(p, v); }
template <class T> __device__ __forceinline__ void atomic_add_narrow_int(T* p, T v) {
  const unsigned long long at = reinterpret_cast<unsigned long long>(p);
  unsigned* word = reinterpret_cast<unsigned*>(at & ~3ull);
  const unsigned shift = static_cast<unsigned>(at & 3ull) * 8u;
  const unsigned mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    const unsigned sum = (assumed >> shift) + static_cast<unsigned>(v);
    old = atomicCAS(word, assumed, (assumed & ~mask) | ((sum << shift) & mask));
  } while (old != assumed);
}
__device__ __forceinline__ void atomic_add(signed char* p, signed char v) { atomic_add_narrow_int(p, v); }
__device__ __forceinline__ void atomic_add(unsigned char* p, unsigned char v) { atomic_add_narrow_int(p, v); }
__device__ __forceinline__ void atomic_add(short* p, short v) { atomic_add_narrow_int(p, v); }
__device__ __forceinline__ void atomic_add(unsigned short* p, unsigned short v) { atomic_add_narrow_int(p, v); }
"""
