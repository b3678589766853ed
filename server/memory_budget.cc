#include "server/memory_budget.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace stoker::server {

MemoryBudget::Charge& MemoryBudget::Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    Reset();
    budget_ = std::move(other.budget_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryBudget::Charge::Reset() {
  if (budget_ != nullptr && bytes_ != 0) budget_->Release(bytes_);
  budget_.reset();
  bytes_ = 0;
}

std::shared_ptr<MemoryBudget> MemoryBudget::Create(int64_t limit_bytes) {
  return std::shared_ptr<MemoryBudget>(
      new MemoryBudget(std::max<int64_t>(1, limit_bytes)));
}

MemoryBudget::Charge MemoryBudget::ChargeOrWait(
    int64_t bytes, std::function<void(Charge)> granted, uint64_t* ticket) {
  absl::MutexLock lock(&mu_);
  // First fit: a request that fits now is charged even while larger ones
  // wait.
  if (used_ + bytes <= limit_) {
    used_ += bytes;
    peak_ = std::max(peak_, used_);
    *ticket = 0;
    return Charge(shared_from_this(), bytes);
  }
  *ticket = next_ticket_++;
  waiters_.push_back(Waiter{*ticket, bytes, std::move(granted)});
  return Charge();
}

bool MemoryBudget::Withdraw(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (it->ticket == ticket) {
      waiters_.erase(it);
      return true;
    }
  }
  return false;
}

MemoryBudget::Charge MemoryBudget::ForceCharge(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return Charge(shared_from_this(), bytes);
}

void MemoryBudget::Release(int64_t bytes) {
  std::vector<Waiter> granted;
  {
    absl::MutexLock lock(&mu_);
    used_ -= bytes;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (used_ + it->bytes <= limit_) {
        used_ += it->bytes;
        granted.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    peak_ = std::max(peak_, used_);
  }
  for (Waiter& w : granted) {
    w.granted(Charge(shared_from_this(), w.bytes));
  }
}

MemoryBudget::Stats MemoryBudget::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{used_, peak_, static_cast<int64_t>(waiters_.size())};
}

}  // namespace stoker::server
