#include "client/convert.h"

#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/convert_kernels.h"

// This file is compiled with -ffp-contract=off (client/BUILD): the affine must
// be a rounded multiply then a rounded add, exactly as in the kernel.

namespace stoker::client {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Rounds `value` >> `shift` to nearest, ties to even (shift >= 1).
uint32_t ShiftRoundNearestEven(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
}

template <typename T>
T Encode(float f, DType dtype);

template <>
uint8_t Encode<uint8_t>(float, DType) {
  return 0;  // Not used: uint8 output copies x.
}

template <>
uint16_t Encode<uint16_t>(float f, DType dtype) {
  return dtype == DType::kFloat16 ? FloatToHalfBits(f)
                                  : FloatToBFloat16Bits(f);
}

template <>
uint32_t Encode<uint32_t>(float f, DType) {
  return FloatBits(f);
}

// Output bits of every (channel, x) pair.
template <typename T>
struct Table {
  T v[3][256];
};

template <typename T>
void FillTable(const ConvertOptions& options, int channels, Table<T>* table) {
  const ChannelAffine affine = ComputeAffine(options);
  for (int c = 0; c < channels; ++c) {
    for (int x = 0; x < 256; ++x) {
      if (options.dtype == DType::kUint8) {
        table->v[c][x] = static_cast<T>(x);
      } else {
        const float product = static_cast<float>(x) * affine.scale[c];
        const float f = product + affine.bias[c];
        table->v[c][x] = Encode<T>(f, options.dtype);
      }
    }
  }
}

__attribute__((target("ssse3"))) inline void Split16(const uint8_t* at,
                                                     __m128i channel[3]);

// Interleaved 3-channel uint8 pixels into three planes, 16 pixels per step
// with SSSE3 byte shuffles (about ten times the scalar loop's speed); the
// caller checks that the CPU has SSSE3. Returns the pixels done (a
// multiple of 16); the caller finishes the rest.
__attribute__((target("ssse3"))) int64_t Deinterleave3Ssse3(
    const uint8_t* in, int64_t pixels, uint8_t* r, uint8_t* g, uint8_t* b) {
  uint8_t* planes[3] = {r, g, b};
  int64_t p = 0;
  for (; p + 16 <= pixels; p += 16) {
    __m128i channel[3];
    Split16(in + 3 * p, channel);
    for (int c = 0; c < 3; ++c) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(planes[c] + p), channel[c]);
    }
  }
  return p;
}

// The three channels of 16 interleaved pixels (48 bytes at `at`).
__attribute__((target("ssse3"))) inline void Split16(const uint8_t* at,
                                                     __m128i channel[3]) {
  // masks[c][v]: where output byte k of channel c comes from in source
  // vector v (byte 3k + c of the 48), or 0x80 (zero) if not from v.
  alignas(16) static const auto masks = [] {
    std::array<std::array<std::array<uint8_t, 16>, 3>, 3> m{};
    for (int c = 0; c < 3; ++c) {
      for (int v = 0; v < 3; ++v) m[c][v].fill(0x80);
      for (int k = 0; k < 16; ++k) {
        const int from = 3 * k + c;
        m[c][from / 16][k] = static_cast<uint8_t>(from % 16);
      }
    }
    return m;
  }();
  const __m128i v[3] = {
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 16)),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 32))};
  for (int c = 0; c < 3; ++c) {
    __m128i out = _mm_setzero_si128();
    for (int s = 0; s < 3; ++s) {
      out = _mm_or_si128(
          out, _mm_shuffle_epi8(v[s], _mm_load_si128(reinterpret_cast<
                                          const __m128i*>(masks[c][s].data()))));
    }
    channel[c] = out;
  }
}

bool HasSsse3() {
  static const bool has = __builtin_cpu_supports("ssse3");
  return has;
}

bool HasSse41() {
  static const bool has = __builtin_cpu_supports("sse4.1");
  return has;
}

// Four uint8 values (zero-extended in `u32`) through x * scale + bias, as
// the table computes them (a rounded product, then a rounded sum: the same
// bits), stored as float32 or as bfloat16 (rounded to nearest even like
// FloatToBFloat16Bits; the values are finite).
__attribute__((target("sse4.1"))) inline __m128 Affine4(__m128i u32,
                                                        __m128 scale,
                                                        __m128 bias) {
  return _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(u32), scale), bias);
}

__attribute__((target("sse4.1"))) inline __m128i BFloat16Bits(__m128 f) {
  const __m128i bits = _mm_castps_si128(f);
  const __m128i odd = _mm_and_si128(_mm_srli_epi32(bits, 16),
                                    _mm_set1_epi32(1));
  return _mm_srli_epi32(
      _mm_add_epi32(_mm_add_epi32(bits, _mm_set1_epi32(0x7fff)), odd), 16);
}

