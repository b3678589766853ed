#ifndef STOKER_CLIENT_BATCH_OPS_H_
#define STOKER_CLIENT_BATCH_OPS_H_

// Batch-level augmentations, applied by the client to a converted (float,
// normalized) batch, where torchvision / timm training recipes apply them
// after batching:
//
//   1. Random erasing, per sample, like torchvision.transforms.RandomErasing
//      placed after Normalize: with probability p a box of random area and
//      aspect ratio is filled with a constant (in normalized units: 0 is the
//      channel mean) or with standard normal noise (value="random").
//      get_params is torchvision's: up to 10 tries of an area fraction
//      ~ U(scale) and a log aspect ratio ~ U(log ratio), h = round(sqrt(area
//      * ratio)), w = round(sqrt(area / ratio)) (Python's round: half to
//      even), accepted when h < H and w < W, then top ~ U{0..H-h} and
//      left ~ U{0..W-w}; after 10 misses the sample is left alone.
//   2. MixUp / CutMix, per batch, like timm.data.Mixup in its "batch" mode:
//      with probability mix_prob the batch is mixed (else lambda = 1); when
//      both are enabled CutMix is chosen with probability switch_prob;
//      lambda ~ Beta(alpha, alpha). Sample i is mixed with sample n-1-i (the
//      batch flipped, as timm does; torchvision's v2 MixUp / CutMix use a roll
//      by one instead):
//        MixUp:  x_i = lambda * x_i + (1 - lambda) * x_{n-1-i}
//        CutMix: a box of sides H * sqrt(1 - lambda), W * sqrt(1 - lambda)
//                (truncated to integers) centred uniformly at random and
//                clipped to the image; inside it x_i = x_{n-1-i}; lambda is
//                corrected to 1 - box area / image area.
//      Targets become soft: with label smoothing s over C classes,
//      on = 1 - s + s / C, off = s / C, target_i = lambda * smooth(y_i)
//      + (1 - lambda) * smooth(y_{n-1-i}), a float (n, C) matrix whose rows
//      sum to 1 (up to float rounding).
//   Erasing comes first (it is part of torchvision's per-sample transform),
//   then mixing.
//
// Determinism. Every random draw comes from common/random.h's CounterRng,
// keyed so that a batch's augmentation does not depend on which server sent
// it, on the order batches arrive in, or on a restart:
//   erasing of a sample: EraseKey(seed, epoch, sample_index), a stream
//     distinct from the server's per-sample augmentation (SampleKey);
//   mixing of a batch:   MixKey(seed, epoch, rank, batch_index).
// (With world_size not dividing the dataset, DistributedSampler-style
// padding repeats samples; a repeated sample is erased identically, as its
// server-side crop is identical.) The parameters are drawn on the host
// (DrawBatchOps; it uses libm's log / exp, so they are identical on hosts
// with the same libm) and applied on the host or the GPU.
//
// Arithmetic, identical on host (ApplyBatchOpsOnHost) and GPU
// (ApplyBatchOpsOnDevice) for every float dtype (client/batch_ops_math.h):
//   * Elements are read as float (float16 / bfloat16 widen exactly),
//     computed in float32 and rounded once to the output dtype (nearest,
//     ties to even). For float16 / bfloat16 this rounds once where torch,
//     computing in the 16-bit type, would round after every operation.
//   * MixUp: x * a + x' * b with a = float(lambda), b = float(1 - lambda)
//     (the subtraction in double), each product and the sum rounded (no fused
//     multiply-add): torch's float32 x.mul(a).add(x.flip(0).mul(b)).
//     CutMix copies elements bit for bit.
//   * Erasing with a constant writes value[c] rounded to the dtype; with
//     noise, element k of the box (numbered in (channel, row, column)
//     order) gets EraseNoise(noise_key, k): a normal deviate computed in
//     double by the polar method with a portable logarithm, rounded to float.
//   * Soft targets: on / off rounded to float, then MixUp's arithmetic.
// uint8 outputs cannot be erased or mixed (their values are raw pixels, not
// normalized ones): Apply* refuse them with InvalidArgument.
//
// Thread-safety: every function is pure or touches only its arguments.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/batch_ops_math.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/host_batch.h"
#include "common/random.h"

