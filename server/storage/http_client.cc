#include "server/storage/http_client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iterator>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/storage/xml_scan.h"

namespace stoker::storage {
namespace {

// SHA-256 of an empty payload: S3 wants the payload hash in
// x-amz-content-sha256, and our requests have no body.
constexpr char kEmptyPayloadSha256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Bodies of error answers are kept up to this size for the message.
constexpr int64_t kMaxErrorBody = 4096;

absl::Status CurlGlobalInit() {
  static const CURLcode code = curl_global_init(CURL_GLOBAL_ALL);
  if (code != CURLE_OK) {
    return absl::InternalError(
        absl::StrCat("curl_global_init: ", curl_easy_strerror(code)));
  }
  return absl::OkStatus();
}

bool RetryableCurlError(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool RetryableHttpStatus(long status) {
  return status == 408 || status == 429 || status == 500 || status == 502 ||
         status == 503 || status == 504;
}

absl::StatusCode CodeOfHttpStatus(long status) {
  switch (status) {
    case 404:
      return absl::StatusCode::kNotFound;
    case 401:
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 412:
      return absl::StatusCode::kDataLoss;
    case 416:
      return absl::StatusCode::kOutOfRange;
    default:
      return status >= 400 && status < 500 ? absl::StatusCode::kInvalidArgument
                                           : absl::StatusCode::kUnknown;
  }
}

}  // namespace

std::string SummarizeErrorBody(const std::string& body) {
  const std::string code = XmlText(body, "Code");
  if (!code.empty()) {
    const std::string message = XmlText(body, "Message");
    return message.empty() ? code : absl::StrCat(code, ": ", message);
  }
  absl::string_view line = body;
  line = line.substr(0, std::min(line.find('\n'), size_t{200}));
  return std::string(absl::StripAsciiWhitespace(line));
}

namespace http_internal {

// What one logical request wants and where its body goes.
struct Request {
  enum class Kind { kHead, kGet, kRange, kDownload };
  Kind kind = Kind::kGet;
  std::string url;
  const SigV4* sign = nullptr;
  Precondition version;
  // kRange: the range and its buffer.
  int64_t offset = 0;
  int64_t size = 0;
  char* dst = nullptr;
  // kGet: the body, at most max_bytes.
  std::string* body = nullptr;
  int64_t max_bytes = 0;
  // kDownload: the file and the size it must reach (-1: any).
  int fd = -1;
  int64_t expected_size = -1;
  // Filled by the last attempt.
  ObjectHeaders headers;

  // Requests of one group take turns with other groups' (HttpClient).
  std::string group;
  HttpDone done;
  // If not null, receives `headers` when the request is done.
  ObjectHeaders* headers_out = nullptr;
  // Attempts made so far, the next back-off and the last failure.
  int attempts = 0;
  absl::Duration backoff;
  absl::Status last;

