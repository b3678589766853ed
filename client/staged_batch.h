#ifndef STOKER_CLIENT_STAGED_BATCH_H_
#define STOKER_CLIENT_STAGED_BATCH_H_

// One delivered batch still in the device loader's uint8 NHWC output slot
// (a DeviceBatch from a loader whose convert options are uint8 NHWC and
// apply_batch_ops false, as the Python pipeline builds it), converted into
// memory the caller allocated: the logic of the Python binding's
// StagedBatch (client/python/stoker_ext.cc), which adds only the Python
// types. The caller allocates the outputs itself (PyTorch's caching
// allocator on the GPU, so every tensor handed out belongs to the caller and
// any number may be kept) and ConvertInto() fills them:
//
//   images  converted with `output` (dtype, layout, normalization), then
//           the batch ops the loader drew (random erasing, MixUp / CutMix)
//           applied to them;
//   labels  the n int64 labels, or with MixUp / CutMix the n x num_classes
//           float32 soft labels;
//   fields  requests with fields: the masks and class values copied, image
//           views converted like the images (without batch ops). Bytes
//           values are read (Values) before ConvertInto.
//
// Streams (kCuda): ConvertInto makes `stream` wait for the batch, enqueues
// everything on it and releases the slot on it, so the loader rewrites the
// slot only after the conversion has run; the outputs are ready when the
// work queued on `stream` is. kCpu: everything is done when ConvertInto
// returns.
//
// Ownership: owns the DeviceBatch (its output slot) until ConvertInto,
// which releases it whatever its outcome (except when the batch's device
// cannot be made current). Output memory belongs to the caller. Values'
// views point into the slot and are valid until ConvertInto.
//
// Thread-safety: none; single use (ConvertInto once). Move-only.

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/device_loader.h"
#include "client/host_batch.h"

namespace stoker::client {

// How the fields text (client/field_spec.h) and the Python API name a
// field role: "image", "mask", "class" or "bytes" ("unspecified" for any
// other value).
const char* FieldRoleName(v1::FieldRole role);

// The n values of a bytes field, viewed where they lie (no copy).
class BytesValues {
 public:
  // `offsets` (n + 1 entries, checked by the device loader) into `base`;
  // both must outlive this object.
  BytesValues(const char* base, absl::Span<const int64_t> offsets)
      : base_(base), offsets_(offsets) {}

  size_t size() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  // Value j < size(): [offsets[j], offsets[j + 1]) of the field's bytes.
  absl::string_view operator[](size_t j) const {
    return absl::string_view(base_ + offsets_[j],
                             static_cast<size_t>(offsets_[j + 1] - offsets_[j]));
  }

 private:
  const char* base_;
  absl::Span<const int64_t> offsets_;
};

// Where ConvertInto writes, all in the batch's kind of memory (device
// memory of its GPU for kCuda, host memory for kCpu).
struct StagedTargets {
  // A dense tensor of output.dtype with n * h * w * c elements, in the
  // output layout. Null: the images are not wanted (allowed only when no
  // batch ops were drawn, e.g. a request whose image fields are all views).
  void* images = nullptr;
  // n int64 labels, or with soft_labels() n * num_classes float32. Null: no
  // labels (not allowed with soft_labels()).
  void* labels = nullptr;
  // Requests with fields: empty, or one address per field of fields(), 0
  // to leave that field out: for a mask, of a dense uint8 NHWC tensor of
  // its shape; for a class field, of n int64 values; for an image field
  // other than the batch's image, of a tensor like `images` for its
  // n * repeats views. Ignored for the batch's image and bytes fields.
  // Addresses (not pointers) as the Python binding receives them.
  absl::Span<const uintptr_t> fields;
};

class StagedBatch {
 public:
  // `batch`: a valid uint8 NHWC batch (see the top); `output`: the
  // conversion ConvertInto applies (validated by the caller).
  StagedBatch(DeviceBatch batch, const ConvertOptions& output)
      : batch_(std::move(batch)), output_(output) {}

  StagedBatch(StagedBatch&&) = default;
  StagedBatch(const StagedBatch&) = delete;
  StagedBatch& operator=(const StagedBatch&) = delete;

  // ConvertInto was called (the slot is released).
  bool converted() const { return !batch_.valid(); }

  // (n, c, h, w), the logical shape of the images. Also after ConvertInto.
  std::array<int64_t, 4> shape() const;

  // Whether ConvertInto writes soft labels (n x num_classes float32):
  // MixUp / CutMix is on.
  bool soft_labels() const { return batch_.batch_ops().soft_labels; }

  // Requests with fields: every field in request order (name, role, shape
  // as received: (n, h, w, c) for images and masks, (n, repeats, h, w, 3)
  // for an image field with several views, (n) otherwise). Empty for a
  // classic request. Also after ConvertInto.
  const std::vector<FieldBatch>& fields() const {
    return batch_.info().fields;
  }
  // Whether fields()[i] is the batch's image (converted into
  // StagedTargets::images with the batch ops); false for every other field,
  // other image views included, and for every field after ConvertInto.
  bool field_is_image(size_t i) const;

  // The n values of bytes field i, valid until ConvertInto. Errors:
  // FailedPrecondition after ConvertInto; InvalidArgument if field i does
  // not exist or is not a bytes field.
  absl::StatusOr<BytesValues> Values(size_t i) const;

  // Fills `to` (see StagedTargets and the top) and releases the batch.
  // `stream`: the cudaStream_t the caller will use the outputs on (null:
  // the legacy default stream); ignored for kCpu. Errors, before anything
  // is done: FailedPrecondition when already converted; InvalidArgument
  // for a wrong number of field addresses, no images with batch ops drawn,
  // no labels with soft labels, or labels asked of a batch without (no
  // class field). After: the conversion's or CUDA's error, naming the
  // field it concerns.
  absl::Status ConvertInto(const StagedTargets& to, CudaStream stream);

 private:
  absl::Status CheckTargets(const StagedTargets& to) const;
  // ConvertInto for kCpu and kCuda, once the targets are checked.
  absl::Status ConvertOnHostInto(const StagedTargets& to, CudaStream stream);
  absl::Status ConvertOnDeviceInto(const StagedTargets& to, CudaStream stream);
  // Bytes of int64 labels to copy into to.labels (0 with soft labels).
  size_t LabelBytes(const StagedTargets& to) const;
  // The masks, class values and other image views of `fields`: on the
  // host, else on `stream` (which already waits on the batch).
  absl::Status ConvertFields(absl::Span<const uintptr_t> fields,
                             CudaStream stream);

  DeviceBatch batch_;
  const ConvertOptions output_;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_STAGED_BATCH_H_
