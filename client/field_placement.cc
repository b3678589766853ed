#include "client/field_placement.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace stoker::client::internal {
namespace {

// PlaceFields' walk over the fields: what is placed so far, and which
// image and class fields came first.
class Placer {
 public:
  explicit Placer(const HostBatch& host)
      : host_(host),
        image_shape_{host.n, host.height, host.width, host.channels} {
    placement_.fields.reserve(host.fields.size());
  }

  absl::Status Add(const FieldBatch& f) {
    const size_t payload = host_.pixels.size();
    if (f.data_offset > payload || f.data_size > payload - f.data_offset) {
      return Bad(f, "lies outside the received buffer");
    }
    FieldPlacement::Field place;
    absl::Status s;
    switch (f.role) {
      case v1::FIELD_ROLE_IMAGE:
        if (TakeBatchImage(f)) {
          place.kind = FieldPlacement::Kind::kImage;
          break;
        }
        [[fallthrough]];
      case v1::FIELD_ROLE_MASK:
      case v1::FIELD_ROLE_VIDEO:
        s = PlaceFixed(f, place);
        break;
      case v1::FIELD_ROLE_CLASS:
        s = PlaceClass(f, place);
        break;
      case v1::FIELD_ROLE_BYTES:
        s = PlaceBytes(f, place);
        break;
      default:
        return Bad(f, absl::StrCat("has unknown role ", f.role));
    }
    if (!s.ok()) return s;
    placement_.fields.push_back(place);
    return absl::OkStatus();
  }

  absl::StatusOr<FieldPlacement> Finish() && {
    const bool labels_match =
        first_class_ == nullptr
            ? host_.labels.empty()
            : std::equal(host_.labels.begin(), host_.labels.end(),
                         first_class_->labels.begin(),
                         first_class_->labels.end());
    if (!labels_match) {
      return absl::InvalidArgumentError(
          "labels are not the first class field's values");
    }
    return std::move(placement_);
  }

 private:
  static absl::Status Bad(const FieldBatch& f, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", f.name, "' ", why));
  }

  // The first image field is the batch's image when it is exactly that;
  // other image fields (more views per sample, views of their own size)
  // travel like masks.
  bool TakeBatchImage(const FieldBatch& f) {
    const bool first = first_image_;
    first_image_ = false;
    return first && f.data_offset == 0 && f.shape == image_shape_ &&
           f.data_size == host_.pixel_bytes();
  }

  absl::Status PlaceFixed(const FieldBatch& f, FieldPlacement::Field& place) {
    size_t bytes = 1;
    for (int d : f.shape) bytes *= d < 0 ? 0 : static_cast<size_t>(d);
    if (f.role == v1::FIELD_ROLE_VIDEO) {
      if ((f.shape.size() != 5 && f.shape.size() != 6) ||
          f.shape[0] != host_.n || bytes != f.data_size) {
        return Bad(f, "is not (n, [clips,] frames, h, w, 3) over its bytes");
      }
    } else {
      const bool views =
          f.role == v1::FIELD_ROLE_IMAGE && f.shape.size() == 5;
      if ((f.shape.size() != 4 && !views) || f.shape[0] != host_.n ||
          bytes != f.data_size) {
        return Bad(f, views ? "is not (n, repeats, h, w, c) over its bytes"
                            : "is not (n, h, w, c) over its bytes");
      }
    }
    place.kind = FieldPlacement::Kind::kFixed;
    place.offset = placement_.fixed_bytes;
    placement_.fixed_bytes += AlignUp(f.data_size);
    return absl::OkStatus();
  }

  absl::Status PlaceClass(const FieldBatch& f, FieldPlacement::Field& place) {
    if (f.labels.size() != static_cast<size_t>(host_.n)) {
      return Bad(f, "does not have n values");
    }
    if (first_class_ == nullptr) first_class_ = &f;
    place.kind = FieldPlacement::Kind::kClass;
    place.offset = placement_.class_fields++;
    return absl::OkStatus();
  }

  absl::Status PlaceBytes(const FieldBatch& f, FieldPlacement::Field& place) {
    if (f.offsets.size() != static_cast<size_t>(host_.n) + 1 ||
        f.offsets.front() != 0 ||
        f.offsets.back() != static_cast<int64_t>(f.data_size) ||
        !std::is_sorted(f.offsets.begin(), f.offsets.end())) {
      return Bad(f, "has bad offsets");
    }
    place.kind = FieldPlacement::Kind::kBytes;
    place.offset = placement_.value_bytes;
    placement_.value_bytes += f.data_size;
    return absl::OkStatus();
  }

  const HostBatch& host_;
  const std::vector<int> image_shape_;
  FieldPlacement placement_;
  const FieldBatch* first_class_ = nullptr;
  bool first_image_ = true;
};

}  // namespace

size_t AlignUp(size_t bytes) {
  return (bytes + kFieldAlignment - 1) / kFieldAlignment * kFieldAlignment;
}

size_t FieldPlacement::host_bytes(DeviceKind device) const {
  return device == DeviceKind::kCuda ? value_bytes : fixed_bytes + value_bytes;
}

size_t FieldPlacement::device_bytes(DeviceKind device) const {
  return device == DeviceKind::kCuda ? fixed_bytes : 0;
}

size_t FieldPlacement::values_offset(DeviceKind device) const {
  return device == DeviceKind::kCuda ? 0 : fixed_bytes;
}

absl::StatusOr<FieldPlacement> PlaceFields(const HostBatch& host) {
  Placer placer(host);
  for (const FieldBatch& f : host.fields) {
    if (absl::Status s = placer.Add(f); !s.ok()) return s;
  }
  return std::move(placer).Finish();
}

}  // namespace stoker::client::internal
