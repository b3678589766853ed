#ifndef STOKER_CLIENT_BATCH_OPS_MATH_H_
#define STOKER_CLIENT_BATCH_OPS_MATH_H_

// The arithmetic of the batch-level augmentations (client/batch_ops.h) that
// runs on both the host and the GPU, written once: this header is plain C++
// that nvcc compiles into the kernels (client/batch_ops_kernels.cu) and the
// host compiler into client/batch_ops.cc, so both sides execute the same
// operations in the same order. Every floating-point operation goes through
// the wrappers below, which are IEEE round-to-nearest operations on both
// sides: on the GPU the __fmul_rn / __dadd_rn / ... intrinsics (which nvcc
// never contracts into a fused multiply-add), on the host plain operators
// compiled with -ffp-contract=off (client/BUILD). Results are therefore
// bit-identical on host and device.
//
// Not a public API: use client/batch_ops.h. No absl or CUDA includes.

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STOKER_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define STOKER_HOST_DEVICE inline
#endif

namespace stoker::client {

// Where one sample of a batch is erased (client/batch_ops.h): rows
// [top, top + height) and columns [left, left + width) of every channel.
// height == 0 or width == 0: the sample is not erased. noise_key keys the
// per-element noise of EraseFill::kNormal (see EraseNoise). Plain data,
// uploaded to the GPU as is.
struct EraseBox {
  int32_t top = 0;
  int32_t left = 0;
  int32_t height = 0;
  int32_t width = 0;
  uint64_t noise_key = 0;
};

namespace batch_math {

// --- IEEE operations, rounded to nearest, never fused ---

STOKER_HOST_DEVICE float FMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

STOKER_HOST_DEVICE float FAdd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

STOKER_HOST_DEVICE double DMul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

STOKER_HOST_DEVICE double DAdd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

STOKER_HOST_DEVICE double DDiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

STOKER_HOST_DEVICE double DSqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

STOKER_HOST_DEVICE float DoubleToFloat(double a) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(a);
#else
  return static_cast<float>(a);
#endif
}

STOKER_HOST_DEVICE uint64_t DoubleBits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
#endif
}

STOKER_HOST_DEVICE double BitsDouble(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof(d));
  return d;
#endif
}

// --- Counter-based generator ---

// The same functions as common/random.h (Mix64, HashCombine, CounterRng's
// stream), callable from device code; batch_ops_test checks they agree.
STOKER_HOST_DEVICE uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

STOKER_HOST_DEVICE uint64_t HashCombine(uint64_t a, uint64_t b) {
  return Mix64(Mix64(a) ^ (b + 0x9e3779b97f4a7c15ULL));
}

// common::CounterRng's NextU64 / NextDouble.
struct CounterStream {
  uint64_t key;
  uint64_t counter;

  STOKER_HOST_DEVICE uint64_t NextU64() {
    ++counter;
    return Mix64(key + counter * 0x9e3779b97f4a7c15ULL);
  }
  // Uniform in [0, 1), exact (53 bits times 2^-53).
  STOKER_HOST_DEVICE double NextDouble() {
    return static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
  }
};

// --- A portable natural logarithm and normal deviate ---

