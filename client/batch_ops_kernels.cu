// Random erasing, MixUp / CutMix and soft targets on a converted batch.
//
// The arithmetic is client/batch_ops_math.h's, the very functions the host
// path (client/batch_ops.cc) runs, with the __fmul_rn / __dadd_rn / ...
// intrinsics, so results are bit-identical to the host. 16-bit elements
// widen exactly to float and round back with __float2half_rn /
// __float2bfloat16_rn (nearest, ties to even), like the host's
// FloatToHalfBits / FloatToBFloat16Bits.
//
// These kernels touch a fraction of the batch (erase boxes, CutMix boxes)
// or read and write it once (MixUp); they are simple grid-stride loops.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "client/batch_ops_kernels.h"
#include "client/batch_ops_math.h"
#include "client/convert_kernels.h"

namespace stoker::client::kernels {
namespace {

namespace bm = ::stoker::client::batch_math;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;
// Blocks per image for erasing (a box has up to ~50k elements at 224px).
constexpr int kEraseBlocksPerImage = 4;

template <int kDType>
struct Elem;

template <>
struct Elem<kKernelFloat32> {
  using Bits = uint32_t;
  static __device__ __forceinline__ float ToFloat(Bits b) {
    return __uint_as_float(b);
  }
  static __device__ __forceinline__ Bits FromFloat(float f) {
    return __float_as_uint(f);
  }
};

template <>
struct Elem<kKernelFloat16> {
  using Bits = uint16_t;
  static __device__ __forceinline__ float ToFloat(Bits b) {
    return __half2float(__ushort_as_half(b));
  }
  static __device__ __forceinline__ Bits FromFloat(float f) {
    return __half_as_ushort(__float2half_rn(f));
  }
};

template <>
struct Elem<kKernelBFloat16> {
  using Bits = uint16_t;
  static __device__ __forceinline__ float ToFloat(Bits b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
  }
  static __device__ __forceinline__ Bits FromFloat(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};

__device__ __forceinline__ float Pick(const float (&v)[3], int64_t c) {
  return c == 0 ? v[0] : (c == 1 ? v[1] : v[2]);
}

template <int kDType>
__global__ void __launch_bounds__(kThreads) EraseKernel(BatchOpsKernelArgs a) {
  using E = Elem<kDType>;
  const int64_t image = blockIdx.x / kEraseBlocksPerImage;
  const int64_t part = blockIdx.x % kEraseBlocksPerImage;
  const EraseBox box = a.boxes[image];
  if (box.height <= 0 || box.width <= 0) return;
  const int64_t per_channel = static_cast<int64_t>(box.height) * box.width;
  const int64_t total = a.channels * per_channel;
  auto* out = static_cast<typename E::Bits*>(a.images);
  for (int64_t k = part * blockDim.x + threadIdx.x; k < total;
       k += static_cast<int64_t>(kEraseBlocksPerImage) * blockDim.x) {
    const int64_t c = k / per_channel;
    const int64_t rem = k - c * per_channel;
    const int64_t y = rem / box.width;
    const int64_t x = rem - y * box.width;
    const float v = a.normal_fill ? bm::EraseNoise(box.noise_key, k)
                                  : Pick(a.value, a.channels == 1 ? 0 : c);
    out[bm::ElementOffset(a.nchw, image, c, box.top + y, box.left + x,
                          a.channels, a.height, a.width)] = E::FromFloat(v);
  }
}

// One thread per element position of a pair (i, n-1-i): both outputs from
// both inputs, so the batch is mixed in place.
template <int kDType>
__global__ void __launch_bounds__(kThreads)
    MixUpKernel(BatchOpsKernelArgs a, int64_t pairs, int64_t per_image) {
  using E = Elem<kDType>;
  auto* out = static_cast<typename E::Bits*>(a.images);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < pairs * per_image; t += stride) {
    const int64_t p = t / per_image;
    const int64_t e = t - p * per_image;
    const int64_t i = p * per_image + e;
    const int64_t j = (a.n - 1 - p) * per_image + e;
    const float xi = E::ToFloat(out[i]);
    const float xj = E::ToFloat(out[j]);
    out[i] =
        E::FromFloat(bm::MixValue(xi, xj, a.self_weight, a.partner_weight));
    if (j != i) {
      out[j] =
          E::FromFloat(bm::MixValue(xj, xi, a.self_weight, a.partner_weight));
    }
  }
}

// Swaps the CutMix box of each pair (i, n-1-i), i < n-1-i.
template <typename Bits>
__global__ void __launch_bounds__(kThreads)
    CutMixKernel(BatchOpsKernelArgs a, int64_t pairs) {
  auto* out = static_cast<Bits*>(a.images);
  const int64_t box_w = a.x1 - a.x0;
  const int64_t per_channel = static_cast<int64_t>(a.y1 - a.y0) * box_w;
  const int64_t per_pair = a.channels * per_channel;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < pairs * per_pair; t += stride) {
    const int64_t p = t / per_pair;
    const int64_t k = t - p * per_pair;
    const int64_t c = k / per_channel;
    const int64_t rem = k - c * per_channel;
    const int64_t y = a.y0 + rem / box_w;
    const int64_t x = a.x0 + rem % box_w;
    const int64_t i =
        bm::ElementOffset(a.nchw, p, c, y, x, a.channels, a.height, a.width);
    const int64_t j = bm::ElementOffset(a.nchw, a.n - 1 - p, c, y, x,
                                        a.channels, a.height, a.width);
    const Bits v = out[i];
    out[i] = out[j];
    out[j] = v;
  }
}

__global__ void __launch_bounds__(kThreads) TargetKernel(BatchOpsKernelArgs a) {
  const int64_t total = a.n * a.num_classes;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < total; t += stride) {
    const int64_t i = t / a.num_classes;
    const int64_t c = t - i * a.num_classes;
    a.targets[t] =
        bm::SoftTarget(a.labels[i], a.labels[a.n - 1 - i], c, a.label_on,
                       a.label_off, a.self_weight, a.partner_weight);
  }
}

