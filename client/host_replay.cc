#include "client/host_replay.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace stoker::client {
namespace {

// The staging conversion DeviceLoader runs (the pipeline stages raw pixels).
ConvertOptions StagingOptions() {
  ConvertOptions staging;
  staging.dtype = DType::kUint8;
  staging.layout = Layout::kNHWC;
  return staging;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostReplay>> HostReplay::Create(
    const uint8_t* pixels, const int64_t* labels, const ImageShape& shape,
    const HostReplayOptions& options) {
  if (absl::Status s = ValidateImageShape(shape); !s.ok()) return s;
  if (absl::Status s = ValidateConvertOptions(options.output); !s.ok()) {
    return s;
  }
  if (shape.elements() > 0 && pixels == nullptr) {
    return absl::InvalidArgumentError("HostReplay needs the batch's pixels");
  }
  if (shape.n > 0 && labels == nullptr) {
    return absl::InvalidArgumentError("HostReplay needs the batch's labels");
  }
  if (options.device == DeviceKind::kCuda) {
    if (absl::Status s = CheckCudaDevice(options.device_id); !s.ok()) return s;
  }
  std::unique_ptr<HostReplay> replay(new HostReplay(shape, options));
  if (absl::Status s = replay->Allocate(pixels, labels); !s.ok()) return s;
  return replay;
}

absl::Status HostReplay::Allocate(const uint8_t* pixels,
                                  const int64_t* labels) {
  const size_t bytes = static_cast<size_t>(shape_.elements());
  const size_t n = static_cast<size_t>(shape_.n);
  if (options_.device == DeviceKind::kCpu) {
    host_pixels_.assign(pixels, pixels + bytes);
    host_labels_.assign(labels, labels + n);
    slot_pixels_.resize(bytes);
    slot_labels_.resize(n);
    return absl::OkStatus();
  }
  ScopedCudaDevice device(options_.device_id);
  if (!device.status().ok()) return device.status();
  // +1: zero-sized batches still get distinct, valid allocations.
  absl::StatusOr<void*> pinned_pixels = CudaHostAlloc(bytes + 1);
  if (!pinned_pixels.ok()) return pinned_pixels.status();
  pinned_pixels_ = static_cast<uint8_t*>(*pinned_pixels);
  absl::StatusOr<void*> pinned_labels = CudaHostAlloc((n + 1) * sizeof(int64_t));
  if (!pinned_labels.ok()) return pinned_labels.status();
  pinned_labels_ = static_cast<int64_t*>(*pinned_labels);
  absl::StatusOr<void*> device_pixels = CudaMalloc(bytes + 1);
  if (!device_pixels.ok()) return device_pixels.status();
  device_pixels_ = static_cast<uint8_t*>(*device_pixels);
  absl::StatusOr<void*> device_labels = CudaMalloc((n + 1) * sizeof(int64_t));
  if (!device_labels.ok()) return device_labels.status();
  device_labels_ = static_cast<int64_t*>(*device_labels);
  absl::StatusOr<CudaStream> stream = CudaStreamCreate();
  if (!stream.ok()) return stream.status();
  copy_stream_ = *stream;
  absl::StatusOr<CudaEvent> copied = CudaEventCreate();
  if (!copied.ok()) return copied.status();
  copied_ = *copied;
  absl::StatusOr<CudaEvent> released = CudaEventCreate();
  if (!released.ok()) return released.status();
  released_ = *released;
  if (bytes > 0) std::memcpy(pinned_pixels_, pixels, bytes);
  if (n > 0) std::memcpy(pinned_labels_, labels, n * sizeof(int64_t));
  return absl::OkStatus();
}

HostReplay::~HostReplay() {
  if (options_.device != DeviceKind::kCuda) return;
  ScopedCudaDevice device(options_.device_id);
  // The caller's stream may still be converting out of the slot.
  if (release_pending_) CudaEventSynchronize(released_).IgnoreError();
  if (copy_stream_ != nullptr) {
    CudaStreamSynchronize(copy_stream_).IgnoreError();
    CudaStreamDestroy(copy_stream_);
  }
  if (copied_ != nullptr) CudaEventDestroy(copied_);
  if (released_ != nullptr) CudaEventDestroy(released_);
  CudaFree(device_pixels_);
  CudaFree(device_labels_);
  CudaFreeHost(pinned_pixels_);
  CudaFreeHost(pinned_labels_);
}

absl::Status HostReplay::ConvertInto(void* images, int64_t* labels,
                                     CudaStream stream) {
  if (images == nullptr) {
    return absl::InvalidArgumentError("HostReplay::ConvertInto: null images");
  }
  return options_.device == DeviceKind::kCpu
             ? ConvertOnCpu(images, labels)
             : ConvertOnGpu(images, labels, stream);
}

absl::Status HostReplay::ConvertOnCpu(void* images, int64_t* labels) {
  if (absl::Status s = ConvertOnHost(host_pixels_.data(), shape_,
                                     StagingOptions(), slot_pixels_.data());
      !s.ok()) {
    return s;
  }
  std::copy(host_labels_.begin(), host_labels_.end(), slot_labels_.begin());
  if (absl::Status s = ConvertOnHost(slot_pixels_.data(), shape_,
                                     options_.output, images);
      !s.ok()) {
    return s;
  }
  if (labels != nullptr) {
    std::copy(slot_labels_.begin(), slot_labels_.end(), labels);
  }
  return absl::OkStatus();
}

absl::Status HostReplay::ConvertOnGpu(void* images, int64_t* labels,
                                      CudaStream stream) {
  ScopedCudaDevice device(options_.device_id);
  if (!device.status().ok()) return device.status();
  const size_t bytes = static_cast<size_t>(shape_.elements());
  const size_t label_bytes = static_cast<size_t>(shape_.n) * sizeof(int64_t);
  auto where = [](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("host replay: ", s.message()));
  };
  // The replay's stream: refill the slot once the last conversion read it.
  if (release_pending_) {
    if (absl::Status s = CudaStreamWaitEvent(copy_stream_, released_);
        !s.ok()) {
      return where(s);
    }
    release_pending_ = false;
  }
  absl::Status s;
  if (bytes > 0) {
    s = CudaMemcpyAsync(device_pixels_, pinned_pixels_, bytes, copy_stream_);
  }
  if (s.ok() && label_bytes > 0) {
    s = CudaMemcpyAsync(device_labels_, pinned_labels_, label_bytes,
                        copy_stream_);
  }
  if (s.ok()) s = CudaEventRecord(copied_, copy_stream_);
  // The caller's stream: wait for the copy, convert, copy the labels out.
  if (s.ok()) s = CudaStreamWaitEvent(stream, copied_);
  if (s.ok() && bytes > 0) {
    s = ConvertOnDevice(device_pixels_, shape_, options_.output, images,
                        stream);
  }
  if (s.ok() && labels != nullptr && label_bytes > 0) {
    s = CudaMemcpyAsync(labels, device_labels_, label_bytes, stream);
  }
  if (s.ok()) s = CudaEventRecord(released_, stream);
  if (!s.ok()) {
    // Nothing may still use the slot after an error.
    CudaStreamSynchronize(copy_stream_).IgnoreError();
    CudaStreamSynchronize(stream).IgnoreError();
    return where(s);
  }
  release_pending_ = true;
  return absl::OkStatus();
}

}  // namespace stoker::client
