#ifndef STOKER_SERVER_AUTH_H_
#define STOKER_SERVER_AUTH_H_

// Per-job bearer tokens (stoker_server --auth_tokens_file): which job a
// request comes from, which datasets it may read, and how many streams it
// may hold open.
//
// Tokens file, one job per line (blank lines and '#' comments ignored):
//
//   <token> <job> <dataset>[,<dataset>...]     e.g.  3f9a...c1 resnet imagenet
//   <token> <job> *                            every dataset
//
// Tokens are at least 16 characters of [A-Za-z0-9._~+/=-] (e.g. 32 random
// bytes in hex), unique; jobs are unique names. Clients send
// "authorization: Bearer <token>" metadata. A request without a known token
// is UNAUTHENTICATED; a dataset its token does not cover is
// PERMISSION_DENIED whether or not the server has it, so neither answer
// reveals which datasets exist. Token comparisons take the same time
// whichever token matches and wherever a mismatch is; tokens appear in no
// message and no log.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace stoker::server {

class TokenAuthorizer {
 public:
  // Parses a tokens file. InvalidArgument naming the line (never its token)
  // for a malformed, short or duplicate entry; NotFound / PermissionDenied
  // when it cannot be read; InvalidArgument for a file without entries.
  static absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> Load(
      const std::string& path);
  // The same from the file's text (for tests).
  static absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> Parse(
      absl::string_view text);

  // The job allowed to read `dataset` with this "authorization" metadata
  // value (empty when absent). UNAUTHENTICATED or PERMISSION_DENIED
  // otherwise.
  absl::StatusOr<std::string> Check(absl::string_view authorization,
                                    absl::string_view dataset) const;

  int jobs() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    std::string token;
    std::string job;
    std::vector<std::string> datasets;  // empty: every dataset
  };
  explicit TokenAuthorizer(std::vector<Entry> entries)
      : entries_(std::move(entries)) {}

  const std::vector<Entry> entries_;
};

// Each job's open streams against a per-job limit, so one job cannot take
// every stream of a shared server (--max_streams_per_job). Thread-safe.
class JobStreamLimits {
 public:
  // `max_per_job` >= 1.
  explicit JobStreamLimits(int max_per_job) : max_per_job_(max_per_job) {}

  // One open stream of a job; the slot is given back on destruction.
  class Slot {
   public:
    ~Slot() { limits_->Release(job_); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    friend class JobStreamLimits;
    Slot(JobStreamLimits* limits, std::string job)
        : limits_(limits), job_(std::move(job)) {}
    JobStreamLimits* const limits_;
    const std::string job_;
  };

  // A slot for `job`, or RESOURCE_EXHAUSTED when it has max_per_job open.
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(const std::string& job);

  int open(const std::string& job) const;

 private:
  void Release(const std::string& job);

  const int max_per_job_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_AUTH_H_
