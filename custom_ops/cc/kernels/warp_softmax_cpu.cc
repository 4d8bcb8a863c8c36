// CPU row math of WarpSoftmax: AVX-512 (F/BW/VL/DQ) when the CPU has it,
// else AVX2+FMA, else scalar, picked once at run time
// ($TFLAB_WARP_SOFTMAX_ISA=scalar|avx2|avx512 forces one).
//
// Why a separate translation unit without TF headers: the vector functions use
// `__attribute__((target(...)))`, so every path is compiled on any x86-64
// host (a build error shows up everywhere) and the library still loads and
// runs on a CPU without AVX2 (the scalar path is taken); this file compiles
// in a few seconds while the OpKernel file takes much longer.
//
// Memory traffic per row (the point of the kernel): x is read from memory
// once and y written once.
//   * rows of up to kInCacheCols elements: pass 1 finds the max, pass 2
//     writes e = exp(x - max) as float32 (into y itself for float32, into a
//     per-thread scratch row otherwise) and sums it, pass 3 scales by 1/sum.
//     Passes 2 and 3 hit the row in L1/L2, so DRAM sees one read and one
//     write, and exp is evaluated once per element.
//   * longer rows: one streaming pass keeps a running (max, sum) per chunk
//     ("online softmax"), then one pass writes exp(x - max) / sum: x is read
//     twice, exp evaluated twice, but nothing longer than a chunk is cached.
//
// exp: Cody-Waite range reduction x = n*ln2 + r, |r| <= ln2/2, and a degree-6
// polynomial (fitted here, see kQ2) for exp(r), then 2^n by
// writing the exponent field. About 1 ULP; see README.md for the measured
// bounds against tf.nn.softmax. Inputs below ln(FLT_MIN) give 0 (TF runs its
// kernels with flush-to-zero, so the reference flushes those as well).

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "warp_softmax.h"

namespace tflab {
namespace {

constexpr int64_t kInCacheCols = 65536;  // 256 KiB of float32: x and y fit in L2.
constexpr int64_t kChunk = 2048;         // online pass: 8 KiB chunks in L1.

constexpr float kExpHi = 88.3762626647949f;    // exp(kExpHi) < FLT_MAX
constexpr float kExpLo = -87.3365447505531f;   // ln(FLT_MIN)
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;          // few mantissa bits: n*kLn2Hi exact
constexpr float kLn2Lo = -2.12194440e-4f;
// exp(r) = 1 + r + r^2 (kQ2 + kQ3 r + kQ4 r^2 + kQ5 r^3 + kQ6 r^4) on |r| <= ln2/2: a degree-6
// polynomial fitted for relative error (iteratively reweighted least squares towards minimax,
// custom_ops/cc/bench/fit_exp_polynomial.py prints these), 3.6e-9 in exact arithmetic.
// Evaluated in float32 with FMAs it is within 1.01 ULP of exp over a sweep of 1.6e8 points of
// [-87.3, 0], against 1.04 ULP for the degree-7 Cephes polynomial it replaced (one FMA more;
// 7% more time per row in cache, custom_ops/README.md); tests/test_09_cpu_paths.py asserts 2 ULP.
constexpr float kQ2 = 4.9999988079e-01f;
constexpr float kQ3 = 1.6666518152e-01f;
constexpr float kQ4 = 4.1669506580e-02f;
constexpr float kQ5 = 8.3689130843e-03f;
constexpr float kQ6 = 1.3752969680e-03f;

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------- scalar ---

inline float ExpScalar(float x) {
  if (std::isnan(x)) return x;
  if (x < kExpLo) return 0.0f;
  x = std::fmin(x, kExpHi);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = std::fma(kQ6, r, kQ5);
  p = std::fma(p, r, kQ4);
  p = std::fma(p, r, kQ3);
  p = std::fma(p, r, kQ2);
  p = std::fma(p, r * r, r) + 1.0f;
  return p * BitsFloat(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float f = std::ldexp(static_cast<float>(mant), -24);  // subnormal
    return sign ? -f : f;
  }
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest even, as Eigen::half does.
inline uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0u);
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                        // below 2^-14: subnormal half
    const float scaled = BitsFloat(x) * 16777216.0f;  // exact: * 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  const uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

inline float BF16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

// Round to nearest even, NaN stays NaN (as Eigen::bfloat16 does).
inline uint16_t FloatToBF16(float f) {
  const uint32_t x = FloatBits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <WsDtype D> struct Storage;
template <> struct Storage<WsDtype::kFloat32> {
  using T = float;
  static float Load(T v) { return v; }
  static T Store(float v) { return v; }
};
template <> struct Storage<WsDtype::kFloat16> {
  using T = uint16_t;
  static float Load(T v) { return HalfToFloat(v); }
  static T Store(float v) { return FloatToHalf(v); }
};
template <> struct Storage<WsDtype::kBFloat16> {
  using T = uint16_t;
  static float Load(T v) { return BF16ToFloat(v); }
  static T Store(float v) { return FloatToBF16(v); }
};

// Float32 scratch row for 16-bit dtypes (y itself is used for float32).
float* ScratchRow(int64_t cols) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < cols) scratch.resize(cols);
  return scratch.data();
}

template <WsDtype D>
void SoftmaxRowScalar(const typename Storage<D>::T* x, typename Storage<D>::T* y,
                      int64_t n) {
  using S = Storage<D>;
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const float v = S::Load(x[i]);
    nan |= std::isnan(v);
    m = std::fmax(m, v);
  }
  double s = 0.0;  // double: the scalar path has no blocked sum
  if (!nan) {
    for (int64_t i = 0; i < n; ++i) s += ExpScalar(S::Load(x[i]) - m);
  }
  // A NaN anywhere, or a max of +inf (inf - inf) or -inf (all -inf), makes
  // the row NaN, as in tf.nn.softmax.
  const float inv = (nan || std::isinf(m)) ? std::numeric_limits<float>::quiet_NaN()
                                             : 1.0f / static_cast<float>(s);
  for (int64_t i = 0; i < n; ++i) y[i] = S::Store(ExpScalar(S::Load(x[i]) - m) * inv);
}

