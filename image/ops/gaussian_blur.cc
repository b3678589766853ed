// torchvision.transforms.GaussianBlur(kernel_size, sigma=(0.1, 2.0)).
//
// kernel_size: k (both axes) or (kx, ky), odd integers in
// [1, kMaxGaussianKernelSize] (torchvision takes int(k) of a float; we
// require integers). sigma: s > 0 (fixed) or (min, max) with
// 0 < min <= max, finite.
//
// Draws, as GaussianBlur.get_params: sigma = uniform_(min, max) ->
// Uniform(min, max), one draw even when min == max. Then
// F.gaussian_blur(img, [kx, ky], [sigma, sigma]). sigma is a double; torch
// draws float32 (and rounds it to float32 when building the kernel anyway).
// Trace: "gaussian_blur" {kernel_w, kernel_h, sigma_x, sigma_y}.

#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "image/functional.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

constexpr std::pair<double, double> kDefaultSigma = {0.1, 2.0};

class GaussianBlurTransform : public Op {
 public:
  int kernel_w = 0;
  int kernel_h = 0;
  // Written back as a single number when given as one.
  bool kernel_single = false;
  std::pair<double, double> sigma = kDefaultSigma;
  bool sigma_single = false;

  void WriteArgs(ArgWriter& w) const override {
    ArgValue k;
    if (kernel_single) {
      k.numbers = {static_cast<double>(kernel_w)};
    } else {
      k.numbers = {static_cast<double>(kernel_w),
                   static_cast<double>(kernel_h)};
      k.tuple = true;
    }
    w.Value("kernel_size", k, false);
    if (sigma_single) {
      w.Number("sigma", sigma.first, 1e300);
    } else {
      w.Pair("sigma", sigma, kDefaultSigma);
    }
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const double s = rng.Uniform(sigma.first, sigma.second);
    plan.Trace("gaussian_blur", {{"kernel_w", kernel_w},
                                 {"kernel_h", kernel_h},
                                 {"sigma_x", s},
                                 {"sigma_y", s}});
    plan.Pixel(kGaussianBlur, {static_cast<double>(kernel_w),
                               static_cast<double>(kernel_h), s, s});
  }
};

absl::Status BadKernelSize(const ArgValue& v) {
  std::string got;
  for (double x : v.numbers) absl::StrAppend(&got, got.empty() ? "" : ", ", x);
  return absl::InvalidArgumentError(absl::StrCat(
      "kernel_size must be an odd positive integer k or a pair (kx, ky) of "
      "them, at most ",
      kMaxGaussianKernelSize, "; got ", v.is_word() ? v.word : got));
}

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<GaussianBlurTransform>();
  const ArgValue* k = args.Find("kernel_size");
  if (k == nullptr) {
    return absl::InvalidArgumentError("missing kernel_size");
  }
  if (k->is_word() || k->numbers.empty() || k->numbers.size() > 2) {
    return BadKernelSize(*k);
  }
  for (double x : k->numbers) {
    if (!(x >= 1 && x <= kMaxGaussianKernelSize) || std::floor(x) != x ||
        static_cast<int>(x) % 2 == 0) {
      return BadKernelSize(*k);
    }
  }
  // _setup_size: one number (or a 1-tuple) serves both axes.
  op->kernel_single = k->numbers.size() == 1;
  op->kernel_w = static_cast<int>(k->numbers[0]);
  op->kernel_h = static_cast<int>(k->numbers.back());

  const ArgValue* s = args.Find("sigma");
  if (s != nullptr) {
    const bool single = !s->is_word() && s->numbers.size() == 1;
    const bool pair = !s->is_word() && s->numbers.size() == 2;
    if (single) {
      if (!(s->numbers[0] > 0) || !std::isfinite(s->numbers[0])) {
        return absl::InvalidArgumentError(
            absl::StrCat("sigma must be positive when a single number, got ",
                         s->numbers[0]));
      }
      op->sigma = {s->numbers[0], s->numbers[0]};
      op->sigma_single = true;
    } else if (pair) {
      const double lo = s->numbers[0], hi = s->numbers[1];
      if (!(lo > 0 && lo <= hi) || !std::isfinite(hi)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sigma values must be positive and of the form (min, max), got (",
            lo, ", ", hi, ")"));
      }
      op->sigma = {lo, hi};
    } else {
      return absl::InvalidArgumentError(
          "sigma must be a single number or a pair (min, max)");
    }
  }
  return op;
}

}  // namespace

const OpDef& GaussianBlurOp() {
  static const OpDef* const def = new OpDef{
      "GaussianBlur",
      {"kernel_size", "sigma"},
      "GaussianBlur(kernel_size, sigma=(0.1, 2.0)); kernel_size odd, k or "
      "(kx, ky)",
      &Create};
  return *def;
}

}  // namespace stoker::image
