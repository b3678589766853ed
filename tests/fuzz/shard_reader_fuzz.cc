// Fuzz target for the tar indexer and reader (server/shard_reader.h): the
// input is a whole shard file. It is written to a memfd (no disk traffic)
// that ShardIndex::Build and ShardReader::Open reach through
// /proc/self/fd/N; every indexed record is then read back.
//
// Checked, beyond "no crash, no sanitizer report", as the header promises:
// Build fails only with DataLoss; records carry the shard id; the defect
// counts match (damaged samples are a subset of defective ones, and there are
// none in an undamaged shard); corrupt regions are 512-aligned, non-empty,
// in file order, disjoint, inside the file and sum to skipped_bytes(); a
// record without a defect has a non-empty image and a label of at most
// kMaxLabelBytes, inside the file and outside every corrupt region; the
// reader opened from the index (the file is unchanged) refuses defective
// records with DataLoss and returns exactly the indexed bytes of the others.

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/shard_reader.h"
#include "tests/fuzz/fuzz_check.h"

namespace stoker::server {
namespace {

using fuzz::FuzzCheck;

constexpr int32_t kShardId = 7;

// The in-memory file that holds the current input. Created once per process
// (libFuzzer calls the target many times) and rewritten for every input.
class MemoryFile {
 public:
  MemoryFile() : fd_(memfd_create("shard_reader_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = absl::StrCat("/proc/self/fd/", fd_);
  }

  void Write(const uint8_t* data, size_t size) {
    FuzzCheck(ftruncate(fd_, 0) == 0, "ftruncate of the memfd");
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, done);
      if (n < 0 && errno == EINTR) continue;
      FuzzCheck(n > 0, "pwrite to the memfd");
      done += static_cast<size_t>(n);
    }
  }

  const std::string& path() const { return path_; }

 private:
  const int fd_;
  std::string path_;
};

bool Inside(int64_t offset, int64_t size, int64_t file_size) {
  return offset >= 0 && size >= 0 && offset <= file_size &&
         size <= file_size - offset;
}

bool Overlaps(int64_t offset, int64_t size, const CorruptRegion& region) {
  return size > 0 && offset < region.offset + region.size &&
         region.offset < offset + size;
}

void CheckRegions(const ShardIndex& index) {
  int64_t end = 0;
  int64_t total = 0;
  for (const CorruptRegion& r : index.corrupt_regions()) {
    FuzzCheck(r.offset % 512 == 0 && r.size > 0 && r.offset >= end &&
                  Inside(r.offset, r.size, index.file_size()),
              absl::StrCat("corrupt region [", r.offset, ", +", r.size,
                           ") is unaligned, empty, out of order or outside "
                           "the file of ",
                           index.file_size(), " bytes"));
    end = r.offset + r.size;
    total += r.size;
  }
  FuzzCheck(total == index.skipped_bytes(),
            absl::StrCat("skipped_bytes() ", index.skipped_bytes(),
                         " but the regions sum to ", total));
}

void Run(const uint8_t* data, size_t size) {
  static MemoryFile* const file = new MemoryFile();
  file->Write(data, size);
  const absl::string_view input(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<ShardIndex> index = ShardIndex::Build(file->path(), kShardId);
  if (!index.ok()) {
    FuzzCheck(absl::IsDataLoss(index.status()),
              absl::StrCat("Build failed with a code other than DataLoss: ",
                           index.status().ToString()));
    return;
  }
  FuzzCheck(index->file_size() == static_cast<int64_t>(size),
            absl::StrCat("file_size ", index->file_size(), " != ", size));
  FuzzCheck(index->shard_id() == kShardId, "shard_id not kept");
  CheckRegions(*index);

  int64_t defects = 0;
  for (const SampleRecord& r : index->samples()) {
    FuzzCheck(r.shard == kShardId, "record shard is not the shard id");
    if (!r.defect.empty()) {
      ++defects;
      continue;
    }
    const std::string where = absl::StrCat("sample '", r.key, "'");
    FuzzCheck(Inside(r.image_offset, r.image_size, index->file_size()) &&
                  r.image_size > 0,
              absl::StrCat(where, " without defect has image [", r.image_offset,
                           ", +", r.image_size, ") outside the file or empty"));
    FuzzCheck(
        Inside(r.label_offset, r.label_size, index->file_size()) &&
            r.label_size <= ShardIndex::kMaxLabelBytes,
        absl::StrCat(where, " without defect has label [", r.label_offset,
                     ", +", r.label_size, ") outside the file or too long"));
    for (const CorruptRegion& region : index->corrupt_regions()) {
      FuzzCheck(!Overlaps(r.image_offset, r.image_size, region) &&
                    !Overlaps(r.label_offset, r.label_size, region),
                absl::StrCat(where,
                             " without defect has data in the "
                             "corrupt region [",
                             region.offset, ", +", region.size, ")"));
    }
  }
  FuzzCheck(defects == index->defective_samples(),
            absl::StrCat("defective_samples() ", index->defective_samples(),
                         " but ", defects, " records have a defect"));
  FuzzCheck(
      index->damaged_samples() >= 0 &&
          index->damaged_samples() <= index->defective_samples() &&
          (index->damaged() || index->damaged_samples() == 0),
      absl::StrCat("damaged_samples() ", index->damaged_samples(),
                   " with defective_samples() ", index->defective_samples(),
                   " and damaged() ", index->damaged()));

  absl::StatusOr<std::unique_ptr<ShardReader>> reader =
      ShardReader::Open(*index);
  FuzzCheck(reader.ok(), absl::StrCat("Open failed after Build succeeded: ",
                                      reader.status().ToString()));
  std::string image;
  for (const SampleRecord& r : index->samples()) {
    int32_t label = -1;
    const absl::Status s = (*reader)->ReadSample(r, &image, &label);
    if (!r.defect.empty()) {
      FuzzCheck(absl::IsDataLoss(s),
                absl::StrCat("defective record '", r.key, "' read with status ",
                             s.ToString()));
      continue;
    }
    if (!s.ok()) {
      // Only the label text can still be bad; the file is all there.
      FuzzCheck(absl::IsDataLoss(s),
                absl::StrCat("ReadSample('", r.key, "'): ", s.ToString()));
      continue;
    }
    FuzzCheck(label >= 0, "negative label");
    FuzzCheck(image == input.substr(r.image_offset, r.image_size),
              absl::StrCat("image bytes of '", r.key,
                           "' differ from the indexed range"));
  }
}

}  // namespace
}  // namespace stoker::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::server::Run(data, size);
  return 0;
}
