#include "server/storage/http_client.h"

#include <curl/curl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>

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

struct HttpClient::Handle {
  explicit Handle(CURL* c) : curl(c) {}
  ~Handle() { curl_easy_cleanup(curl); }
  CURL* const curl;
};

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
  // Large ranges arrive in fewer, larger reads and callbacks.
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L * 1024);
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

absl::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Create(
    const HttpOptions& options) {
  if (options.max_concurrent_requests < 1) {
    return absl::InvalidArgumentError("max_concurrent_requests must be >= 1");
  }
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError("max_attempts must be >= 1");
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
  return std::unique_ptr<HttpClient>(new HttpClient(options));
}

HttpClient::HttpClient(const HttpOptions& options) : options_(options) {}

HttpClient::~HttpClient() = default;

bool HttpClient::SlotFree() const {
  return in_flight_ < options_.max_concurrent_requests;
}

void HttpClient::GiveHandle(std::unique_ptr<Handle> handle) const {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (handle != nullptr) idle_.push_back(std::move(handle));
}

absl::StatusOr<ObjectHeaders> HttpClient::Head(const std::string& url,
                                               const SigV4* sign) const {
  Request request;
  request.kind = Request::Kind::kHead;
  request.url = url;
  request.sign = sign;
  if (absl::Status s = Run(request); !s.ok()) return s;
  return request.headers;
}

absl::StatusOr<std::string> HttpClient::Get(const std::string& url,
                                            const SigV4* sign,
                                            int64_t max_bytes,
                                            ObjectHeaders* headers) const {
  std::string body;
  Request request;
  request.kind = Request::Kind::kGet;
  request.url = url;
  request.sign = sign;
  request.body = &body;
  request.max_bytes = max_bytes;
  if (absl::Status s = Run(request); !s.ok()) return s;
  if (headers != nullptr) *headers = request.headers;
  return body;
}

absl::Status HttpClient::GetRange(const std::string& url, const SigV4* sign,
                                  const Precondition& version, int64_t offset,
                                  int64_t size, char* dst) const {
  if (size <= 0) return absl::OkStatus();
  Request request;
  request.kind = Request::Kind::kRange;
  request.url = url;
  request.sign = sign;
  request.version = version;
  request.offset = offset;
  request.size = size;
  request.dst = dst;
  return Run(request);
}

absl::Status HttpClient::Download(const std::string& url, const SigV4* sign,
                                  const Precondition& version,
                                  int64_t expected_size, int fd) const {
  Request request;
  request.kind = Request::Kind::kDownload;
  request.url = url;
  request.sign = sign;
  request.version = version;
  request.fd = fd;
  request.expected_size = expected_size;
  return Run(request);
}

HttpStats HttpClient::stats() const {
  HttpStats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.retries = retries_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  return s;
}

absl::Status HttpClient::Run(Request& request) const {
  thread_local std::minstd_rand jitter(std::random_device{}());
  absl::Duration backoff = options_.initial_backoff;
  absl::Status last;
  for (int attempt = 1; attempt <= options_.max_attempts; ++attempt) {
    if (attempt > 1) {
      retries_.fetch_add(1, std::memory_order_relaxed);
      const double half = absl::ToDoubleSeconds(backoff) / 2;
      std::uniform_real_distribution<double> wait(half, 2 * half);
      absl::SleepFor(absl::Seconds(wait(jitter)));
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    bool retryable = false;
    last = RunOnce(request, &retryable);
    if (last.ok()) return last;
    if (!retryable) {
      // A 404 is an answer (e.g. no sidecar index), not a failure.
      if (!absl::IsNotFound(last)) {
        failures_.fetch_add(1, std::memory_order_relaxed);
      }
      return absl::Status(last.code(),
                          absl::StrCat(request.Describe(), ": ", last.message()));
    }
  }
  failures_.fetch_add(1, std::memory_order_relaxed);
  return absl::UnavailableError(absl::StrCat(
      request.Describe(), ": ", last.message(), " (gave up after ",
      options_.max_attempts, " attempts)"));
}

absl::Status HttpClient::RunOnce(Request& request, bool* retryable) const {
  *retryable = false;
  // Wait for a request slot, then borrow (or make) a handle.
  std::unique_ptr<Handle> handle;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &HttpClient::SlotFree));
    ++in_flight_;
    if (!idle_.empty()) {
      handle = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (handle == nullptr) {
    CURL* curl = curl_easy_init();
    if (curl == nullptr) {
      GiveHandle(nullptr);
      return absl::InternalError("curl_easy_init failed");
    }
    handle = std::make_unique<Handle>(curl);
  }
  requests_.fetch_add(1, std::memory_order_relaxed);

  CURL* curl = handle->curl;
  curl_easy_reset(curl);
  Attempt attempt;
  attempt.request = &request;
  if (absl::Status s = ResetBody(request); !s.ok()) {
    GiveHandle(std::move(handle));
    return s;
  }
  char error[CURL_ERROR_SIZE] = {0};
  SetTransferOptions(curl, options_, &attempt, error);
  RequestHeaders headers;
  SetRequestHeaders(curl, request, &headers);

  const CURLcode code = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers.list);
  GiveHandle(std::move(handle));
  bytes_.fetch_add(attempt.received, std::memory_order_relaxed);
  request.headers = attempt.headers;
  if (attempt.content_length >= 0 && request.kind == Request::Kind::kHead) {
    request.headers.size = attempt.content_length;
  }

  if (!attempt.refused.ok()) return attempt.refused;
  if (absl::Status s =
          CheckResponse(request, attempt, code, status, error, retryable);
      !s.ok()) {
    return s;
  }
  return CheckBody(request, attempt, status, retryable);
}

}  // namespace stoker::storage
