#ifndef STOKER_IMAGE_FUNCTIONAL_INTERNAL_H_
#define STOKER_IMAGE_FUNCTIONAL_INTERNAL_H_

// Helpers shared by the functional_*.cc files of //image:functional. Not part
// of its interface.
//
// Hot loops are written once as plain C++ that the compiler vectorises
// (-O3), inlined into two entry points: one for the baseline target and one
// compiled for AVX2, picked at run time. Where the compiler's code is slow
// (the blend loop, the blur passes) the AVX2 entry point uses intrinsics,
// with the same float operations in the same order as the plain loop, so
// both give the same bytes. The library is compiled with
// -ffp-contract=off: float expressions must round after every operation, as
// in Pillow's (non-FMA) build, or results drift by an ulp and truncations
// flip.

#include <cstdint>

#include "image/plan.h"

// STOKER_FUNCTIONAL_AVX2 marks the AVX2 entry points. Elsewhere than x86
// they compile as a second copy of the baseline and UseAvx2() is false;
// code with AVX2 intrinsics needs #ifdef STOKER_FUNCTIONAL_X86.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STOKER_FUNCTIONAL_X86 1
#define STOKER_FUNCTIONAL_INLINE inline __attribute__((always_inline))
#define STOKER_FUNCTIONAL_AVX2 __attribute__((target("avx2")))
#else
#define STOKER_FUNCTIONAL_INLINE inline
#define STOKER_FUNCTIONAL_AVX2
#endif

namespace stoker::image::functional_internal {

// True when the AVX2 entry points may run.
inline bool UseAvx2() {
#ifdef STOKER_FUNCTIONAL_X86
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

// PIL's convert("L") of one RGB pixel (Convert.c, L24).
inline uint8_t GrayValue(int r, int g, int b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >>
                              16);
}

// Pillow's ImagingBlend(degenerate, image, alpha) for one sample:
// degenerate + alpha * (value - degenerate) in float32, clipped to
// [0, 255] and truncated. (For alpha in [0, 1] Pillow skips the clipping,
// but the value is then already in [0, 255].)
inline uint8_t BlendValue(int degenerate, int value, float alpha) {
  const float t = static_cast<float>(degenerate) +
                  alpha * static_cast<float>(value - degenerate);
  if (t <= 0.0f) return 0;
  if (t >= 255.0f) return 255;
  return static_cast<uint8_t>(t);
}

// image[i] = BlendValue(degenerate[i], image[i], alpha) for i in [0, n).
void BlendRow(const uint8_t* degenerate, uint8_t* image, int n, float alpha);

// Maps every sample through `lut`: R through lut[0..255], G through
// lut[256..511], B through lut[512..767].
void ApplyChannelLuts(const ImageView& image, const uint8_t* lut);

// Maps every sample through the same 256-entry `lut`.
void ApplyLut(const ImageView& image, const uint8_t* lut);

}  // namespace stoker::image::functional_internal

#endif  // STOKER_IMAGE_FUNCTIONAL_INTERNAL_H_