template <WsDtype D>
void GradRowScalar(const typename Storage<D>::T* y, const typename Storage<D>::T* dy,
                   typename Storage<D>::T* dx, int64_t n) {
  using S = Storage<D>;
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += S::Load(y[i]) * S::Load(dy[i]);
  const float dot = static_cast<float>(acc);
  for (int64_t i = 0; i < n; ++i) dx[i] = S::Store(S::Load(y[i]) * (S::Load(dy[i]) - dot));
}

// ------------------------------------------------------------- AVX2+FMA ----

#define TFLAB_AVX2 __attribute__((target("avx2,fma,f16c")))

// exp(x) for x <= 0 or x = -inf, never NaN: the callers take x - max of a
// row already checked for NaN and +-inf max, so no NaN or overflow handling
// is needed here (the NaN rows are written separately).
TFLAB_AVX2 inline __m256 Exp8(__m256 x) {
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_LT_OQ);
  // t = x*log2(e) + 1.5*2^23 rounds to an integer n held in t's low mantissa
  // bits: n as a float is t - 1.5*2^23, and n << 23 is t's bits << 23.
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), magic);
  const __m256 n = _mm256_sub_ps(t, magic);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  // Horner's scheme, as ExpScalar (Estrin's shorter chain gained nothing once the polynomial
  // lost a degree: the loop is throughput-bound, and Horner has one multiply fewer).
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kQ6), r, _mm256_set1_ps(kQ5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kQ4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kQ3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kQ2));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, r);  // exp(r) - 1
  // 2^n for n in [-126, 0]; lanes below kExpLo (n garbage) are zeroed.
  // exp(x) = (exp(r) - 1) * 2^n + 2^n: one FMA instead of "+ 1" then "* 2^n"
  // (6% less CPU time in cache, measured); scaling by 2^n is exact, so the
  // result is the same except for outputs below FLT_MIN.
  const __m256i e = _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(t), 23),
                                     _mm256_set1_epi32(127 << 23));
  const __m256 scale = _mm256_castsi256_ps(e);
  return _mm256_andnot_ps(under, _mm256_fmadd_ps(p, scale, scale));
}

