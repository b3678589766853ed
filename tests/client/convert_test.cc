#include "client/convert.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// Compiled with -ffp-contract=off (tests/client/BUILD) so the reference's
// multiply and add round separately, as documented.

namespace stoker::client {
namespace {

using ::testing::HasSubstr;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// --- Independent references for the roundings ---
// Both decode candidate bit patterns to exact doubles and pick the nearest,
// ties to the even pattern, instead of manipulating bits.

// Value of a non-negative half pattern; 0x7c00 (infinity) counts as 2^16, the
// value the exponent range would continue with, which makes "rounds to
// infinity" fall out of nearest-even.
double RefHalfValue(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return std::ldexp(static_cast<double>(mantissa), -24);
  return std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
}

uint16_t RefNearestEven(double x, uint16_t lo, uint16_t hi, double lo_value,
                        double hi_value) {
  const double to_lo = x - lo_value;
  const double to_hi = hi_value - x;
  if (to_lo < to_hi) return lo;
  if (to_hi < to_lo) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

uint16_t RefFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7e00;
  const double x = std::fabs(static_cast<double>(f));
  if (std::isinf(f) || x >= RefHalfValue(0x7c00)) return sign | 0x7c00;
  // Largest pattern whose value is <= x (values increase with the pattern).
  uint16_t lo = 0;
  uint16_t hi = 0x7c00;
  while (hi - lo > 1) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (RefHalfValue(mid) <= x) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  if (RefHalfValue(lo) == x) return sign | lo;
  return sign | RefNearestEven(x, lo, lo + 1, RefHalfValue(lo),
                               RefHalfValue(lo + 1));
}

double RefBFloat16Value(uint16_t bits) {
  if (bits == 0x7f80) return std::ldexp(1.0, 128);
  return static_cast<double>(FromBits(static_cast<uint32_t>(bits) << 16));
}

uint16_t RefFloatToBFloat16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7fc0;
  if (std::isinf(f)) return sign | 0x7f80;
  const double x = std::fabs(static_cast<double>(f));
  // Truncation gives the pattern just below (or at) x.
  const uint16_t lo = static_cast<uint16_t>((Bits(std::fabs(f))) >> 16);
  if (RefBFloat16Value(lo) == x) return sign | lo;
  return sign | RefNearestEven(x, lo, lo + 1, RefBFloat16Value(lo),
                               RefBFloat16Value(lo + 1));
}

// Floats around every representable value of a 16-bit format: the value,
// the midpoint to the next one (a tie) and the floats just around it.
std::vector<float> Probes(double (*value)(uint16_t), uint16_t max_pattern) {
  std::vector<float> out;
  for (uint32_t b = 0; b < max_pattern; ++b) {
    const double v = value(static_cast<uint16_t>(b));
    const double mid = (v + value(static_cast<uint16_t>(b + 1))) / 2;
    const float fmid = static_cast<float>(mid);  // exact: fewer bits than float
    for (float f : {static_cast<float>(v), fmid,
                    std::nextafter(fmid, 0.0f),
                    std::nextafter(fmid, std::numeric_limits<float>::max())}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  return out;
}

class ConvertTest : public ::testing::Test {};

TEST_F(ConvertTest, HalfMatchesKnownBitPatterns) {
  EXPECT_EQ(FloatToHalfBits(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(3.14159265f), 0x4248);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);             // largest half
  EXPECT_EQ(FloatToHalfBits(65519.996f), 0x7bff);           // just below tie
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);             // tie -> inf
  EXPECT_EQ(FloatToHalfBits(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(-INFINITY), 0xfc00);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -14)), 0x0400);  // min normal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);  // min subnormal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even 0
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);  // tie -> even 2
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -26)), 0x0000);
  // 1 + 2^-11 is the tie between 1 and 1 + 2^-10: even is 1.
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 ties between 0x3c01 and 0x3c02: even is 0x3c02.
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalfBits(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)),
            0x3c01);
  EXPECT_EQ(FloatToHalfBits(NAN) & 0x7fff, 0x7e00);
}

