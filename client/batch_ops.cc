#include "client/batch_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/batch_ops_kernels.h"
#include "client/convert_kernels.h"
#include "image/ops/geometry_util.h"

// This file is compiled with -ffp-contract=off (client/BUILD): the shared
// arithmetic of client/batch_ops_math.h must round every operation, exactly
// as the kernels' intrinsics do.

namespace stoker::client {
namespace {

namespace bm = batch_math;

// Stream tags ("erasing", "noise", "mixing" in ASCII): keep the draws of
// each kind apart from each other and from the server's SampleKey streams.
constexpr uint64_t kEraseTag = 0x65726173696e67ULL;
constexpr uint64_t kNoiseTag = 0x6e6f697365ULL;
constexpr uint64_t kMixTag = 0x6d6978696e67ULL;

// Torchvision's get_params gives up after this many tries.
constexpr int kEraseAttempts = 10;

bool InUnitInterval(double v) { return v >= 0 && v <= 1; }

// log Gamma(alpha, 1) draw, alpha > 0 (Marsaglia and Tsang, "A simple
// method for generating gamma variables", 2000; alpha < 1 by their boost
// Gamma(alpha) = Gamma(alpha + 1) * U^(1 / alpha), kept in log space).
double LogGammaDraw(double alpha, common::CounterRng* rng) {
  if (alpha < 1) {
    const double log_boosted = LogGammaDraw(alpha + 1, rng);
    const double u = 1.0 - rng->NextDouble();  // (0, 1]
    return log_boosted + std::log(u) / alpha;
  }
  const double d = alpha - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x;
    double v;
    do {
      x = SampleStandardNormal(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = rng->NextDouble();
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return std::log(d * v);
    if (u > 0 && std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) {
      return std::log(d * v);
    }
  }
}

// --- Host element access ---

template <DType kDType>
struct HostElem;

template <>
struct HostElem<DType::kFloat32> {
  using Bits = uint32_t;
  static float ToFloat(Bits b) {
    float f;
    std::memcpy(&f, &b, sizeof(f));
    return f;
  }
  static Bits FromFloat(float f) {
    Bits b;
    std::memcpy(&b, &f, sizeof(b));
    return b;
  }
};

template <>
struct HostElem<DType::kFloat16> {
  using Bits = uint16_t;
  static float ToFloat(Bits b) { return HalfBitsToFloat(b); }
  static Bits FromFloat(float f) { return FloatToHalfBits(f); }
};

template <>
struct HostElem<DType::kBFloat16> {
  using Bits = uint16_t;
  static float ToFloat(Bits b) { return BFloat16BitsToFloat(b); }
  static Bits FromFloat(float f) { return FloatToBFloat16Bits(f); }
};

// The host twin of client/batch_ops_kernels.cu, loop for loop.
template <DType kDType>
void ApplyToImages(const BatchOpsParams& params, const ImageShape& shape,
                   bool nchw, void* images) {
  using E = HostElem<kDType>;
  auto* out = static_cast<typename E::Bits*>(images);
  const int64_t n = shape.n;
  const int64_t channels = shape.channels;
  const int64_t height = shape.height;
  const int64_t width = shape.width;
  const bool normal = params.fill == EraseFill::kNormal;
  for (int64_t image = 0; image < static_cast<int64_t>(params.erase.size());
       ++image) {
    const EraseBox& box = params.erase[image];
    if (box.height <= 0 || box.width <= 0) continue;
    int64_t k = 0;  // (channel, row, column) order
    for (int64_t c = 0; c < channels; ++c) {
      const float value = params.value[channels == 1 ? 0 : c];
      for (int64_t y = 0; y < box.height; ++y) {
        for (int64_t x = 0; x < box.width; ++x, ++k) {
          const float v = normal ? bm::EraseNoise(box.noise_key, k) : value;
          out[bm::ElementOffset(nchw, image, c, box.top + y, box.left + x,
                                channels, height, width)] = E::FromFloat(v);
        }
      }
    }
  }
  const MixParams& mix = params.mix;
  if (mix.mode == MixMode::kMixUp) {
    const int64_t per_image = channels * height * width;
    for (int64_t p = 0; p < (n + 1) / 2; ++p) {
      typename E::Bits* a = out + p * per_image;
      typename E::Bits* b = out + (n - 1 - p) * per_image;
      for (int64_t e = 0; e < per_image; ++e) {
        const float xa = E::ToFloat(a[e]);
        const float xb = E::ToFloat(b[e]);
        a[e] = E::FromFloat(
            bm::MixValue(xa, xb, mix.self_weight, mix.partner_weight));
        if (b != a) {
          b[e] = E::FromFloat(
              bm::MixValue(xb, xa, mix.self_weight, mix.partner_weight));
        }
      }
    }
  } else if (mix.mode == MixMode::kCutMix) {
    for (int64_t p = 0; p < n / 2; ++p) {
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t y = mix.y0; y < mix.y1; ++y) {
          for (int64_t x = mix.x0; x < mix.x1; ++x) {
            std::swap(out[bm::ElementOffset(nchw, p, c, y, x, channels, height,
                                            width)],
                      out[bm::ElementOffset(nchw, n - 1 - p, c, y, x, channels,
                                            height, width)]);
          }
        }
      }
    }
  }
}

void WriteTargets(const BatchOpsParams& params, int64_t n,
                  const int64_t* labels, float* targets) {
  const int64_t classes = params.num_classes;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < classes; ++c) {
      targets[i * classes + c] = bm::SoftTarget(
          labels[i], labels[n - 1 - i], c, params.label_on, params.label_off,
          params.mix.self_weight, params.mix.partner_weight);
    }
  }
}