  std::string Describe() const {
    const char* method = kind == Kind::kHead ? "HEAD" : "GET";
    if (kind == Kind::kRange) {
      return absl::StrCat(method, " ", url, " bytes ", offset, "-",
                          offset + size - 1);
    }
    return absl::StrCat(method, " ", url);
  }
};

// The state of one attempt, seen by curl's callbacks.
struct Attempt {
  Request* request = nullptr;
  long status = 0;
  int64_t received = 0;
  std::string error_body;
  // Set by the write callback when it refused the body.
  absl::Status refused;
  std::string content_range;
  int64_t content_length = -1;
  ObjectHeaders headers;
};

}  // namespace http_internal

namespace {

using http_internal::Attempt;

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* attempt = static_cast<Attempt*>(user);
  const size_t n = size * count;
  absl::string_view line(data, n);
  if (absl::StartsWith(line, "HTTP/")) {
    // A new response (after a redirect or 100-continue): forget the last.
    attempt->content_range.clear();
    attempt->content_length = -1;
    attempt->headers = ObjectHeaders();
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    long status = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &status)) {
      attempt->status = status;
    }
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return n;
  const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
  const std::string value(
      absl::StripAsciiWhitespace(line.substr(colon + 1)));
  if (name == "etag") {
    attempt->headers.etag = value;
  } else if (name == "last-modified") {
    attempt->headers.last_modified = value;
  } else if (name == "content-range") {
    attempt->content_range = value;
  } else if (name == "content-length") {
    int64_t length = -1;
    if (absl::SimpleAtoi(value, &length)) attempt->content_length = length;
  }
  return n;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* attempt = static_cast<Attempt*>(user);
  http_internal::Request& request = *attempt->request;
  const int64_t n = static_cast<int64_t>(size * count);
  if (attempt->status >= 300) {
    const int64_t keep =
        std::min<int64_t>(n, kMaxErrorBody - attempt->error_body.size());
    if (keep > 0) attempt->error_body.append(data, keep);
    return static_cast<size_t>(n);
  }
  using Kind = http_internal::Request::Kind;
  switch (request.kind) {
    case Kind::kRange:
      if (attempt->received + n > request.size) {
        attempt->refused = absl::DataLossError(absl::StrCat(
            "the server sent more than the ", request.size,
            " bytes asked for"));
        return 0;
      }
      std::memcpy(request.dst + attempt->received, data, n);
      break;
    case Kind::kGet:
      if (attempt->received + n > request.max_bytes) {
        attempt->refused = absl::OutOfRangeError(absl::StrCat(
            "the body is larger than ", request.max_bytes, " bytes"));
        return 0;
      }
      request.body->append(data, n);
      break;
    case Kind::kDownload: {
      int64_t done = 0;
      while (done < n) {
        const ssize_t w = ::write(request.fd, data + done, n - done);
        if (w < 0) {
          if (errno == EINTR) continue;
          attempt->refused = absl::ErrnoToStatus(errno, "writing the download");
          return 0;
        }
        done += w;
      }
      break;
    }
    case Kind::kHead:
      break;
  }
  attempt->received += n;
  return static_cast<size_t>(n);
}

// Parses "bytes A-B/T" into A and B.
bool ParseContentRange(absl::string_view value, int64_t* first, int64_t* last) {
  if (!absl::ConsumePrefix(&value, "bytes ")) return false;
  const size_t dash = value.find('-');
  const size_t slash = value.find('/');
  if (dash == absl::string_view::npos || slash == absl::string_view::npos ||
      slash < dash) {
    return false;
  }
  return absl::SimpleAtoi(value.substr(0, dash), first) &&
         absl::SimpleAtoi(value.substr(dash + 1, slash - dash - 1), last);
}

using http_internal::Request;

// Empties the request's body before an attempt (a retry starts over).
absl::Status ResetBody(Request& request) {
  if (request.kind == Request::Kind::kGet) request.body->clear();
  if (request.kind == Request::Kind::kDownload) {
    if (::ftruncate(request.fd, 0) != 0 ||
        ::lseek(request.fd, 0, SEEK_SET) != 0) {
      return absl::ErrnoToStatus(errno, "cannot rewind the download file");
    }
  }
  return absl::OkStatus();
}

// The options of every attempt: URL, callbacks into `attempt`, timeouts,
// transfer settings. `error` (CURL_ERROR_SIZE bytes) gets curl's message.
void SetTransferOptions(CURL* curl, const HttpOptions& options,
                        Attempt* attempt, char* error) {
  const Request& request = *attempt->request;
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, attempt);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, attempt);
  curl_easy_setopt(
      curl, CURLOPT_CONNECTTIMEOUT_MS,
      static_cast<long>(absl::ToInt64Milliseconds(options.connect_timeout)));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(
      curl, CURLOPT_LOW_SPEED_TIME,
      static_cast<long>(absl::ToInt64Seconds(options.stall_timeout)));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  // Large ranges arrive in fewer, larger reads and callbacks; each handle
  // holds a buffer this size, and thousands may be in flight.
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 64L * 1024);
  // No transparent decompression: byte ranges are of the stored object.
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, nullptr);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!options.ca_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, options.ca_file.c_str());
  }
  if (request.kind == Request::Kind::kHead) {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  }
}

// What the request options point at; lives until the transfer is done. The
// caller frees `list` (curl_slist_free_all).
struct RequestHeaders {
  std::string range;
  std::string sigv4;
  struct curl_slist* list = nullptr;
};

// The range, the precondition (If-Match or If-Unmodified-Since) and the
// SigV4 signature with its headers.
void SetRequestHeaders(CURL* curl, const Request& request,
                       RequestHeaders* out) {
  if (request.kind == Request::Kind::kRange) {
    out->range =
        absl::StrCat(request.offset, "-", request.offset + request.size - 1);
    curl_easy_setopt(curl, CURLOPT_RANGE, out->range.c_str());
  }
  std::vector<std::string> header_lines;
  if (!request.version.etag.empty()) {
    header_lines.push_back(absl::StrCat("If-Match: ", request.version.etag));
  } else if (!request.version.last_modified.empty()) {
    header_lines.push_back(
        absl::StrCat("If-Unmodified-Since: ", request.version.last_modified));
  }
  if (request.sign != nullptr) {
    out->sigv4 = absl::StrCat("aws:amz:", request.sign->region, ":s3");
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, out->sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERNAME, request.sign->access_key.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, request.sign->secret_key.c_str());
    header_lines.push_back(
        absl::StrCat("x-amz-content-sha256: ", kEmptyPayloadSha256));
    if (!request.sign->session_token.empty()) {
      header_lines.push_back(absl::StrCat("x-amz-security-token: ",
                                          request.sign->session_token));
    }
  }
  for (const std::string& line : header_lines) {
    out->list = curl_slist_append(out->list, line.c_str());
  }
  if (out->list != nullptr) {
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, out->list);
  }
}