TEST_F(ConvertTest, BFloat16MatchesKnownBitPatterns) {
  EXPECT_EQ(FloatToBFloat16Bits(0.0f), 0x0000);
  EXPECT_EQ(FloatToBFloat16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16Bits(3.14159265f), 0x4049);
  EXPECT_EQ(FloatToBFloat16Bits(-1.0f), 0xbf80);
  // 1 + 2^-8 ties between 1 (0x3f80) and 1 + 2^-7 (0x3f81): even 0x3f80.
  EXPECT_EQ(FloatToBFloat16Bits(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 ties between 0x3f81 and 0x3f82: even 0x3f82.
  EXPECT_EQ(FloatToBFloat16Bits(1.01171875f), 0x3f82);
  EXPECT_EQ(FloatToBFloat16Bits(std::nextafter(1.00390625f, 2.0f)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16Bits(INFINITY), 0x7f80);
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::denorm_min()),
            0x0000);
  EXPECT_EQ(FloatToBFloat16Bits(NAN) & 0x7fff, 0x7fc0);
}

TEST_F(ConvertTest, HalfRoundsToNearestEvenAtEveryTie) {
  for (float f : Probes(RefHalfValue, 0x7c00)) {
    ASSERT_EQ(FloatToHalfBits(f), RefFloatToHalf(f))
        << absl::StrFormat("f = %a", f);
  }
}

TEST_F(ConvertTest, BFloat16RoundsToNearestEvenAtEveryTie) {
  for (float f : Probes(RefBFloat16Value, 0x7f80)) {
    ASSERT_EQ(FloatToBFloat16Bits(f), RefFloatToBFloat16(f))
        << absl::StrFormat("f = %a", f);
  }
}

TEST_F(ConvertTest, RoundingMatchesReferenceOnRandomFloats) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 300000; ++i) {
    const float f = FromBits(rng());
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalfBits(f), RefFloatToHalf(f))
        << absl::StrFormat("f = %a", f);
    ASSERT_EQ(FloatToBFloat16Bits(f), RefFloatToBFloat16(f))
        << absl::StrFormat("f = %a", f);
  }
}

TEST_F(ConvertTest, WideningIsExactInverse) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float h = HalfBitsToFloat(bits);
    if (!std::isnan(h)) {
      ASSERT_EQ(FloatToHalfBits(h), bits) << b;
    }
    const float bf = BFloat16BitsToFloat(bits);
    if (!std::isnan(bf)) {
      ASSERT_EQ(FloatToBFloat16Bits(bf), bits) << b;
    }
  }
  EXPECT_EQ(HalfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfBitsToFloat(0xc000), -2.0f);
}

// --- Whole-batch conversion ---

// The documented formula, evaluated per output element by walking the output
// in its own order and locating each element's input byte.
std::vector<uint8_t> Reference(const std::vector<uint8_t>& src,
                               const ImageShape& s,
                               const ConvertOptions& options) {
  const size_t size = DTypeSize(options.dtype);
  std::vector<uint8_t> out(src.size() * size);
  size_t o = 0;
  auto emit = [&](uint8_t x, int c) {
    uint32_t bits = x;
    if (options.dtype != DType::kUint8) {
      const float scale = 1.0f / (255.0f * options.std[c]);
      const float bias = -options.mean[c] / options.std[c];
      const float product = static_cast<float>(x) * scale;
      const float f = product + bias;
      bits = options.dtype == DType::kFloat32    ? Bits(f)
             : options.dtype == DType::kFloat16 ? RefFloatToHalf(f)
                                                : RefFloatToBFloat16(f);
    }
    std::memcpy(&out[o], &bits, size);  // little-endian low bytes
    o += size;
  };
  auto in = [&](int64_t n, int64_t y, int64_t x, int64_t c) {
    return src[((n * s.height + y) * s.width + x) * s.channels + c];
  };
  for (int64_t n = 0; n < s.n; ++n) {
    if (options.layout == Layout::kNCHW) {
      for (int64_t c = 0; c < s.channels; ++c) {
        for (int64_t y = 0; y < s.height; ++y) {
          for (int64_t x = 0; x < s.width; ++x) {
            emit(in(n, y, x, c), static_cast<int>(c));
          }
        }
      }
    } else {
      for (int64_t y = 0; y < s.height; ++y) {
        for (int64_t x = 0; x < s.width; ++x) {
          for (int64_t c = 0; c < s.channels; ++c) {
            emit(in(n, y, x, c), static_cast<int>(c));
          }
        }
      }
    }
  }
  return out;
}

