// gaussian_blur as torchvision computes it for PIL images: pil_to_tensor,
// float32 conv2d with an outer product of two 1-D Gaussian kernels and
// reflect padding, round half to even, back to uint8. Here the convolution
// is separable (vertical, then horizontal), in float32. PyTorch's summation
// order is its own (and depends on the CPU), so neither order is exact: both
// round a value within a few float32 ulps of the exact sum, which matters
// only where that lies within ~1e-4 of a .5.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "image/functional.h"
#include "image/functional_internal.h"

#ifdef STOKER_FUNCTIONAL_X86
#include <immintrin.h>
#endif

namespace stoker::image {

using functional_internal::UseAvx2;

namespace {

// functional_tensor._get_gaussian_kernel1d in float32:
//   x = linspace(-(k - 1) / 2, (k - 1) / 2, k)  (exact: the step is 1)
//   pdf = exp(-0.5 * (x / sigma)^2); kernel = pdf / pdf.sum()
std::vector<float> GaussianKernel1d(int size, double sigma) {
  const float s = static_cast<float>(sigma);
  const float half = static_cast<float>(size - 1) * 0.5f;
  std::vector<float> pdf(size);
  double sum = 0;
  for (int i = 0; i < size; ++i) {
    const float x = (static_cast<float>(i) - half) / s;
    pdf[i] = std::exp(-0.5f * (x * x));
    sum += pdf[i];
  }
  const float total = static_cast<float>(sum);
  for (float& p : pdf) p /= total;
  return pdf;
}

// Index of the sample that reflect padding puts at `i` of [0, n).
int Reflect(int i, int n) {
  if (n == 1) return 0;
  const int period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// The kernels are symmetric (weights[j] == weights[taps - 1 - j], exactly:
// pdf(x) and pdf(-x) are the same float computation), so each pass adds
// mirrored samples first and multiplies once per pair:
//   sum = w[c] * x[c] + w[0] * (x[0] + x[taps-1]) + w[1] * (...) + ...
// accumulated in float32 in this order (c = taps / 2). The baseline loops
// and the AVX2 kernels perform the same operations in the same order, so
// their results are bit-identical.

// out[e] = the vertical sum of rows[*][e] for e in [begin, n).
STOKER_FUNCTIONAL_INLINE void VerticalImpl(const uint8_t* const* rows,
                                           const float* weights, int taps,
                                           int begin, int n, float* out) {
  const int c = taps / 2;
  {
    const uint8_t* r = rows[c];
    const float w = weights[c];
    for (int e = begin; e < n; ++e) out[e] = w * static_cast<float>(r[e]);
  }
  for (int j = 0; j < c; ++j) {
    const uint8_t* a = rows[j];
    const uint8_t* b = rows[taps - 1 - j];
    const float w = weights[j];
    for (int e = begin; e < n; ++e) {
      out[e] += w * static_cast<float>(a[e] + b[e]);
    }
  }
}

// Rounds half to even (torch.round) after clamping to [0, 255]: adding and
// subtracting 1.5 * 2^23 leaves the nearest integer, ties to even.
inline uint8_t RoundToByte(float v) {
  const float kMagic = 12582912.0f;
  v = v > 0.0f ? v : 0.0f;
  v = v < 255.0f ? v : 255.0f;
  v = (v + kMagic) - kMagic;
  return static_cast<uint8_t>(static_cast<int>(v));
}

// out[e] = RoundToByte(the horizontal sum of in[e + 3 i]) for e in
// [begin, n); acc is scratch of n floats.
STOKER_FUNCTIONAL_INLINE void HorizontalImpl(const float* in,
                                             const float* weights, int taps,
                                             int begin, int n, float* acc,
                                             uint8_t* out) {
  const int c = taps / 2;
  {
    const float* src = in + 3 * c;
    const float w = weights[c];
    for (int e = begin; e < n; ++e) acc[e] = w * src[e];
  }
  for (int i = 0; i < c; ++i) {
    const float* a = in + 3 * i;
    const float* b = in + 3 * (taps - 1 - i);
    const float w = weights[i];
    for (int e = begin; e < n; ++e) acc[e] += w * (a[e] + b[e]);
  }
  for (int e = begin; e < n; ++e) out[e] = RoundToByte(acc[e]);
}

void VerticalBaseline(const uint8_t* const* rows, const float* weights,
                      int taps, int n, float* out) {
  VerticalImpl(rows, weights, taps, 0, n, out);
}
void HorizontalBaseline(const float* in, const float* weights, int taps, int n,
                        float* acc, uint8_t* out) {
  HorizontalImpl(in, weights, taps, 0, n, acc, out);
}

#ifdef STOKER_FUNCTIONAL_X86
// Accumulators in registers, 32 samples at a time.

// 16 bytes at a and at b, summed as 16-bit lanes.
STOKER_FUNCTIONAL_AVX2 inline __m256i AddBytes16(const uint8_t* a,
                                                 const uint8_t* b) {
  return _mm256_add_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(
                              reinterpret_cast<const __m128i*>(a))),
                          _mm256_cvtepu8_epi16(_mm_loadu_si128(
                              reinterpret_cast<const __m128i*>(b))));
}

// Lanes [8 half, 8 half + 8) of 16-bit lanes, as floats.
STOKER_FUNCTIONAL_AVX2 inline __m256 WordsToFloat(__m256i words, int half) {
  const __m128i part = half == 0 ? _mm256_castsi256_si128(words)
                                 : _mm256_extracti128_si256(words, 1);
  return _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(part));
}

