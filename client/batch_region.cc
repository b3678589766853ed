#include "client/batch_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/batch_region_format.h"

namespace stoker::client {
namespace {

constexpr size_t kPage = 4096;
using common::kBatchRegionName;
using common::kBatchRegionNonceBytes;

size_t RoundUp(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

}  // namespace

absl::StatusOr<std::shared_ptr<BatchRegion>> BatchRegion::Create(
    int slots, size_t slot_bytes, const RegionHook& hook) {
  if (slots < 1 || slot_bytes == 0) {
    return absl::InvalidArgumentError(
        "a batch region needs slots of > 0 bytes");
  }
  const size_t stride = RoundUp(slot_bytes, kPage);
  const size_t size = kPage + stride * static_cast<size_t>(slots);
  const int fd =
      memfd_create(kBatchRegionName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::ErrnoToStatus(errno, "memfd_create");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    close(fd);
    return absl::ErrnoToStatus(
        e, absl::StrCat("sizing a ", size, "-byte shared region"));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return absl::ErrnoToStatus(e, "mmap of the shared region");
  }
  std::random_device random;
  std::string nonce(kBatchRegionNonceBytes, '\0');
  for (char& c : nonce) c = static_cast<char>(random());
  std::memcpy(base, nonce.data(), kBatchRegionNonceBytes);
  std::vector<int64_t> offsets;
  for (int i = 0; i < slots; ++i) {
    offsets.push_back(static_cast<int64_t>(kPage + stride * i));
  }
  std::shared_ptr<BatchRegion> region(
      new BatchRegion(fd, static_cast<uint8_t*>(base), size, slot_bytes,
                      std::move(offsets), std::move(nonce)));
  if (hook) region->unhook_ = hook(base, size);
  return region;
}

BatchRegion::BatchRegion(int fd, uint8_t* base, size_t size, size_t slot_bytes,
                         std::vector<int64_t> offsets, std::string nonce)
    : fd_(fd),
      base_(base),
      size_(size),
      slot_bytes_(slot_bytes),
      offsets_(std::move(offsets)),
      nonce_(std::move(nonce)),
      busy_(offsets_.size(), false),
      free_(static_cast<int>(offsets_.size())) {}

BatchRegion::~BatchRegion() {
  if (unhook_) unhook_();
  munmap(base_, size_);
  close(fd_);
}

std::optional<std::vector<int>> BatchRegion::Acquire(int n,
                                                     absl::Duration timeout) {
  if (n > slots()) return std::nullopt;  // never
  absl::MutexLock lock(&mu_);
  auto ready = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return retired_ || free_ >= n;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (retired_ || free_ < n) return std::nullopt;
  std::vector<int> taken;
  for (int i = 0; i < slots() && static_cast<int>(taken.size()) < n; ++i) {
    if (!busy_[i]) {
      busy_[i] = true;
      taken.push_back(i);
    }
  }
  free_ -= n;
  return taken;
}

v1::SharedMemory BatchRegion::Describe(const std::vector<int>& slots) const {
  v1::SharedMemory offer;
  offer.set_pid(static_cast<int32_t>(getpid()));
  offer.set_fd(fd_);
  offer.set_nonce(nonce_);
  offer.set_region_bytes(static_cast<int64_t>(size_));
  offer.set_slot_bytes(static_cast<int64_t>(slot_bytes_));
  for (int slot : slots) offer.add_slot_offsets(offsets_[slot]);
  return offer;
}

absl::StatusOr<PixelBuffer> BatchRegion::Take(int slot, size_t size) {
  if (slot < 0 || slot >= slots() || size > slot_bytes_) {
    return absl::DataLossError(
        absl::StrCat("a batch of ", size, " bytes in shared slot ", slot,
                     " does not fit its ", slot_bytes_, "-byte slot"));
  }
  return PixelBuffer(
      base_ + offsets_[slot], size,
      [self = shared_from_this(), slot](uint8_t*) { self->Free(slot); });
}

void BatchRegion::Release(const std::vector<int>& slots) {
  for (int slot : slots) Free(slot);
}

void BatchRegion::Free(int slot) {
  absl::MutexLock lock(&mu_);
  if (busy_[slot]) {
    busy_[slot] = false;
    ++free_;
  }
}

void BatchRegion::Retire() {
  absl::MutexLock lock(&mu_);
  retired_ = true;
}

bool BatchRegion::retired() const {
  absl::MutexLock lock(&mu_);
  return retired_;
}

}  // namespace stoker::client
