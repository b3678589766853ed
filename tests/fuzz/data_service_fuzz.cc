// Fuzz target for request validation in server/data_service.h: the input is
// a serialized v1::StreamBatchesRequest, as a client sends it. The service
// serves one tiny dataset ("tiny": three shards of small JPEG and PNG images,
// one sample with a corrupt image), written once per process into a
// temporary directory. Every stream that opens is polled once and cancelled,
// so an input costs at most a few sample decodes on the worker thread.
// GetDatasetInfo is asked about the request's dataset name as well.
//
// Checked, beyond "no crash, no sanitizer report", as the headers promise:
// GetDatasetInfo succeeds exactly for "tiny" and otherwise says NOT_FOUND;
// OpenStream fails only with the documented codes, and succeeds only for a
// request whose dataset (or mixture of it), fingerprint, transform, batching
// and batch size are acceptable; after Cancel, Poll returns kEnd.

#include <stdlib.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/epoch_plan.h"
#include "image/ops/transform.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/stoker.pb.h"
#include "server/batch_stream.h"
#include "server/data_service.h"
#include "server/sample_fields.h"
#include "server/dataset.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/sample_shards.h"

namespace stoker::server {
namespace {

using fuzz::FuzzCheck;

constexpr char kDataset[] = "tiny";
// Small, so that fuzzed requests reach both limits on a batch's size: the
// per-request one, and the memory budget, which is smaller still.
constexpr int64_t kMaxBatchBytes = int64_t{1} << 20;
constexpr int64_t kMaxMemoryBytes = int64_t{512} << 10;

void CheckOk(const absl::Status& status, absl::string_view what) {
  FuzzCheck(status.ok(), absl::StrCat(what, ": ", status.ToString()));
}

// The service and the directory holding its shards, for the whole process.
class Environment {
 public:
  Environment() {
    // The harness is this process's main: it decides what gets logged.
    // Fuzzed strings are often not UTF-8, which protobuf logs on every parse.
    spdlog::set_level(spdlog::level::off);
    google::protobuf::SetLogHandler(nullptr);
    const char* root = std::getenv("TEST_TMPDIR");
    if (root == nullptr) root = std::getenv("TMPDIR");
    std::string pattern = absl::StrCat(root != nullptr ? root : "/tmp",
                                       "/data_service_fuzz_XXXXXX");
    FuzzCheck(mkdtemp(pattern.data()) != nullptr, "mkdtemp");
    dir_ = pattern;

    tools::SampleShardsOptions options;
    options.dir = dir_;
    options.prefix = "tiny";
    options.num_shards = 2;
    options.samples_per_shard = 3;
    options.min_side = 8;
    options.max_side = 24;
    options.num_classes = 3;
    options.png_fraction = 0.3;
    CheckOk(tools::WriteSampleShards(options).status(), "WriteSampleShards");
    // A third shard with a sample whose image does not decode (exercises the
    // skip and fail policies) and one without a label.
    CheckOk(tools::WriteTarFile(absl::StrCat(dir_, "/tiny-bad.tar"),
                                {{"bad0.cls", "1\n"},
                                 {"bad0.jpg", "\xff\xd8\xff not a jpeg"},
                                 {"nolabel0.png", "\x89PNG"}}),
            "WriteTarFile");

    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        Dataset::Open(kDataset, absl::StrCat(dir_, "/*.tar"));
    CheckOk(dataset.status(), "Dataset::Open");
    fingerprint_ = (*dataset)->fingerprint();
    std::vector<std::unique_ptr<Dataset>> datasets;
    datasets.push_back(*std::move(dataset));

    DataServiceOptions service_options;
    service_options.worker_threads = 1;
    service_options.max_streams = 4;
    service_options.max_batch_bytes = kMaxBatchBytes;
    service_options.max_memory_bytes = kMaxMemoryBytes;
    absl::StatusOr<std::unique_ptr<DataService>> service =
        DataService::Create(service_options, std::move(datasets));
    CheckOk(service.status(), "DataService::Create");
    service_ = *std::move(service);
  }