template <WsDtype D> struct Vec;
template <> struct Vec<WsDtype::kFloat32> {
  using T = float;
  TFLAB_AVX2 static __m256 Load(const T* p) { return _mm256_loadu_ps(p); }
  TFLAB_AVX2 static void Store(T* p, __m256 v) { _mm256_storeu_ps(p, v); }
};
template <> struct Vec<WsDtype::kFloat16> {
  using T = uint16_t;
  TFLAB_AVX2 static __m256 Load(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  TFLAB_AVX2 static void Store(T* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};
template <> struct Vec<WsDtype::kBFloat16> {
  using T = uint16_t;
  TFLAB_AVX2 static __m256 Load(const T* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  TFLAB_AVX2 static void Store(T* p, __m256 v) {
    const __m256i b = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    const __m256 nan_mask = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(quiet),
                                             nan_mask));
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
};

// Partial vectors (the last n % 8 elements) go through an 8-wide buffer so
// the tail uses the same arithmetic as the body.
template <WsDtype D>
TFLAB_AVX2 inline __m256 LoadTail(const typename Vec<D>::T* p, int64_t k, float pad) {
  typename Vec<D>::T buf[8];
  const typename Vec<D>::T padv = Storage<D>::Store(pad);
  for (int i = 0; i < 8; ++i) buf[i] = i < k ? p[i] : padv;
  return Vec<D>::Load(buf);
}
template <WsDtype D>
TFLAB_AVX2 inline void StoreTail(typename Vec<D>::T* p, int64_t k, __m256 v) {
  typename Vec<D>::T buf[8];
  Vec<D>::Store(buf, v);
  for (int64_t i = 0; i < k; ++i) p[i] = buf[i];
}

TFLAB_AVX2 inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
// Max of n elements and whether any is NaN (max_ps drops NaNs, so they are
// tracked separately).
template <WsDtype D>
TFLAB_AVX2 float RowMax(const typename Vec<D>::T* x, int64_t n, bool* has_nan) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  __m256 nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 a = Vec<D>::Load(x + i), b = Vec<D>::Load(x + i + 8);
    const __m256 c = Vec<D>::Load(x + i + 16), d = Vec<D>::Load(x + i + 24);
    m0 = _mm256_max_ps(m0, a);
    m1 = _mm256_max_ps(m1, b);
    m2 = _mm256_max_ps(m2, c);
    m3 = _mm256_max_ps(m3, d);
    nan = _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q),
                                         _mm256_cmp_ps(c, d, _CMP_UNORD_Q)));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 a = Vec<D>::Load(x + i);
    m0 = _mm256_max_ps(m0, a);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  if (i < n) {
    const __m256 a = LoadTail<D>(x + i, n - i, -std::numeric_limits<float>::infinity());
    m0 = _mm256_max_ps(m0, a);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  *has_nan = _mm256_movemask_ps(nan) != 0;
  return HMax(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
}

// Sums are blocked: 16 float32 lanes each add at most kSumBlock / 16
// terms, then the block total is added in double. A plain float32 running
// sum over a 50257-element row drifts by ~1e-5 relative; blocked, the row
// sum is as accurate as a short sum (README.md, "Error bounds").
constexpr int64_t kSumBlock = 512;

TFLAB_AVX2 inline double HSumD(__m256 v) {
  const __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                  _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
  h = _mm_add_sd(h, _mm_unpackhi_pd(h, h));
  return _mm_cvtsd_f64(h);
}

// Writes e = exp(x - m) to out (float32) if kStore, and returns sum(e).
// pf, pf_n: memory to prefetch while the exps run (pf[0, pf_n), one 16-element
// step per iteration), see ForwardRows.
template <WsDtype D, bool kStore>
TFLAB_AVX2 float ExpSumImpl(const typename Vec<D>::T* x, float* out, int64_t n, float m,
                            const typename Vec<D>::T* pf = nullptr, int64_t pf_n = 0) {
  const __m256 mv = _mm256_set1_ps(m);
  double total = 0.0;
  int64_t i = 0;
  while (i + 16 <= n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    const int64_t stop = i + kSumBlock < n ? i + kSumBlock : n;
    for (; i + 16 <= stop; i += 16) {
      if (i < pf_n) _mm_prefetch(reinterpret_cast<const char*>(pf + i), _MM_HINT_T0);
      const __m256 a = Exp8(_mm256_sub_ps(Vec<D>::Load(x + i), mv));
      const __m256 b = Exp8(_mm256_sub_ps(Vec<D>::Load(x + i + 8), mv));
      if (kStore) {
        _mm256_storeu_ps(out + i, a);
        _mm256_storeu_ps(out + i + 8, b);
      }
      s0 = _mm256_add_ps(s0, a);
      s1 = _mm256_add_ps(s1, b);
    }
    total += HSumD(_mm256_add_ps(s0, s1));
  }
  __m256 s0 = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 a = Exp8(_mm256_sub_ps(Vec<D>::Load(x + i), mv));
    if (kStore) _mm256_storeu_ps(out + i, a);
    s0 = _mm256_add_ps(s0, a);
  }
  if (i < n) {
    // exp(-inf - m) is 0 for the padding whenever m is finite.
    const __m256 a = Exp8(_mm256_sub_ps(
        LoadTail<D>(x + i, n - i, -std::numeric_limits<float>::infinity()), mv));
    if (kStore) StoreTail<WsDtype::kFloat32>(out + i, n - i, a);
    s0 = _mm256_add_ps(s0, a);
  }
  return static_cast<float>(total + HSumD(s0));
}

template <WsDtype D>
TFLAB_AVX2 float ExpStoreSum(const typename Vec<D>::T* x, float* out, int64_t n, float m,
                             const typename Vec<D>::T* pf, int64_t pf_n) {
  return ExpSumImpl<D, true>(x, out, n, m, pf, pf_n);
}

// Sum of exp(x - m) without storing (online pass over one chunk).
template <WsDtype D>
TFLAB_AVX2 float ExpSum(const typename Vec<D>::T* x, int64_t n, float m) {
  return ExpSumImpl<D, false>(x, nullptr, n, m);
}

