// ServerMetrics (server/metrics.h) and MetricsExporter
// (server/metrics_exporter.h) as a user sees them: the exporter of a real
// DataService listens on 127.0.0.1:0, the test feeds measurements in and
// reads /metrics with a plain HTTP GET over a socket, then checks the
// series a dashboard or autoscaler would query (names, labels, types and
// values in the Prometheus text format).

#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/transform.h"
#include "proto/stoker.pb.h"
#include "server/data_service.h"
#include "server/dataset.h"
#include "server/metrics_exporter.h"
#include "tests/testing/sample_dataset.h"
#include "tools/sample_shards.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMemoryLimit = int64_t{64} << 20;
constexpr int kWorkerThreads = 3;
constexpr absl::Duration kWaitLimit = absl::Seconds(30);
constexpr int64_t kMs = 1000 * 1000;  // nanoseconds
constexpr int64_t kUs = 1000;

// The body of GET http://127.0.0.1:<port><path>, sent as HTTP/1.0 so that
// the server closes the connection after the response (no chunking, no
// keep-alive). Error if the status is not 200 or the socket fails; reads
// give up after kWaitLimit.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  timeval timeout{};
  timeout.tv_sec = absl::ToInt64Seconds(kWaitLimit);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address),
                sizeof(address)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("connect to port ", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n =
        ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return absl::ErrnoToStatus(errno, "send");
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[16384];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) return absl::ErrnoToStatus(errno, "recv");
    response.append(buffer, static_cast<size_t>(n));
  }
  const size_t end_of_headers = response.find("\r\n\r\n");
  if (end_of_headers == std::string::npos) {
    return absl::DataLossError(absl::StrCat("no HTTP response: ", response));
  }
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (!absl::StrContains(status_line, " 200 ")) {
    return absl::UnavailableError(status_line);
  }
  return response.substr(end_of_headers + 4);
}

// One sample line of the text exposition format.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// A parsed /metrics page.
struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // "# TYPE <name> <type>"
  std::string text;

  // The samples named `name` whose labels include `labels`.
  std::vector<Sample> Find(
      const std::string& name,
      const std::map<std::string, std::string>& labels = {}) const {
    std::vector<Sample> out;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto it = s.labels.find(k);
        match = match && it != s.labels.end() && it->second == v;
      }
      if (match) out.push_back(s);
    }
    return out;
  }

  // The value of the one series `name` with exactly `labels`; NaN (which
  // fails any comparison) with a test failure if there is not exactly one.
  double Value(const std::string& name,
               const std::map<std::string, std::string>& labels = {}) const {
    std::vector<Sample> found;
    for (const Sample& s : Find(name, labels)) {
      if (s.labels == labels) found.push_back(s);
    }
    if (found.size() != 1) {
      ADD_FAILURE() << found.size() << " series " << name << " with "
                    << labels.size() << " given labels in:\n"
                    << text;
      return std::nan("");
    }
    return found[0].value;
  }

  // The cumulative count of histogram `name`{stage} at bucket bound `le`
  // (compared as numbers: the text may write 0.0025 as 2.5e-03).
  double Bucket(const std::string& name, const std::string& stage,
                double le) const {
    for (const Sample& s :
         Find(absl::StrCat(name, "_bucket"), {{"stage", stage}})) {
      auto it = s.labels.find("le");
      if (it == s.labels.end()) continue;
      const double bound = std::strtod(it->second.c_str(), nullptr);
      const bool same = std::isinf(le)
                            ? std::isinf(bound) && bound > 0
                            : std::fabs(bound - le) <= 1e-12 * std::fabs(le);
      if (same) return s.value;
    }
    ADD_FAILURE() << "no bucket le=" << le << " of " << name << "{stage=\""
                  << stage << "\"} in:\n"
                  << text;
    return std::nan("");
  }
};

