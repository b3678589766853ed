// The PixelKernel table and argument validation. The ops themselves are in
// functional_point.cc (lookup tables), functional_color.cc (channel mixing,
// sharpness, hue) and functional_blur.cc.

#include "image/functional.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace stoker::image {

namespace {

int RoundToInt(double v) {
  if (!(v > std::numeric_limits<int>::min() &&
        v < std::numeric_limits<int>::max())) {
    return v > 0 ? std::numeric_limits<int>::max()
                 : std::numeric_limits<int>::min();  // and NaN
  }
  return static_cast<int>(std::lround(v));
}

}  // namespace

const PixelKernel kAdjustBrightness = {
    "adjust_brightness", 1, [](const PixelArgs& args, const ImageView& image) {
      AdjustBrightness(image, args[0]);
    }};
const PixelKernel kAdjustContrast = {
    "adjust_contrast", 1, [](const PixelArgs& args, const ImageView& image) {
      AdjustContrast(image, args[0]);
    }};
const PixelKernel kAdjustSaturation = {
    "adjust_saturation", 1, [](const PixelArgs& args, const ImageView& image) {
      AdjustSaturation(image, args[0]);
    }};
const PixelKernel kAdjustHue = {
    "adjust_hue", 1, [](const PixelArgs& args, const ImageView& image) {
      AdjustHue(image, args[0]);
    }};
const PixelKernel kRgbToGrayscale = {
    "rgb_to_grayscale", 0,
    [](const PixelArgs&, const ImageView& image) { RgbToGrayscale(image); }};
const PixelKernel kGaussianBlur = {
    "gaussian_blur", 4, [](const PixelArgs& args, const ImageView& image) {
      GaussianBlur(image, RoundToInt(args[0]), RoundToInt(args[1]), args[2],
                   args[3]);
    }};
const PixelKernel kSolarize = {
    "solarize", 1, [](const PixelArgs& args, const ImageView& image) {
      Solarize(image, args[0]);
    }};
const PixelKernel kPosterize = {
    "posterize", 1, [](const PixelArgs& args, const ImageView& image) {
      Posterize(image, RoundToInt(args[0]));
    }};
const PixelKernel kEqualize = {
    "equalize", 0,
    [](const PixelArgs&, const ImageView& image) { Equalize(image); }};
const PixelKernel kAutocontrast = {
    "autocontrast", 0,
    [](const PixelArgs&, const ImageView& image) { Autocontrast(image); }};
const PixelKernel kAdjustSharpness = {
    "adjust_sharpness", 1, [](const PixelArgs& args, const ImageView& image) {
      AdjustSharpness(image, args[0]);
    }};
const PixelKernel kInvert = {
    "invert", 0,
    [](const PixelArgs&, const ImageView& image) { Invert(image); }};

absl::Span<const PixelKernel* const> FunctionalKernels() {
  static constexpr const PixelKernel* kAll[] = {
      &kAdjustBrightness, &kAdjustContrast, &kAdjustSaturation, &kAdjustHue,
      &kRgbToGrayscale,   &kGaussianBlur,   &kSolarize,         &kPosterize,
      &kEqualize,         &kAutocontrast,   &kAdjustSharpness,  &kInvert,
  };
  return kAll;
}

const PixelKernel* FindFunctionalKernel(absl::string_view name) {
  for (const PixelKernel* kernel : FunctionalKernels()) {
    if (name == kernel->name) return kernel;
  }
  return nullptr;
}

absl::Status ValidateFunctionalArgs(const PixelKernel& kernel,
                                    const PixelArgs& args) {
  const auto error = [&](absl::string_view what, double value) {
    return absl::InvalidArgumentError(
        absl::StrCat(kernel.name, ": ", what, ", got ", value));
  };
  const auto finite_float = [](double v) {
    return std::isfinite(static_cast<float>(v));
  };
  const auto odd_size = [](double v) {
    return v >= 1 && v <= kMaxGaussianKernelSize && v == std::floor(v) &&
           static_cast<int>(v) % 2 == 1;
  };
  if (&kernel == &kAdjustBrightness || &kernel == &kAdjustContrast ||
      &kernel == &kAdjustSaturation || &kernel == &kAdjustSharpness) {
    if (!finite_float(args[0])) {
      return error("the factor must be finite (as a float32)", args[0]);
    }
  } else if (&kernel == &kAdjustHue) {
    if (!(args[0] >= -0.5 && args[0] <= 0.5)) {
      return error("hue_factor must be in [-0.5, 0.5]", args[0]);
    }
  } else if (&kernel == &kGaussianBlur) {
    for (int i = 0; i < 2; ++i) {
      if (!odd_size(args[i])) {
        return error(absl::StrCat(i == 0 ? "kernel_w" : "kernel_h",
                                  " must be an odd integer in [1, ",
                                  kMaxGaussianKernelSize, "]"),
                     args[i]);
      }
    }
    for (int i = 2; i < 4; ++i) {
      if (!(finite_float(args[i]) && static_cast<float>(args[i]) > 0)) {
        return error(absl::StrCat(i == 2 ? "sigma_x" : "sigma_y",
                                  " must be positive and finite"),
                     args[i]);
      }
    }
  } else if (&kernel == &kSolarize) {
    if (std::isnan(args[0])) {
      return error("threshold must be a number", args[0]);
    }
  } else if (&kernel == &kPosterize) {
    if (!(args[0] >= 0 && args[0] <= 8 && args[0] == std::floor(args[0]))) {
      return error("bits must be an integer in [0, 8]", args[0]);
    }
  } else if (&kernel != &kRgbToGrayscale && &kernel != &kEqualize &&
             &kernel != &kAutocontrast && &kernel != &kInvert) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a kernel of image/functional.h: ",
                     kernel.name == nullptr ? "(unnamed)" : kernel.name));
  }
  return absl::OkStatus();
}

}  // namespace stoker::image