// y = e * inv, e float32 (may alias y when D is float32).
template <WsDtype D>
TFLAB_AVX2 void ScaleStore(const float* e, typename Vec<D>::T* y, int64_t n, float inv) {
  const __m256 iv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Vec<D>::Store(y + i, _mm256_mul_ps(_mm256_loadu_ps(e + i), iv));
  if (i < n) StoreTail<D>(y + i, n - i, _mm256_mul_ps(LoadTail<WsDtype::kFloat32>(e + i, n - i, 0.f), iv));
}

// y = e * inv for float32 with non-temporal stores: y's lines are written
// whole without being read first (no read-for-ownership), which saves a third
// of the DRAM traffic when the output is much larger than the caches. The
// products are the same as ScaleStore's.
TFLAB_AVX2 void ScaleStream(const float* e, float* y, int64_t n, float inv) {
  const __m256 iv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(y + i) & 31) != 0; ++i) y[i] = e[i] * inv;
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(e + i), iv));
  for (; i < n; ++i) y[i] = e[i] * inv;
}

// y = exp(x - m) * inv, straight from x (second pass of the online path).
template <WsDtype D>
TFLAB_AVX2 void ExpScaleStore(const typename Vec<D>::T* x, typename Vec<D>::T* y, int64_t n,
                              float m, float inv) {
  const __m256 mv = _mm256_set1_ps(m), iv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    Vec<D>::Store(y + i, _mm256_mul_ps(Exp8(_mm256_sub_ps(Vec<D>::Load(x + i), mv)), iv));
  if (i < n) {
    StoreTail<D>(y + i, n - i,
                 _mm256_mul_ps(Exp8(_mm256_sub_ps(LoadTail<D>(x + i, n - i, 0.f), mv)), iv));
  }
}

// stream: write float32 output with non-temporal stores (large outputs).
// pf, pf_n: input to prefetch during the exp pass (see ForwardRows).
template <WsDtype D>
TFLAB_AVX2 void SoftmaxRowAvx2(const typename Vec<D>::T* x, typename Vec<D>::T* y, int64_t n,
                               bool stream, const typename Vec<D>::T* pf, int64_t pf_n) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  if (n <= kInCacheCols) {
    bool nan = false;
    const float m = RowMax<D>(x, n, &nan);
    if (nan || std::isinf(m)) {  // the whole row is NaN, as in tf.nn.softmax
      for (int64_t i = 0; i < n; ++i) y[i] = Storage<D>::Store(kNaN);
      return;
    }
    const bool in_place = D == WsDtype::kFloat32 && !stream;
    float* e = in_place ? reinterpret_cast<float*>(y) : ScratchRow(n);
    const float s = ExpStoreSum<D>(x, e, n, m, pf, pf_n);
    if constexpr (D == WsDtype::kFloat32) {
      if (stream) {
        ScaleStream(e, y, n, 1.0f / s);
        return;
      }
    }
    ScaleStore<D>(e, y, n, 1.0f / s);
    return;
  }
  // Online pass: running max m and sum s of exp(x - m), rescaled when a
  // chunk raises the max.
  float m = -std::numeric_limits<float>::infinity();
  double s = 0.0;
  bool any_nan = false;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = n - c < kChunk ? n - c : kChunk;
    bool nan = false;
    const float cm = RowMax<D>(x + c, len, &nan);
    any_nan |= nan;
    if (any_nan || std::isinf(cm)) {
      if (any_nan || cm > 0) { any_nan = true; break; }  // NaN or +inf: NaN row
      continue;  // an all -inf chunk adds exp(-inf) = 0
    }
    if (cm > m) {
      s *= ExpScalar(m - cm);
      m = cm;
    }
    s += ExpSum<D>(x + c, len, m);
  }
  if (any_nan || std::isinf(m)) {  // NaN, +inf, or every element -inf
    for (int64_t i = 0; i < n; ++i) y[i] = Storage<D>::Store(kNaN);
    return;
  }
  ExpScaleStore<D>(x, y, n, m, static_cast<float>(1.0 / s));
}

template <WsDtype D>
TFLAB_AVX2 void GradRowAvx2(const typename Vec<D>::T* y, const typename Vec<D>::T* dy,
                            typename Vec<D>::T* dx, int64_t n) {
  double total = 0.0;
  int64_t i = 0;
  while (i + 16 <= n) {
    __m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps();
    const int64_t stop = i + kSumBlock < n ? i + kSumBlock : n;
    for (; i + 16 <= stop; i += 16) {
      d0 = _mm256_fmadd_ps(Vec<D>::Load(y + i), Vec<D>::Load(dy + i), d0);
      d1 = _mm256_fmadd_ps(Vec<D>::Load(y + i + 8), Vec<D>::Load(dy + i + 8), d1);
    }
    total += HSumD(_mm256_add_ps(d0, d1));
  }
  __m256 d0 = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) d0 = _mm256_fmadd_ps(Vec<D>::Load(y + i), Vec<D>::Load(dy + i), d0);
  if (i < n) d0 = _mm256_fmadd_ps(LoadTail<D>(y + i, n - i, 0.f), LoadTail<D>(dy + i, n - i, 0.f), d0);
  const __m256 dot = _mm256_set1_ps(static_cast<float>(total + HSumD(d0)));
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 yv = Vec<D>::Load(y + i);
    Vec<D>::Store(dx + i, _mm256_mul_ps(yv, _mm256_sub_ps(Vec<D>::Load(dy + i), dot)));
  }
  if (i < n) {
    const __m256 yv = LoadTail<D>(y + i, n - i, 0.f);
    StoreTail<D>(dx + i, n - i, _mm256_mul_ps(yv, _mm256_sub_ps(LoadTail<D>(dy + i, n - i, 0.f), dot)));
  }
}

