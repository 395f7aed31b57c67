"""Device helpers both backends' headers share (inside their ``namespace tl``): min/max with fminf/fmaxf for
floats, floor division and modulo (the IR's ``//`` and ``%`` on possibly negative operands), sigmoid, the
vector of values ``Vec`` and ``bits`` (narrow values packed into a word)."""

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
__device__ __forceinline__ float ffloormod(float a, float b) {
  float m = fmodf(a, b);
  if (b == 0.0f) return m;
  if (m != 0.0f) return ((b < 0.0f) != (m < 0.0f)) ? m + b : m;
  return copysignf(0.0f, b);
}
__device__ __forceinline__ float ffloordiv(float a, float b) {
  if (b == 0.0f) return a / b;
  float m = fmodf(a, b), d = (a - m) / b;
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) d -= 1.0f;
  if (d == 0.0f) return copysignf(0.0f, a / b);
  float f = floorf(d);
  return d - f > 0.5f ? f + 1.0f : f;
}
__device__ __forceinline__ double ffloormod(double a, double b) {
  double m = fmod(a, b);
  if (b == 0.0) return m;
  if (m != 0.0) return ((b < 0.0) != (m < 0.0)) ? m + b : m;
  return copysign(0.0, b);
}
__device__ __forceinline__ double ffloordiv(double a, double b) {
  if (b == 0.0) return a / b;
  double m = fmod(a, b), d = (a - m) / b;
  if (m != 0.0 && ((b < 0.0) != (m < 0.0))) d -= 1.0;
  if (d == 0.0) return copysign(0.0, a / b);
  double f = floor(d);
  return d - f > 0.5 ? f + 1.0 : f;
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
"""
