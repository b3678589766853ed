#include "image/resample.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"

#if defined(__x86_64__) || defined(__i386__)
#define STOKER_RESAMPLE_X86 1
#include <immintrin.h>
#endif

namespace stoker::image {
namespace {

using AxisTable = Resampler::AxisTable;

// Bytes past the last pixel of an input row that the SIMD horizontal kernels
// may read (4; see HorizontalPixel128), rounded up.
constexpr int kRowSlack = 16;
// Pillow's limit on fractional bits for 8-bit images (int32 accumulators).
constexpr int kMaxPrecision = 22;
// Larger downscales would need windows too wide for int16 weights.
constexpr double kMaxDownscale = 4096;

// Pillow's filters (libImaging/Resample.c): the function and its support.
struct TriangleFilter {
  static constexpr double kSupport = 1.0;
  static double Weight(double x) {
    x = std::fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
  }
};

// Keys' cubic convolution with a = -0.5 (Pillow's bicubic_filter).
struct BicubicFilter {
  static constexpr double kSupport = 2.0;
  static double Weight(double x) {
    constexpr double a = -0.5;
    x = std::fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
  }
};

// Pillow's precompute_coeffs for `Filter`, quantized. Window o (or
// out_size-1-o when flipped) starts at table->start[o] (absolute source
// index) and its weights sit at the front of its `taps` slots.
template <class Filter>
void ComputeAxis(int in_size, double in0, double in1, int out_size, bool flip,
                 std::vector<double>* scratch, std::vector<int32_t>* counts,
                 AxisTable* table) {
  const double scale = (in1 - in0) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = Filter::kSupport * filter_scale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;

  if (scratch->size() < static_cast<size_t>(out_size) * ksize) {
    scratch->resize(static_cast<size_t>(out_size) * ksize);
  }
  counts->resize(out_size);
  table->out_size = out_size;
  table->start.resize(out_size);
  int max_count = 1;
  double max_weight = 0.0;
  int first = in_size;
  int last = 0;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    // Truncation (not floor) as in Pillow; negatives are clamped anyway.
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    int count = std::max(xmax - xmin, 0);
    const int o = flip ? out_size - 1 - xx : xx;
    double* w = scratch->data() + static_cast<size_t>(o) * ksize;
    double total = 0.0;
    for (int x = 0; x < count; ++x) {
      w[x] = Filter::Weight((x + xmin - center + 0.5) * ss);
      total += w[x];
    }
    if (total == 0.0) {
      // Cannot happen for a valid box (the center pixel has weight > 0 and
      // the bicubic lobes sum to less than it); keep the output defined.
      count = 1;
      xmin = std::min(std::max(static_cast<int>(center), 0), in_size - 1);
      w[0] = 1.0;
      total = 1.0;
    }
    const double inverse = 1.0 / total;
    for (int x = 0; x < count; ++x) {
      w[x] *= inverse;
      max_weight = std::max(max_weight, std::fabs(w[x]));
    }
    table->start[o] = xmin;
    (*counts)[o] = count;
    max_count = std::max(max_count, count);
    first = std::min(first, xmin);
    last = std::max(last, xmin + count);
  }
  const int taps = (max_count + 1) & ~1;
  table->taps = taps;
  table->first = first;
  table->last = last;

  int precision = kMaxPrecision;
  while (precision > 1 &&
         std::floor(max_weight * (1 << precision) + 0.5) + taps > 32767) {
    --precision;
  }
  table->precision = precision;