// The transfer's outcome as a status: curl's error, a non-2xx answer, or a
// body shorter than its Content-Length. Sets `*retryable` on failure.
absl::Status CheckResponse(const Request& request, const Attempt& attempt,
                           CURLcode code, long status, const char* error,
                           bool* retryable) {
  if (code != CURLE_OK) {
    *retryable = RetryableCurlError(code);
    return absl::UnavailableError(absl::StrCat(
        "curl: ", error[0] != '\0' ? error : curl_easy_strerror(code),
        status > 0 ? absl::StrCat(" (HTTP ", status, ")") : ""));
  }
  if (status >= 300 || status < 200) {
    *retryable = RetryableHttpStatus(status);
    const std::string why = SummarizeErrorBody(attempt.error_body);
    std::string message =
        absl::StrCat("HTTP ", status, why.empty() ? "" : " ", why);
    if (status == 412) {
      absl::StrAppend(&message,
                      ": the object changed since it was indexed; restart "
                      "the server to re-index");
    }
    return absl::Status(*retryable ? absl::StatusCode::kUnavailable
                                   : CodeOfHttpStatus(status),
                        message);
  }
  // A body shorter than announced is a connection cut short.
  if (request.kind != Request::Kind::kHead && attempt.content_length >= 0 &&
      attempt.received != attempt.content_length) {
    *retryable = true;
    return absl::UnavailableError(absl::StrCat(
        "short body: ", attempt.received, " of ", attempt.content_length,
        " bytes (HTTP ", status, ")"));
  }
  return absl::OkStatus();
}

// After a 2xx answer: checks the body against what the request's kind asked
// for and records its size. Sets `*retryable` on a short body.
absl::Status CheckBody(Request& request, const Attempt& attempt, long status,
                       bool* retryable) {
  switch (request.kind) {
    case Request::Kind::kRange: {
      int64_t first = 0;
      int64_t last = 0;
      if (status == 206) {
        if (!ParseContentRange(attempt.content_range, &first, &last) ||
            first != request.offset ||
            last != request.offset + request.size - 1) {
          return absl::DataLossError(absl::StrCat(
              "the server answered with another range: Content-Range '",
              attempt.content_range, "'"));
        }
      } else if (request.offset != 0) {
        return absl::DataLossError(absl::StrCat(
            "the server ignored the Range header (HTTP ", status, ")"));
      }
      if (attempt.received != request.size) {
        *retryable = true;
        return absl::UnavailableError(absl::StrCat(
            "short body: ", attempt.received, " of ", request.size, " bytes"));
      }
      break;
    }
    case Request::Kind::kDownload:
      if (request.expected_size >= 0 &&
          attempt.received != request.expected_size) {
        *retryable = true;
        return absl::UnavailableError(absl::StrCat(
            "short body: ", attempt.received, " of ", request.expected_size,
            " bytes"));
      }
      request.headers.size = attempt.received;
      break;
    case Request::Kind::kGet:
      request.headers.size = attempt.received;
      break;
    case Request::Kind::kHead:
      break;
  }
  return absl::OkStatus();
}

}  // namespace


// One event loop: a curl multi handle whose sockets are watched with epoll,
// its request queues, retry timers and concurrency control. Everything but
// Submit() and stats() runs on the loop's thread.
class HttpClient::Loop {
 public:
  // `ceiling`: this loop's share of max_concurrent_requests.
  static absl::StatusOr<std::unique_ptr<Loop>> Create(const HttpOptions& options,
                                                      int ceiling);
  // Fails what is still queued or in flight with CANCELLED, then stops.
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Thread-safe.
  void Submit(std::unique_ptr<Request> request);
  // Thread-safe: adds this loop's figures to `*out`.
  void AddStats(HttpStats* out) const;

 private:
  // One attempt on the wire.
  struct Transfer {
    std::unique_ptr<Request> request;
    CURL* curl = nullptr;
    Attempt attempt;
    char error[CURL_ERROR_SIZE] = {0};
    RequestHeaders headers;
    absl::Time started;
  };
  // A request waiting for its next attempt.
  struct Retry {
    absl::Time at;
    std::unique_ptr<Request> request;
  };