namespace stoker::client {

enum class EraseFill {
  // value[c] in channel c.
  kConstant,
  // Standard normal noise per element (torchvision's value="random").
  kNormal,
};

struct RandomErasingOptions {
  // Probability that a sample is erased, in [0, 1]. Default 0: erasing off.
  double probability = 0;
  // Range of the erased area as a fraction of the image's area:
  // 0 <= scale_min <= scale_max <= 1. Default [0.02, 0.33].
  double scale_min = 0.02;
  double scale_max = 0.33;
  // Range of the erased box's aspect ratio (height / width), drawn uniformly
  // in log space: 0 < ratio_min <= ratio_max, finite. Default [0.3, 3.3].
  double ratio_min = 0.3;
  double ratio_max = 3.3;
  // Fill of the box. Default kConstant.
  EraseFill fill = EraseFill::kConstant;
  // Per channel (R, G, B; a 1-channel batch uses value[0]) for kConstant, in
  // the normalized output's units: 0 (default) is the channel's mean.
  // Finite.
  std::array<float, 3> value{0, 0, 0};
};

struct MixOptions {
  // Beta(alpha, alpha) concentration of MixUp's lambda; 0 (default) turns
  // MixUp off. Finite, >= 0.
  double mixup_alpha = 0;
  // Beta(alpha, alpha) concentration of CutMix's lambda; 0 (default) turns
  // CutMix off. Finite, >= 0.
  double cutmix_alpha = 0;
  // Probability that a batch is mixed at all, in [0, 1]. Default 1.
  double mix_prob = 1;
  // With both MixUp and CutMix on: probability that a mixed batch uses
  // CutMix, in [0, 1]. Default 0.5 (timm's). Ignored otherwise.
  double switch_prob = 0.5;
  // Label smoothing of the one-hot targets before mixing, in [0, 1).
  // Default 0. Only with mixing on (otherwise put it in the loss, e.g.
  // torch.nn.CrossEntropyLoss(label_smoothing=...)).
  double label_smoothing = 0;
  // Classes, i.e. the width of the soft targets; required (>= 1) when
  // mixing is on. Every label must lie in [0, num_classes).
  int num_classes = 0;
};

struct BatchOpsOptions {
  RandomErasingOptions erasing;
  MixOptions mix;
  // The plan's seed and this process's rank (the network loader's
  // LoaderOptions::seed and rank): with a batch's epoch, batch index and
  // sample indices they key every draw (see the top of this file).
  uint64_t seed = 0;
  int rank = 0;

  bool erasing_enabled() const { return erasing.probability > 0; }
  bool mixing_enabled() const {
    return mix.mixup_alpha > 0 || mix.cutmix_alpha > 0;
  }
  bool enabled() const { return erasing_enabled() || mixing_enabled(); }
};

// InvalidArgument naming the field and the accepted range for any value
// outside the ranges above (NaN included), e.g.
// "BatchOpsOptions.mix.num_classes = 0 must be >= 1 when MixUp or CutMix is
// on".
absl::Status ValidateBatchOpsOptions(const BatchOpsOptions& options);

enum class MixMode { kNone, kMixUp, kCutMix };
// "none", "mixup", "cutmix".
absl::string_view MixModeName(MixMode mode);

// A batch's mixing, as drawn.
struct MixParams {
  MixMode mode = MixMode::kNone;
  // The weight of each sample's own image and target (timm's lam): the Beta
  // draw for MixUp, 1 - box area / image area for CutMix, 1 for kNone.
  double lambda = 1;
  // float(lambda) and float(1 - lambda): the weights the arithmetic uses.
  float self_weight = 1;
  float partner_weight = 0;
  // CutMix: rows [y0, y1) and columns [x0, x1) come from the partner (empty
  // for the other modes).
  int32_t y0 = 0;
  int32_t y1 = 0;
  int32_t x0 = 0;
  int32_t x1 = 0;
};

// Everything needed to apply one batch's augmentations (drawn by
// DrawBatchOps; plain data, copyable).
struct BatchOpsParams {
  // One box per sample when erasing is on (empty boxes for samples left
  // alone), else empty.
  std::vector<EraseBox> erase;
  EraseFill fill = EraseFill::kConstant;
  std::array<float, 3> value{0, 0, 0};
  // kNone when mixing is off or this batch was not mixed.
  MixParams mix;
  // Mixing is on: the targets are soft, (n, num_classes) floats.
  bool soft_labels = false;
  int num_classes = 0;
  // The smoothed one-hot values, rounded to float.
  float label_on = 1;
  float label_off = 0;