  // Cumulative rounding: each window's integer weights sum to exactly
  // 2^precision (flat areas stay exact); each differs from its exact value
  // by less than one unit (non-negative filters keep non-negative weights).
  table->weights.assign(static_cast<size_t>(out_size) * taps, 0);
  const double one = static_cast<double>(1 << precision);
  for (int o = 0; o < out_size; ++o) {
    const double* w = scratch->data() + static_cast<size_t>(o) * ksize;
    int16_t* q = table->weights.data() + static_cast<size_t>(o) * taps;
    double prefix = 0.0;
    int32_t previous = 0;
    const int count = (*counts)[o];
    for (int x = 0; x < count; ++x) {
      prefix += w[x];
      // Round half up (bicubic prefixes can be negative).
      const int32_t rounded =
          x + 1 == count ? (1 << precision)
                         : static_cast<int32_t>(std::floor(prefix * one + 0.5));
      q[x] = static_cast<int16_t>(rounded - previous);
      previous = rounded;
    }
  }
}

// Re-bases a table onto a pass input that starts at source index `base` and
// is `length` samples long, and moves each window left where needed so that
// start + taps <= length (the SIMD kernels read all `taps` samples). Returns
// false when length < taps (then start + taps may exceed length; the scalar
// kernels clamp indices instead).
bool RebaseAxis(int base, int length, AxisTable* table) {
  const int taps = table->taps;
  const bool fits = length >= taps;
  for (int o = 0; o < table->out_size; ++o) {
    const int start = table->start[o] - base;
    const int moved = fits ? std::min(start, length - taps) : start;
    const int shift = start - moved;
    if (shift > 0) {
      int16_t* q = table->weights.data() + static_cast<size_t>(o) * taps;
      std::memmove(q + shift, q, sizeof(int16_t) * (taps - shift));
      std::fill(q, q + shift, 0);
    }
    table->start[o] = moved;
  }
  return fits;
}

inline uint8_t Clip8(int32_t v, int precision) {
  v >>= precision;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Scalar kernels. Same integer arithmetic as the SIMD kernels, so the
// results are bit-identical.

void HorizontalScalar(const uint8_t* const* rows, int num_rows, int length,
                      const AxisTable& t, uint8_t* out, ptrdiff_t out_stride) {
  const int32_t round = 1 << (t.precision - 1);
  for (int y = 0; y < num_rows; ++y) {
    const uint8_t* in = rows[y];
    uint8_t* o = out + y * out_stride;
    for (int x = 0; x < t.out_size; ++x) {
      const int16_t* w = t.weights.data() + static_cast<size_t>(x) * t.taps;
      int32_t r = round, g = round, b = round;
      // Taps past the input end (only when length < taps) have weight 0.
      const int taps = std::min(t.taps, length - t.start[x]);
      const uint8_t* p = in + 3 * t.start[x];
      for (int k = 0; k < taps; ++k, p += 3) {
        r += p[0] * w[k];
        g += p[1] * w[k];
        b += p[2] * w[k];
      }
      o[3 * x + 0] = Clip8(r, t.precision);
      o[3 * x + 1] = Clip8(g, t.precision);
      o[3 * x + 2] = Clip8(b, t.precision);
    }
  }
}

void VerticalScalar(const uint8_t* const* rows, int length, int width_bytes,
                    const AxisTable& t, uint8_t* out, ptrdiff_t out_stride,
                    std::vector<int32_t>* acc) {
  const int32_t round = 1 << (t.precision - 1);
  acc->resize(width_bytes);
  int32_t* a = acc->data();
  for (int y = 0; y < t.out_size; ++y) {
    const int16_t* w = t.weights.data() + static_cast<size_t>(y) * t.taps;
    std::fill(a, a + width_bytes, round);
    for (int k = 0; k < t.taps; ++k) {
      if (w[k] == 0) continue;
      const uint8_t* in = rows[std::min(t.start[y] + k, length - 1)];
      const int32_t wk = w[k];
      for (int i = 0; i < width_bytes; ++i) a[i] += in[i] * wk;
    }
    uint8_t* o = out + y * out_stride;
    for (int i = 0; i < width_bytes; ++i) o[i] = Clip8(a[i], t.precision);
  }
}

// Layout of AxisTable::broadcast, in int32 units. Horizontal tables
// interleave neighbouring output pixels so that one 32-byte load gives the
// weights of pixels x and x+1 (x even) for tap pair k; vertical tables are
// plain rows of `pairs` vectors.
inline size_t HorizontalBroadcastIndex(int x, int k, int pairs) {
  return ((static_cast<size_t>(x >> 1) * pairs + k) * 2 + (x & 1)) * 4;
}

void BuildBroadcast(bool horizontal, AxisTable* t) {
  const int pairs = t->taps / 2;
  if (horizontal) {
    t->byte_start.resize(t->out_size);
    for (int o = 0; o < t->out_size; ++o) t->byte_start[o] = 3 * t->start[o];
  }
  const int padded = horizontal ? (t->out_size + 1) & ~1 : t->out_size;
  t->broadcast.assign(static_cast<size_t>(padded) * pairs * 4, 0);
  for (int o = 0; o < t->out_size; ++o) {
    const int16_t* w = t->weights.data() + static_cast<size_t>(o) * t->taps;
    for (int k = 0; k < pairs; ++k) {
      int32_t pair;
      std::memcpy(&pair, w + 2 * k, sizeof(pair));
      const size_t at = horizontal ? HorizontalBroadcastIndex(o, k, pairs)
                                   : (static_cast<size_t>(o) * pairs + k) * 4;
      for (int i = 0; i < 4; ++i) t->broadcast[at + i] = pair;
    }
  }
}

#ifdef STOKER_RESAMPLE_X86

// Shuffles that gather (R0,R1,G0,G1,B0,B1) of pixels 0,1 (A) or 2,3 (B) of
// 16 loaded bytes as int16 lanes (last two lanes zero), ready for madd with
// a tap pair's weights.
#define STOKER_SHUFFLE_A 0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1
#define STOKER_SHUFFLE_B \
  6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1

// One output pixel: the sum over `pairs` tap pairs of the RGB pixels from p
// on. Two tap pairs come from one 16-byte load (4 pixels = 12 bytes, so it
// reads 4 bytes past the window) and an odd last pair from an 8-byte load
// (2 bytes past): hence kRowSlack. `w` is the pixel's first weight vector;
// consecutive pairs are 8 int32 apart (HorizontalBroadcastIndex).
__attribute__((target("ssse3"))) inline __m128i HorizontalPixel128(
    const uint8_t* p, const int32_t* w, int pairs, __m128i round) {
  const __m128i kA = _mm_setr_epi8(STOKER_SHUFFLE_A);
  const __m128i kB = _mm_setr_epi8(STOKER_SHUFFLE_B);
  __m128i acc = round;
  int k = 0;
  for (; k + 2 <= pairs; k += 2) {
    const __m128i v =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6 * k));
    const __m128i w0 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * k));
    const __m128i w1 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * k + 8));
    acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(v, kA), w0));
    acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(v, kB), w1));
  }
  if (k < pairs) {
    const __m128i v =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 6 * k));
    const __m128i w0 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * k));
    acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(v, kA), w0));
  }
  return acc;
}