  Loop(const HttpOptions& options, int ceiling, int epoll_fd, int wake_fd,
       CURLM* multi);

  void Run();
  // Moves submitted requests into the queues.
  void TakeSubmitted();
  // Starts queued requests while fewer than the limit are in flight.
  void Admit(absl::Time now);
  // The next request to start, due retries first, then groups in turn.
  std::unique_ptr<Request> NextQueued(absl::Time now);
  void Start(std::unique_ptr<Request> request, absl::Time now);
  // Handles transfers curl reports done.
  void ReadCompletions(absl::Time now);
  void Finish(std::unique_ptr<Transfer> transfer, CURLcode code,
              absl::Time now);
  // Calls the request's callback with its final status.
  void Complete(std::unique_ptr<Request> request, absl::Status status);
  // Fails everything queued and in flight (at shutdown).
  void Drain();
  // Publishes the counts stats() reads.
  void Publish();

  // curl's callbacks.
  static int OnSocket(CURL* easy, curl_socket_t fd, int what, void* loop,
                      void* socket_data);
  static int OnTimer(CURLM* multi, long timeout_ms, void* loop);

  const HttpOptions options_;
  const int epoll_fd_;
  const int wake_fd_;
  CURLM* const multi_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Request>> submitted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Loop thread only.
  ConcurrencyControl control_;
  // Waiting requests by group, and the groups with any, in turn order.
  absl::flat_hash_map<std::string, std::deque<std::unique_ptr<Request>>>
      queues_;
  std::deque<std::string> turns_;
  int64_t queued_ = 0;
  // Retries by due time (a min-heap).
  std::vector<Retry> retries_;
  absl::flat_hash_set<Transfer*> in_flight_;
  std::vector<CURL*> idle_handles_;
  // curl's timer: when it wants curl_multi_socket_action(TIMEOUT).
  absl::Time curl_deadline_ = absl::InfiniteFuture();
  std::minstd_rand jitter_{std::random_device{}()};

  // Read by stats() from any thread.
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> retries_count_{0};
  std::atomic<int64_t> failures_{0};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> connections_{0};
  std::atomic<int64_t> throttled_{0};
  std::atomic<int64_t> throttle_events_{0};
  std::atomic<int64_t> in_flight_count_{0};
  std::atomic<int64_t> queued_count_{0};
  std::atomic<int64_t> limit_{0};
  std::atomic<int64_t> latency_ns_{0};
  std::atomic<int64_t> latency_counts_[kLatencyBucketCount] = {};
  std::atomic<int64_t> latency_sum_ns_{0};

  std::thread thread_;
};


absl::StatusOr<std::unique_ptr<HttpClient::Loop>> HttpClient::Loop::Create(
    const HttpOptions& options, int ceiling) {
  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return absl::ErrnoToStatus(errno, "epoll_create1");
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    const int error = errno;
    ::close(epoll_fd);
    return absl::ErrnoToStatus(error, "eventfd");
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake_fd;
  CURLM* multi = nullptr;
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &event) != 0 ||
      (multi = curl_multi_init()) == nullptr) {
    const int error = errno;
    ::close(wake_fd);
    ::close(epoll_fd);
    return multi == nullptr && error == 0
               ? absl::InternalError("curl_multi_init failed")
               : absl::ErrnoToStatus(error, "starting an HTTP event loop");
  }
  std::unique_ptr<Loop> loop(
      new Loop(options, ceiling, epoll_fd, wake_fd, multi));
  curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &Loop::OnSocket);
  curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, loop.get());
  curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, &Loop::OnTimer);
  curl_multi_setopt(multi, CURLMOPT_TIMERDATA, loop.get());
  // Keep as many connections alive as there may be requests in flight.
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, static_cast<long>(ceiling));
  curl_multi_setopt(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  loop->thread_ = std::thread([l = loop.get()] {
    // Named so that top -H and perf tell its CPU from the decoders'.
    pthread_setname_np(pthread_self(), "stoker-http");
    l->Run();
  });
  return loop;
}

namespace {

ConcurrencyOptions WithCeiling(ConcurrencyOptions options, int ceiling) {
  options.ceiling = ceiling;
  options.initial = std::min(options.initial, ceiling);
  return options;
}

}  // namespace

HttpClient::Loop::Loop(const HttpOptions& options, int ceiling, int epoll_fd,
                       int wake_fd, CURLM* multi)
    : options_(options),
      epoll_fd_(epoll_fd),
      wake_fd_(wake_fd),
      multi_(multi),
      control_(WithCeiling(options.concurrency, ceiling)) {}