std::vector<uint8_t> RandomPixels(const ImageShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(s.elements());
  for (uint8_t& v : out) v = static_cast<uint8_t>(rng());
  return out;
}

class ConvertLayoutTest
    : public ::testing::TestWithParam<std::tuple<DType, Layout, int>> {};

TEST_P(ConvertLayoutTest, HostMatchesReferenceBitForBit) {
  const auto [dtype, layout, channels] = GetParam();
  ConvertOptions options;
  options.dtype = dtype;
  options.layout = layout;
  // Odd sizes; 256 values per channel appear many times.
  const ImageShape shape{3, 19, 23, channels};
  const std::vector<uint8_t> src = RandomPixels(shape, 7);
  std::vector<uint8_t> dst(ConvertedBytes(shape, dtype), 0xcd);
  ASSERT_TRUE(ConvertOnHost(src.data(), shape, options, dst.data()).ok());
  EXPECT_EQ(dst, Reference(src, shape, options));
}

TEST_P(ConvertLayoutTest, HostMatchesReferenceWithOtherNormalization) {
  const auto [dtype, layout, channels] = GetParam();
  ConvertOptions options;
  options.dtype = dtype;
  options.layout = layout;
  options.mean = {0.5f, -0.25f, 0.0f};
  options.std = {0.5f, 2.0f, -1.0f / 3};
  ImageShape shape{1, 16, 16, channels};
  std::vector<uint8_t> src(shape.elements());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i);
  std::vector<uint8_t> dst(ConvertedBytes(shape, dtype));
  ASSERT_TRUE(ConvertOnHost(src.data(), shape, options, dst.data()).ok());
  EXPECT_EQ(dst, Reference(src, shape, options));
}

INSTANTIATE_TEST_SUITE_P(
    AllDTypesAndLayouts, ConvertLayoutTest,
    ::testing::Combine(::testing::Values(DType::kUint8, DType::kFloat32,
                                         DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                       ::testing::Values(1, 2, 3)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s_C%d",
                             DTypeName(std::get<0>(info.param)),
                             LayoutName(std::get<1>(info.param)),
                             std::get<2>(info.param));
    });

TEST_F(ConvertTest, Float32IsCloseToExactNormalization) {
  ConvertOptions options;
  const ImageShape shape{1, 1, 256, 3};
  std::vector<uint8_t> src(shape.elements());
  for (int x = 0; x < 256; ++x) {
    for (int c = 0; c < 3; ++c) src[x * 3 + c] = static_cast<uint8_t>(x);
  }
  std::vector<float> dst(shape.elements());
  options.layout = Layout::kNHWC;
  ASSERT_TRUE(ConvertOnHost(src.data(), shape, options, dst.data()).ok());
  for (int x = 0; x < 256; ++x) {
    for (int c = 0; c < 3; ++c) {
      const double exact =
          (x / 255.0 - options.mean[c]) / static_cast<double>(options.std[c]);
      EXPECT_NEAR(dst[x * 3 + c], exact, 2e-6) << "x=" << x << " c=" << c;
    }
  }
}

TEST_F(ConvertTest, KnownValuesWithUnitNormalization) {
  ConvertOptions options;
  options.mean = {0, 0, 0};
  options.std = {1, 1, 1};
  options.layout = Layout::kNHWC;
  const ImageShape shape{1, 1, 1, 3};
  const uint8_t src[3] = {0, 255, 51};
  uint16_t half[3];
  options.dtype = DType::kFloat16;
  ASSERT_TRUE(ConvertOnHost(src, shape, options, half).ok());
  EXPECT_EQ(half[0], 0x0000);
  EXPECT_EQ(half[1], 0x3c00);  // 1.0
  EXPECT_EQ(half[2], 0x3266);  // 0.2
  uint16_t bf16[3];
  options.dtype = DType::kBFloat16;
  ASSERT_TRUE(ConvertOnHost(src, shape, options, bf16).ok());
  EXPECT_EQ(bf16[0], 0x0000);
  EXPECT_EQ(bf16[1], 0x3f80);
  EXPECT_EQ(bf16[2], 0x3e4d);  // 0.2
}