// Rounds and stores one pixel: 4 bytes (the 4th lands on the next pixel,
// written later) or, for the last pixel of an exact row, 3.
__attribute__((target("ssse3"))) inline void StorePixel128(__m128i acc,
                                                           __m128i shift,
                                                           bool exact,
                                                           uint8_t* o) {
  acc = _mm_sra_epi32(acc, shift);
  acc = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
  const int32_t rgbx = _mm_cvtsi128_si32(acc);
  if (exact) {
    std::memcpy(o, &rgbx, 3);
  } else {
    std::memcpy(o, &rgbx, 4);
  }
}

// Horizontal pass over num_rows rows. With exact_tail the last pixel of each
// row gets a 3-byte store; otherwise rows may be overrun by one byte.
template <int kPairs>
__attribute__((target("ssse3"))) void HorizontalSsse3(
    const uint8_t* const* rows, int num_rows, const AxisTable& t, uint8_t* out,
    ptrdiff_t out_stride, bool exact_tail) {
  const __m128i round = _mm_set1_epi32(1 << (t.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(t.precision);
  const int pairs = kPairs > 0 ? kPairs : t.taps / 2;
  const int n = t.out_size;
  const int loose = exact_tail ? n - 1 : n;  // pixels with 4-byte stores
  const int32_t* start = t.byte_start.data();
  for (int y = 0; y < num_rows; ++y) {
    const uint8_t* in = rows[y];
    uint8_t* o = out + y * out_stride;
    const int32_t* w = t.broadcast.data();
    int x = 0;
    for (; x + 2 <= loose; x += 2, w += 8 * pairs) {
      StorePixel128(HorizontalPixel128(in + start[x], w, pairs, round), shift,
                    false, o + 3 * x);
      StorePixel128(HorizontalPixel128(in + start[x + 1], w + 4, pairs, round),
                    shift, false, o + 3 * x + 3);
    }
    for (; x < n; ++x) {
      const __m128i acc = HorizontalPixel128(
          in + start[x],
          t.broadcast.data() + HorizontalBroadcastIndex(x, 0, pairs), pairs,
          round);
      StorePixel128(acc, shift, exact_tail && x == n - 1, o + 3 * x);
    }
  }
}

// Accumulators of pixels x (low lane) and x+1 (high lane); `w` points at
// their weights for tap pair 0 (HorizontalBroadcastIndex layout).
template <int kPairs>
__attribute__((target("avx2"))) inline __m256i HorizontalPixelPair(
    const uint8_t* p0, const uint8_t* p1, const __m256i* w, int runtime_pairs,
    __m256i round) {
  const int pairs = kPairs > 0 ? kPairs : runtime_pairs;
  const __m256i kA = _mm256_setr_epi8(STOKER_SHUFFLE_A, STOKER_SHUFFLE_A);
  const __m256i kB = _mm256_setr_epi8(STOKER_SHUFFLE_B, STOKER_SHUFFLE_B);
  __m256i acc = round;
  int k = 0;
  for (; k + 2 <= pairs; k += 2) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 6 * k))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 6 * k)), 1);
    acc = _mm256_add_epi32(
        acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, kA),
                               _mm256_loadu_si256(w + k)));
    acc = _mm256_add_epi32(
        acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, kB),
                               _mm256_loadu_si256(w + k + 1)));
  }
  if (k < pairs) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0 + 6 * k))),
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1 + 6 * k)), 1);
    acc = _mm256_add_epi32(
        acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, kA),
                               _mm256_loadu_si256(w + k)));
  }
  return acc;
}