// 16 uint8 values as four vectors of four int32.
__attribute__((target("sse4.1"))) inline void Widen16(__m128i v,
                                                      __m128i out[4]) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i lo = _mm_unpacklo_epi8(v, zero);
  const __m128i hi = _mm_unpackhi_epi8(v, zero);
  out[0] = _mm_unpacklo_epi16(lo, zero);
  out[1] = _mm_unpackhi_epi16(lo, zero);
  out[2] = _mm_unpacklo_epi16(hi, zero);
  out[3] = _mm_unpackhi_epi16(hi, zero);
}

// Stores 16 converted values (four vectors of four) at `out`.
__attribute__((target("sse4.1"))) inline void Store16(const __m128 f[4],
                                                      uint32_t* out) {
  for (int k = 0; k < 4; ++k) {
    _mm_storeu_ps(reinterpret_cast<float*>(out + 4 * k), f[k]);
  }
}

__attribute__((target("sse4.1"))) inline void Store16(const __m128 f[4],
                                                      uint16_t* out) {
  for (int k = 0; k < 2; ++k) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8 * k),
                     _mm_packus_epi32(BFloat16Bits(f[2 * k]),
                                      BFloat16Bits(f[2 * k + 1])));
  }
}

// float32 (T = uint32_t) or bfloat16 (T = uint16_t) conversion of
// 3-channel pixels, 16 per step: into planes (`planar`, one image's) or
// interleaved like the input. Returns the pixels done; the caller converts
// the rest with the table.
template <typename T>
__attribute__((target("sse4.1"))) int64_t Affine3Sse41(
    const uint8_t* in, int64_t pixels, bool planar, const ChannelAffine& a,
    T* out) {
  int64_t p = 0;
  if (planar) {
    __m128 scale[3];
    __m128 bias[3];
    for (int c = 0; c < 3; ++c) {
      scale[c] = _mm_set1_ps(a.scale[c]);
      bias[c] = _mm_set1_ps(a.bias[c]);
    }
    for (; p + 16 <= pixels; p += 16) {
      __m128i channel[3];
      Split16(in + 3 * p, channel);
      for (int c = 0; c < 3; ++c) {
        __m128i wide[4];
        Widen16(channel[c], wide);
        __m128 f[4];
        for (int k = 0; k < 4; ++k) f[k] = Affine4(wide[k], scale[c], bias[c]);
        Store16(f, out + c * pixels + p);
      }
    }
    return p;
  }
  // Interleaved: element e has channel e % 3; the four lanes of the g-th
  // vector of a 48-element step start at channel g % 3.
  __m128 scale[3];
  __m128 bias[3];
  for (int m = 0; m < 3; ++m) {
    scale[m] = _mm_setr_ps(a.scale[m % 3], a.scale[(m + 1) % 3],
                           a.scale[(m + 2) % 3], a.scale[m % 3]);
    bias[m] = _mm_setr_ps(a.bias[m % 3], a.bias[(m + 1) % 3],
                          a.bias[(m + 2) % 3], a.bias[m % 3]);
  }
  for (; p + 16 <= pixels; p += 16) {
    for (int s = 0; s < 3; ++s) {
      const __m128i v =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 3 * p + 16 * s));
      __m128i wide[4];
      Widen16(v, wide);
      __m128 f[4];
      for (int k = 0; k < 4; ++k) {
        const int m = (4 * s + k) % 3;
        f[k] = Affine4(wide[k], scale[m], bias[m]);
      }
      Store16(f, out + 3 * p + 16 * s);
    }
  }
  return p;
}

