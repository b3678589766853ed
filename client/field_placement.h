#ifndef STOKER_CLIENT_FIELD_PLACEMENT_H_
#define STOKER_CLIENT_FIELD_PLACEMENT_H_

// Where the fields of a received batch (requests with fields,
// client/host_batch.h) go in a device loader output slot
// (client/output_pool.h), and the checks that make copying them safe. An
// implementation part of the device loader (client/device_loader.h), pure
// arithmetic, in its own library so it can be tested alone.
//
// A slot has four homes for fields:
//   image  the batch's image (the first image field when it is exactly the
//          batch's (n, height, width, channels) pixels at offset 0): the
//          slot's converted pixels;
//   fixed  masks and every other image field (more views per sample, views
//          of their own size): uint8, back to back in the slot's fixed
//          region, each starting at a multiple of kFieldAlignment;
//   class  n int64 values per class field, one after another in the slot's
//          labels buffer (so the first class field's are the labels);
//   bytes  the values of every bytes field, back to back in the slot's
//          host bytes region (host memory also for kCuda).
// kCuda keeps the fixed region in device memory and the bytes region alone
// in host memory; kCpu keeps both in host memory, the fixed region first.
//
// Thread-safety: plain values and a pure function.

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "client/device_kind.h"
#include "client/host_batch.h"

namespace stoker::client::internal {

// Masks and image views start at multiples of this in the fixed region, so
// device kernels reading them take their vectorized path.
inline constexpr size_t kFieldAlignment = 256;

// `bytes` rounded up to a multiple of kFieldAlignment.
size_t AlignUp(size_t bytes);

struct FieldPlacement {
  enum class Kind {
    kImage,  // the batch's image: the slot's converted pixels
    kFixed,  // masks and other image views: uint8, the fixed region
    kClass,  // int64 values in the labels buffer
    kBytes,  // values back to back in the bytes region
  };
  struct Field {
    Kind kind = Kind::kImage;
    // kFixed: byte offset into the fixed region (aligned); kClass: index
    // among the class fields (its values start at offset * n); kBytes: byte
    // offset into the bytes region. 0 for kImage.
    size_t offset = 0;
  };
  // One per HostBatch::fields entry, in request order.
  std::vector<Field> fields;
  // Number of class fields.
  size_t class_fields = 0;
  // Size of the fixed region (each field's size aligned up) and of the
  // bytes region, in bytes.
  size_t fixed_bytes = 0;
  size_t value_bytes = 0;

  // Bytes of host memory (fixed region for kCpu, then the bytes region)
  // and of device memory (the fixed region for kCuda, else 0) the slot
  // needs for these fields on `device`.
  size_t host_bytes(DeviceKind device) const;
  size_t device_bytes(DeviceKind device) const;
  // Where the bytes region starts in the host memory.
  size_t values_offset(DeviceKind device) const;
};

// Checks the fields of `host` against its shape and received buffer (a
// BatchSource other than the network loader may produce anything) and
// places them. Checks: every field lies inside host.pixels; masks are
// (n, h, w, c) and image views (n, h, w, c) or (n, repeats, h, w, c) over
// exactly their bytes; class fields have n values; bytes fields n + 1
// sorted offsets from 0 to their size; host.labels are the first class
// field's values (empty without one). Errors: InvalidArgument naming the
// field ("field 'mask' lies outside the received buffer") or the labels.
absl::StatusOr<FieldPlacement> PlaceFields(const HostBatch& host);

}  // namespace stoker::client::internal

#endif  // STOKER_CLIENT_FIELD_PLACEMENT_H_