// Same contract as HorizontalSsse3. Four output pixels per step: two pixel
// pairs, packed together and stored as 16 bytes (12 used; the rest is
// rewritten by later pixels), then the remaining pixels singly.
template <int kPairs>
__attribute__((target("avx2"))) void HorizontalAvx2(
    const uint8_t* const* rows, int num_rows, const AxisTable& t, uint8_t* out,
    ptrdiff_t out_stride, bool exact_tail) {
  // RGBX x4 -> RGB x4 in the low 12 bytes.
  const __m128i kCompact =
      _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i round = _mm256_set1_epi32(1 << (t.precision - 1));
  const __m128i round128 = _mm_set1_epi32(1 << (t.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(t.precision);
  const int pairs = kPairs > 0 ? kPairs : t.taps / 2;
  const int n = t.out_size;
  // A 16-byte store at pixel x ends at byte 3x + 16: inside the row (or its
  // successor / slack when not exact) while x + 6 <= n.
  const int quad_end = exact_tail ? std::max(n - 5, 0) & ~3 : n & ~3;
  const int32_t* start = t.byte_start.data();
  for (int y = 0; y < num_rows; ++y) {
    const uint8_t* in = rows[y];
    uint8_t* o = out + y * out_stride;
    const __m256i* w = reinterpret_cast<const __m256i*>(t.broadcast.data());
    int x = 0;
    for (; x < quad_end; x += 4, w += 2 * pairs) {
      __m256i a = HorizontalPixelPair<kPairs>(in + start[x], in + start[x + 1],
                                              w, pairs, round);
      __m256i b = HorizontalPixelPair<kPairs>(
          in + start[x + 2], in + start[x + 3], w + pairs, pairs, round);
      a = _mm256_sra_epi32(a, shift);
      b = _mm256_sra_epi32(b, shift);
      // Lane 0: x, x+2; lane 1: x+1, x+3 (as RGBX dwords 0 and 1).
      const __m256i packed =
          _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_setzero_si256());
      const __m128i ordered =
          _mm_unpacklo_epi32(_mm256_castsi256_si128(packed),
                             _mm256_extracti128_si256(packed, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * x),
                       _mm_shuffle_epi8(ordered, kCompact));
    }
    for (; x < n; ++x) {
      const __m128i acc = HorizontalPixel128(
          in + start[x],
          t.broadcast.data() + HorizontalBroadcastIndex(x, 0, pairs), pairs,
          round128);
      StorePixel128(acc, shift, exact_tail && x == n - 1, o + 3 * x);
    }
  }
}

using HorizontalKernel = void (*)(const uint8_t* const*, int, const AxisTable&,
                                  uint8_t*, ptrdiff_t, bool);

template <template <int> class Kernel>
HorizontalKernel SelectByPairs(int pairs) {
  switch (pairs) {
    case 1: return Kernel<1>::Run;
    case 2: return Kernel<2>::Run;
    case 3: return Kernel<3>::Run;
    case 4: return Kernel<4>::Run;
    case 5: return Kernel<5>::Run;
    case 6: return Kernel<6>::Run;
    default: return Kernel<0>::Run;
  }
}

template <int kPairs>
struct HorizontalSsse3Kernel {
  static constexpr HorizontalKernel Run = HorizontalSsse3<kPairs>;
};
template <int kPairs>
struct HorizontalAvx2Kernel {
  static constexpr HorizontalKernel Run = HorizontalAvx2<kPairs>;
};

// 16 output bytes at `offset`: the sum over tap pairs of two input rows,
// interleaved bytewise so that one madd covers both taps.
__attribute__((target("ssse3"))) inline void VerticalChunk128(
    const uint8_t* const* tap_rows, const int32_t* w, int pairs, int offset,
    __m128i round, __m128i shift, uint8_t* out) {
  const __m128i zero = _mm_setzero_si128();
  __m128i s0 = round, s1 = round, s2 = round, s3 = round;
  for (int k = 0; k < pairs; ++k) {
    const __m128i a = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(tap_rows[2 * k] + offset));
    const __m128i b = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(tap_rows[2 * k + 1] + offset));
    const __m128i lo = _mm_unpacklo_epi8(a, b);
    const __m128i hi = _mm_unpackhi_epi8(a, b);
    const __m128i wk =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 4 * k));
    s0 = _mm_add_epi32(s0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), wk));
    s1 = _mm_add_epi32(s1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), wk));
    s2 = _mm_add_epi32(s2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), wk));
    s3 = _mm_add_epi32(s3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), wk));
  }
  s0 = _mm_sra_epi32(s0, shift);
  s1 = _mm_sra_epi32(s1, shift);
  s2 = _mm_sra_epi32(s2, shift);
  s3 = _mm_sra_epi32(s3, shift);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + offset),
                   _mm_packus_epi16(_mm_packs_epi32(s0, s1),
                                    _mm_packs_epi32(s2, s3)));
}

