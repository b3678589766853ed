#include "server/tar_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::server {
namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kMaxOctalSize = (int64_t{1} << 33) - 1;  // 11 octal digits

int64_t Padded(int64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

// Splits `name` into ustar's prefix and name fields; false if it cannot.
bool SplitUstar(absl::string_view name, absl::string_view* prefix,
                absl::string_view* base) {
  if (name.size() <= 100) {
    *prefix = "";
    *base = name;
    return true;
  }
  for (size_t slash = name.rfind('/'); slash != absl::string_view::npos;
       slash = slash == 0 ? absl::string_view::npos
                          : name.rfind('/', slash - 1)) {
    if (slash <= 155 && name.size() - slash - 1 <= 100 && slash > 0 &&
        slash + 1 < name.size()) {
      *prefix = name.substr(0, slash);
      *base = name.substr(slash + 1);
      return true;
    }
  }
  return false;
}

// A pax record "LEN path=NAME\n", LEN counting itself.
std::string PaxPath(absl::string_view name) {
  const std::string body = absl::StrCat(" path=", name, "\n");
  size_t len = body.size() + 1;
  while (absl::StrCat(len).size() + body.size() != len) ++len;
  return absl::StrCat(len, body);
}

void Octal(char* field, size_t width, int64_t value) {
  const std::string text = absl::StrFormat("%0*o", static_cast<int>(width - 1),
                                           static_cast<uint64_t>(value));
  std::memcpy(field, text.data(), width - 1);
  field[width - 1] = '\0';
}

}  // namespace

int64_t TarMemberBytes(absl::string_view name, int64_t size) {
  absl::string_view prefix, base;
  int64_t bytes = kBlock + Padded(size);
  if (!SplitUstar(name, &prefix, &base)) {
    bytes += kBlock + Padded(static_cast<int64_t>(PaxPath(name).size()));
  }
  return bytes;
}

absl::StatusOr<TarWriter> TarWriter::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        0644);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot create '", path, "'"));
  }
  return TarWriter(fd, path);
}

TarWriter::TarWriter(TarWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      bytes_(other.bytes_) {}

TarWriter::~TarWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status TarWriter::Write(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("cannot write '", path_, "'"));
    }
    data += n;
    size -= static_cast<size_t>(n);
    bytes_ += n;
  }
  return absl::OkStatus();
}

absl::Status TarWriter::AddRaw(absl::string_view name, char type,
                               absl::string_view data) {
  absl::string_view prefix, base;
  if (!SplitUstar(name, &prefix, &base)) {
    // Only pax headers reach here, with a short name of their own.
    return absl::InvalidArgumentError(
        absl::StrCat("tar member name '", name, "' does not fit"));
  }
  char header[kBlock] = {};
  std::memcpy(header, base.data(), base.size());
  Octal(header + 100, 8, 0644);
  Octal(header + 108, 8, 0);
  Octal(header + 116, 8, 0);
  Octal(header + 124, 12, static_cast<int64_t>(data.size()));
  Octal(header + 136, 12, 0);
  std::memset(header + 148, ' ', 8);
  header[156] = type;
  std::memcpy(header + 257, "ustar", 6);
  std::memcpy(header + 263, "00", 2);
  std::memcpy(header + 345, prefix.data(), prefix.size());
  unsigned sum = 0;
  for (char c : header) sum += static_cast<unsigned char>(c);
  const std::string check = absl::StrFormat("%06o", sum);
  std::memcpy(header + 148, check.data(), 6);
  header[154] = '\0';
  header[155] = ' ';
  if (absl::Status s = Write(header, kBlock); !s.ok()) return s;
  if (absl::Status s = Write(data.data(), data.size()); !s.ok()) return s;
  static const char kZeros[kBlock] = {};
  const int64_t pad = Padded(static_cast<int64_t>(data.size())) -
                      static_cast<int64_t>(data.size());
  return Write(kZeros, static_cast<size_t>(pad));
}

absl::Status TarWriter::Add(absl::string_view name, absl::string_view data) {
  if (name.empty()) {
    return absl::InvalidArgumentError("empty tar member name");
  }
  if (static_cast<int64_t>(data.size()) > kMaxOctalSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("member '", name, "' is 8 GiB or more"));
  }
  absl::string_view prefix, base;
  if (!SplitUstar(name, &prefix, &base)) {
    if (absl::Status s = AddRaw("././@PaxHeader", 'x', PaxPath(name));
        !s.ok()) {
      return s;
    }
    // ustar keeps what fits; readers take the pax path.
    name = name.substr(name.size() - 100);
  }
  return AddRaw(name, '0', data);
}

absl::Status TarWriter::Finish() {
  static const char kZeros[kTarEndBytes] = {};
  absl::Status s = Write(kZeros, kTarEndBytes);
  if (s.ok() && ::fsync(fd_) != 0) {
    s = absl::ErrnoToStatus(errno, absl::StrCat("cannot fsync '", path_, "'"));
  }
  if (::close(fd_) != 0 && s.ok()) {
    s = absl::ErrnoToStatus(errno, absl::StrCat("cannot close '", path_, "'"));
  }
  fd_ = -1;
  return s;
}

}  // namespace stoker::server