  // Whether applying these changes anything (erasing or mixing on).
  bool active() const { return !erase.empty() || soft_labels; }
};

// The keys of the draws (see the top of this file).
uint64_t EraseKey(uint64_t seed, int64_t epoch, int64_t sample_index);
uint64_t MixKey(uint64_t seed, int64_t epoch, int rank, int64_t batch_index);

// One draw of Beta(alpha, alpha) (alpha > 0) from `rng`, via two Gamma
// draws (Marsaglia and Tsang's method, boosted for alpha < 1) combined in
// log space, so small alphas (whose Gammas underflow) still give a lambda
// in [0, 1].
double SampleBeta(double alpha, common::CounterRng* rng);
// A standard normal deviate (batch_math::StandardNormal on rng's stream).
double SampleStandardNormal(common::CounterRng* rng);

// The erase box of one sample of a height x width image: torchvision's
// forward (u < p) and get_params, drawn from CounterRng(key). noise_key is
// set (from key) whenever the box is not empty. `options` must be valid.
EraseBox DrawEraseBox(const RandomErasingOptions& options, uint64_t key,
                      int height, int width);

// The mixing of one batch of height x width images, drawn from
// CounterRng(key) in timm's order: mix (u < mix_prob), then CutMix or not
// (u < switch_prob, only with both on), then lambda, then the CutMix box
// centre (row, then column, uniform integers). `options` must be valid.
MixParams DrawMix(const MixOptions& options, uint64_t key, int height,
                  int width);

// Everything for `batch` (its pixels are not read): one erase box per
// sample (keyed by its sample index) and the batch's mixing. Errors:
// InvalidArgument for invalid options, a batch whose sample_indices or
// labels do not have n entries, or (with mixing on) a label outside
// [0, num_classes), naming the sample's key.
absl::StatusOr<BatchOpsParams> DrawBatchOps(const BatchOpsOptions& options,
                                            const HostBatch& batch);

// Applies `params` in place to `images`, a dense batch of `shape` (uint8
// NHWC shape, as given to the conversion) converted to `dtype` in `layout`
// (host memory, aligned to the element size), and writes the soft targets
// (params.soft_labels) into `soft_labels`: n * num_classes floats, row
// major, computed from the n int64 `labels`. Erasing first, then mixing.
// Single-threaded. Errors (InvalidArgument, nothing written): a uint8
// dtype with params.active(), params.erase neither empty nor n boxes, a box
// outside the image, a CutMix box outside the image, null soft_labels or
// labels when needed, a misaligned pointer.
absl::Status ApplyBatchOpsOnHost(const BatchOpsParams& params,
                                 const ImageShape& shape, DType dtype,
                                 Layout layout, void* images,
                                 const int64_t* labels, float* soft_labels);

// The same on a GPU, enqueued on `stream` (returns without waiting):
// images, labels and soft_labels are device memory of the current device;
// `device_boxes` is params.erase copied to device memory (null when
// params.erase is empty) and must stay unchanged until the work has run.
// The host copy `params` is what is validated. Errors: those above;
// Internal for a CUDA error.
absl::Status ApplyBatchOpsOnDevice(const BatchOpsParams& params,
                                   const EraseBox* device_boxes,
                                   const ImageShape& shape, DType dtype,
                                   Layout layout, void* images,
                                   const int64_t* labels, float* soft_labels,
                                   CudaStream stream);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_BATCH_OPS_H_