// Requires width_bytes >= 16: a last partial chunk is moved left to end at
// the row end (recomputing a few bytes) instead of writing past it.
__attribute__((target("ssse3"))) void VerticalSsse3(
    const uint8_t* const* rows, int length, int width_bytes, const AxisTable& t,
    uint8_t* out, ptrdiff_t out_stride, std::vector<const uint8_t*>* tap_rows) {
  const __m128i round = _mm_set1_epi32(1 << (t.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(t.precision);
  const int pairs = t.taps / 2;
  tap_rows->resize(t.taps);
  const uint8_t** r = tap_rows->data();
  for (int y = 0; y < t.out_size; ++y) {
    for (int k = 0; k < t.taps; ++k) {
      r[k] = rows[std::min(t.start[y] + k, length - 1)];
    }
    const int32_t* w = t.broadcast.data() + static_cast<size_t>(y) * pairs * 4;
    uint8_t* o = out + y * out_stride;
    int i = 0;
    for (; i + 16 <= width_bytes; i += 16) {
      VerticalChunk128(r, w, pairs, i, round, shift, o);
    }
    if (i < width_bytes) {
      VerticalChunk128(r, w, pairs, width_bytes - 16, round, shift, o);
    }
  }
}

template <int kPairs>
__attribute__((target("avx2"))) inline void VerticalChunk256(
    const uint8_t* const* tap_rows, const __m256i* w, int runtime_pairs,
    int offset, __m256i round, __m128i shift, uint8_t* out) {
  const int pairs = kPairs > 0 ? kPairs : runtime_pairs;
  const __m256i zero = _mm256_setzero_si256();
  __m256i s0 = round, s1 = round, s2 = round, s3 = round;
  for (int k = 0; k < pairs; ++k) {
    const __m256i a = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(tap_rows[2 * k] + offset));
    const __m256i b = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(tap_rows[2 * k + 1] + offset));
    // Per 128-bit lane, like the SSSE3 chunk; packing below restores the
    // byte order within each lane.
    const __m256i lo = _mm256_unpacklo_epi8(a, b);
    const __m256i hi = _mm256_unpackhi_epi8(a, b);
    const __m256i wk = w[k];
    s0 = _mm256_add_epi32(s0,
                          _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), wk));
    s1 = _mm256_add_epi32(s1,
                          _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), wk));
    s2 = _mm256_add_epi32(s2,
                          _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), wk));
    s3 = _mm256_add_epi32(s3,
                          _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), wk));
  }
  s0 = _mm256_sra_epi32(s0, shift);
  s1 = _mm256_sra_epi32(s1, shift);
  s2 = _mm256_sra_epi32(s2, shift);
  s3 = _mm256_sra_epi32(s3, shift);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + offset),
                      _mm256_packus_epi16(_mm256_packs_epi32(s0, s1),
                                          _mm256_packs_epi32(s2, s3)));
}