HttpClient::Loop::~Loop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  for (CURL* curl : idle_handles_) curl_easy_cleanup(curl);
  curl_multi_cleanup(multi_);
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void HttpClient::Loop::Submit(std::unique_ptr<Request> request) {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      // The loop takes every submitted request at once when it wakes: one
      // wake-up per batch of submissions.
      wake = submitted_.empty();
      submitted_.push_back(std::move(request));
    }
  }
  if (request != nullptr) {
    Complete(std::move(request),
             absl::CancelledError("the storage client is shutting down"));
    return;
  }
  if (wake) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

int HttpClient::Loop::OnSocket(CURL* /*easy*/, curl_socket_t fd, int what,
                               void* user, void* /*socket_data*/) {
  auto* loop = static_cast<Loop*>(user);
  if (what == CURL_POLL_REMOVE) {
    // curl may have closed it already (closing removes it from epoll).
    ::epoll_ctl(loop->epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    return 0;
  }
  epoll_event event{};
  event.data.fd = fd;
  event.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) |
                 ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
  if (::epoll_ctl(loop->epoll_fd_, EPOLL_CTL_MOD, fd, &event) != 0 &&
      errno == ENOENT) {
    ::epoll_ctl(loop->epoll_fd_, EPOLL_CTL_ADD, fd, &event);
  }
  return 0;
}

int HttpClient::Loop::OnTimer(CURLM* /*multi*/, long timeout_ms, void* user) {
  auto* loop = static_cast<Loop*>(user);
  loop->curl_deadline_ = timeout_ms < 0
                             ? absl::InfiniteFuture()
                             : absl::Now() + absl::Milliseconds(timeout_ms);
  return 0;
}

void HttpClient::Loop::Run() {
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  while (true) {
    absl::Time wake_at = curl_deadline_;
    if (!retries_.empty()) wake_at = std::min(wake_at, retries_.front().at);
    int timeout_ms = -1;
    if (wake_at != absl::InfiniteFuture()) {
      const int64_t us = absl::ToInt64Microseconds(wake_at - absl::Now());
      // Rounded up: waking early would spin.
      timeout_ms = static_cast<int>(std::clamp<int64_t>((us + 999) / 1000, 0,
                                                        60 * 1000));
    }
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
    int running = 0;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t count = 0;
        (void)!::read(wake_fd_, &count, sizeof(count));
        continue;
      }
      int flags = 0;
      if (events[i].events & EPOLLIN) flags |= CURL_CSELECT_IN;
      if (events[i].events & EPOLLOUT) flags |= CURL_CSELECT_OUT;
      if (events[i].events & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
      curl_multi_socket_action(multi_, fd, flags, &running);
    }
    absl::Time now = absl::Now();
    if (now >= curl_deadline_) {
      curl_deadline_ = absl::InfiniteFuture();
      curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    ReadCompletions(now);
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    if (stopping) {
      Drain();
      return;
    }
    TakeSubmitted();
    Admit(now);
    Publish();
  }
}

void HttpClient::Loop::TakeSubmitted() {
  std::vector<std::unique_ptr<Request>> taken;
  {
    absl::MutexLock lock(&mu_);
    taken.swap(submitted_);
  }
  for (std::unique_ptr<Request>& request : taken) {
    std::deque<std::unique_ptr<Request>>& queue = queues_[request->group];
    if (queue.empty()) turns_.push_back(request->group);
    queue.push_back(std::move(request));
    ++queued_;
  }
}

std::unique_ptr<http_internal::Request> HttpClient::Loop::NextQueued(
    absl::Time now) {
  const auto later = [](const Retry& a, const Retry& b) { return a.at > b.at; };
  if (!retries_.empty() && retries_.front().at <= now) {
    std::pop_heap(retries_.begin(), retries_.end(), later);
    std::unique_ptr<Request> request = std::move(retries_.back().request);
    retries_.pop_back();
    --queued_;
    return request;
  }
  if (turns_.empty()) return nullptr;
  const std::string group = std::move(turns_.front());
  turns_.pop_front();
  auto it = queues_.find(group);
  std::unique_ptr<Request> request = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) {
    queues_.erase(it);
  } else {
    turns_.push_back(group);
  }
  --queued_;
  return request;
}

void HttpClient::Loop::Admit(absl::Time now) {
  while (static_cast<int>(in_flight_.size()) < control_.limit()) {
    std::unique_ptr<Request> request = NextQueued(now);
    if (request == nullptr) break;
    Start(std::move(request), now);
  }
}

