#include "client/staged_batch.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/batch_ops.h"

namespace stoker::client {

const char* FieldRoleName(v1::FieldRole role) {
  switch (role) {
    case v1::FIELD_ROLE_IMAGE:
      return "image";
    case v1::FIELD_ROLE_MASK:
      return "mask";
    case v1::FIELD_ROLE_CLASS:
      return "class";
    case v1::FIELD_ROLE_BYTES:
      return "bytes";
    case v1::FIELD_ROLE_VIDEO:
      return "video";
    default:
      return "unspecified";
  }
}

std::array<int64_t, 4> StagedBatch::shape() const {
  const HostBatch& info = batch_.info();
  return {info.n, info.channels, info.height, info.width};
}

bool StagedBatch::field_is_image(size_t i) const {
  return batch_.valid() && batch_.field_converted(i);
}

absl::StatusOr<BytesValues> StagedBatch::Values(size_t i) const {
  if (!batch_.valid()) {
    return absl::FailedPreconditionError("this batch was already converted");
  }
  const std::vector<FieldBatch>& fields = batch_.info().fields;
  if (i >= fields.size() || fields[i].role != v1::FIELD_ROLE_BYTES) {
    return absl::InvalidArgumentError(
        absl::StrCat("field ", i, " is not a bytes field"));
  }
  // A field whose values are all empty may have no memory.
  static const char kEmpty[1] = {0};
  const char* base = batch_.field_data(i) != nullptr
                         ? static_cast<const char*>(batch_.field_data(i))
                         : kEmpty;
  return BytesValues(base, fields[i].offsets);
}

absl::Status StagedBatch::ConvertInto(const StagedTargets& to,
                                      CudaStream stream) {
  if (absl::Status s = CheckTargets(to); !s.ok()) return s;
  return batch_.device() == DeviceKind::kCpu
             ? ConvertOnHostInto(to, stream)
             : ConvertOnDeviceInto(to, stream);
}

absl::Status StagedBatch::CheckTargets(const StagedTargets& to) const {
  if (!batch_.valid()) {
    return absl::FailedPreconditionError("this batch was already converted");
  }
  const size_t count = batch_.info().fields.size();
  if (!to.fields.empty() && to.fields.size() != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "convert_into got ", to.fields.size(), " field addresses for ", count,
        " fields"));
  }
  if (to.images == nullptr && batch_.batch_ops().active()) {
    return absl::InvalidArgumentError(
        "random erasing and MixUp / CutMix apply to the batch's image, which "
        "this batch does not have");
  }
  if (to.labels == nullptr && soft_labels()) {
    return absl::InvalidArgumentError(
        "convert_into needs a soft labels tensor (MixUp / CutMix)");
  }
  if (to.labels != nullptr && !soft_labels() && batch_.labels() == nullptr) {
    return absl::InvalidArgumentError(
        "this batch has no labels: the request has no class field");
  }
  return absl::OkStatus();
}

size_t StagedBatch::LabelBytes(const StagedTargets& to) const {
  if (soft_labels() || to.labels == nullptr) return 0;
  return static_cast<size_t>(batch_.info().n) * sizeof(int64_t);
}

absl::Status StagedBatch::ConvertOnHostInto(const StagedTargets& to,
                                            CudaStream stream) {
  const HostBatch& info = batch_.info();
  const ImageShape shape{info.n, info.height, info.width, info.channels};
  const auto* pixels = static_cast<const uint8_t*>(batch_.data());
  const BatchOpsParams& ops = batch_.batch_ops();
  // With soft labels `labels` receives them; else the int64 labels.
  float* soft = ops.soft_labels ? static_cast<float*>(to.labels) : nullptr;
  const size_t label_bytes = LabelBytes(to);
  absl::Status s;
  if (to.images != nullptr) {
    s = ConvertOnHost(pixels, shape, output_, to.images);
  }
  if (s.ok() && ops.active()) {
    s = ApplyBatchOpsOnHost(ops, shape, output_.dtype, output_.layout,
                            to.images, batch_.labels(), soft);
  }
  if (s.ok() && label_bytes > 0) {
    std::memcpy(to.labels, batch_.labels(), label_bytes);
  }
  if (s.ok()) s = ConvertFields(to.fields, stream);
  batch_.Release();
  return s;
}

absl::Status StagedBatch::ConvertOnDeviceInto(const StagedTargets& to,
                                              CudaStream stream) {
  const HostBatch& info = batch_.info();
  const ImageShape shape{info.n, info.height, info.width, info.channels};
  const auto* pixels = static_cast<const uint8_t*>(batch_.data());
  const BatchOpsParams& ops = batch_.batch_ops();
  float* soft = ops.soft_labels ? static_cast<float*>(to.labels) : nullptr;
  const size_t label_bytes = LabelBytes(to);
  ScopedCudaDevice device(batch_.device_id());
  if (!device.status().ok()) return device.status();
  absl::Status s = batch_.WaitOn(stream);
  if (s.ok() && to.images != nullptr) {
    s = ConvertOnDevice(pixels, shape, output_, to.images, stream);
  }
  if (s.ok() && ops.active()) {
    s = ApplyBatchOpsOnDevice(ops, batch_.erase_boxes(), shape, output_.dtype,
                              output_.layout, to.images, batch_.labels(), soft,
                              stream);
  }
  if (s.ok() && label_bytes > 0) {
    s = CudaMemcpyAsync(to.labels, batch_.labels(), label_bytes, stream);
  }
  if (s.ok()) s = ConvertFields(to.fields, stream);
  // Recorded on `stream` (the last WaitOn), or, if the wait failed, a
  // release without an event: nothing was enqueued that reads the slot.
  batch_.Release();
  return s;
}

absl::Status StagedBatch::ConvertFields(absl::Span<const uintptr_t> fields,
                                        CudaStream stream) {
  const std::vector<FieldBatch>& info = batch_.info().fields;
  const bool cpu = batch_.device() == DeviceKind::kCpu;
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldBatch& f = info[i];
    void* out = reinterpret_cast<void*>(fields[i]);
    const auto* src = static_cast<const uint8_t*>(batch_.field_data(i));
    if (out == nullptr || batch_.field_bytes(i) == 0) continue;
    absl::Status s;
    if ((f.role == v1::FIELD_ROLE_IMAGE && !batch_.field_converted(i)) ||
        f.role == v1::FIELD_ROLE_VIDEO) {
      // Views (n, [repeats,] h, w, 3) and videos (n, [clips,] frames, h, w,
      // 3): the product of the leading dimensions is the number of images.
      const size_t d = f.shape.size();
      ImageShape views{f.shape[0], f.shape[d - 3], f.shape[d - 2],
                       f.shape[d - 1]};
      for (size_t k = 1; k + 3 < d; ++k) views.n *= f.shape[k];
      s = cpu ? ConvertOnHost(src, views, output_, out)
              : ConvertOnDevice(src, views, output_, out, stream);
    } else if (f.role == v1::FIELD_ROLE_MASK ||
               f.role == v1::FIELD_ROLE_CLASS) {
      if (cpu) {
        std::memcpy(out, src, batch_.field_bytes(i));
      } else {
        s = CudaMemcpyAsync(out, src, batch_.field_bytes(i), stream);
      }
    }
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("field '", f.name, "': ",
                                                 s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::client