// Parses `name{k="v",...} value` lines and TYPE comments. Label values
// here hold no escapes.
Exposition Parse(const std::string& text) {
  Exposition out;
  out.text = text;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() == 2) out.types[parts[0]] = parts[1];
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;
    Sample sample;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    absl::string_view rest;
    if (brace != absl::string_view::npos && brace < space) {
      sample.name = std::string(line.substr(0, brace));
      const size_t close = line.rfind('}');
      absl::string_view labels = line.substr(brace + 1, close - brace - 1);
      while (!labels.empty()) {
        const size_t eq = labels.find("=\"");
        const size_t end = labels.find('"', eq + 2);
        if (eq == absl::string_view::npos || end == absl::string_view::npos) {
          break;
        }
        sample.labels[std::string(labels.substr(0, eq))] =
            std::string(labels.substr(eq + 2, end - eq - 2));
        labels.remove_prefix(end + 1);
        absl::ConsumePrefix(&labels, ",");
      }
      rest = line.substr(close + 1);
    } else {
      sample.name = std::string(line.substr(0, line.find(' ')));
      rest = line.substr(line.find(' '));
    }
    absl::ConsumePrefix(&rest, " ");
    const std::string value(rest.substr(0, rest.find(' ')));
    sample.value = std::strtod(value.c_str(), nullptr);
    out.samples.push_back(std::move(sample));
  }
  return out;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tools::SampleShardsOptions shards = testing::SmallShards(2, 4, 1);
    shards.min_side = 32;
    shards.max_side = 64;
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        testing::WriteAndOpenDataset(shards, "train");
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    std::vector<std::unique_ptr<Dataset>> datasets;
    datasets.push_back(*std::move(dataset));
    DataServiceOptions options;
    options.worker_threads = kWorkerThreads;
    options.max_streams = 1;
    options.max_memory_bytes = kMemoryLimit;
    absl::StatusOr<std::unique_ptr<DataService>> service =
        DataService::Create(options, std::move(datasets));
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
        MetricsExporter::Start("127.0.0.1:0", service_.get());
    ASSERT_TRUE(exporter.ok()) << exporter.status();
    exporter_ = *std::move(exporter);
    ASSERT_GT(exporter_->port(), 0);
  }

  void TearDown() override {
    exporter_.reset();
    if (service_ != nullptr) service_->Stop();
  }

  // GET /metrics, parsed; a failed scrape fails the test and parses as
  // nothing.
  Exposition Scrape() {
    absl::StatusOr<std::string> body = HttpGet(exporter_->port(), "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    return Parse(body.ok() ? *body : "");
  }

  ServerMetrics& metrics() { return *service_->metrics(); }

  std::unique_ptr<DataService> service_;
  std::unique_ptr<MetricsExporter> exporter_;
};

TEST_F(MetricsTest, StageHistogramsCountSamplesInSecondsPerStage) {
  for (int i = 0; i < 3; ++i) {
    metrics().ObserveSample(/*read_ns=*/2 * kMs, /*decode_ns=*/30 * kMs,
                            /*transform_ns=*/400 * kUs);
  }
  const Exposition page = Scrape();
  EXPECT_EQ(page.types.at("stoker_stage_seconds"), "histogram");
  for (const char* stage : {"read", "decode", "transform"}) {
    EXPECT_EQ(page.Value("stoker_stage_seconds_count", {{"stage", stage}}), 3)
        << stage;
    EXPECT_EQ(page.Bucket("stoker_stage_seconds", stage, INFINITY), 3) << stage;
  }
  EXPECT_NEAR(page.Value("stoker_stage_seconds_sum", {{"stage", "read"}}),
              0.006, 1e-9);
  EXPECT_NEAR(page.Value("stoker_stage_seconds_sum", {{"stage", "decode"}}),
              0.090, 1e-9);
  EXPECT_NEAR(page.Value("stoker_stage_seconds_sum", {{"stage", "transform"}}),
              0.0012, 1e-9);
  // Each observation lands in the first bucket whose bound it does not pass.
  EXPECT_EQ(page.Bucket("stoker_stage_seconds", "read", 0.001), 0);
  EXPECT_EQ(page.Bucket("stoker_stage_seconds", "read", 0.0025), 3);
  EXPECT_EQ(page.Bucket("stoker_stage_seconds", "decode", 0.025), 0);
  EXPECT_EQ(page.Bucket("stoker_stage_seconds", "decode", 0.05), 3);
  EXPECT_EQ(page.Bucket("stoker_stage_seconds", "transform", 0.00025), 0);
  EXPECT_EQ(page.Bucket("stoker_stage_seconds", "transform", 0.0005), 3);
  // Batch stages are a family of their own.
  EXPECT_EQ(page.Value("stoker_batch_seconds_count", {{"stage", "send"}}), 0);
}