void HttpClient::Loop::Start(std::unique_ptr<Request> request, absl::Time now) {
  CURL* curl = nullptr;
  if (!idle_handles_.empty()) {
    curl = idle_handles_.back();
    idle_handles_.pop_back();
    curl_easy_reset(curl);
  } else if ((curl = curl_easy_init()) == nullptr) {
    Complete(std::move(request), absl::InternalError("curl_easy_init failed"));
    return;
  }
  if (absl::Status s = ResetBody(*request); !s.ok()) {
    idle_handles_.push_back(curl);
    Complete(std::move(request), std::move(s));
    return;
  }
  auto transfer = std::make_unique<Transfer>();
  transfer->request = std::move(request);
  transfer->curl = curl;
  transfer->attempt.request = transfer->request.get();
  transfer->started = now;
  const Request& r = *transfer->request;
  SetTransferOptions(curl, options_, &transfer->attempt, transfer->error);
  SetRequestHeaders(curl, r, &transfer->headers);
  curl_easy_setopt(curl, CURLOPT_PRIVATE, transfer.get());
  if (absl::StartsWith(r.url, "https://")) {
    // Wait for a connection that may multiplex (HTTP/2) rather than open
    // one per request.
    curl_easy_setopt(curl, CURLOPT_PIPEWAIT, 1L);
  }
  if (r.attempts > 0) retries_count_.fetch_add(1, std::memory_order_relaxed);
  ++transfer->request->attempts;
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (const CURLMcode code = curl_multi_add_handle(multi_, curl);
      code != CURLM_OK) {
    curl_slist_free_all(transfer->headers.list);
    idle_handles_.push_back(curl);
    Complete(std::move(transfer->request),
             absl::InternalError(absl::StrCat("curl_multi_add_handle: ",
                                              curl_multi_strerror(code))));
    return;
  }
  in_flight_.insert(transfer.release());
}

void HttpClient::Loop::ReadCompletions(absl::Time now) {
  int left = 0;
  while (CURLMsg* message = curl_multi_info_read(multi_, &left)) {
    if (message->msg != CURLMSG_DONE) continue;
    CURL* curl = message->easy_handle;
    const CURLcode code = message->data.result;
    char* data = nullptr;
    curl_easy_getinfo(curl, CURLINFO_PRIVATE, &data);
    auto* transfer = reinterpret_cast<Transfer*>(data);
    curl_multi_remove_handle(multi_, curl);
    in_flight_.erase(transfer);
    Finish(std::unique_ptr<Transfer>(transfer), code, now);
  }
}

void HttpClient::Loop::Finish(std::unique_ptr<Transfer> transfer,
                              CURLcode code, absl::Time now) {
  long status = 0;
  curl_easy_getinfo(transfer->curl, CURLINFO_RESPONSE_CODE, &status);
  long connects = 0;
  curl_easy_getinfo(transfer->curl, CURLINFO_NUM_CONNECTS, &connects);
  connections_.fetch_add(connects, std::memory_order_relaxed);
  curl_slist_free_all(transfer->headers.list);
  idle_handles_.push_back(transfer->curl);
  Request& request = *transfer->request;
  const Attempt& attempt = transfer->attempt;
  bytes_.fetch_add(attempt.received, std::memory_order_relaxed);
  request.headers = attempt.headers;
  if (attempt.content_length >= 0 && request.kind == Request::Kind::kHead) {
    request.headers.size = attempt.content_length;
  }
  bool retryable = false;
  absl::Status s = attempt.refused;
  if (s.ok()) {
    s = CheckResponse(request, attempt, code, status, transfer->error,
                      &retryable);
  }
  if (s.ok()) s = CheckBody(request, attempt, status, &retryable);
  const absl::Duration held = now - transfer->started;
  if (s.ok()) {
    // Demand was held back if requests wait, or this one's slot was the
    // last.
    control_.OnSuccess(now, held,
                       queued_ > 0 || static_cast<int>(in_flight_.size()) +
                                              1 >= control_.limit());
    const double seconds = absl::ToDoubleSeconds(held);
    const int bucket = static_cast<int>(
        std::lower_bound(std::begin(kLatencyBuckets), std::end(kLatencyBuckets),
                         seconds) -
        std::begin(kLatencyBuckets));
    latency_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    latency_sum_ns_.fetch_add(absl::ToInt64Nanoseconds(held),
                              std::memory_order_relaxed);
    Complete(std::move(transfer->request), absl::OkStatus());
    return;
  }
  if (code == CURLE_OK && (status == 429 || status == 503)) {
    throttled_.fetch_add(1, std::memory_order_relaxed);
    // In flight when it was refused: the others, and this one.
    control_.OnThrottled(now, static_cast<int>(in_flight_.size()) + 1);
  }
  if (retryable && request.attempts < options_.max_attempts) {
    request.last = std::move(s);
    // Equal jitter: uniformly in the upper half of the back-off.
    const double half = absl::ToDoubleSeconds(request.backoff) / 2;
    std::uniform_real_distribution<double> wait(half, 2 * half);
    Retry retry{now + absl::Seconds(wait(jitter_)),
                std::move(transfer->request)};
    retry.request->backoff =
        std::min(retry.request->backoff * 2, options_.max_backoff);
    retries_.push_back(std::move(retry));
    std::push_heap(retries_.begin(), retries_.end(),
                   [](const Retry& a, const Retry& b) { return a.at > b.at; });
    ++queued_;
    return;
  }
  if (!retryable) {
    // A 404 is an answer (e.g. no sidecar index), not a failure.
    if (!absl::IsNotFound(s)) failures_.fetch_add(1, std::memory_order_relaxed);
    Complete(std::move(transfer->request),
             absl::Status(s.code(), absl::StrCat(request.Describe(), ": ",
                                                 s.message())));
    return;
  }
  failures_.fetch_add(1, std::memory_order_relaxed);
  Complete(std::move(transfer->request),
           absl::UnavailableError(absl::StrCat(
               request.Describe(), ": ", s.message(), " (gave up after ",
               options_.max_attempts, " attempts)")));
}