// ln(x) for a positive normal double, from +, -, *, / only (no libm, whose
// results differ between the host and the GPU): x = m * 2^e with m in
// [sqrt(1/2), sqrt(2)), ln(m) = 2 atanh(f) with f = (m - 1) / (m + 1),
// |f| <= 0.172, summed to 12 terms of its series (error well below 1 ulp of
// a float, which is all the noise needs).
STOKER_HOST_DEVICE double PortableLog(double x) {
  const uint64_t bits = DoubleBits(x);
  int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  double m = BitsDouble((bits & 0x000fffffffffffffULL) |
                        0x3ff0000000000000ULL);  // [1, 2)
  if (m > 0x1.6a09e667f3bcdp+0) {                // sqrt(2)
    m = DMul(m, 0.5);                            // exact
    exponent += 1;
  }
  const double f = DDiv(DAdd(m, -1.0), DAdd(m, 1.0));
  const double f2 = DMul(f, f);
  // 1 / (2k + 1), k = 11 .. 0.
  constexpr double kCoefficients[12] = {
      0x1.642c8590b2164p-5, 0x1.8618618618618p-5, 0x1.af286bca1af28p-5,
      0x1.e1e1e1e1e1e1ep-5, 0x1.1111111111111p-4, 0x1.3b13b13b13b14p-4,
      0x1.745d1745d1746p-4, 0x1.c71c71c71c71cp-4, 0x1.2492492492492p-3,
      0x1.999999999999ap-3, 0x1.5555555555555p-2, 0x1.0000000000000p+0,
  };
  double t = kCoefficients[0];
  for (int k = 1; k < 12; ++k) t = DAdd(DMul(t, f2), kCoefficients[k]);
  return DAdd(DMul(static_cast<double>(exponent), 0x1.62e42fefa39efp-1),
              DMul(DMul(2.0, f), t));
}

// A standard normal deviate by Marsaglia's polar method: pairs (u, v)
// uniform in the square [-1, 1)^2 until one falls inside the unit disc
// (probability pi/4 each), then u * sqrt(-2 ln(s) / s), s = u^2 + v^2.
// Gives up (returns 0) after 64 rejected pairs, which happens with
// probability about 1e-43, so that device code always terminates. Rng:
// CounterStream, or common::CounterRng on the host (same numbers).
template <typename Rng>
STOKER_HOST_DEVICE double StandardNormal(Rng* rng) {
  for (int attempt = 0; attempt < 64; ++attempt) {
    const double u = DAdd(DMul(2.0, rng->NextDouble()), -1.0);
    const double v = DAdd(DMul(2.0, rng->NextDouble()), -1.0);
    const double s = DAdd(DMul(u, u), DMul(v, v));
    if (s >= 1.0 || s == 0.0) continue;
    return DMul(u, DSqrt(DDiv(DMul(-2.0, PortableLog(s)), s)));
  }
  return 0.0;
}

// The fill of element `element` of an erased box under EraseFill::kNormal:
// a standard normal deviate, rounded to float, from its own stream
// HashCombine(noise_key, element). Elements are numbered in the box's
// (channel, row, column) order, like torchvision's noise tensor
// of shape (channels, height, width).
STOKER_HOST_DEVICE float EraseNoise(uint64_t noise_key, int64_t element) {
  CounterStream rng{HashCombine(noise_key, static_cast<uint64_t>(element)), 0};
  return DoubleToFloat(StandardNormal(&rng));
}

// --- Mixing ---

// MixUp of one element: x * self_weight + partner * partner_weight, two
// rounded products and a rounded sum (torch's x.mul(lam).add(flip.mul(1 -
// lam)) in float32).
STOKER_HOST_DEVICE float MixValue(float x, float partner, float self_weight,
                                  float partner_weight) {
  return FAdd(FMul(x, self_weight), FMul(partner, partner_weight));
}

// Soft target of class `c` for a sample labelled `label` mixed with one
// labelled `partner_label` (timm's mixup_target in float32): the smoothed
// one-hot values on / off of each, mixed with MixValue's arithmetic.
STOKER_HOST_DEVICE float SoftTarget(int64_t label, int64_t partner_label,
                                    int64_t c, float on, float off,
                                    float self_weight, float partner_weight) {
  return MixValue(label == c ? on : off, partner_label == c ? on : off,
                  self_weight, partner_weight);
}

// Offset of element (channel c, row y, column x) of image `image` in a
// dense NCHW or NHWC tensor.
STOKER_HOST_DEVICE int64_t ElementOffset(bool nchw, int64_t image, int64_t c,
                                         int64_t y, int64_t x, int64_t channels,
                                         int64_t height, int64_t width) {
  return nchw ? ((image * channels + c) * height + y) * width + x
              : ((image * height + y) * width + x) * channels + c;
}

}  // namespace batch_math
}  // namespace stoker::client

#endif  // STOKER_CLIENT_BATCH_OPS_MATH_H_