// Requires width_bytes >= 32; otherwise as VerticalSsse3. `scratch` holds
// the current row's weights as 32-byte vectors.
template <int kPairs>
__attribute__((target("avx2"))) void VerticalAvx2(
    const uint8_t* const* rows, int length, int width_bytes, const AxisTable& t,
    uint8_t* out, ptrdiff_t out_stride, std::vector<const uint8_t*>* tap_rows,
    std::vector<int32_t>* scratch) {
  const __m256i round = _mm256_set1_epi32(1 << (t.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(t.precision);
  const int pairs = t.taps / 2;
  tap_rows->resize(t.taps);
  const uint8_t** r = tap_rows->data();
  scratch->resize(8 * pairs + 8);
  int32_t* aligned = scratch->data();
  while (reinterpret_cast<uintptr_t>(aligned) % 32 != 0) ++aligned;
  __m256i* w = reinterpret_cast<__m256i*>(aligned);
  for (int y = 0; y < t.out_size; ++y) {
    for (int k = 0; k < t.taps; ++k) {
      r[k] = rows[std::min(t.start[y] + k, length - 1)];
    }
    const int32_t* row_weights =
        t.broadcast.data() + static_cast<size_t>(y) * pairs * 4;
    for (int k = 0; k < pairs; ++k) {
      _mm256_store_si256(
          w + k, _mm256_broadcastsi128_si256(_mm_loadu_si128(
                     reinterpret_cast<const __m128i*>(row_weights + 4 * k))));
    }
    uint8_t* o = out + y * out_stride;
    int i = 0;
    for (; i + 32 <= width_bytes; i += 32) {
      VerticalChunk256<kPairs>(r, w, pairs, i, round, shift, o);
    }
    if (i < width_bytes) {
      VerticalChunk256<kPairs>(r, w, pairs, width_bytes - 32, round, shift, o);
    }
  }
}

using VerticalAvx2Kernel = void (*)(const uint8_t* const*, int, int,
                                    const AxisTable&, uint8_t*, ptrdiff_t,
                                    std::vector<const uint8_t*>*,
                                    std::vector<int32_t>*);

VerticalAvx2Kernel SelectVerticalAvx2(int pairs) {
  switch (pairs) {
    case 1: return VerticalAvx2<1>;
    case 2: return VerticalAvx2<2>;
    case 3: return VerticalAvx2<3>;
    case 4: return VerticalAvx2<4>;
    default: return VerticalAvx2<0>;
  }
}

#undef STOKER_SHUFFLE_A
#undef STOKER_SHUFFLE_B

#endif  // STOKER_RESAMPLE_X86

Resampler::Isa DetectIsa(ResamplerOptions::Kernels cap) {
  if (cap == ResamplerOptions::Kernels::kScalar) return Resampler::Isa::kScalar;
#ifdef STOKER_RESAMPLE_X86
  __builtin_cpu_init();
  if (cap == ResamplerOptions::Kernels::kAuto &&
      __builtin_cpu_supports("avx2")) {
    return Resampler::Isa::kAvx2;
  }
  if (__builtin_cpu_supports("ssse3")) return Resampler::Isa::kSsse3;
#endif
  return Resampler::Isa::kScalar;
}

// Rough per-call work of each pass (instruction counts of the SIMD kernels),
// used only to pick the pass order.
double HorizontalCost(int rows, const AxisTable& t) {
  return static_cast<double>(rows) * t.out_size * (8.0 + 2.5 * t.taps);
}

double VerticalCost(int out_rows, int width_pixels, const AxisTable& t) {
  return static_cast<double>(out_rows) * width_pixels * 3.0 / 16.0 *
         (12.0 + 9.0 * t.taps);
}

bool ValidAxis(double b0, double b1, int size) {
  return std::isfinite(b0) && std::isfinite(b1) && b0 >= 0.0 && b0 < b1 &&
         b1 <= static_cast<double>(size);
}

// Resample's argument checks (see resample.h).
absl::Status CheckResampleArgs(const uint8_t* src, int src_w, int src_h,
                               int src_stride, int channels, double box_x0,
                               double box_y0, double box_x1, double box_y1,
                               int out_w, int out_h, const uint8_t* dst,
                               int dst_stride) {
  constexpr int kMaxSide = 1 << 20;
  if (src == nullptr || dst == nullptr) {
    return absl::InvalidArgumentError("Resample: null image pointer");
  }
  if (channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resample: only 3 channels are supported, got ", channels));
  }
  if (src_w <= 0 || src_h <= 0 || out_w <= 0 || out_h <= 0 ||
      src_w > kMaxSide || src_h > kMaxSide || out_w > kMaxSide ||
      out_h > kMaxSide) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resample: bad sizes: source ", src_w, "x", src_h,
                     ", output ", out_w, "x", out_h));
  }
  if (src_stride < 3 * src_w || dst_stride < 3 * out_w) {
    return absl::InvalidArgumentError("Resample: stride smaller than a row");
  }
  if (!ValidAxis(box_x0, box_x1, src_w) || !ValidAxis(box_y0, box_y1, src_h)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Resample: box [", box_x0, ", ", box_x1, ") x [", box_y0, ", ", box_y1,
        ") is empty or outside the ", src_w, "x", src_h, " source"));
  }
  if ((box_x1 - box_x0) / out_w > kMaxDownscale ||
      (box_y1 - box_y0) / out_h > kMaxDownscale) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resample: downscaling by more than ", kMaxDownscale,
                     " is not supported"));
  }
  return absl::OkStatus();
}


void RunHorizontal(Resampler::Isa isa, bool simd_fits,
                   const uint8_t* const* rows, int num_rows, int length,
                   const AxisTable& t, uint8_t* out, ptrdiff_t out_stride,
                   bool exact_tail) {
#ifdef STOKER_RESAMPLE_X86
  if (simd_fits && isa == Resampler::Isa::kAvx2) {
    SelectByPairs<HorizontalAvx2Kernel>(t.taps / 2)(rows, num_rows, t, out,
                                                     out_stride, exact_tail);
    return;
  }
  if (simd_fits && isa == Resampler::Isa::kSsse3) {
    SelectByPairs<HorizontalSsse3Kernel>(t.taps / 2)(rows, num_rows, t, out,
                                                      out_stride, exact_tail);
    return;
  }
#endif
  HorizontalScalar(rows, num_rows, length, t, out, out_stride);
}

void RunVertical(Resampler::Isa isa, const uint8_t* const* rows, int length,
                 int width_bytes, const AxisTable& t, uint8_t* out,
                 ptrdiff_t out_stride, std::vector<const uint8_t*>* tap_rows,
                 std::vector<int32_t>* scratch) {
#ifdef STOKER_RESAMPLE_X86
  if (isa == Resampler::Isa::kAvx2 && width_bytes >= 32) {
    SelectVerticalAvx2(t.taps / 2)(rows, length, width_bytes, t, out,
                                   out_stride, tap_rows, scratch);
    return;
  }
  if (isa != Resampler::Isa::kScalar && width_bytes >= 16) {
    VerticalSsse3(rows, length, width_bytes, t, out, out_stride, tap_rows);
    return;
  }
#endif
  VerticalScalar(rows, length, width_bytes, t, out, out_stride, scratch);
}

