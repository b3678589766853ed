#include "tests/client/field_batches.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "proto/stoker.pb.h"

namespace stoker::client {

uint8_t MaskPixel(int64_t batch_index, size_t i) {
  return static_cast<uint8_t>(batch_index * 31 + i * 7);
}

std::string Caption(int64_t batch_index, int i, size_t bytes) {
  std::string out = absl::StrFormat("caption %d/%d ", batch_index, i);
  out.resize(bytes, static_cast<char>('a' + (batch_index + i) % 26));
  return out;
}

int32_t ClassA(int64_t batch_index, int i) {
  return static_cast<int32_t>(batch_index * 10 + i);
}

int32_t ClassB(int64_t batch_index, int i) {
  return i == 1 ? -1 : static_cast<int32_t>(batch_index + 100 * i);
}

absl::StatusOr<HostBatch> FieldsBatch(PixelAllocator* allocator,
                                      const FakeBatchSpec& spec,
                                      size_t caption_bytes) {
  HostBatch b = FakeBatchSource::Info(spec);
  const size_t n = static_cast<size_t>(spec.n);
  const size_t image = b.pixel_bytes();
  const size_t mask = n * spec.height * spec.width;
  const size_t captions = n * caption_bytes;
  absl::StatusOr<PixelBuffer> pixels =
      allocator->Allocate(image + mask + captions);
  if (!pixels.ok()) return pixels.status();
  b.pixels = *std::move(pixels);
  const std::vector<uint8_t> want = FakeBatchSource::Pixels(spec);
  std::copy(want.begin(), want.end(), b.pixels.data());
  for (size_t i = 0; i < mask; ++i) {
    b.pixels.data()[image + i] = MaskPixel(spec.batch_index, i);
  }
  FieldBatch f_image{"image", v1::FIELD_ROLE_IMAGE,
                     {spec.n, spec.height, spec.width, spec.channels}};
  f_image.data_size = image;
  FieldBatch f_a{"a", v1::FIELD_ROLE_CLASS, {spec.n}};
  FieldBatch f_mask{"mask", v1::FIELD_ROLE_MASK,
                    {spec.n, spec.height, spec.width, 1}};
  f_mask.data_offset = image;
  f_mask.data_size = mask;
  FieldBatch f_caption{"caption", v1::FIELD_ROLE_BYTES, {spec.n}};
  f_caption.data_offset = image + mask;
  f_caption.data_size = captions;
  f_caption.offsets.push_back(0);
  FieldBatch f_b{"b", v1::FIELD_ROLE_CLASS, {spec.n}};
  for (int i = 0; i < spec.n; ++i) {
    f_a.labels.push_back(ClassA(spec.batch_index, i));
    f_b.labels.push_back(ClassB(spec.batch_index, i));
    const std::string c = Caption(spec.batch_index, i, caption_bytes);
    std::memcpy(b.pixels.data() + f_caption.data_offset + i * caption_bytes,
                c.data(), c.size());
    f_caption.offsets.push_back(static_cast<int64_t>((i + 1) * caption_bytes));
  }
  b.labels = f_a.labels;
  b.fields = {f_image, f_a, f_mask, f_caption, f_b};
  return b;
}

absl::StatusOr<HostBatch> ViewsBatch(PixelAllocator* allocator,
                                     const FakeBatchSpec& spec, bool repeats,
                                     int small) {
  HostBatch b = FakeBatchSource::Info(spec);
  const size_t view = b.pixel_bytes();
  const size_t small_bytes = size_t{3} * spec.n * small * small;
  const size_t first = repeats ? 2 * view : view;
  absl::StatusOr<PixelBuffer> pixels =
      allocator->Allocate(first + small_bytes);
  if (!pixels.ok()) return pixels.status();
  b.pixels = *std::move(pixels);
  for (size_t k = 0; k < first + small_bytes; ++k) {
    b.pixels.data()[k] = ViewsByte(k);
  }
  FieldBatch a{"a", v1::FIELD_ROLE_IMAGE,
               repeats ? std::vector<int>{spec.n, 2, spec.height, spec.width, 3}
                       : std::vector<int>{spec.n, spec.height, spec.width, 3}};
  a.data_size = first;
  FieldBatch c{"c", v1::FIELD_ROLE_IMAGE, {spec.n, small, small, 3}};
  c.data_offset = first;
  c.data_size = small_bytes;
  b.labels.clear();
  b.fields = {a, c};
  return b;
}

void ScriptedSource::Add(Step step) {
  absl::MutexLock lock(&mu_);
  steps_.push_back(std::move(step));
}

absl::StatusOr<HostBatch> ScriptedSource::Next() {
  Step step;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](ScriptedSource* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return s->cancelled_ || !s->steps_.empty();
        },
        this));
    if (cancelled_) return absl::CancelledError("scripted source cancelled");
    step = std::move(steps_.front());
    steps_.pop_front();
  }
  return step();
}

void ScriptedSource::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

}  // namespace stoker::client