TEST_F(ConvertTest, NchwPutsEachChannelInItsOwnPlane) {
  ConvertOptions options;
  options.dtype = DType::kUint8;
  options.layout = Layout::kNCHW;
  const ImageShape shape{2, 1, 2, 3};
  const std::vector<uint8_t> src = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<uint8_t> dst(12);
  ASSERT_TRUE(ConvertOnHost(src.data(), shape, options, dst.data()).ok());
  EXPECT_EQ(dst, (std::vector<uint8_t>{1, 4, 2, 5, 3, 6, 7, 10, 8, 11, 9, 12}));
  EXPECT_EQ(ConvertedShape(shape, Layout::kNCHW),
            (std::array<int64_t, 4>{2, 3, 1, 2}));
  EXPECT_EQ(ConvertedShape(shape, Layout::kNHWC),
            (std::array<int64_t, 4>{2, 1, 2, 3}));
}

TEST_F(ConvertTest, RejectsBadOptionsAndShapes) {
  ConvertOptions options;
  options.std[1] = 0;
  absl::Status s = ValidateConvertOptions(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("std[1]"));
  options.dtype = DType::kUint8;  // normalization unused
  EXPECT_TRUE(ValidateConvertOptions(options).ok());
  options = ConvertOptions();
  options.mean[2] = NAN;
  EXPECT_EQ(ValidateConvertOptions(options).code(),
            absl::StatusCode::kInvalidArgument);

  uint8_t byte = 0;
  float out = 0;
  EXPECT_EQ(ConvertOnHost(&byte, ImageShape{1, 1, 1, 4}, ConvertOptions(), &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConvertOnHost(&byte, ImageShape{-1, 1, 1, 3}, ConvertOptions(),
                          &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      ConvertOnHost(nullptr, ImageShape{0, 4, 4, 3}, ConvertOptions(), nullptr)
          .ok());
}

TEST_F(ConvertTest, RefusesOutputNotAlignedToItsElements) {
  alignas(16) uint8_t src[12] = {};
  alignas(16) uint8_t out[64] = {};
  const ImageShape shape{1, 2, 2, 3};
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    ConvertOptions options;
    options.dtype = dtype;
    const absl::Status host = ConvertOnHost(src, shape, options, out + 1);
    EXPECT_EQ(host.code(), absl::StatusCode::kInvalidArgument) << host;
    EXPECT_THAT(host.message(), HasSubstr("not aligned"));
    EXPECT_TRUE(ConvertOnHost(src, shape, options, out + DTypeSize(dtype))
                    .ok());
    // Checked before anything reaches the GPU (a misaligned store there
    // would poison the CUDA context), so it is the same without one.
    const absl::Status device =
        ConvertOnDevice(src, shape, options, out + 1, nullptr);
    EXPECT_EQ(device.code(), absl::StatusCode::kInvalidArgument) << device;
  }
  ConvertOptions bytes;
  bytes.dtype = DType::kUint8;
  EXPECT_TRUE(ConvertOnHost(src, shape, bytes, out + 1).ok());
}

TEST_F(ConvertTest, ParsesNames) {
  EXPECT_EQ(*ParseDType("float32"), DType::kFloat32);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBFloat16);
  EXPECT_EQ(*ParseDType("half"), DType::kFloat16);
  EXPECT_EQ(*ParseDType("uint8"), DType::kUint8);
  EXPECT_EQ(ParseDType("int7").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseLayout("channels_last"), Layout::kNHWC);
  EXPECT_EQ(*ParseLayout("NCHW"), Layout::kNCHW);
  EXPECT_EQ(ParseLayout("HWC").status().code(),
            absl::StatusCode::kInvalidArgument);
  for (DType d : {DType::kUint8, DType::kFloat32, DType::kFloat16,
                  DType::kBFloat16}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  }
}

TEST_F(ConvertTest, ConvertOnDeviceFailsCleanlyWithoutGpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  const absl::Status s = ConvertOnDevice(nullptr, ImageShape{1, 4, 4, 3},
                                         ConvertOptions(), nullptr, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("conversion kernel"));
}

}  // namespace
}  // namespace stoker::client