// Pillow's nearest-neighbour resize along one axis (ImagingScaleAffine, as
// ImagingResize runs it for NEAREST): output i reads source index
// floor(x0 + scale / 2 + i * scale), the sum accumulated one step at a time
// as Pillow does. The box's integer part is added afterwards: torchvision
// crops (whole pixels) before it resizes, so Pillow accumulates from the
// crop's own origin. Indices are clamped to the image (only a box edge at
// the image edge within rounding can reach past it).
void NearestAxis(int in_size, double in0, double in1, int out_size, bool flip,
                 int element_bytes, std::vector<int32_t>* offsets) {
  const double base = std::floor(in0);
  const double scale = (in1 - in0) / out_size;
  double position = (in0 - base) + scale * 0.5;
  const int first = static_cast<int>(base);
  offsets->resize(out_size);
  for (int i = 0; i < out_size; ++i) {
    const int index = position < 0.0 ? -1 : static_cast<int>(position);
    const int clamped = std::clamp(first + index, 0, in_size - 1);
    (*offsets)[flip ? out_size - 1 - i : i] = clamped * element_bytes;
    position += scale;
  }
}

}  // namespace

Resampler::Resampler(const ResamplerOptions& options)
    : isa_(DetectIsa(options.kernels)) {}

void Resampler::ResampleNearest(const uint8_t* src, int src_w, int src_h,
                                int src_stride, double box_x0, double box_y0,
                                double box_x1, double box_y1, int out_w,
                                int out_h, const ResampleParams& params,
                                uint8_t* dst, int dst_stride) {
  NearestAxis(src_w, box_x0, box_x1, out_w, params.flip_horizontal, 3,
              &nearest_columns_);
  NearestAxis(src_h, box_y0, box_y1, out_h, params.flip_vertical, 1,
              &nearest_rows_);
  const int32_t* columns = nearest_columns_.data();
  for (int y = 0; y < out_h; ++y) {
    const uint8_t* in =
        src + static_cast<ptrdiff_t>(nearest_rows_[y]) * src_stride;
    uint8_t* o = dst + static_cast<ptrdiff_t>(y) * dst_stride;
    for (int x = 0; x < out_w; ++x, o += 3) {
      const uint8_t* p = in + columns[x];
      o[0] = p[0];
      o[1] = p[1];
      o[2] = p[2];
    }
  }
}

absl::Status Resampler::Resample(const uint8_t* src, int src_w, int src_h,
                                 int src_stride, int channels, double box_x0,
                                 double box_y0, double box_x1, double box_y1,
                                 int out_w, int out_h, bool flip_horizontal,
                                 uint8_t* dst, int dst_stride) {
  ResampleParams params;
  params.flip_horizontal = flip_horizontal;
  return Resample(src, src_w, src_h, src_stride, channels, box_x0, box_y0,
                  box_x1, box_y1, out_w, out_h, params, dst, dst_stride);
}

absl::Status Resampler::Resample(const uint8_t* src, int src_w, int src_h,
                                 int src_stride, int channels, double box_x0,
                                 double box_y0, double box_x1, double box_y1,
                                 int out_w, int out_h,
                                 const ResampleParams& params, uint8_t* dst,
                                 int dst_stride) {
  if (absl::Status s = CheckResampleArgs(src, src_w, src_h, src_stride,
                                         channels, box_x0, box_y0, box_x1,
                                         box_y1, out_w, out_h, dst, dst_stride);
      !s.ok()) {
    return s;
  }

  switch (params.interpolation) {
    case Interpolation::kNearest:
      ResampleNearest(src, src_w, src_h, src_stride, box_x0, box_y0, box_x1,
                      box_y1, out_w, out_h, params, dst, dst_stride);
      return absl::OkStatus();
    case Interpolation::kBilinear:
      ComputeAxis<TriangleFilter>(src_w, box_x0, box_x1, out_w,
                                  params.flip_horizontal, &scratch_weights_,
                                  &scratch_counts_, &horizontal_);
      ComputeAxis<TriangleFilter>(src_h, box_y0, box_y1, out_h,
                                  params.flip_vertical, &scratch_weights_,
                                  &scratch_counts_, &vertical_);
      break;
    case Interpolation::kBicubic:
      ComputeAxis<BicubicFilter>(src_w, box_x0, box_x1, out_w,
                                 params.flip_horizontal, &scratch_weights_,
                                 &scratch_counts_, &horizontal_);
      ComputeAxis<BicubicFilter>(src_h, box_y0, box_y1, out_h,
                                 params.flip_vertical, &scratch_weights_,
                                 &scratch_counts_, &vertical_);
      break;
  }

  const int used_rows = vertical_.last - vertical_.first;
  const int used_cols = horizontal_.last - horizontal_.first;
  // Bicubic overshoots, and the intermediate is clamped to [0, 255]: near
  // saturated edges the order matters, so it follows Pillow's (horizontal
  // first). The bilinear filter never leaves [0, 255]: either order.
  const bool horizontal_first =
      params.interpolation == Interpolation::kBicubic ||
      HorizontalCost(used_rows, horizontal_) +
              VerticalCost(out_h, out_w, vertical_) <=
          VerticalCost(out_h, used_cols, vertical_) +
              HorizontalCost(out_h, horizontal_);
  if (horizontal_first) {
    ResampleHorizontalFirst(src, src_w, src_h, src_stride, out_w, dst,
                            dst_stride);
  } else {
    ResampleVerticalFirst(src, src_h, src_stride, out_h, dst, dst_stride);
  }
  return absl::OkStatus();
}

