#ifndef STOKER_CLIENT_HOST_REPLAY_H_
#define STOKER_CLIENT_HOST_REPLAY_H_

// One received batch (uint8 NHWC pixels and int64 labels) kept in host
// memory and delivered again and again through exactly the steps a batch
// takes in the Python loader after it has arrived from the network:
//
//   GPU  (DeviceKind::kCuda): the pixels and labels sit in page-locked host
//        memory; each ConvertInto copies them into a device slot on the
//        replay's own stream (as DeviceLoader does), makes the caller's
//        stream wait for that copy, and enqueues on the caller's stream the
//        conversion kernel (ConvertOnDevice) and the label copy into the
//        caller's tensors (as StagedBatch::convert_into does). The next
//        copy into the slot waits on the GPU until the conversion has read
//        it.
//   CPU  (DeviceKind::kCpu): the uint8 copy into a host slot that
//        DeviceLoader makes, then ConvertOnHost into the caller's memory
//        and the label copy.
//
// This is the "host cached" rung of the caching ladder (stoker.diagnose):
// the copy and conversion the loader runs, and nothing else, so that the
// rung above it (the model alone) and the rung below it (the network and
// the receiving client added) differ from it by one stage each.
//
// Thread-safety: none; one consumer calls ConvertInto at a time. Ownership:
// the replay owns its host and device memory; the caller's tensors are only
// written.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/device_loader.h"

namespace stoker::client {

struct HostReplayOptions {
  // Where the caller's tensors live. Default the CPU.
  DeviceKind device = DeviceKind::kCpu;
  // The CUDA device for kCuda.
  int device_id = 0;
  // The conversion the caller asked for (dtype, layout, normalization).
  ConvertOptions output;
};

class HostReplay {
 public:
  // Copies `pixels` (shape.elements() uint8 values, NHWC) and `labels`
  // (shape.n values) into the replay's host memory (page-locked for kCuda)
  // and allocates its slot. Errors: InvalidArgument for a bad shape, null
  // pixels or bad convert options; FailedPrecondition for kCuda without a
  // usable GPU; the CUDA errors of the allocations.
  static absl::StatusOr<std::unique_ptr<HostReplay>> Create(
      const uint8_t* pixels, const int64_t* labels, const ImageShape& shape,
      const HostReplayOptions& options);

  // Waits for the replay's work on the GPU, then frees its memory.
  ~HostReplay();

  HostReplay(const HostReplay&) = delete;
  HostReplay& operator=(const HostReplay&) = delete;

  // Converts the batch into `images` (shape.elements() values of
  // output.dtype in output.layout) and copies the labels into `labels`
  // (shape.n int64 values; null to leave them out). Both are device memory
  // on device_id for kCuda, where the work is enqueued on `stream` (the
  // caller's; 0 is the legacy default stream) and ConvertInto returns
  // without waiting for it; host memory for kCpu (stream ignored), where
  // the work is done on return. Errors: InvalidArgument for null images;
  // the CUDA errors of the copies and the kernel.
  absl::Status ConvertInto(void* images, int64_t* labels, CudaStream stream);

  const ImageShape& shape() const { return shape_; }

 private:
  HostReplay(const ImageShape& shape, const HostReplayOptions& options)
      : shape_(shape), options_(options) {}

  absl::Status Allocate(const uint8_t* pixels, const int64_t* labels);
  absl::Status ConvertOnCpu(void* images, int64_t* labels);
  absl::Status ConvertOnGpu(void* images, int64_t* labels, CudaStream stream);

  const ImageShape shape_;
  const HostReplayOptions options_;

  // kCpu: the cached batch and the slot DeviceLoader would stage it in.
  std::vector<uint8_t> host_pixels_;
  std::vector<int64_t> host_labels_;
  std::vector<uint8_t> slot_pixels_;
  std::vector<int64_t> slot_labels_;

  // kCuda: the cached batch in page-locked memory, the device slot, the
  // replay's copy stream and the events ordering it against the caller's.
  uint8_t* pinned_pixels_ = nullptr;
  int64_t* pinned_labels_ = nullptr;
  uint8_t* device_pixels_ = nullptr;
  int64_t* device_labels_ = nullptr;
  CudaStream copy_stream_ = nullptr;
  CudaEvent copied_ = nullptr;
  CudaEvent released_ = nullptr;
  bool release_pending_ = false;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_HOST_REPLAY_H_
