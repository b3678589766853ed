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
    job_ = std::move(other.job_);
  }
  return *this;
}

void MemoryBudget::Charge::Reset() {
  if (budget_ != nullptr && bytes_ != 0) budget_->Release(bytes_, job_);
  budget_.reset();
  bytes_ = 0;
}

std::shared_ptr<MemoryBudget> MemoryBudget::Create(int64_t limit_bytes,
                                                   int64_t job_limit_bytes) {
  return std::shared_ptr<MemoryBudget>(
      new MemoryBudget(std::max<int64_t>(1, limit_bytes),
                       std::max<int64_t>(0, job_limit_bytes)));
}

bool MemoryBudget::FitsLocked(int64_t bytes, const std::string& job) const {
  if (used_ + bytes > limit_) return false;
  if (job.empty() || job_limit_ == 0) return true;
  const auto it = job_used_.find(job);
  const int64_t held = it == job_used_.end() ? 0 : it->second;
  return held == 0 || held + bytes <= job_limit_;
}

void MemoryBudget::ChargeLocked(int64_t bytes, const std::string& job) {
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  if (!job.empty()) job_used_[job] += bytes;
}

MemoryBudget::Charge MemoryBudget::ChargeOrWait(
    int64_t bytes, std::function<void(Charge)> granted, uint64_t* ticket,
    const std::string& job) {
  absl::MutexLock lock(&mu_);
  // First fit: a request that fits now is charged even while larger ones
  // wait.
  if (FitsLocked(bytes, job)) {
    ChargeLocked(bytes, job);
    *ticket = 0;
    return Charge(shared_from_this(), bytes, job);
  }
  *ticket = next_ticket_++;
  waiters_.push_back(Waiter{*ticket, bytes, job, std::move(granted)});
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
  ChargeLocked(bytes, "");
  return Charge(shared_from_this(), bytes);
}

void MemoryBudget::Release(int64_t bytes, const std::string& job) {
  std::vector<Waiter> granted;
  {
    absl::MutexLock lock(&mu_);
    used_ -= bytes;
    if (!job.empty()) {
      auto it = job_used_.find(job);
      if (it != job_used_.end() && (it->second -= bytes) <= 0) {
        job_used_.erase(it);
      }
    }
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (FitsLocked(it->bytes, it->job)) {
        ChargeLocked(it->bytes, it->job);
        granted.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Waiter& w : granted) {
    w.granted(Charge(shared_from_this(), w.bytes, std::move(w.job)));
  }
}

MemoryBudget::Stats MemoryBudget::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{used_, peak_, static_cast<int64_t>(waiters_.size())};
}

}  // namespace stoker::server