// Everything Apply* check before touching memory (see the header).
absl::Status ValidateApply(const BatchOpsParams& params,
                           const ImageShape& shape, DType dtype,
                           const void* images, const int64_t* labels,
                           const float* soft_labels) {
  if (!params.active()) return absl::OkStatus();
  if (dtype == DType::kUint8) {
    return absl::InvalidArgumentError(
        "random erasing and MixUp / CutMix need a float output dtype "
        "(float32, float16 or bfloat16): uint8 output holds raw pixels, not "
        "normalized values");
  }
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 &&
      dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError("batch ops: dtype is not a DType");
  }
  if (absl::Status s = ValidateImageShape(shape); !s.ok()) return s;
  if (reinterpret_cast<uintptr_t>(images) % DTypeSize(dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch ops: images %p are not aligned to their %d-byte elements",
        images, DTypeSize(dtype)));
  }
  if (!params.erase.empty()) {
    if (static_cast<int64_t>(params.erase.size()) != shape.n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("batch ops: %d erase boxes for a batch of %d",
                          params.erase.size(), shape.n));
    }
    for (size_t i = 0; i < params.erase.size(); ++i) {
      const EraseBox& b = params.erase[i];
      if (b.top < 0 || b.left < 0 || b.height < 0 || b.width < 0 ||
          b.top + int64_t{b.height} > shape.height ||
          b.left + int64_t{b.width} > shape.width) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "batch ops: erase box %d (top %d, left %d, %dx%d) lies outside "
            "the %dx%d image",
            i, b.top, b.left, b.height, b.width, shape.height, shape.width));
      }
    }
  }
  const MixParams& m = params.mix;
  if (m.mode == MixMode::kCutMix &&
      !(0 <= m.y0 && m.y0 <= m.y1 && m.y1 <= shape.height && 0 <= m.x0 &&
        m.x0 <= m.x1 && m.x1 <= shape.width)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch ops: CutMix box rows [%d, %d) x columns [%d, %d) lies outside "
        "the %dx%d image",
        m.y0, m.y1, m.x0, m.x1, shape.height, shape.width));
  }
  if (params.soft_labels) {
    if (params.num_classes < 1) {
      return absl::InvalidArgumentError(
          "batch ops: soft labels need num_classes >= 1");
    }
    if (shape.n > 0 && (labels == nullptr || soft_labels == nullptr)) {
      return absl::InvalidArgumentError(
          "batch ops: MixUp / CutMix need the labels and a buffer for the "
          "soft labels");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateBatchOpsOptions(const BatchOpsOptions& options) {
  const RandomErasingOptions& e = options.erasing;
  if (!InUnitInterval(e.probability)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BatchOpsOptions.erasing.probability = %g must be in [0, 1]",
        e.probability));
  }
  if (options.erasing_enabled()) {
    if (!(e.scale_min >= 0 && e.scale_min <= e.scale_max && e.scale_max <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "BatchOpsOptions.erasing scale = (%g, %g) must satisfy 0 <= min <= "
          "max <= 1 (fractions of the image area)",
          e.scale_min, e.scale_max));
    }
    if (!(e.ratio_min > 0 && e.ratio_min <= e.ratio_max &&
          std::isfinite(e.ratio_max))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "BatchOpsOptions.erasing ratio = (%g, %g) must satisfy 0 < min <= "
          "max < infinity (height / width)",
          e.ratio_min, e.ratio_max));
    }
    if (e.fill != EraseFill::kConstant && e.fill != EraseFill::kNormal) {
      return absl::InvalidArgumentError(
          "BatchOpsOptions.erasing.fill is not an EraseFill");
    }
    for (int c = 0; c < 3; ++c) {
      if (!std::isfinite(e.value[c])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "BatchOpsOptions.erasing.value[%d] = %g is not finite", c,
            e.value[c]));
      }
    }
  }
  const MixOptions& m = options.mix;
  if (!(m.mixup_alpha >= 0 && std::isfinite(m.mixup_alpha))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BatchOpsOptions.mix.mixup_alpha = %g must be finite and >= 0 (0: "
        "off)",
        m.mixup_alpha));
  }
  if (!(m.cutmix_alpha >= 0 && std::isfinite(m.cutmix_alpha))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BatchOpsOptions.mix.cutmix_alpha = %g must be finite and >= 0 (0: "
        "off)",
        m.cutmix_alpha));
  }
  if (!InUnitInterval(m.mix_prob)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BatchOpsOptions.mix.mix_prob = %g must be in [0, 1]", m.mix_prob));
  }
  if (!InUnitInterval(m.switch_prob)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BatchOpsOptions.mix.switch_prob = %g must be in [0, 1]",
        m.switch_prob));
  }
  if (!(m.label_smoothing >= 0 && m.label_smoothing < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BatchOpsOptions.mix.label_smoothing = %g must be in [0, 1)",
        m.label_smoothing));
  }
  if (m.num_classes < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BatchOpsOptions.mix.num_classes = %d must be >= 0", m.num_classes));
  }
  if (options.mixing_enabled() && m.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BatchOpsOptions.mix.num_classes = %d must be >= 1 when MixUp or "
        "CutMix is on (the width of the soft labels)",
        m.num_classes));
  }
  if (!options.mixing_enabled() && m.label_smoothing > 0) {
    return absl::InvalidArgumentError(
        "BatchOpsOptions.mix.label_smoothing applies to the soft labels of "
        "MixUp / CutMix; without them smooth in the loss instead (e.g. "
        "torch.nn.CrossEntropyLoss(label_smoothing=...))");
  }
  return absl::OkStatus();
}

