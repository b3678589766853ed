#ifndef STOKER_SERVER_MEMORY_BUDGET_H_
#define STOKER_SERVER_MEMORY_BUDGET_H_

// One server-wide budget for the memory that requests make the server hold:
// batch buffers (from assembly until gRPC has sent them) and the workers'
// decode buffers. Streams ask for a batch's bytes before allocating them;
// when the budget is spent they wait (back-pressure), and memory released by
// any stream is granted to waiting ones, first come first served among those
// that fit (a large waiting batch may be overtaken by small ones; it gets
// its memory once enough is free at once).
//
// Thread-safe. Grant callbacks run on the thread that released the memory,
// with no lock of the budget held; so memory must never be released while
// holding a lock that a grant callback takes.

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace stoker::server {

class MemoryBudget : public std::enable_shared_from_this<MemoryBudget> {
 public:
  // Bytes held against the budget; given back when destroyed. Movable.
  class Charge {
   public:
    Charge() = default;
    Charge(Charge&& other) noexcept { *this = std::move(other); }
    Charge& operator=(Charge&& other) noexcept;
    ~Charge() { Reset(); }
    int64_t bytes() const { return bytes_; }
    // Gives the bytes back now.
    void Reset();

   private:
    friend class MemoryBudget;
    Charge(std::shared_ptr<MemoryBudget> budget, int64_t bytes,
           std::string job = "")
        : budget_(std::move(budget)), bytes_(bytes), job_(std::move(job)) {}
    std::shared_ptr<MemoryBudget> budget_;
    int64_t bytes_ = 0;
    std::string job_;  // whose share it counts against ("": none)
  };

  // `limit_bytes` >= 1. `job_limit_bytes` > 0 caps what one job's
  // charges may hold at once (ChargeOrWait's `job`), so one job cannot take
  // the whole budget from the others; a job holding nothing is always
  // allowed its request (if the budget has room), so a batch larger than
  // the cap still goes through, one at a time. 0: no per-job cap. Shared:
  // charges keep the budget alive.
  static std::shared_ptr<MemoryBudget> Create(int64_t limit_bytes,
                                              int64_t job_limit_bytes = 0);

  int64_t limit() const { return limit_; }

  // Charges `bytes` (<= limit()) if they fit now; otherwise queues the
  // request and returns an empty Charge: `granted` is then called once with
  // the charge when memory frees up, unless Withdraw(ticket) returned true
  // first. `*ticket` identifies the queued request.
  // `job` ("" for none) is the job whose share the bytes count against.
  Charge ChargeOrWait(int64_t bytes, std::function<void(Charge)> granted,
                      uint64_t* ticket, const std::string& job = "");
  // Removes a queued request. False if it was already granted (its callback
  // has run or is about to run).
  bool Withdraw(uint64_t ticket);

  // Charges `bytes` even past the limit: for memory that is already
  // allocated and cannot wait (a worker's decode buffer). Streams then wait
  // until it is given back.
  Charge ForceCharge(int64_t bytes);

  struct Stats {
    int64_t used = 0;     // bytes charged now
    int64_t peak = 0;     // most bytes ever charged at once
    int64_t waiting = 0;  // queued requests
  };
  Stats stats() const;

 private:
  MemoryBudget(int64_t limit_bytes, int64_t job_limit_bytes)
      : limit_(limit_bytes), job_limit_(job_limit_bytes) {}
  void Release(int64_t bytes, const std::string& job);
  // Whether `bytes` for `job` may be charged now.
  bool FitsLocked(int64_t bytes, const std::string& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChargeLocked(int64_t bytes, const std::string& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Waiter {
    uint64_t ticket;
    int64_t bytes;
    std::string job;
    std::function<void(Charge)> granted;
  };

  const int64_t limit_;
  const int64_t job_limit_;
  mutable absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(mu_);  // in arrival order
  // Bytes held per job (jobs holding nothing are absent).
  std::map<std::string, int64_t> job_used_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_MEMORY_BUDGET_H_
