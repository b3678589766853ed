#ifndef STOKER_CLIENT_BATCH_OPS_KERNELS_H_
#define STOKER_CLIENT_BATCH_OPS_KERNELS_H_

// CUDA kernels behind ApplyBatchOpsOnDevice (client/batch_ops.h), compiled
// by nvcc (cuda_library in client/BUILD). Plain C++ with no CUDA or absl
// includes; use client/batch_ops.h, which validates the arguments, rather
// than calling these directly.

#include <cstdint>

#include "client/batch_ops_math.h"

struct CUstream_st;

namespace stoker::client::kernels {

struct BatchOpsKernelArgs {
  // The converted batch (device memory): n images of channels x height x
  // width elements of `dtype` (a KernelDType of client/convert_kernels.h;
  // float32, float16 or bfloat16), NCHW if `nchw`, else NHWC.
  void* images = nullptr;
  int64_t n = 0;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int dtype = 1;
  bool nchw = true;

  // Erasing: n boxes in device memory, or null for none. normal_fill: the
  // boxes get EraseNoise; otherwise value[c] (value[0] for one channel).
  const EraseBox* boxes = nullptr;
  bool normal_fill = false;
  float value[3] = {0, 0, 0};

  // Mixing with the flipped batch: mode 0 none, 1 MixUp (every element:
  // MixValue(x_i, x_{n-1-i}, self_weight, partner_weight)), 2 CutMix (rows
  // [y0, y1) x columns [x0, x1) of x_i and x_{n-1-i} swapped).
  int mix_mode = 0;
  float self_weight = 1;
  float partner_weight = 0;
  int32_t y0 = 0;
  int32_t y1 = 0;
  int32_t x0 = 0;
  int32_t x1 = 0;

  // Soft targets: if `targets` is not null, n x num_classes floats
  // SoftTarget(labels[i], labels[n-1-i], c, on, off, self_weight,
  // partner_weight), from n int64 labels (device memory).
  const int64_t* labels = nullptr;
  float* targets = nullptr;
  int64_t num_classes = 0;
  float label_on = 1;
  float label_off = 0;
};

// Enqueues erasing, then mixing, then the targets on `stream`. Returns a
// cudaError_t value (cudaSuccess == 0), e.g. for a launch failure or an
// unsupported dtype (cudaErrorInvalidValue).
int LaunchBatchOpsKernels(const BatchOpsKernelArgs& args, CUstream_st* stream);

}  // namespace stoker::client::kernels

#endif  // STOKER_CLIENT_BATCH_OPS_KERNELS_H_