// ------------------------------------------------------------- AVX-512 ---
// 16 lanes, same algorithm and the same arithmetic as the AVX2 path: the same
// exp polynomial in the same (Horner) order, the same max, the same 16 partial
// sums per 512-element block (AVX2 keeps them in two 8-lane accumulators, this
// path in one 16-lane register; the two halves are added the same way), so
// the two paths give the same bits (a test checks it). What AVX-512 changes is
// the instruction count per element (half the exp and load/store
// instructions), and the masked tails.

#define TFLAB_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

TFLAB_AVX512 inline __m512 Exp16(__m512 x) {
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_LT_OQ);
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), magic);
  const __m512 n = _mm512_sub_ps(t, magic);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kQ6), r, _mm512_set1_ps(kQ5));  // Exp8's Horner order
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kQ4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kQ3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kQ2));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, r);  // exp(r) - 1; then (exp(r) - 1) * 2^n + 2^n, as Exp8
  const __m512i e = _mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(t), 23),
                                     _mm512_set1_epi32(127 << 23));
  const __m512 scale = _mm512_castsi512_ps(e);
  return _mm512_maskz_fmadd_ps(static_cast<__mmask16>(~under), p, scale, scale);
}

template <WsDtype D> struct Vec16;
template <> struct Vec16<WsDtype::kFloat32> {
  using T = float;
  TFLAB_AVX512 static __m512 Load(const T* p) { return _mm512_loadu_ps(p); }
  TFLAB_AVX512 static void Store(T* p, __m512 v) { _mm512_storeu_ps(p, v); }
  // Lanes at or past k hold `pad`; nothing past p[k - 1] is read or written.
  TFLAB_AVX512 static __m512 LoadTail(const T* p, int64_t k, float pad) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(pad), static_cast<__mmask16>((1u << k) - 1), p);
  }
  TFLAB_AVX512 static void StoreTail(T* p, int64_t k, __m512 v) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << k) - 1), v);
  }
};
template <> struct Vec16<WsDtype::kFloat16> {
  using T = uint16_t;
  TFLAB_AVX512 static __m512 Load(const T* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  TFLAB_AVX512 static __m256i Pack(__m512 v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  TFLAB_AVX512 static void Store(T* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Pack(v));
  }
  TFLAB_AVX512 static __m512 LoadTail(const T* p, int64_t k, float pad) {
    const __m256i padv = _mm256_set1_epi16(static_cast<short>(Storage<WsDtype::kFloat16>::Store(pad)));
    return _mm512_cvtph_ps(_mm256_mask_loadu_epi16(padv, static_cast<__mmask16>((1u << k) - 1), p));
  }
  TFLAB_AVX512 static void StoreTail(T* p, int64_t k, __m512 v) {
    _mm256_mask_storeu_epi16(p, static_cast<__mmask16>((1u << k) - 1), Pack(v));
  }
};
template <> struct Vec16<WsDtype::kBFloat16> {
  using T = uint16_t;
  TFLAB_AVX512 static __m512 Widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  TFLAB_AVX512 static __m512 Load(const T* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // Round to nearest even, NaN stays NaN (quiet bit set), as FloatToBF16 and the AVX2 path.
  TFLAB_AVX512 static __m256i Pack(__m512 v) {
    const __m512i b = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), quiet);
    return _mm512_cvtepi32_epi16(r);
  }
  TFLAB_AVX512 static void Store(T* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Pack(v));
  }
  TFLAB_AVX512 static __m512 LoadTail(const T* p, int64_t k, float pad) {
    const __m256i padv = _mm256_set1_epi16(static_cast<short>(Storage<WsDtype::kBFloat16>::Store(pad)));
    return Widen(_mm256_mask_loadu_epi16(padv, static_cast<__mmask16>((1u << k) - 1), p));
  }
  TFLAB_AVX512 static void StoreTail(T* p, int64_t k, __m512 v) {
    _mm256_mask_storeu_epi16(p, static_cast<__mmask16>((1u << k) - 1), Pack(v));
  }
};

