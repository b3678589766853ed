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

// Interleaved 3-channel uint8 pixels into three planes, 16 pixels per step
// with SSSE3 byte shuffles (about ten times the scalar loop's speed); the
// caller checks that the CPU has SSSE3. Returns the pixels done (a
// multiple of 16); the caller finishes the rest.
__attribute__((target("ssse3"))) int64_t Deinterleave3Ssse3(
    const uint8_t* in, int64_t pixels, uint8_t* r, uint8_t* g, uint8_t* b) {
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
  uint8_t* planes[3] = {r, g, b};
  int64_t p = 0;
  for (; p + 16 <= pixels; p += 16) {
    const uint8_t* at = in + 3 * p;
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
      _mm_storeu_si128(reinterpret_cast<__m128i*>(planes[c] + p), out);
    }
  }
  return p;
}

bool HasSsse3() {
  static const bool has = __builtin_cpu_supports("ssse3");
  return has;
}

// Interleaved (NHWC) 3-channel pixels into three planes through `table`:
// one pass over the input, three sequential output streams.
template <typename T, typename Lookup>
void Deinterleave3(const uint8_t* in, int64_t pixels, T* out,
                   const Lookup& lookup) {
  T* r = out;
  T* g = out + pixels;
  T* b = out + 2 * pixels;
  for (int64_t p = 0; p < pixels; ++p) {
    r[p] = lookup(0, in[3 * p]);
    g[p] = lookup(1, in[3 * p + 1]);
    b[p] = lookup(2, in[3 * p + 2]);
  }
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
  if (interleaved) {
    const int64_t total = shape.elements();
    if (channels == 3) {
      for (int64_t i = 0; i + 3 <= total; i += 3) {
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
    if (channels == 3) {
      if constexpr (sizeof(T) == 1) {
        const int64_t done =
            HasSsse3() ? Deinterleave3Ssse3(in, pixels, out, out + pixels,
                                            out + 2 * pixels)
                       : 0;
        for (int c = 0; c < 3; ++c) {
          for (int64_t p = done; p < pixels; ++p) {
            out[c * pixels + p] = in[3 * p + c];
          }
        }
      } else {
        Deinterleave3(in, pixels, out,
                      [&table](int c, uint8_t x) { return table.v[c][x]; });
      }
      continue;
    }
    for (int c = 0; c < channels; ++c) {
      const T* lut = table.v[c];
      T* plane = out + c * pixels;
      for (int64_t p = 0; p < pixels; ++p) plane[p] = lut[in[p * channels + c]];
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