template <typename T>
void ConvertWithTable(const uint8_t* src, const ImageShape& shape,
                      const ConvertOptions& options, T* dst) {
  const int channels = static_cast<int>(shape.channels);
  const int64_t pixels = shape.height * shape.width;
  const bool interleaved = options.layout == Layout::kNHWC || channels == 1;
  // uint8 keeps the raw pixels: a copy, or a transpose to planes.
  if constexpr (sizeof(T) == 1) {
    if (interleaved) {
      std::memcpy(dst, src, static_cast<size_t>(shape.elements()));
      return;
    }
  }
  Table<T> table;
  FillTable(options, channels, &table);
  // float32 and bfloat16 of 3 channels: vectors, with the table's bits.
  constexpr bool kAffine = sizeof(T) != 1;
  const bool simd = kAffine && channels == 3 && HasSse41() && HasSsse3() &&
                    (sizeof(T) == 4 || options.dtype == DType::kBFloat16);
  const ChannelAffine affine = ComputeAffine(options);
  if (interleaved) {
    const int64_t total = shape.elements();
    if (channels == 3) {
      int64_t start = 0;
      if constexpr (kAffine) {
        if (simd) {
          start = 3 * Affine3Sse41(src, shape.n * pixels, /*planar=*/false,
                                   affine, dst);
        }
      }
      for (int64_t i = start; i + 3 <= total; i += 3) {
        dst[i] = table.v[0][src[i]];
        dst[i + 1] = table.v[1][src[i + 1]];
        dst[i + 2] = table.v[2][src[i + 2]];
      }
    } else {
      for (int64_t i = 0; i < total; ++i) {
        dst[i] = table.v[i % channels][src[i]];
      }
    }
    return;
  }
  for (int64_t image = 0; image < shape.n; ++image) {
    const uint8_t* in = src + image * pixels * channels;
    T* out = dst + image * pixels * channels;
    // Vectors for the bulk of 3-channel images, the table for the rest.
    int64_t done = 0;
    if (channels == 3) {
      if constexpr (kAffine) {
        if (simd) done = Affine3Sse41(in, pixels, /*planar=*/true, affine, out);
      } else if (HasSsse3()) {
        done = Deinterleave3Ssse3(in, pixels, out, out + pixels,
                                  out + 2 * pixels);
      }
    }
    for (int c = 0; c < channels; ++c) {
      const T* lut = table.v[c];
      T* plane = out + c * pixels;
      for (int64_t p = done; p < pixels; ++p) {
        plane[p] = lut[in[p * channels + c]];
      }
    }
  }
}

}  // namespace

absl::Status ValidateConvertOptions(const ConvertOptions& options) {
  if (options.layout != Layout::kNCHW && options.layout != Layout::kNHWC) {
    return absl::InvalidArgumentError("ConvertOptions.layout is not a Layout");
  }
  switch (options.dtype) {
    case DType::kUint8:
      return absl::OkStatus();
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16:
      break;
    default:
      return absl::InvalidArgumentError("ConvertOptions.dtype is not a DType");
  }
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(options.mean[c])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("ConvertOptions.mean[%d] = %g is not finite", c,
                          options.mean[c]));
    }
    if (!std::isfinite(options.std[c]) || options.std[c] == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ConvertOptions.std[%d] = %g must be finite and nonzero", c,
          options.std[c]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateImageShape(const ImageShape& shape) {
  if (shape.n < 0 || shape.height < 0 || shape.width < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "negative image shape (n=%d, height=%d, width=%d)", shape.n,
        shape.height, shape.width));
  }
  if (shape.channels < 1 || shape.channels > 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "images have %d channels; conversion supports 1 to 3",
        shape.channels));
  }
  return absl::OkStatus();
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return 1;
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

size_t ConvertedBytes(const ImageShape& shape, DType dtype) {
  return static_cast<size_t>(shape.elements()) * DTypeSize(dtype);
}

std::array<int64_t, 4> ConvertedShape(const ImageShape& shape, Layout layout) {
  if (layout == Layout::kNCHW) {
    return {shape.n, shape.channels, shape.height, shape.width};
  }
  return {shape.n, shape.height, shape.width, shape.channels};
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return "uint8";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

absl::string_view LayoutName(Layout layout) {
  return layout == Layout::kNCHW ? "NCHW" : "NHWC";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "uint8") return DType::kUint8;
  if (n == "float32" || n == "float" || n == "fp32") return DType::kFloat32;
  if (n == "float16" || n == "half" || n == "fp16") return DType::kFloat16;
  if (n == "bfloat16" || n == "bf16") return DType::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name,
                   "\"; use uint8, float32, float16 or bfloat16"));
}

absl::StatusOr<Layout> ParseLayout(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "nchw" || n == "channels_first") return Layout::kNCHW;
  if (n == "nhwc" || n == "channels_last") return Layout::kNHWC;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown layout \"", name,
                   "\"; use NCHW (channels_first) or NHWC (channels_last)"));
}

ChannelAffine ComputeAffine(const ConvertOptions& options) {
  ChannelAffine affine;
  if (options.dtype == DType::kUint8) return affine;
  for (int c = 0; c < 3; ++c) {
    const float denominator = 255.0f * options.std[c];
    affine.scale[c] = 1.0f / denominator;
    affine.bias[c] = -options.mean[c] / options.std[c];
  }
  return affine;
}

