#ifndef STOKER_SERVER_TAR_WRITER_H_
#define STOKER_SERVER_TAR_WRITER_H_

// Writing WebDataset shards: POSIX tar (ustar; a pax "path" record for a
// name that does not fit ustar's 100 + 155 bytes), regular files only,
// mode 0644, owner 0, mtime 0, so the same members always make the same
// bytes. What server/tar_scanner.h and Python's tarfile read.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::server {

// Bytes a member named `name` with `size` bytes of data takes in the
// archive (headers and padding included).
int64_t TarMemberBytes(absl::string_view name, int64_t size);

// The end-of-archive marker's bytes (two zero blocks).
inline constexpr int64_t kTarEndBytes = 1024;

// Appends members to a new file. Not thread-safe; movable.
class TarWriter {
 public:
  // Creates (or truncates) `path`.
  static absl::StatusOr<TarWriter> Create(const std::string& path);
  TarWriter(TarWriter&& other) noexcept;
  TarWriter& operator=(TarWriter&&) = delete;
  ~TarWriter();

  // InvalidArgument for an empty name or data of 8 GiB or more; the
  // errno's status if writing fails.
  absl::Status Add(absl::string_view name, absl::string_view data);
  // Writes the end marker, flushes to disk (fsync) and closes.
  absl::Status Finish();
  int64_t bytes() const { return bytes_; }

 private:
  TarWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  absl::Status Write(const char* data, size_t size);
  absl::Status AddRaw(absl::string_view name, char type,
                      absl::string_view data);

  int fd_ = -1;
  std::string path_;
  int64_t bytes_ = 0;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_TAR_WRITER_H_
