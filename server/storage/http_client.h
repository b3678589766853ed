#ifndef STOKER_SERVER_STORAGE_HTTP_CLIENT_H_
#define STOKER_SERVER_STORAGE_HTTP_CLIENT_H_

// HTTP(S) requests for shards in object storage, over libcurl: HEAD, small
// GETs (listings, sidecar indexes), range GETs into a caller's buffer and
// whole-object downloads into a file.
//
// Event-driven. Requests run on `event_threads` event loops, each a
// libcurl multi handle driven by epoll (curl_multi_socket_action), so
// thousands of requests can be in flight from a thread or two; blocking
// calls hand their request to a loop and wait. Each loop keeps its
// connections alive in its multi handle's pool and, over https, multiplexes
// requests on HTTP/2 connections where the store offers it.
//
// Concurrency. A loop sends what its callers ask for (the prefetchers size
// their demand by Little's law), within a limit that grows while requests
// wait and halves while the store throttles (429, 503), never past
// `max_concurrent_requests` (split evenly between the loops): see
// server/storage/concurrency.h. Requests beyond the limit wait in their
// loop, taken in turns between groups (a stream's job, say), first come
// first served within a group, so one group's burst does not hold the
// others' requests back.
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
// Thread-safe: all methods may be called from many threads at once, but
// not from a completion callback (it runs on an event loop, which a
// blocking call would then wait for).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/storage/concurrency.h"

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
  // Most requests in flight at once, server-wide (the ceiling of the
  // adaptive limit; see the file comment). >= event_threads.
  int max_concurrent_requests = 4096;
  // Event loops (threads). One drives thousands of requests; more spread
  // the per-request CPU (TLS, signing) of very high request rates. >= 1.
  int event_threads = 1;
  // How the limit grows and falls; its ceiling is max_concurrent_requests.
  ConcurrencyOptions concurrency;
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

// Upper bounds, in seconds, of the latency histogram's buckets (the last
// bucket, +Inf, is implied).
inline constexpr double kLatencyBuckets[] = {0.001, 0.002, 0.005, 0.01, 0.02,
                                             0.05,  0.1,   0.2,   0.5,  1,
                                             2,     5,     10};
inline constexpr int kLatencyBucketCount =
    sizeof(kLatencyBuckets) / sizeof(kLatencyBuckets[0]) + 1;

// Counters since the client was created, and the loops' state now (summed
// over the loops).
struct HttpStats {
  int64_t requests = 0;   // attempts made, retries included
  int64_t retries = 0;    // attempts that followed a retryable failure
  int64_t failures = 0;   // requests that failed for good (404s aside)
  int64_t bytes = 0;      // body bytes received
  int64_t connections = 0;  // connections opened (the rest reused one)
  int64_t throttled = 0;  // answers 429/503 (each one)
  int64_t throttle_events = 0;  // times the throttle limit was lowered
  int64_t in_flight = 0;  // requests on the wire now
  int64_t queued = 0;     // requests waiting for a slot or a retry
  int64_t limit = 0;      // the concurrency limit now
  double latency_s = 0;   // smoothed latency of successes (mean over loops)
  // Latencies of successful attempts: count per bucket (not cumulative;
  // bucket i holds those <= kLatencyBuckets[i] and above the one before),
  // and their sum in seconds.
  int64_t latency_counts[kLatencyBucketCount] = {};
  double latency_sum_s = 0;
};

// Called once when an asynchronous request is done: OK, or the error the
// blocking call would have returned. Runs on an event loop: it must be
// quick and must not call the client's blocking methods.
using HttpDone = absl::AnyInvocable<void(absl::Status) &&>;

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

  // GetRange without waiting: `done` gets its result. `dst`, `sign` and
  // what `version` names must stay valid until then. Requests of one
  // `group` take turns with other groups' for slots.
  void StartGetRange(const std::string& url, const SigV4* sign,
                     const Precondition& version, int64_t offset, int64_t size,
                     char* dst, const std::string& group, HttpDone done) const;

  // GET `url` whole into the open file `fd` (truncated and rewritten on
  // every attempt); the body must be `expected_size` bytes when that is
  // >= 0.
  absl::Status Download(const std::string& url, const SigV4* sign,
                        const Precondition& version, int64_t expected_size,
                        int fd) const;

  HttpStats stats() const;

 private:
  class Loop;
  using Request = http_internal::Request;

  explicit HttpClient(const HttpOptions& options);

  // Hands `request` to a loop (in turns).
  void Submit(std::unique_ptr<Request> request) const;
  // Submits `request` and waits for it.
  absl::Status RunAndWait(std::unique_ptr<Request> request) const;
  // A range GET of bytes [offset, offset + size) into `dst`.
  static std::unique_ptr<Request> RangeRequest(const std::string& url,
                                               const SigV4* sign,
                                               const Precondition& version,
                                               int64_t offset, int64_t size,
                                               char* dst);

  const HttpOptions options_;
  std::vector<std::unique_ptr<Loop>> loops_;
  mutable std::atomic<uint64_t> next_loop_{0};
};

// The body of an S3-style XML error (<Code>, <Message>) as "Code: Message",
// or the first line of any other body (at most 200 characters). Exposed for
// tests.
std::string SummarizeErrorBody(const std::string& body);

}  // namespace stoker::storage

#endif  // STOKER_SERVER_STORAGE_HTTP_CLIENT_H_