uint16_t FloatToHalfBits(float value) {
  const uint32_t f = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000);
  const uint32_t abs = f & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;  // NaN
  // 65520 (0x477ff000) is halfway between 65504, the largest half, and 2^16;
  // ties to even round it (and everything above) to infinity.
  if (abs >= 0x477ff000) return sign | 0x7c00;
  if (abs >= 0x38800000) {
    // Normal half: rebias the exponent (127 -> 15) and drop 13 mantissa bits;
    // a carry out of the mantissa correctly bumps the exponent.
    return sign | static_cast<uint16_t>(
                      ShiftRoundNearestEven(abs - 0x38000000, 13));
  }
  // Subnormal half (or zero): value / 2^-24 with the implicit bit restored.
  // Up to 2^-25 (a tie with zero, which is even) rounds to zero.
  if (abs <= 0x33000000) return sign;
  const int exponent = static_cast<int>(abs >> 23);  // 102..112
  const uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
  return sign | static_cast<uint16_t>(
                    ShiftRoundNearestEven(mantissa, 126 - exponent));
}

uint16_t FloatToBFloat16Bits(float value) {
  const uint32_t f = FloatBits(value);
  if ((f & 0x7fffffff) > 0x7f800000) {
    return static_cast<uint16_t>(((f >> 16) & 0x8000) | 0x7fc0);
  }
  // Round the low 16 bits to nearest even; a carry may reach the exponent
  // (and turn the largest finite values into infinity), as it should.
  return static_cast<uint16_t>((f + 0x7fff + ((f >> 16) & 1)) >> 16);
}

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0x1f) {
    return BitsFloat(sign | 0x7f800000 | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float BFloat16BitsToFloat(uint16_t bits) {
  return BitsFloat(static_cast<uint32_t>(bits) << 16);
}

namespace {

// The output is written as elements of options.dtype, which need their
// natural alignment (a GPU faults on a misaligned store and poisons the
// context; on the host it is undefined behaviour).
absl::Status ValidateOutput(const ConvertOptions& options, const void* dst) {
  const size_t align = DTypeSize(options.dtype);
  if (reinterpret_cast<uintptr_t>(dst) % align != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "conversion output %p is not aligned to its %d-byte %s elements", dst,
        align, DTypeName(options.dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ConvertOnHost(const uint8_t* src, const ImageShape& shape,
                           const ConvertOptions& options, void* dst) {
  if (absl::Status s = ValidateConvertOptions(options); !s.ok()) return s;
  if (absl::Status s = ValidateImageShape(shape); !s.ok()) return s;
  if (absl::Status s = ValidateOutput(options, dst); !s.ok()) return s;
  if (shape.elements() == 0) return absl::OkStatus();
  switch (DTypeSize(options.dtype)) {
    case 1:
      ConvertWithTable(src, shape, options, static_cast<uint8_t*>(dst));
      break;
    case 2:
      ConvertWithTable(src, shape, options, static_cast<uint16_t*>(dst));
      break;
    default:
      ConvertWithTable(src, shape, options, static_cast<uint32_t*>(dst));
      break;
  }
  return absl::OkStatus();
}

absl::Status ConvertOnDevice(const uint8_t* src, const ImageShape& shape,
                             const ConvertOptions& options, void* dst,
                             CudaStream stream) {
  if (absl::Status s = ValidateConvertOptions(options); !s.ok()) return s;
  if (absl::Status s = ValidateImageShape(shape); !s.ok()) return s;
  if (absl::Status s = ValidateOutput(options, dst); !s.ok()) return s;
  kernels::ConvertKernelArgs args;
  args.src = src;
  args.dst = dst;
  args.n = shape.n;
  args.pixels = shape.height * shape.width;
  args.channels = static_cast<int>(shape.channels);
  switch (options.dtype) {
    case DType::kUint8:
      args.dtype = kernels::kKernelUint8;
      break;
    case DType::kFloat32:
      args.dtype = kernels::kKernelFloat32;
      break;
    case DType::kFloat16:
      args.dtype = kernels::kKernelFloat16;
      break;
    case DType::kBFloat16:
      args.dtype = kernels::kKernelBFloat16;
      break;
  }
  args.nchw = options.layout == Layout::kNCHW;
  const ChannelAffine affine = ComputeAffine(options);
  for (int c = 0; c < 3; ++c) {
    args.scale[c] = affine.scale[c];
    args.bias[c] = affine.bias[c];
  }
  return CudaStatus(kernels::LaunchConvertKernel(args, stream),
                    absl::StrFormat("conversion kernel (%s %s, %d elements)",
                                    DTypeName(options.dtype),
                                    LayoutName(options.layout),
                                    shape.elements()));
}

}  // namespace stoker::client