// Max of n elements and whether any is NaN (max_ps drops NaNs).
template <WsDtype D>
TFLAB_AVX512 float RowMax512(const typename Vec16<D>::T* x, int64_t n, bool* has_nan) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512 a = Vec16<D>::Load(x + i), b = Vec16<D>::Load(x + i + 16);
    const __m512 c = Vec16<D>::Load(x + i + 32), d = Vec16<D>::Load(x + i + 48);
    m0 = _mm512_max_ps(m0, a);
    m1 = _mm512_max_ps(m1, b);
    m2 = _mm512_max_ps(m2, c);
    m3 = _mm512_max_ps(m3, d);
    nan |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, d, _CMP_UNORD_Q);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 a = Vec16<D>::Load(x + i);
    m0 = _mm512_max_ps(m0, a);
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  }
  if (i < n) {
    const __m512 a = Vec16<D>::LoadTail(x + i, n - i, -std::numeric_limits<float>::infinity());
    m0 = _mm512_max_ps(m0, a);
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  }
  *has_nan = nan != 0;
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

// Lane j + lane j+8 in float32, then the 8 sums in double: the AVX2 path's
// HSumD(s0 + s1) on the same 16 partial sums, so the same bits.
TFLAB_AVX512 inline double HSumD16(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 h = _mm256_add_ps(lo, hi);
  const __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(h)),
                                  _mm256_cvtps_pd(_mm256_extractf128_ps(h, 1)));
  __m128d q = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
  q = _mm_add_sd(q, _mm_unpackhi_pd(q, q));
  return _mm_cvtsd_f64(q);
}

// e = exp(x - m) into out (float32), returns sum(e); prefetches pf[0, pf_n).
template <WsDtype D>
TFLAB_AVX512 float ExpStoreSum512(const typename Vec16<D>::T* x, float* out, int64_t n, float m,
                                  const typename Vec16<D>::T* pf, int64_t pf_n) {
  const __m512 mv = _mm512_set1_ps(m);
  double total = 0.0;
  int64_t i = 0;
  while (i + 16 <= n) {
    __m512 s = _mm512_setzero_ps();
    const int64_t stop = i + kSumBlock < n ? i + kSumBlock : n;
    for (; i + 16 <= stop; i += 16) {
      if (i < pf_n) _mm_prefetch(reinterpret_cast<const char*>(pf + i), _MM_HINT_T0);
      const __m512 a = Exp16(_mm512_sub_ps(Vec16<D>::Load(x + i), mv));
      _mm512_storeu_ps(out + i, a);
      s = _mm512_add_ps(s, a);
    }
    total += HSumD16(s);
  }
  if (i < n) {  // 1..15 left; padding -inf gives exp = 0 (m is finite)
    const __m512 a = Exp16(_mm512_sub_ps(
        Vec16<D>::LoadTail(x + i, n - i, -std::numeric_limits<float>::infinity()), mv));
    Vec16<WsDtype::kFloat32>::StoreTail(out + i, n - i, a);
    total += HSumD16(a);
  }
  return static_cast<float>(total);
}

template <WsDtype D>
TFLAB_AVX512 void ScaleStore512(const float* e, typename Vec16<D>::T* y, int64_t n, float inv) {
  const __m512 iv = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) Vec16<D>::Store(y + i, _mm512_mul_ps(_mm512_loadu_ps(e + i), iv));
  if (i < n) {
    Vec16<D>::StoreTail(y + i, n - i,
                        _mm512_mul_ps(Vec16<WsDtype::kFloat32>::LoadTail(e + i, n - i, 0.f), iv));
  }
}

// Non-temporal float32 stores (see ScaleStream); same products.
TFLAB_AVX512 void ScaleStream512(const float* e, float* y, int64_t n, float inv) {
  const __m512 iv = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(y + i) & 63) != 0; ++i) y[i] = e[i] * inv;
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(e + i), iv));
  for (; i < n; ++i) y[i] = e[i] * inv;
}