absl::string_view MixModeName(MixMode mode) {
  switch (mode) {
    case MixMode::kNone:
      return "none";
    case MixMode::kMixUp:
      return "mixup";
    case MixMode::kCutMix:
      return "cutmix";
  }
  return "unknown";
}

uint64_t EraseKey(uint64_t seed, int64_t epoch, int64_t sample_index) {
  return common::HashCombine(common::SampleKey(seed, epoch, sample_index),
                             kEraseTag);
}

uint64_t MixKey(uint64_t seed, int64_t epoch, int rank, int64_t batch_index) {
  uint64_t key = common::HashCombine(seed, kMixTag);
  key = common::HashCombine(key, static_cast<uint64_t>(epoch));
  key = common::HashCombine(key, static_cast<uint64_t>(int64_t{rank}));
  return common::HashCombine(key, static_cast<uint64_t>(batch_index));
}

double SampleStandardNormal(common::CounterRng* rng) {
  return bm::StandardNormal(rng);
}

double SampleBeta(double alpha, common::CounterRng* rng) {
  const double log_x = LogGammaDraw(alpha, rng);
  const double log_y = LogGammaDraw(alpha, rng);
  // x / (x + y), without forming x and y (both underflow for small alpha).
  return 1.0 / (1.0 + std::exp(log_y - log_x));
}