STOKER_FUNCTIONAL_AVX2 inline __m256 LoadBytes8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// RoundToByte's clamp (NaN included) and rounding, to int32.
STOKER_FUNCTIONAL_AVX2 inline __m256i RoundToInt32(__m256 v, __m256 zero,
                                                   __m256 max) {
  v = _mm256_min_ps(_mm256_max_ps(v, zero), max);
  return _mm256_cvtps_epi32(
      _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

STOKER_FUNCTIONAL_AVX2 void VerticalAvx2(const uint8_t* const* rows,
                                         const float* weights, int taps, int n,
                                         float* out) {
  const int c = taps / 2;
  int e = 0;
  for (; e + 32 <= n; e += 32) {
    __m256 w = _mm256_set1_ps(weights[c]);
    const uint8_t* r = rows[c] + e;
    __m256 a0 = _mm256_mul_ps(w, LoadBytes8(r));
    __m256 a1 = _mm256_mul_ps(w, LoadBytes8(r + 8));
    __m256 a2 = _mm256_mul_ps(w, LoadBytes8(r + 16));
    __m256 a3 = _mm256_mul_ps(w, LoadBytes8(r + 24));
    for (int j = 0; j < c; ++j) {
      w = _mm256_set1_ps(weights[j]);
      const uint8_t* ra = rows[j] + e;
      const uint8_t* rb = rows[taps - 1 - j] + e;
      const __m256i lo = AddBytes16(ra, rb);
      const __m256i hi = AddBytes16(ra + 16, rb + 16);
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(w, WordsToFloat(lo, 0)));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(w, WordsToFloat(lo, 1)));
      a2 = _mm256_add_ps(a2, _mm256_mul_ps(w, WordsToFloat(hi, 0)));
      a3 = _mm256_add_ps(a3, _mm256_mul_ps(w, WordsToFloat(hi, 1)));
    }
    _mm256_storeu_ps(out + e, a0);
    _mm256_storeu_ps(out + e + 8, a1);
    _mm256_storeu_ps(out + e + 16, a2);
    _mm256_storeu_ps(out + e + 24, a3);
  }
  VerticalImpl(rows, weights, taps, e, n, out);
}

STOKER_FUNCTIONAL_AVX2 void HorizontalAvx2(const float* in,
                                           const float* weights, int taps,
                                           int n, float* acc, uint8_t* out) {
  const int c = taps / 2;
  const __m256 zero = _mm256_setzero_ps();
  const __m256 max = _mm256_set1_ps(255.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int e = 0;
  for (; e + 32 <= n; e += 32) {
    __m256 w = _mm256_set1_ps(weights[c]);
    const float* src = in + e + 3 * c;
    __m256 a0 = _mm256_mul_ps(w, _mm256_loadu_ps(src));
    __m256 a1 = _mm256_mul_ps(w, _mm256_loadu_ps(src + 8));
    __m256 a2 = _mm256_mul_ps(w, _mm256_loadu_ps(src + 16));
    __m256 a3 = _mm256_mul_ps(w, _mm256_loadu_ps(src + 24));
    for (int i = 0; i < c; ++i) {
      w = _mm256_set1_ps(weights[i]);
      const float* pa = in + e + 3 * i;
      const float* pb = in + e + 3 * (taps - 1 - i);
      a0 = _mm256_add_ps(
          a0, _mm256_mul_ps(
                  w, _mm256_add_ps(_mm256_loadu_ps(pa), _mm256_loadu_ps(pb))));
      a1 = _mm256_add_ps(
          a1, _mm256_mul_ps(w, _mm256_add_ps(_mm256_loadu_ps(pa + 8),
                                             _mm256_loadu_ps(pb + 8))));
      a2 = _mm256_add_ps(
          a2, _mm256_mul_ps(w, _mm256_add_ps(_mm256_loadu_ps(pa + 16),
                                             _mm256_loadu_ps(pb + 16))));
      a3 = _mm256_add_ps(
          a3, _mm256_mul_ps(w, _mm256_add_ps(_mm256_loadu_ps(pa + 24),
                                             _mm256_loadu_ps(pb + 24))));
    }
    const __m256i lo = _mm256_packus_epi32(RoundToInt32(a0, zero, max),
                                           RoundToInt32(a1, zero, max));
    const __m256i hi = _mm256_packus_epi32(RoundToInt32(a2, zero, max),
                                           RoundToInt32(a3, zero, max));
    const __m256i bytes =
        _mm256_permutevar8x32_epi32(_mm256_packus_epi16(lo, hi), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + e), bytes);
  }
  HorizontalImpl(in, weights, taps, e, n, acc, out);
}
#else
// UseAvx2() is false; these only keep the call sites uniform.
constexpr auto VerticalAvx2 = VerticalBaseline;
constexpr auto HorizontalAvx2 = HorizontalBaseline;
#endif

}  // namespace