template <WsDtype D>
TFLAB_AVX512 void SoftmaxRowAvx512(const typename Vec16<D>::T* x, typename Vec16<D>::T* y,
                                   int64_t n, bool stream, const typename Vec16<D>::T* pf,
                                   int64_t pf_n) {
  bool nan = false;
  const float m = RowMax512<D>(x, n, &nan);
  if (nan || std::isinf(m)) {  // the IEEE formula: the whole row is NaN
    for (int64_t i = 0; i < n; ++i) y[i] = Storage<D>::Store(std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const bool in_place = D == WsDtype::kFloat32 && !stream;
  float* e = in_place ? reinterpret_cast<float*>(y) : ScratchRow(n);
  const float s = ExpStoreSum512<D>(x, e, n, m, pf, pf_n);
  if constexpr (D == WsDtype::kFloat32) {
    if (stream) {
      ScaleStream512(e, y, n, 1.0f / s);
      return;
    }
  }
  ScaleStore512<D>(e, y, n, 1.0f / s);
}

// ------------------------------------------------------------ dispatch ---

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

bool CpuHas(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return CpuHas(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

// The path for a request ("" or null: the best this CPU has). Returns -1 and
// fills err for a bad value or a path this CPU lacks.
int ResolveIsa(const char* request, std::string* err) {
  if (request == nullptr || *request == '\0') {
    return static_cast<int>(CpuHas(Isa::kAvx512) ? Isa::kAvx512
                            : CpuHas(Isa::kAvx2) ? Isa::kAvx2 : Isa::kScalar);
  }
  const std::string r(request);
  Isa isa;
  if (r == "scalar") {
    isa = Isa::kScalar;
  } else if (r == "avx2") {
    isa = Isa::kAvx2;
  } else if (r == "avx512") {
    isa = Isa::kAvx512;
  } else {
    *err = "TFLAB_WARP_SOFTMAX_ISA=" + r + " is not a CPU path; use scalar, avx2 or avx512, or unset it "
           "to take the best path this CPU has";
    return -1;
  }
  if (!CpuHas(isa)) {
    *err = "TFLAB_WARP_SOFTMAX_ISA=" + r + ": this CPU lacks " +
           (isa == Isa::kAvx512 ? "AVX-512 (F, BW, VL and DQ)" : "AVX2, FMA or F16C") +
           "; use a path it has (scalar always runs), or unset it";
    return -1;
  }
  return static_cast<int>(isa);
}

struct IsaChoice {
  Isa isa;
  std::string error;  // non-empty: $TFLAB_WARP_SOFTMAX_ISA was bad (the best path runs)
};

// Read once per process. TFLAB_WARP_SOFTMAX_SCALAR=1 is the older spelling of
// TFLAB_WARP_SOFTMAX_ISA=scalar. The Python loader raises the error.
const IsaChoice& Choice() {
  static const IsaChoice choice = [] {
    IsaChoice c{Isa::kScalar, ""};
    const char* req = std::getenv("TFLAB_WARP_SOFTMAX_ISA");
    if ((req == nullptr || *req == '\0') && std::getenv("TFLAB_WARP_SOFTMAX_SCALAR") != nullptr) {
      req = "scalar";
    }
    const int got = ResolveIsa(req, &c.error);
    c.isa = got < 0 ? static_cast<Isa>(ResolveIsa(nullptr, nullptr)) : static_cast<Isa>(got);
    return c;
  }();
  return choice;
}

constexpr int64_t kPrefetchAhead = 2048;  // elements: 8 KiB of float32, ~2 DRAM latencies of work

template <WsDtype D>
void ForwardRows(Isa isa, const void* xv, void* yv, int64_t r0, int64_t r1, int64_t cols,
                 bool stream) {
  using T = typename Storage<D>::T;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  // While a row's exps run (compute-bound, the row in L1/L2), the input
  // kPrefetchAhead elements further on (the next row when rows are longer) is
  // prefetched, so the next max pass finds it in cache instead of waiting on
  // DRAM: memory and arithmetic overlap. Row r prefetches [start + ahead,
  // start + ahead + cols), so consecutive rows cover the task's range without
  // gaps; nothing past the task's last row is fetched.
  const int64_t ahead = cols > kPrefetchAhead ? cols : kPrefetchAhead;
  const int64_t end = r1 * cols;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * cols;
    const int64_t pf_n = std::max<int64_t>(0, std::min<int64_t>(cols, end - (o + ahead)));
    if (isa == Isa::kAvx512 && cols <= kInCacheCols) {
      SoftmaxRowAvx512<D>(x + o, y + o, cols, stream, x + o + ahead, pf_n);
    } else if (isa != Isa::kScalar) {
      // Rows longer than kInCacheCols take the AVX2 online pass on the AVX-512 path too.
      SoftmaxRowAvx2<D>(x + o, y + o, cols, stream, x + o + ahead, pf_n);
    } else {
      SoftmaxRowScalar<D>(x + o, y + o, cols);
    }
  }
  // Non-temporal stores are weakly ordered: make them visible before the
  // pool reports this task done and another thread reads y.
  if (stream) _mm_sfence();
}

template <WsDtype D>
void GradRows(Isa isa, const void* yv, const void* dyv, void* dxv, int64_t r0, int64_t r1,
              int64_t cols) {
  using T = typename Storage<D>::T;
  const T* y = static_cast<const T*>(yv);
  const T* dy = static_cast<const T*>(dyv);
  T* dx = static_cast<T*>(dxv);
  const bool avx2 = isa != Isa::kScalar;  // the gradient has no AVX-512 variant (AVX2 on both)
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * cols;
    if (avx2) {
      GradRowAvx2<D>(y + o, dy + o, dx + o, cols);
    } else {
      GradRowScalar<D>(y + o, dy + o, dx + o, cols);
    }
  }
}

}  // namespace

namespace {

// Rows shorter than this never stream. Measured single-threaded (CPU time per
// element, AVX-512 path, outputs of 32 MiB, 2-core VM under load): streaming
// took 0.83-0.89 ns at 128 columns against 0.46-0.66 cached, about the same at
// 256, and 0.48-0.67 against 0.67-0.80 at 512 (0.50-0.61 against 0.74-0.90 at
// 1024). A short row's e goes through the scratch row and a separate
// streaming pass, which costs more per row than the read-for-ownership saves.
constexpr int64_t kStreamMinCols = 512;

void RowsCpu(Isa isa, WsDtype dtype, const void* x, void* y, int64_t row_begin, int64_t row_end,
             int64_t cols, bool stream_output) {
  // Only float32 rows stream; 16-bit outputs are half the traffic already.
  const bool stream = stream_output && dtype == WsDtype::kFloat32 && cols >= kStreamMinCols;
  switch (dtype) {
    case WsDtype::kFloat32:
      return ForwardRows<WsDtype::kFloat32>(isa, x, y, row_begin, row_end, cols, stream);
    case WsDtype::kFloat16:
      return ForwardRows<WsDtype::kFloat16>(isa, x, y, row_begin, row_end, cols, false);
    case WsDtype::kBFloat16:
      return ForwardRows<WsDtype::kBFloat16>(isa, x, y, row_begin, row_end, cols, false);
  }
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2+fma";
    case Isa::kScalar: return "scalar";
  }
  return "scalar";
}

}  // namespace