EraseBox DrawEraseBox(const RandomErasingOptions& options, uint64_t key,
                      int height, int width) {
  EraseBox box;
  common::CounterRng rng(key);
  if (!(rng.NextDouble() < options.probability)) return box;
  const double area = static_cast<double>(height) * width;
  const double log_min = std::log(options.ratio_min);
  const double log_max = std::log(options.ratio_max);
  for (int attempt = 0; attempt < kEraseAttempts; ++attempt) {
    const double erase_area =
        area * rng.Uniform(options.scale_min, options.scale_max);
    const double aspect = std::exp(rng.Uniform(log_min, log_max));
    // Python's round(), as torchvision's get_params does.
    const double h = image::PythonRound(std::sqrt(erase_area * aspect));
    const double w = image::PythonRound(std::sqrt(erase_area / aspect));
    if (!(h < height && w < width)) continue;
    const int32_t hi = static_cast<int32_t>(h);
    const int32_t wi = static_cast<int32_t>(w);
    const int32_t top =
        static_cast<int32_t>(rng.UniformInt(0, height - hi + 1));
    const int32_t left =
        static_cast<int32_t>(rng.UniformInt(0, width - wi + 1));
    // A box of zero rows or columns erases nothing (as in torchvision);
    // it is reported as no box.
    if (hi > 0 && wi > 0) {
      box.top = top;
      box.left = left;
      box.height = hi;
      box.width = wi;
      box.noise_key = common::HashCombine(key, kNoiseTag);
    }
    return box;
  }
  return box;
}

MixParams DrawMix(const MixOptions& options, uint64_t key, int height,
                  int width) {
  MixParams mix;
  const bool mixup = options.mixup_alpha > 0;
  const bool cutmix = options.cutmix_alpha > 0;
  if (!mixup && !cutmix) return mix;
  common::CounterRng rng(key);
  if (!(rng.NextDouble() < options.mix_prob)) return mix;
  bool use_cutmix = cutmix;
  if (mixup && cutmix) use_cutmix = rng.NextDouble() < options.switch_prob;
  double lambda =
      SampleBeta(use_cutmix ? options.cutmix_alpha : options.mixup_alpha, &rng);
  if (use_cutmix) {
    // timm's rand_bbox and cutmix_bbox_and_lam (correct_lam=True).
    const double cut = std::sqrt(1.0 - lambda);
    const int64_t cut_h = static_cast<int64_t>(height * cut);
    const int64_t cut_w = static_cast<int64_t>(width * cut);
    const int64_t cy = rng.UniformInt(0, height);
    const int64_t cx = rng.UniformInt(0, width);
    mix.y0 =
        static_cast<int32_t>(std::clamp<int64_t>(cy - cut_h / 2, 0, height));
    mix.y1 =
        static_cast<int32_t>(std::clamp<int64_t>(cy + cut_h / 2, 0, height));
    mix.x0 =
        static_cast<int32_t>(std::clamp<int64_t>(cx - cut_w / 2, 0, width));
    mix.x1 =
        static_cast<int32_t>(std::clamp<int64_t>(cx + cut_w / 2, 0, width));
    const double box_area =
        static_cast<double>(int64_t{mix.y1 - mix.y0} * (mix.x1 - mix.x0));
    const double image_area = static_cast<double>(height) * width;
    lambda = image_area > 0 ? 1.0 - box_area / image_area : 1.0;
    mix.mode = MixMode::kCutMix;
  } else {
    mix.mode = MixMode::kMixUp;
  }
  mix.lambda = lambda;
  mix.self_weight = static_cast<float>(lambda);
  mix.partner_weight = static_cast<float>(1.0 - lambda);
  return mix;
}

absl::StatusOr<BatchOpsParams> DrawBatchOps(const BatchOpsOptions& options,
                                            const HostBatch& batch) {
  if (absl::Status s = ValidateBatchOpsOptions(options); !s.ok()) return s;
  BatchOpsParams params;
  params.fill = options.erasing.fill;
  params.value = options.erasing.value;
  const size_t n = static_cast<size_t>(batch.n);
  if (options.erasing_enabled()) {
    if (batch.sample_indices.size() != n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "random erasing: batch %d of epoch %d has %d sample indices for %d "
          "samples",
          batch.batch_index, batch.epoch, batch.sample_indices.size(), n));
    }
    params.erase.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      params.erase.push_back(DrawEraseBox(
          options.erasing,
          EraseKey(options.seed, batch.epoch, batch.sample_indices[i]),
          batch.height, batch.width));
    }
  }
  if (options.mixing_enabled()) {
    const MixOptions& m = options.mix;
    if (batch.labels.size() != n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "MixUp / CutMix: batch %d of epoch %d has %d labels for %d samples",
          batch.batch_index, batch.epoch, batch.labels.size(), n));
    }
    for (size_t i = 0; i < n; ++i) {
      if (batch.labels[i] < 0 || batch.labels[i] >= m.num_classes) {
        const std::string key =
            i < batch.keys.size() ? batch.keys[i] : std::string("?");
        return absl::InvalidArgumentError(absl::StrFormat(
            "MixUp / CutMix: label %d of sample %s (batch %d of epoch %d) "
            "lies outside [0, num_classes = %d)",
            batch.labels[i], key, batch.batch_index, batch.epoch,
            m.num_classes));
      }
    }
    params.mix = DrawMix(
        m, MixKey(options.seed, batch.epoch, options.rank, batch.batch_index),
        batch.height, batch.width);
    params.soft_labels = true;
    params.num_classes = m.num_classes;
    const double off = m.label_smoothing / m.num_classes;
    params.label_off = static_cast<float>(off);
    params.label_on = static_cast<float>(1.0 - m.label_smoothing + off);
  }
  return params;
}

