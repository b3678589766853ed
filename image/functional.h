#ifndef STOKER_IMAGE_FUNCTIONAL_H_
#define STOKER_IMAGE_FUNCTIONAL_H_

// Pixel ops of torchvision.transforms.functional, as torchvision applies
// them to PIL images, in place on an interleaved RGB uint8 image
// (image/plan.h's ImageView). Each op comes twice:
//   * a typed function (AdjustBrightness(image, factor), ...), and
//   * a PixelKernel (kAdjustBrightness, ...) named after torchvision's
//     function, whose PixelArgs are the typed function's numeric arguments
//     in order, for SamplePlan's PixelStep.
//
// Results are bit-identical to torchvision 0.14 on Pillow 9.4 (checked by
// tests/image/torchvision_functional_test.py), because each op redoes
// Pillow's arithmetic: the same integer formulas, float32 where Pillow
// computes in float32 (ImagingBlend, the 3x3 filter, parts of the HSV
// conversion), double where it computes in double, the same truncations and
// clipping. The one exception is gaussian_blur, which torchvision computes as
// a float32 convolution whose summation order belongs to PyTorch's conv2d:
// it matches within +-1, and exactly except for a small fraction of values
// (of the order of 1e-5) that land within float32 rounding of a .5 boundary.
// Results do not depend on the CPU: the AVX2 code paths and the portable
// ones perform the same float operations in the same order.
//
// Ops built on ImageEnhance blend the image with a "degenerate" image as
// Pillow's ImagingBlend does: out = clip(deg + (float)factor * (img - deg))
// in float32, truncated to uint8. A factor of 1 leaves the image unchanged;
// factors outside [0, 1] extrapolate (with clipping), negative ones
// included, as in PIL.
//
// Arguments: every function accepts any value. Values outside an op's
// domain are brought into it as documented per function (a blend factor
// that is not finite as a float leaves the image unchanged), so no input is
// undefined behaviour; ValidateFunctionalArgs tells a caller, once, whether
// arguments are in the domain torchvision accepts.
//
// Images: `image.data` points at `image.height` rows of `image.width` RGB
// pixels, `image.stride` >= 3 * width bytes apart; the caller owns it. Only
// the 3 * width pixel bytes of each row are read or written (padding bytes
// between rows are untouched). Width or height 0 is a no-op. Ops that read
// neighbours (gaussian_blur, adjust_sharpness) or image statistics
// (adjust_contrast, equalize, autocontrast) see the whole view.
//
// Thread-safety: all functions are reentrant; calls on distinct images may
// run concurrently. Calls allocate only scratch memory proportional to one
// image (blur, sharpness) or nothing at all.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "image/plan.h"