void HttpClient::Loop::Complete(std::unique_ptr<Request> request,
                                absl::Status status) {
  if (request->headers_out != nullptr) *request->headers_out = request->headers;
  HttpDone done = std::move(request->done);
  request.reset();
  std::move(done)(std::move(status));
}

void HttpClient::Loop::Drain() {
  const absl::Status cancelled =
      absl::CancelledError("the storage client is shutting down");
  for (Transfer* raw : in_flight_) {
    std::unique_ptr<Transfer> transfer(raw);
    curl_multi_remove_handle(multi_, transfer->curl);
    curl_slist_free_all(transfer->headers.list);
    idle_handles_.push_back(transfer->curl);
    Complete(std::move(transfer->request), cancelled);
  }
  in_flight_.clear();
  for (Retry& retry : retries_) Complete(std::move(retry.request), cancelled);
  retries_.clear();
  for (auto& [group, queue] : queues_) {
    for (std::unique_ptr<Request>& request : queue) {
      Complete(std::move(request), cancelled);
    }
  }
  queues_.clear();
  turns_.clear();
  queued_ = 0;
  std::vector<std::unique_ptr<Request>> submitted;
  {
    absl::MutexLock lock(&mu_);
    submitted.swap(submitted_);
  }
  for (std::unique_ptr<Request>& request : submitted) {
    Complete(std::move(request), cancelled);
  }
  Publish();
}

void HttpClient::Loop::Publish() {
  in_flight_count_.store(static_cast<int64_t>(in_flight_.size()),
                         std::memory_order_relaxed);
  queued_count_.store(queued_, std::memory_order_relaxed);
  limit_.store(control_.limit(), std::memory_order_relaxed);
  latency_ns_.store(absl::ToInt64Nanoseconds(control_.latency()),
                    std::memory_order_relaxed);
  throttle_events_.store(control_.throttle_events(), std::memory_order_relaxed);
}

void HttpClient::Loop::AddStats(HttpStats* out) const {
  constexpr auto relaxed = std::memory_order_relaxed;
  out->requests += requests_.load(relaxed);
  out->retries += retries_count_.load(relaxed);
  out->failures += failures_.load(relaxed);
  out->bytes += bytes_.load(relaxed);
  out->connections += connections_.load(relaxed);
  out->throttled += throttled_.load(relaxed);
  out->throttle_events += throttle_events_.load(relaxed);
  out->in_flight += in_flight_count_.load(relaxed);
  out->queued += queued_count_.load(relaxed);
  out->limit += limit_.load(relaxed);
  out->latency_s += static_cast<double>(latency_ns_.load(relaxed)) * 1e-9;
  for (int i = 0; i < kLatencyBucketCount; ++i) {
    out->latency_counts[i] += latency_counts_[i].load(relaxed);
  }
  out->latency_sum_s += static_cast<double>(latency_sum_ns_.load(relaxed)) * 1e-9;
}