TEST_F(MetricsTest, BatchStagesAndSendCountersAddUp) {
  metrics().ObserveAssemble(5 * kMs);
  metrics().ObserveQueueWait(1 * kMs);
  metrics().ObserveSend(2 * kMs, /*bytes=*/1000, /*samples=*/4);
  metrics().ObserveSend(20 * kMs, /*bytes=*/500, /*samples=*/2);
  const Exposition page = Scrape();
  EXPECT_EQ(page.types.at("stoker_batch_seconds"), "histogram");
  EXPECT_EQ(page.Value("stoker_batch_seconds_count", {{"stage", "assemble"}}),
            1);
  EXPECT_EQ(page.Value("stoker_batch_seconds_count", {{"stage", "queue_wait"}}),
            1);
  EXPECT_EQ(page.Value("stoker_batch_seconds_count", {{"stage", "send"}}), 2);
  EXPECT_NEAR(page.Value("stoker_batch_seconds_sum", {{"stage", "send"}}),
              0.022, 1e-9);
  EXPECT_EQ(page.Bucket("stoker_batch_seconds", "send", 0.0025), 1);
  EXPECT_EQ(page.Bucket("stoker_batch_seconds", "send", 0.025), 2);
  EXPECT_EQ(page.types.at("stoker_batches_total"), "counter");
  EXPECT_EQ(page.Value("stoker_batches_total"), 2);
  EXPECT_EQ(page.Value("stoker_samples_total"), 6);
  EXPECT_EQ(page.Value("stoker_sent_bytes_total"), 1500);
  // Sample stages saw none of it.
  EXPECT_EQ(page.Value("stoker_stage_seconds_count", {{"stage", "decode"}}), 0);
}

TEST_F(MetricsTest, BadSamplesAreCountedByStatusCode) {
  EXPECT_TRUE(Scrape().Find("stoker_bad_samples_total").empty());
  metrics().CountBadSample(absl::StatusCode::kDataLoss);
  metrics().CountBadSample(absl::StatusCode::kInvalidArgument);
  metrics().CountBadSample(absl::StatusCode::kDataLoss);
  const Exposition page = Scrape();
  EXPECT_EQ(page.types.at("stoker_bad_samples_total"), "counter");
  EXPECT_EQ(page.Find("stoker_bad_samples_total").size(), 2u);
  EXPECT_EQ(page.Value("stoker_bad_samples_total", {{"code", "DATA_LOSS"}}), 2);
  EXPECT_EQ(
      page.Value("stoker_bad_samples_total", {{"code", "INVALID_ARGUMENT"}}),
      1);
}

TEST_F(MetricsTest, MixtureSamplesAreCountedBySourceDataset) {
  EXPECT_TRUE(Scrape().Find("stoker_mixture_samples_total").empty());
  metrics().CountMixtureSamples("web", 12);
  metrics().CountMixtureSamples("books", 3);
  metrics().CountMixtureSamples("web", 5);
  const Exposition page = Scrape();
  EXPECT_EQ(page.types.at("stoker_mixture_samples_total"), "counter");
  EXPECT_EQ(page.Value("stoker_mixture_samples_total", {{"dataset", "web"}}),
            17);
  EXPECT_EQ(page.Value("stoker_mixture_samples_total", {{"dataset", "books"}}),
            3);
}