void GaussianBlur(const ImageView& image, int kernel_w, int kernel_h,
                  double sigma_x, double sigma_y) {
  const int width = image.width;
  const int height = image.height;
  if (width <= 0 || height <= 0) return;
  const auto valid_sigma = [](double s) {
    return std::isfinite(s) && static_cast<float>(s) > 0.0f &&
           std::isfinite(static_cast<float>(s));
  };
  if (!valid_sigma(sigma_x) || !valid_sigma(sigma_y)) return;
  kernel_w = std::clamp(kernel_w, 1, kMaxGaussianKernelSize) | 1;
  kernel_h = std::clamp(kernel_h, 1, kMaxGaussianKernelSize) | 1;
  if (kernel_w == 1 && kernel_h == 1) return;  // the kernel is [1.0]

  const std::vector<float> kx = GaussianKernel1d(kernel_w, sigma_x);
  const std::vector<float> ky = GaussianKernel1d(kernel_h, sigma_y);
  const int rx = kernel_w / 2;
  const int ry = kernel_h / 2;
  // Outer taps of small sigmas weigh 0 or a subnormal float (< 2^-126):
  // skip them. Their products (< 2^-118) cannot move a sum that rounds to
  // anything but 0 across a rounding boundary, so the output is the same;
  // and subnormal arithmetic is slow. The kernels are symmetric: trim both
  // ends alike.
  const auto negligible_taps = [](const std::vector<float>& k) {
    int z = 0;
    while (z < static_cast<int>(k.size()) / 2 &&
           k[z] < std::numeric_limits<float>::min()) {
      ++z;
    }
    return z;
  };
  const int zx = negligible_taps(kx);
  const int zy = negligible_taps(ky);
  const int taps_x = kernel_w - 2 * zx;
  const int taps_y = kernel_h - 2 * zy;
  const int n = 3 * width;

  // The source rows (the output overwrites them), the vertical pass of one
  // row with rx reflected pixels on each side, and the horizontal sums.
  std::vector<uint8_t> source(static_cast<size_t>(n) * height);
  for (int y = 0; y < height; ++y) {
    std::memcpy(source.data() + static_cast<size_t>(y) * n,
                image.data + static_cast<int64_t>(y) * image.stride, n);
  }
  std::vector<float> padded(3 * (static_cast<size_t>(width) + 2 * rx));
  std::vector<float> acc(n);
  std::vector<const uint8_t*> rows(taps_y);
  const bool avx2 = UseAvx2();
  for (int y = 0; y < height; ++y) {
    for (int j = 0; j < taps_y; ++j) {
      rows[j] = source.data() +
                static_cast<size_t>(Reflect(y - ry + zy + j, height)) * n;
    }
    float* center = padded.data() + 3 * rx;
    if (avx2) {
      VerticalAvx2(rows.data(), ky.data() + zy, taps_y, n, center);
    } else {
      VerticalBaseline(rows.data(), ky.data() + zy, taps_y, n, center);
    }
    for (int i = 1; i <= rx; ++i) {
      const int left = Reflect(-i, width);
      const int right = Reflect(width - 1 + i, width);
      std::memcpy(center - 3 * i, center + 3 * left, 3 * sizeof(float));
      std::memcpy(center + 3 * (width - 1 + i), center + 3 * right,
                  3 * sizeof(float));
    }
    uint8_t* out = image.data + static_cast<int64_t>(y) * image.stride;
    const float* first = padded.data() + 3 * zx;
    if (avx2) {
      HorizontalAvx2(first, kx.data() + zx, taps_x, n, acc.data(), out);
    } else {
      HorizontalBaseline(first, kx.data() + zx, taps_x, n, acc.data(), out);
    }
  }
}

}  // namespace stoker::image