  ~Environment() {
    service_.reset();  // joins the worker before its shards go away
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  DataService& service() { return *service_; }
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  std::string dir_;
  std::string fingerprint_;
  std::unique_ptr<DataService> service_;
};

// Whether the cheap, documented preconditions of a stream hold (the batch
// range depends on the epoch plan and is not recomputed here).
bool LooksAcceptable(const v1::StreamBatchesRequest& request,
                     const std::string& fingerprint) {
  const v1::EpochPlanSpec& plan = request.plan();
  if (plan.sources().empty()) {
    if (plan.dataset() != kDataset) return false;
    if (!request.expected_fingerprint().empty() &&
        request.expected_fingerprint() != fingerprint) {
      return false;
    }
  } else {
    // A mixture of the one dataset: named once, a finite weight > 0, the
    // fingerprint if given, no cache mode, and its own transform (if any)
    // of the plan's output size.
    if (!plan.dataset().empty() || plan.sources_size() != 1) return false;
    const v1::MixtureSource& source = plan.sources(0);
    if (source.dataset() != kDataset || !std::isfinite(source.weight()) ||
        !(source.weight() > 0) ||
        (!source.expected_fingerprint().empty() &&
         source.expected_fingerprint() != fingerprint) ||
        request.cache_mode() != v1::CACHE_MODE_NONE) {
      return false;
    }
    if (source.has_transform() &&
        image::OutputSize(source.transform()) !=
            image::OutputSize(plan.transform())) {
      return false;
    }
  }
  absl::StatusOr<std::pair<int, int>> size =
      image::OutputSize(plan.transform());
  if (!size.ok()) return false;
  if (!common::ValidateBatching(plan.batch_size(), plan.rank(),
                                plan.world_size())
           .ok()) {
    return false;
  }
  int64_t sample_bytes = int64_t{size->first} * size->second * 3;
  if (!plan.fields().empty()) {
    // Images (every view) and masks; their checks are MakeFieldLayout's.
    absl::StatusOr<image::Transform> transform =
        image::Transform::Create(plan.transform());
    if (!transform.ok()) return false;
    absl::StatusOr<FieldLayout> layout = MakeFieldLayout(
        plan.fields(),
        std::make_shared<const image::Transform>(*std::move(transform)));
    if (!layout.ok()) return false;
    sample_bytes = static_cast<int64_t>(layout->fixed_sample_bytes);
  }
  const int64_t batch_bytes = int64_t{plan.batch_size()} * sample_bytes;
  return batch_bytes <= kMaxBatchBytes && batch_bytes <= kMaxMemoryBytes;
}

void Run(const uint8_t* data, size_t size) {
  // Destroyed at exit, which stops and joins the worker first.
  static Environment environment;
  Environment* const env = &environment;
  v1::StreamBatchesRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;

  v1::GetDatasetInfoRequest info_request;
  info_request.set_dataset(request.plan().dataset());
  absl::StatusOr<v1::GetDatasetInfoResponse> info =
      env->service().GetDatasetInfo(info_request);
  if (request.plan().dataset() == kDataset) {
    FuzzCheck(info.ok() && info->sample_count() > 0 &&
                  info->fingerprint() == env->fingerprint(),
              absl::StrCat("GetDatasetInfo(tiny): ", info.status().ToString()));
  } else {
    FuzzCheck(absl::IsNotFound(info.status()),
              absl::StrCat("GetDatasetInfo of an unknown dataset: ",
                           info.status().ToString()));
  }

  absl::StatusOr<std::shared_ptr<BatchStream>> stream =
      env->service().OpenStream(request, [] {});
  if (!stream.ok()) {
    const absl::Status& s = stream.status();
    FuzzCheck(absl::IsNotFound(s) || absl::IsFailedPrecondition(s) ||
                  absl::IsInvalidArgument(s) || absl::IsResourceExhausted(s),
              absl::StrCat("OpenStream failed with an undocumented code: ",
                           s.ToString()));
    return;
  }
  FuzzCheck(
      LooksAcceptable(request, env->fingerprint()),
      absl::StrCat("OpenStream accepted {", request.ShortDebugString(), "}"));
  (*stream)->Poll();
  (*stream)->Cancel();
  FuzzCheck((*stream)->Poll().kind == BatchStream::Polled::Kind::kEnd,
            "Poll after Cancel is not kEnd");
}

}  // namespace
}  // namespace stoker::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::server::Run(data, size);
  return 0;
}