void Resampler::ResampleHorizontalFirst(const uint8_t* src, int src_w,
                                        int src_h, int src_stride, int out_w,
                                        uint8_t* dst, int dst_stride) {
  // Horizontal pass over source rows [first, last) into the intermediate
  // (one row per used source row), then vertical pass into dst.
  const bool simd = isa_ != Isa::kScalar;
  const int used_rows = vertical_.last - vertical_.first;
  const bool h_fits = RebaseAxis(0, src_w, &horizontal_);
  RebaseAxis(vertical_.first, used_rows, &vertical_);
  if (simd) {
    BuildBroadcast(/*horizontal=*/true, &horizontal_);
    BuildBroadcast(/*horizontal=*/false, &vertical_);
  }
  const ptrdiff_t mid_stride = 3 * static_cast<ptrdiff_t>(out_w);
  const size_t mid_size = mid_stride * used_rows + kRowSlack;
  if (intermediate_.size() < mid_size) intermediate_.resize(mid_size);

  rows_.resize(used_rows);
  for (int r = 0; r < used_rows; ++r) {
    rows_[r] = src + static_cast<ptrdiff_t>(vertical_.first + r) * src_stride;
  }
  if (simd && h_fits && vertical_.last == src_h) {
    // The last source row may end the caller's buffer: read a padded copy.
    const size_t row_bytes = 3 * static_cast<size_t>(src_w);
    if (padded_row_.size() < row_bytes + kRowSlack) {
      padded_row_.resize(row_bytes + kRowSlack);
    }
    std::memcpy(padded_row_.data(), rows_[used_rows - 1], row_bytes);
    rows_[used_rows - 1] = padded_row_.data();
  }
  RunHorizontal(isa_, h_fits, rows_.data(), used_rows, src_w, horizontal_,
                intermediate_.data(), mid_stride, /*exact_tail=*/false);
  for (int r = 0; r < used_rows; ++r) {
    rows_[r] = intermediate_.data() + r * mid_stride;
  }
  RunVertical(isa_, rows_.data(), used_rows, 3 * out_w, vertical_, dst,
              dst_stride, &tap_rows_, &vertical_scratch_);
}

void Resampler::ResampleVerticalFirst(const uint8_t* src, int src_h,
                                      int src_stride, int out_h, uint8_t* dst,
                                      int dst_stride) {
  // Vertical pass over source columns [first, last) into the intermediate
  // (out_h rows), then horizontal pass into dst.
  const bool simd = isa_ != Isa::kScalar;
  const int used_cols = horizontal_.last - horizontal_.first;
  RebaseAxis(0, src_h, &vertical_);
  const bool h_fits = RebaseAxis(horizontal_.first, used_cols, &horizontal_);
  if (simd) {
    BuildBroadcast(/*horizontal=*/true, &horizontal_);
    BuildBroadcast(/*horizontal=*/false, &vertical_);
  }
  const ptrdiff_t mid_stride = 3 * static_cast<ptrdiff_t>(used_cols);
  const size_t mid_size = mid_stride * out_h + kRowSlack;
  if (intermediate_.size() < mid_size) intermediate_.resize(mid_size);

  rows_.resize(src_h);
  const uint8_t* column0 = src + 3 * static_cast<ptrdiff_t>(horizontal_.first);
  for (int r = 0; r < src_h; ++r) {
    rows_[r] = column0 + static_cast<ptrdiff_t>(r) * src_stride;
  }
  RunVertical(isa_, rows_.data(), src_h, static_cast<int>(mid_stride),
              vertical_, intermediate_.data(), mid_stride, &tap_rows_,
              &vertical_scratch_);
  rows_.resize(out_h);
  for (int r = 0; r < out_h; ++r) {
    rows_[r] = intermediate_.data() + r * mid_stride;
  }
  RunHorizontal(isa_, h_fits, rows_.data(), out_h, used_cols, horizontal_, dst,
                dst_stride, /*exact_tail=*/true);
}

}  // namespace stoker::image