TEST_F(MetricsTest, ServiceFiguresAreReadAtScrapeTime) {
  Exposition page = Scrape();
  EXPECT_EQ(page.types.at("stoker_memory_budget_bytes"), "gauge");
  EXPECT_EQ(page.Value("stoker_memory_budget_bytes", {{"kind", "limit"}}),
            kMemoryLimit);
  EXPECT_EQ(page.Value("stoker_memory_budget_bytes", {{"kind", "used"}}), 0);
  EXPECT_EQ(page.Value("stoker_worker_threads"), kWorkerThreads);
  EXPECT_EQ(page.Value("stoker_streams_active"), 0);
  EXPECT_EQ(page.Value("stoker_streams_opened_total"), 0);
  EXPECT_EQ(page.Value("stoker_streams_refused_total"), 0);
  EXPECT_TRUE(page.Find("stoker_job_starvation_ratio").empty());
  // No object storage: its counters are there, at zero.
  for (const char* name :
       {"stoker_storage_requests_total", "stoker_storage_retries_total",
        "stoker_storage_failed_requests_total", "stoker_storage_bytes_total",
        "stoker_prefetch_ranges_total", "stoker_cache_hits_total",
        "stoker_cache_misses_total"}) {
    EXPECT_EQ(page.Value(name), 0) << name;
    EXPECT_EQ(page.types[name], "counter") << name;
  }

  // A stream of job "resnet" whose client reports it waits a quarter of the
  // time while taking 120 images/s; a second stream is refused
  // (max_streams = 1).
  v1::StreamBatchesRequest request;
  request.mutable_plan()->set_dataset("train");
  *request.mutable_plan()->mutable_transform() =
      *image::ParseTransform("RandomResizedCrop(16)");
  request.mutable_plan()->set_batch_size(2);
  request.mutable_plan()->set_world_size(1);
  request.mutable_client_report()->set_starvation(0.25);
  request.mutable_client_report()->set_images_per_second(120);
  request.mutable_client_report()->set_valid(true);
  absl::StatusOr<std::shared_ptr<BatchStream>> stream = service_->OpenStream(
      request, [] {}, "resnet");
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_TRUE(absl::IsResourceExhausted(service_
                                            ->OpenStream(
                                                request, [] {}, "resnet")
                                            .status()));
  page = Scrape();
  EXPECT_EQ(page.Value("stoker_streams_active"), 1);
  EXPECT_EQ(page.Value("stoker_streams_opened_total"), 1);
  EXPECT_EQ(page.Value("stoker_streams_refused_total"), 1);
  EXPECT_EQ(page.types.at("stoker_job_starvation_ratio"), "gauge");
  EXPECT_EQ(
      page.Value("stoker_job_starvation_ratio", {{"training_job", "resnet"}}),
      0.25);
  EXPECT_EQ(page.Value("stoker_job_demand_images_per_second",
                       {{"training_job", "resnet"}}),
            120);

  (*stream)->Cancel();
  stream->reset();
  const absl::Time deadline = absl::Now() + kWaitLimit;
  while (service_->stats().active_streams != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  page = Scrape();
  EXPECT_EQ(page.Value("stoker_streams_active"), 0);
  EXPECT_EQ(page.Value("stoker_streams_opened_total"), 1);
}

TEST_F(MetricsTest, OtherPathsAreNotMetrics) {
  absl::StatusOr<std::string> body = HttpGet(exporter_->port(), "/nothing");
  EXPECT_FALSE(body.ok());
}

TEST_F(MetricsTest, StartOnABusyPortIsUnavailable) {
  absl::StatusOr<std::unique_ptr<MetricsExporter>> second =
      MetricsExporter::Start(absl::StrCat("127.0.0.1:", exporter_->port()),
                             service_.get());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("cannot serve metrics on"));
  // The first one still serves.
  EXPECT_EQ(Scrape().Value("stoker_worker_threads"), kWorkerThreads);
}

}  // namespace
}  // namespace stoker::server