unsigned int Blocks(int64_t work_items) {
  int64_t blocks = (work_items + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned int>(blocks < 1 ? 1 : blocks);
}

template <int kDType>
int LaunchImageKernels(const BatchOpsKernelArgs& a, cudaStream_t stream) {
  using Bits = typename Elem<kDType>::Bits;
  if (a.boxes != nullptr) {
    EraseKernel<kDType><<<static_cast<unsigned int>(a.n * kEraseBlocksPerImage),
                          kThreads, 0, stream>>>(a);
  }
  const int64_t per_image = a.channels * a.height * a.width;
  if (a.mix_mode == 1) {
    const int64_t pairs = (a.n + 1) / 2;
    MixUpKernel<kDType><<<Blocks(pairs * per_image), kThreads, 0, stream>>>(
        a, pairs, per_image);
  } else if (a.mix_mode == 2) {
    const int64_t pairs = a.n / 2;
    const int64_t per_pair =
        a.channels * static_cast<int64_t>(a.y1 - a.y0) * (a.x1 - a.x0);
    if (pairs > 0 && per_pair > 0) {
      CutMixKernel<Bits>
          <<<Blocks(pairs * per_pair), kThreads, 0, stream>>>(a, pairs);
    }
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchBatchOpsKernels(const BatchOpsKernelArgs& args, CUstream_st* stream) {
  if (args.n <= 0) return cudaSuccess;
  if (args.channels < 1 || args.channels > 3) return cudaErrorInvalidValue;
  int status = cudaSuccess;
  if (args.height > 0 && args.width > 0) {
    switch (args.dtype) {
      case kKernelFloat32:
        status = LaunchImageKernels<kKernelFloat32>(args, stream);
        break;
      case kKernelFloat16:
        status = LaunchImageKernels<kKernelFloat16>(args, stream);
        break;
      case kKernelBFloat16:
        status = LaunchImageKernels<kKernelBFloat16>(args, stream);
        break;
      default:
        return cudaErrorInvalidValue;
    }
  }
  if (status != cudaSuccess) return status;
  if (args.targets != nullptr && args.num_classes > 0) {
    TargetKernel<<<Blocks(args.n * args.num_classes), kThreads, 0, stream>>>(
        args);
    status = static_cast<int>(cudaGetLastError());
  }
  return status;
}

}  // namespace stoker::client::kernels