absl::Status ApplyBatchOpsOnHost(const BatchOpsParams& params,
                                 const ImageShape& shape, DType dtype,
                                 Layout layout, void* images,
                                 const int64_t* labels, float* soft_labels) {
  if (absl::Status s =
          ValidateApply(params, shape, dtype, images, labels, soft_labels);
      !s.ok()) {
    return s;
  }
  if (!params.active() || shape.n == 0) return absl::OkStatus();
  const bool nchw = layout == Layout::kNCHW;
  switch (dtype) {
    case DType::kFloat32:
      ApplyToImages<DType::kFloat32>(params, shape, nchw, images);
      break;
    case DType::kFloat16:
      ApplyToImages<DType::kFloat16>(params, shape, nchw, images);
      break;
    case DType::kBFloat16:
      ApplyToImages<DType::kBFloat16>(params, shape, nchw, images);
      break;
    case DType::kUint8:
      break;  // Refused by ValidateApply.
  }
  if (params.soft_labels) WriteTargets(params, shape.n, labels, soft_labels);
  return absl::OkStatus();
}

absl::Status ApplyBatchOpsOnDevice(const BatchOpsParams& params,
                                   const EraseBox* device_boxes,
                                   const ImageShape& shape, DType dtype,
                                   Layout layout, void* images,
                                   const int64_t* labels, float* soft_labels,
                                   CudaStream stream) {
  if (absl::Status s =
          ValidateApply(params, shape, dtype, images, labels, soft_labels);
      !s.ok()) {
    return s;
  }
  if (!params.active() || shape.n == 0) return absl::OkStatus();
  if (!params.erase.empty() && device_boxes == nullptr) {
    return absl::InvalidArgumentError(
        "ApplyBatchOpsOnDevice: the erase boxes are not on the device");
  }
  kernels::BatchOpsKernelArgs args;
  args.images = images;
  args.n = shape.n;
  args.channels = shape.channels;
  args.height = shape.height;
  args.width = shape.width;
  args.dtype = dtype == DType::kFloat32   ? kernels::kKernelFloat32
               : dtype == DType::kFloat16 ? kernels::kKernelFloat16
                                          : kernels::kKernelBFloat16;
  args.nchw = layout == Layout::kNCHW;
  args.boxes = params.erase.empty() ? nullptr : device_boxes;
  args.normal_fill = params.fill == EraseFill::kNormal;
  for (int c = 0; c < 3; ++c) args.value[c] = params.value[c];
  const MixParams& mix = params.mix;
  args.mix_mode = mix.mode == MixMode::kMixUp    ? 1
                  : mix.mode == MixMode::kCutMix ? 2
                                                 : 0;
  args.self_weight = mix.self_weight;
  args.partner_weight = mix.partner_weight;
  args.y0 = mix.y0;
  args.y1 = mix.y1;
  args.x0 = mix.x0;
  args.x1 = mix.x1;
  if (params.soft_labels) {
    args.labels = labels;
    args.targets = soft_labels;
    args.num_classes = params.num_classes;
    args.label_on = params.label_on;
    args.label_off = params.label_off;
  }
  return CudaStatus(
      kernels::LaunchBatchOpsKernels(args, stream),
      absl::StrFormat("batch ops kernels (%s %s, %d images, erase %s, %s)",
                      DTypeName(dtype), LayoutName(layout), shape.n,
                      params.erase.empty() ? "off" : "on",
                      MixModeName(mix.mode)));
}

}  // namespace stoker::client