namespace stoker::image {

// ImageEnhance.Brightness: blend with black. factor 0 gives black.
void AdjustBrightness(const ImageView& image, double factor);

// ImageEnhance.Contrast: blend with the uniform grey image whose level is
// the mean of the image's L conversion, rounded as PIL does
// (int(mean + 0.5)). factor 0 gives that grey.
void AdjustContrast(const ImageView& image, double factor);

// ImageEnhance.Color: blend with the image's L conversion (replicated to
// RGB). factor 0 gives the grayscale image.
void AdjustSaturation(const ImageView& image, double factor);

// torchvision's functional_pil.adjust_hue: RGB -> HSV with PIL's converter,
// H += uint8(hue_factor * 255) (numpy's conversion: truncation toward zero,
// then modulo 256), HSV -> RGB. The round trip through 8-bit HSV is lossy,
// so hue_factor 0 changes pixels, as in torchvision. hue_factor is clamped
// to [-0.5, 0.5] (torchvision raises outside it); NaN leaves the image
// unchanged.
void AdjustHue(const ImageView& image, double hue_factor);

// rgb_to_grayscale(num_output_channels=3): PIL's convert("L")
// (L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16), replicated to R, G, B.
void RgbToGrayscale(const ImageView& image);

// gaussian_blur(kernel_size=[kernel_w, kernel_h], sigma=[sigma_x, sigma_y]):
// torchvision's float32 Gaussian kernels (exp(-x^2 / (2 sigma^2)),
// normalised), applied separably in float32 with reflect padding (the edge
// pixel is not repeated) and rounded half to even. Kernel sizes must be odd
// and positive (torchvision raises otherwise): a size is clamped to
// [1, kMaxGaussianKernelSize] and an even one is treated as the next odd
// size. A sigma that is not positive and finite leaves the image unchanged.
// Where kernel_w / 2 >= width or kernel_h / 2 >= height (torchvision
// raises), the padding reflects repeatedly. Allocates a copy of the image
// and a few rows.
inline constexpr int kMaxGaussianKernelSize = 1023;
void GaussianBlur(const ImageView& image, int kernel_w, int kernel_h,
                  double sigma_x, double sigma_y);

// ImageOps.solarize(threshold): samples >= threshold become 255 - sample.
// Any threshold works: <= 0 inverts everything, > 255 nothing. A NaN
// threshold inverts everything, as in Python (i < nan is false).
void Solarize(const ImageView& image, double threshold);

// ImageOps.posterize: keeps the `bits` high bits of each sample. bits is
// clamped to [0, 8]; 0 gives black, 8 leaves the image unchanged.
void Posterize(const ImageView& image, int bits);

// ImageOps.equalize: per channel, PIL's histogram-equalisation table (no
// change for a channel with a single value or too few pixels).
void Equalize(const ImageView& image);

// ImageOps.autocontrast (cutoff 0): per channel, maps [lo, hi] (the lowest
// and highest values present) linearly onto [0, 255] (int(x * scale +
// offset) in double, as PIL computes it); a constant channel is unchanged.
void Autocontrast(const ImageView& image);

// ImageEnhance.Sharpness: blend with PIL's SMOOTH 3x3 filter of the image
// (kernel 1 1 1 / 1 5 1 / 1 1 1, divided by 13, float32). The outermost rows
// and columns are their own degenerate, so they never change; nor does an
// image narrower or lower than 3 pixels. Allocates scratch for seven rows
// (six of them float).
void AdjustSharpness(const ImageView& image, double factor);

// ImageOps.invert: 255 - sample.
void Invert(const ImageView& image);

// The same ops as PixelKernels. Arguments (PixelArgs, in order):
extern const PixelKernel kAdjustBrightness;  // "adjust_brightness": factor
extern const PixelKernel kAdjustContrast;    // "adjust_contrast": factor
extern const PixelKernel kAdjustSaturation;  // "adjust_saturation": factor
extern const PixelKernel kAdjustHue;         // "adjust_hue": hue_factor
extern const PixelKernel kRgbToGrayscale;    // "rgb_to_grayscale": none
// "gaussian_blur": kernel_w, kernel_h, sigma_x, sigma_y (sizes rounded to
// the nearest integer).
extern const PixelKernel kGaussianBlur;
extern const PixelKernel kSolarize;  // "solarize": threshold
// "posterize": bits (rounded to the nearest integer).
extern const PixelKernel kPosterize;
extern const PixelKernel kEqualize;         // "equalize": none
extern const PixelKernel kAutocontrast;     // "autocontrast": none
extern const PixelKernel kAdjustSharpness;  // "adjust_sharpness": factor
extern const PixelKernel kInvert;           // "invert": none

// Every kernel above, in the order declared. The pointers are to the
// constants above (static storage).
absl::Span<const PixelKernel* const> FunctionalKernels();

// The kernel with torchvision's name `name`, or nullptr.
const PixelKernel* FindFunctionalKernel(absl::string_view name);

// OK if `args` are in the domain torchvision accepts for `kernel` (one of
// FunctionalKernels()); InvalidArgument naming the op and the argument
// otherwise: factors must be finite (negative factors are allowed, as PIL
// allows them), hue_factor in [-0.5, 0.5], bits an integer in [0, 8], kernel
// sizes odd integers in [1, kMaxGaussianKernelSize], sigmas positive and
// finite, the threshold not NaN. Unused trailing args are not checked.
absl::Status ValidateFunctionalArgs(const PixelKernel& kernel,
                                    const PixelArgs& args);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_FUNCTIONAL_H_
