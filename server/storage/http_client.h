#ifndef STOKER_SERVER_STORAGE_HTTP_CLIENT_H_
#define STOKER_SERVER_STORAGE_HTTP_CLIENT_H_

// HTTP(S) requests for shards in object storage, over libcurl: HEAD, small
// GETs (listings, sidecar indexes), range GETs into a caller's buffer and
// whole-object downloads into a file.
//
// Connections are reused: every request borrows an easy handle from a pool
// (each keeps its connections alive), and at most `max_concurrent_requests`
// requests run at once, server-wide; callers past the limit wait.
//
// Retries. A request is retried, with exponential back-off (doubling from
// `initial_backoff` up to `max_backoff`, each wait drawn uniformly from
// its upper half: "equal jitter"), after:
//   - transport failures: refused or reset connections, timeouts, TLS
//     handshake failures, a connection closed before the full body
//     (curl's "partial file" and "got nothing");
//   - HTTP 408, 429, 500, 502, 503 and 504 (S3's SlowDown is a 503);
//   - a short body: fewer bytes than the Content-Length or the range asked.
// Other statuses are answers, not retried: 404 is NotFound, 401/403
// PermissionDenied, 412 (If-Match failed: the object changed) DataLoss,
// 416 OutOfRange, any other status InvalidArgument or Unknown. When the
// retries are exhausted the error is Unavailable. Every message names the
// method, the URL, the byte range when there is one, the HTTP status or
// curl's error, and the number of attempts.
//
// Thread-safe: all methods may be called from many threads at once.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace stoker::storage {

namespace http_internal {
struct Request;  // one logical request (in http_client.cc)
}  // namespace http_internal

// S3 Signature V4 credentials for a request (see server/storage/s3.h).
struct SigV4 {
  std::string access_key;
  std::string secret_key;
  // Sent as x-amz-security-token when not empty (temporary credentials).
  std::string session_token;
  std::string region = "us-east-1";
};

struct HttpOptions {
  // PEM bundle of certificate authorities for https:// (empty: the system's).
  std::string ca_file;
  // Requests in flight at once, server-wide. >= 1.
  int max_concurrent_requests = 64;
  // Attempts per request, the first included. >= 1.
  int max_attempts = 8;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(5);
  absl::Duration connect_timeout = absl::Seconds(10);
  // A transfer slower than 1 KiB/s for this long is abandoned (and
  // retried).
  absl::Duration stall_timeout = absl::Seconds(30);
};

// What a HEAD or GET told about an object.
struct ObjectHeaders {
  int64_t size = -1;  // Content-Length of the whole object; -1 if unknown
  std::string etag;   // as sent, quotes included; may be empty
  std::string last_modified;
};

// Counters since the client was created.
struct HttpStats {
  int64_t requests = 0;   // attempts made, retries included
  int64_t retries = 0;    // attempts that followed a retryable failure
  int64_t failures = 0;   // requests that failed for good (404s aside)
  int64_t bytes = 0;      // body bytes received
};

// Which version of an object a request must read: sent as If-Match (etag)
// or, without an etag, If-Unmodified-Since (last_modified). A request for a
// changed object then fails with DataLoss instead of mixing two versions.
struct Precondition {
  std::string etag;
  std::string last_modified;
};

class HttpClient {
 public:
  // InvalidArgument for bad options; Internal if libcurl cannot start.
  static absl::StatusOr<std::unique_ptr<HttpClient>> Create(
      const HttpOptions& options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  const HttpOptions& options() const { return options_; }

  // HEAD `url`. `sign` may be null (no authentication).
  absl::StatusOr<ObjectHeaders> Head(const std::string& url,
                                     const SigV4* sign) const;

  // GET `url` whole into a string; OutOfRange (without retrying further) if
  // the body exceeds `max_bytes`. `headers`, if not null, receives what the
  // response said about the object.
  absl::StatusOr<std::string> Get(const std::string& url, const SigV4* sign,
                                  int64_t max_bytes,
                                  ObjectHeaders* headers = nullptr) const;

  // GET bytes [offset, offset + size) of `url` into dst[0, size). The
  // response must be a 206 for exactly that range (or a 200 whose body is
  // exactly the range, when it covers the whole object).
  absl::Status GetRange(const std::string& url, const SigV4* sign,
                        const Precondition& version, int64_t offset,
                        int64_t size, char* dst) const;

  // GET `url` whole into the open file `fd` (truncated and rewritten on
  // every attempt); the body must be `expected_size` bytes when that is
  // >= 0.
  absl::Status Download(const std::string& url, const SigV4* sign,
                        const Precondition& version, int64_t expected_size,
                        int fd) const;

  HttpStats stats() const;

 private:
  struct Handle;
  using Request = http_internal::Request;

  explicit HttpClient(const HttpOptions& options);

  // Runs `request` with retries; see the file comment.
  absl::Status Run(Request& request) const;
  // One attempt; `*retryable` says whether a failure may be retried.
  absl::Status RunOnce(Request& request, bool* retryable) const;
  // Whether another request may start.
  bool SlotFree() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back a request slot and, if not null, an idle handle.
  void GiveHandle(std::unique_ptr<Handle> handle) const;

  const HttpOptions options_;
  mutable absl::Mutex mu_;
  mutable std::vector<std::unique_ptr<Handle>> idle_ ABSL_GUARDED_BY(mu_);
  mutable int in_flight_ ABSL_GUARDED_BY(mu_) = 0;

  mutable std::atomic<int64_t> requests_{0};
  mutable std::atomic<int64_t> retries_{0};
  mutable std::atomic<int64_t> failures_{0};
  mutable std::atomic<int64_t> bytes_{0};
};

// The body of an S3-style XML error (<Code>, <Message>) as "Code: Message",
// or the first line of any other body (at most 200 characters). Exposed for
// tests.
std::string SummarizeErrorBody(const std::string& body);

}  // namespace stoker::storage

#endif  // STOKER_SERVER_STORAGE_HTTP_CLIENT_H_