void WarpSoftmaxRowsCpu(WsDtype dtype, const void* x, void* y, int64_t row_begin,
                        int64_t row_end, int64_t cols, bool stream_output) {
  RowsCpu(Choice().isa, dtype, x, y, row_begin, row_end, cols, stream_output);
}

void WarpSoftmaxGradRowsCpu(WsDtype dtype, const void* y, const void* dy, void* dx,
                            int64_t row_begin, int64_t row_end, int64_t cols) {
  const Isa isa = Choice().isa;
  switch (dtype) {
    case WsDtype::kFloat32: return GradRows<WsDtype::kFloat32>(isa, y, dy, dx, row_begin, row_end, cols);
    case WsDtype::kFloat16: return GradRows<WsDtype::kFloat16>(isa, y, dy, dx, row_begin, row_end, cols);
    case WsDtype::kBFloat16: return GradRows<WsDtype::kBFloat16>(isa, y, dy, dx, row_begin, row_end, cols);
  }
}

const char* WarpSoftmaxCpuIsa() { return IsaName(Choice().isa); }

}  // namespace tflab

// For Python (ctypes), without a TF op for them:
// which CPU path runs ("avx512", "avx2+fma" or "scalar"),
extern "C" const char* tflab_warp_softmax_cpu_isa() { return tflab::WarpSoftmaxCpuIsa(); }
// the error of a bad $TFLAB_WARP_SOFTMAX_ISA ("" when it is fine; the loader raises it),
extern "C" const char* tflab_warp_softmax_isa_error() { return tflab::Choice().error.c_str(); }
// whether this CPU has a path (0 scalar, 1 avx2, 2 avx512),
extern "C" int tflab_warp_softmax_cpu_has(int isa) {
  return isa >= 0 && isa <= 2 && tflab::CpuHas(static_cast<tflab::Isa>(isa)) ? 1 : 0;
}
// a copy of n bytes written with non-temporal stores (the kernel's output path for large
// outputs): one of the ways the copy roofline tries (custom_ops.bench.copy_roofline), so a
// kernel that streams its output is never measured against a slower copy than its own
// stores allow. -1 without AVX2 (nothing copied); 0 after an sfence.
namespace tflab {
TFLAB_AVX2 static void StreamCopyAvx2(const char* src, char* dst, int64_t n) {
  int64_t head = (32 - reinterpret_cast<uintptr_t>(dst) % 32) % 32;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  int64_t i = head;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}
}  // namespace tflab
extern "C" int tflab_stream_copy(const void* src, void* dst, int64_t n) {
  if (!tflab::CpuHas(tflab::Isa::kAvx2)) return -1;
  tflab::StreamCopyAvx2(static_cast<const char*>(src), static_cast<char*>(dst), n);
  return 0;
}
// and float32 rows through one given path, for tests that compare the paths in
// one process (returns -1 when the CPU lacks the path; nothing is written then).
extern "C" int tflab_warp_softmax_rows_f32(int isa, const float* x, float* y, int64_t rows,
                                           int64_t cols, int stream) {
  if (tflab_warp_softmax_cpu_has(isa) == 0) return -1;
  tflab::RowsCpu(static_cast<tflab::Isa>(isa), tflab::WsDtype::kFloat32, x, y, 0, rows, cols,
                 stream != 0);
  return 0;
}