absl::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Create(
    const HttpOptions& options) {
  if (options.event_threads < 1) {
    return absl::InvalidArgumentError("event_threads must be >= 1");
  }
  if (options.max_concurrent_requests < options.event_threads) {
    return absl::InvalidArgumentError(
        "max_concurrent_requests must be >= 1 per event thread");
  }
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError("max_attempts must be >= 1");
  }
  const ConcurrencyOptions& c = options.concurrency;
  if (c.initial < 1 || !(c.increase_per_rtt > 0)) {
    return absl::InvalidArgumentError(
        "concurrency: initial must be >= 1 and increase_per_rtt > 0");
  }
  if (!options.ca_file.empty()) {
    struct stat st;
    if (::stat(options.ca_file.c_str(), &st) != 0 ||
        ::access(options.ca_file.c_str(), R_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot read the CA file '", options.ca_file, "': ",
          std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the CA file '", options.ca_file,
          "' is not a regular file (give a PEM bundle, not a directory)"));
    }
  }
  if (absl::Status s = CurlGlobalInit(); !s.ok()) return s;
  std::unique_ptr<HttpClient> client(new HttpClient(options));
  for (int i = 0; i < options.event_threads; ++i) {
    // The ceiling split evenly, the remainder to the first loops.
    const int share = options.max_concurrent_requests / options.event_threads +
                      (i < options.max_concurrent_requests % options.event_threads
                           ? 1
                           : 0);
    absl::StatusOr<std::unique_ptr<Loop>> loop = Loop::Create(options, share);
    if (!loop.ok()) return loop.status();
    client->loops_.push_back(*std::move(loop));
  }
  return client;
}

HttpClient::HttpClient(const HttpOptions& options) : options_(options) {}

HttpClient::~HttpClient() = default;

void HttpClient::Submit(std::unique_ptr<Request> request) const {
  request->backoff = options_.initial_backoff;
  const uint64_t turn = next_loop_.fetch_add(1, std::memory_order_relaxed);
  loops_[turn % loops_.size()]->Submit(std::move(request));
}

absl::Status HttpClient::RunAndWait(std::unique_ptr<Request> request) const {
  absl::Notification finished;
  absl::Status result;
  request->done = [&](absl::Status status) {
    result = std::move(status);
    finished.Notify();
  };
  Submit(std::move(request));
  finished.WaitForNotification();
  return result;
}

absl::StatusOr<ObjectHeaders> HttpClient::Head(const std::string& url,
                                               const SigV4* sign) const {
  ObjectHeaders headers;
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kHead;
  request->url = url;
  request->sign = sign;
  request->headers_out = &headers;
  if (absl::Status s = RunAndWait(std::move(request)); !s.ok()) return s;
  return headers;
}

absl::StatusOr<std::string> HttpClient::Get(const std::string& url,
                                            const SigV4* sign,
                                            int64_t max_bytes,
                                            ObjectHeaders* headers) const {
  std::string body;
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kGet;
  request->url = url;
  request->sign = sign;
  request->body = &body;
  request->max_bytes = max_bytes;
  request->headers_out = headers;
  if (absl::Status s = RunAndWait(std::move(request)); !s.ok()) return s;
  return body;
}

std::unique_ptr<http_internal::Request> HttpClient::RangeRequest(
    const std::string& url, const SigV4* sign, const Precondition& version,
    int64_t offset, int64_t size, char* dst) {
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kRange;
  request->url = url;
  request->sign = sign;
  request->version = version;
  request->offset = offset;
  request->size = size;
  request->dst = dst;
  return request;
}

absl::Status HttpClient::GetRange(const std::string& url, const SigV4* sign,
                                  const Precondition& version, int64_t offset,
                                  int64_t size, char* dst) const {
  if (size <= 0) return absl::OkStatus();
  return RunAndWait(RangeRequest(url, sign, version, offset, size, dst));
}

void HttpClient::StartGetRange(const std::string& url, const SigV4* sign,
                               const Precondition& version, int64_t offset,
                               int64_t size, char* dst,
                               const std::string& group, HttpDone done) const {
  if (size <= 0) {
    std::move(done)(absl::OkStatus());
    return;
  }
  std::unique_ptr<Request> request =
      RangeRequest(url, sign, version, offset, size, dst);
  request->group = group;
  request->done = std::move(done);
  Submit(std::move(request));
}

absl::Status HttpClient::Download(const std::string& url, const SigV4* sign,
                                  const Precondition& version,
                                  int64_t expected_size, int fd) const {
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kDownload;
  request->url = url;
  request->sign = sign;
  request->version = version;
  request->fd = fd;
  request->expected_size = expected_size;
  return RunAndWait(std::move(request));
}

HttpStats HttpClient::stats() const {
  HttpStats s;
  for (const std::unique_ptr<Loop>& loop : loops_) loop->AddStats(&s);
  if (!loops_.empty()) s.latency_s /= static_cast<double>(loops_.size());
  return s;
}

}  // namespace stoker::storage
