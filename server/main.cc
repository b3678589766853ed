// stoker_server: serves WebDataset shards as decoded, transformed uint8
// batches over gRPC. See docs/user-guide.md; `--help` lists the flags.

#include <fcntl.h>
#include <signal.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/command_line.h"
#include "common/cpu_list.h"
#include "server/data_service.h"
#include "server/dataset.h"
#include "server/file_dataset.h"
#include "server/file_list.h"
#include "image/image_probe.h"
#include "image/ops/plugin.h"
#include "image/ops/python_op.h"
#include "image/video_decoder.h"
#include "server/python_ops/python_metrics.h"
#include "server/python_ops/python_workers.h"
#include "server/metrics_exporter.h"
#include "server/parent_link.h"
#include "server/server.h"
#include "server/storage/disk_cache.h"
#include "server/storage/object_store.h"
#include "server/storage/url.h"
#include "common/malloc_tuning.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int, port, 50051, "TCP port to listen on (0 picks a free port).");
ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(std::vector<std::string>, dataset, {},
          "NAME=GLOB: serve the .tar shards matching GLOB as dataset NAME. "
          "GLOB may be a local path with wildcards and brace ranges "
          "(/data/train-{000..127}.tar: every name a range gives must "
          "exist), http(s)://host/shard-{000..099}.tar or "
          "s3://bucket/prefix/*.tar. NAME=FOLDER serves an ImageFolder tree "
          "(FOLDER/<class>/<image>) and NAME=LIST.csv or LIST.jsonl a file "
          "list, as the files are. Repeat the flag for several datasets.");
ABSL_FLAG(std::string, index_cache_dir, "",
          "Where the listings of folder and list datasets are kept between "
          "runs; empty: $XDG_CACHE_HOME/stoker/index (else "
          "~/.cache/stoker/index), or the index cache of --cache_dir; "
          "'none': not kept.");
ABSL_FLAG(std::string, s3_endpoint, "",
          "http(s)://host[:port] of an S3-compatible store (MinIO, Ceph, "
          "GCS's XML API, R2), addressed path-style; empty: AWS S3.");
ABSL_FLAG(std::string, s3_region, "",
          "Region for S3 request signing; empty: AWS_REGION, "
          "AWS_DEFAULT_REGION or us-east-1.");
ABSL_FLAG(std::string, storage_ca_file, "",
          "PEM CA bundle for https:// shard URLs and S3 endpoints; empty: "
          "the system's.");
ABSL_FLAG(int, storage_max_requests, 4096,
          "Most requests to object storage in flight at once, server-wide: "
          "the ceiling of the adaptive target (measured latency x the rate "
          "the streams need, lowered while the store throttles).");
ABSL_FLAG(int, storage_initial_requests, 64,
          "Requests to object storage allowed in flight before latency and "
          "rate are measured, and the least the demand-based limit allows "
          "(for stores known to take large bursts).");
ABSL_FLAG(int, storage_event_threads, 1,
          "Event-loop threads driving the requests to object storage; one "
          "holds thousands in flight (raise it for tens of thousands of "
          "requests per second, e.g. over TLS).");
ABSL_FLAG(int, storage_attempts, 8,
          "Attempts per request to object storage (retries on 5xx, 429, "
          "resets and short bodies, with exponential back-off and jitter).");
ABSL_FLAG(int64_t, prefetch_bytes, int64_t{512} << 20,
          "Shards in object storage: the most bytes of sample data each "
          "stream holds fetched or in flight (charged to the memory "
          "budget); below it the depth follows the measured latency and "
          "the rate the stream consumes.");
ABSL_FLAG(int64_t, prefetch_merge_gap, int64_t{64} << 10,
          "Shards in object storage: samples of one shard at most this many "
          "bytes apart are read with one request (the bytes between are read "
          "and dropped); 0: one request per sample, unless they touch.");
ABSL_FLAG(std::string, cache_dir, "",
          "Keep raw sample bytes from object storage in DIR/stoker-cache-v1 "
          "(LRU, within --cache_bytes), and built shard indexes in "
          "DIR/stoker-index-v1. Only files the cache wrote are ever deleted.");
ABSL_FLAG(int64_t, cache_bytes, int64_t{10} << 30,
          "Size limit of the --cache_dir sample cache.");
ABSL_FLAG(int, threads, 0,
          "Decode/transform worker threads shared by all streams; 0 = one "
          "per core.");
ABSL_FLAG(int, max_streams, 64,
          "Concurrent StreamBatches calls; more are refused with "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_batch_bytes, int64_t{512} << 20,
          "Largest batch payload (N*H*W*3 bytes) a client may request.");
ABSL_FLAG(int, inflight_batches, 2,
          "Batches each stream assembles ahead of the network (memory per "
          "stream is about this many batches plus one).");
ABSL_FLAG(bool, dct_scaling, true,
          "Decode JPEGs at 1/2, 1/4 or 1/8 scale when the crop is shrunk by "
          "at least that much (faster; slightly different pixels).");
ABSL_FLAG(int64_t, max_image_pixels, stoker::image::kDefaultMaxImagePixels,
          "Images whose header claims more pixels are refused before "
          "decoding (reported as bad samples). Default: PIL's limit.");
ABSL_FLAG(int64_t, video_max_pixels, stoker::image::VideoLimits().max_frame_pixels,
          "Videos whose header claims larger frames are refused before "
          "decoding (bad samples). Default 4096x2160.");
ABSL_FLAG(int64_t, video_max_frames, stoker::image::VideoLimits().max_frames,
          "Videos whose header claims more frames are refused (bad "
          "samples). Default: two hours at 30 fps.");
ABSL_FLAG(double, video_max_seconds,
          stoker::image::VideoLimits().max_duration_s,
          "Videos whose header claims a longer duration are refused (bad "
          "samples).");
ABSL_FLAG(int32_t, video_max_streams, stoker::image::VideoLimits().max_streams,
          "Videos with more streams (of any kind) are refused (bad samples).");
ABSL_FLAG(int64_t, max_memory_bytes, 0,
          "Memory budget in bytes for batch buffers and decode buffers; "
          "streams wait for memory beyond it. 0 = half of the machine's or "
          "the container's (cgroup) memory, whichever is less.");
ABSL_FLAG(absl::Duration, stream_idle_timeout, absl::Minutes(2),
          "Cancel a stream whose client has taken nothing for this long "
          "(frees the memory it holds), e.g. 90s or 5m.");
ABSL_FLAG(absl::Duration, drain_grace, absl::Seconds(20),
          "On SIGTERM, how long running streams may take to finish their "
          "current batches before they are cancelled.");
ABSL_FLAG(std::vector<std::string>, plugin, {},
          "PATH.so: load the transform ops of this plugin (see "
          "docs/transforms.md, \"Plugins\") before serving. Repeat the flag "
          "for several plugins.");
ABSL_FLAG(std::vector<std::string>, python_ops, {},
          "MODULE: serve the Python transform ops this module lists in "
          "STOKER_OPS (a module name the --python interpreter can import, "
          "or a path to a .py file), run in worker processes; repeat for "
          "several modules. See docs/python_ops.md.");
ABSL_FLAG(std::string, python, "python3",
          "The interpreter that runs --python_ops (it needs numpy).");
ABSL_FLAG(int, python_workers, 0,
          "Python op worker processes; 0: one per worker thread.");
ABSL_FLAG(absl::Duration, python_op_timeout, absl::Seconds(10),
          "A Python op that runs longer than this on one sample has its "
          "worker killed and replaced; the sample is reported bad.");
ABSL_FLAG(int64_t, python_op_memory, int64_t{2} << 30,
          "Address space of each Python op worker in bytes (RLIMIT_AS; 0: "
          "no limit). An op that needs more fails its sample and its worker "
          "is replaced.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve TLS (with --tls_key). Re-read every "
          "--tls_refresh_s, so rotated files serve new connections.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: mutual TLS, clients must present a certificate it "
          "signed.");
ABSL_FLAG(int, tls_refresh_s, 60,
          "Seconds between re-reads of the TLS files.");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Bearer tokens per job and the datasets each may read (format in "
          "server/auth.h). Without it every client may read every dataset.");
ABSL_FLAG(int, health_port, -1,
          "If >= 0, a plaintext port serving only grpc.health.v1.Health, for "
          "Kubernetes' grpc probes when the main port uses TLS (0 picks a "
          "free port and logs it).");
ABSL_FLAG(double, max_memory_share_per_job, 1.0,
          "With --auth_tokens_file: share of --max_memory_bytes one job's "
          "batches may hold at once, in (0, 1] (1: no per-job cap).");
ABSL_FLAG(int, max_streams_per_job, 0,
          "With --auth_tokens_file: streams one job may hold open at once "
          "(0: no per-job limit).");
ABSL_FLAG(int, metrics_port, -1,
          "If >= 0, serve Prometheus metrics at http://HOST:PORT/metrics "
          "(0 picks a free port and logs it).");
ABSL_FLAG(int64_t, raw_cache_bytes, 0,
          "Memory for raw sample bytes kept by cache_mode=CACHED_RAW requests "
          "(stoker.diagnose); 0 = a quarter of the memory budget.");
ABSL_FLAG(std::string, port_file, "",
          "If set, written atomically (temporary file + rename) once every "
          "port listens: lines port=P, and health_port=H and metrics_port=M "
          "when those ports are on. For launchers that start the server on "
          "port 0: wait for the file instead of reading the log.");
ABSL_FLAG(std::string, cpus, "",
          "If set, a CPU list such as 0-3,6: the server runs only on those "
          "CPUs (sched_setaffinity), and --threads=0 means one worker per "
          "CPU in it.");
ABSL_FLAG(std::string, unix_socket, "",
          "Also serve on this Unix domain socket, in plaintext (its file "
          "permissions guard it; tokens still apply), for clients on this "
          "host such as a sidecar's: --servers=unix:PATH. A stale socket "
          "file is replaced; the file is removed at shutdown.");
ABSL_FLAG(bool, shared_memory, false,
          "Assemble batches straight into the shared memory of clients on "
          "this host that offer it (same user, same PID namespace), so only "
          "their descriptions travel through the socket. Local servers "
          "(client/local_servers.h) have it on.");
ABSL_FLAG(int, control_fd, -1,
          "For a parent that starts the server as its local server "
          "(client/local_servers.h): an inherited socket. The port lines of "
          "--port_file are written to it once every port listens, and the "
          "server exits at once when it is closed (the parent is gone).");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off.");

namespace {

using stoker::server::DataService;
using stoker::server::DataServiceOptions;
using stoker::server::PythonWorkers;
using stoker::server::Dataset;
using stoker::server::ServerOptions;
using stoker::server::StokerServer;

// absl keeps only the last value of a repeated flag; --dataset and --plugin
// may be given many times, so their occurrences are taken out of argv first.
std::vector<std::string> ExtractRepeated(const char* name, int* argc,
                                         char** argv) {
  const std::string eq = absl::StrCat("--", name, "=");
  const std::string bare = absl::StrCat("--", name);
  std::vector<std::string> values;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string arg = argv[i];
    if (absl::StartsWith(arg, eq)) {
      values.push_back(arg.substr(eq.size()));
    } else if (arg == bare && i + 1 < *argc) {
      values.push_back(argv[++i]);
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return values;
}

// Bytes of memory this process may use: the machine's, or less where a
// cgroup (v2 memory.max or v1 memory.limit_in_bytes) limits the container.
int64_t AvailableMemoryBytes() {
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
                  static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    int64_t limit = 0;
    if (in >> limit && limit > 0) bytes = std::min(bytes, limit);  // "max" fails
  }
  return bytes;
}

struct Config {
  absl::Duration drain_grace;
  ServerOptions server;
  DataServiceOptions service;
  std::vector<std::pair<std::string, std::string>> datasets;  // name, glob
  spdlog::level::level_enum log_level;
  stoker::storage::StorageOptions storage;
  bool any_remote = false;
};

// --port, --host, --health_port and TLS.
absl::Status ReadListening(Config* config) {
  const int port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535], got ", port));
  }
  config->server.listen_address =
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", port);
  config->server.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  config->server.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  config->server.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  config->server.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  config->server.tls.refresh_seconds = absl::GetFlag(FLAGS_tls_refresh_s);
  if (const int health_port = absl::GetFlag(FLAGS_health_port);
      health_port >= 0) {
    if (health_port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--health_port must be in [0, 65535], got ", health_port));
    }
    config->server.health_address =
        absl::StrCat(absl::GetFlag(FLAGS_host), ":", health_port);
  }
  if (absl::GetFlag(FLAGS_metrics_port) > 65535) {
    return absl::InvalidArgumentError("--metrics_port must be <= 65535");
  }
  return absl::OkStatus();
}

// Tokens and the per-job limits that need them.
absl::Status ReadJobs(Config* config) {
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens_file);
      !path.empty()) {
    absl::StatusOr<std::shared_ptr<const stoker::server::TokenAuthorizer>>
        auth = stoker::server::TokenAuthorizer::Load(path);
    if (!auth.ok()) return auth.status();
    config->server.grpc.auth = *std::move(auth);
  }
  config->server.grpc.max_streams_per_job =
      absl::GetFlag(FLAGS_max_streams_per_job);
  const double share = absl::GetFlag(FLAGS_max_memory_share_per_job);
  if (!(share > 0 && share <= 1) ||
      (share < 1 && config->server.grpc.auth == nullptr)) {
    return absl::InvalidArgumentError(
        "--max_memory_share_per_job must be in (0, 1] and, below 1, needs "
        "--auth_tokens_file (jobs are known by their tokens)");
  }
  config->service.max_memory_share_per_job = share;
  if (config->server.grpc.max_streams_per_job < 0 ||
      (config->server.grpc.max_streams_per_job > 0 &&
       config->server.grpc.auth == nullptr)) {
    return absl::InvalidArgumentError(
        "--max_streams_per_job must be >= 0 and needs --auth_tokens_file "
        "(jobs are known by their tokens)");
  }
  return absl::OkStatus();
}

// --dataset=NAME=GLOB (at least one).
absl::Status ReadDatasets(const std::vector<std::string>& datasets,
                          Config* config) {
  if (datasets.empty()) {
    return absl::InvalidArgumentError(
        "give at least one --dataset=NAME=GLOB, e.g. "
        "--dataset=imagenet='/data/train-*.tar'");
  }
  for (const std::string& d : datasets) {
    size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == d.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--dataset must be NAME=GLOB, got '", d, "'"));
    }
    config->datasets.emplace_back(d.substr(0, eq), d.substr(eq + 1));
  }
  for (const auto& [name, glob] : config->datasets) {
    // A file list may name objects in storage.
    config->any_remote =
        config->any_remote ||
        stoker::storage::SchemeOf(glob) != stoker::storage::Scheme::kLocal ||
        stoker::server::IsFileListPath(glob);
  }
  return absl::OkStatus();
}

// Threads reading and writing the --cache_dir sample cache.
constexpr int kDiskCacheThreads = 4;

// Object storage, prefetching and the sample cache.
absl::Status ReadStorage(Config* config) {
  config->storage.s3_endpoint = absl::GetFlag(FLAGS_s3_endpoint);
  config->storage.s3_region = absl::GetFlag(FLAGS_s3_region);
  config->storage.http.ca_file = absl::GetFlag(FLAGS_storage_ca_file);
  config->storage.http.max_concurrent_requests =
      absl::GetFlag(FLAGS_storage_max_requests);
  config->storage.http.max_attempts = absl::GetFlag(FLAGS_storage_attempts);
  config->storage.http.event_threads =
      absl::GetFlag(FLAGS_storage_event_threads);
  config->storage.http.concurrency.initial =
      absl::GetFlag(FLAGS_storage_initial_requests);
  if (config->storage.http.concurrency.initial < 1) {
    return absl::InvalidArgumentError(
        "--storage_initial_requests must be >= 1");
  }
  if (config->storage.http.max_concurrent_requests < 1 ||
      config->storage.http.max_attempts < 1 ||
      config->storage.http.event_threads < 1) {
    return absl::InvalidArgumentError(
        "--storage_max_requests, --storage_attempts and "
        "--storage_event_threads must be >= 1");
  }
  if (config->storage.http.max_concurrent_requests <
      config->storage.http.event_threads) {
    return absl::InvalidArgumentError(
        "--storage_max_requests must be at least --storage_event_threads");
  }
  // Requests are asynchronous; the I/O threads only read and write the disk
  // cache of sample bytes.
  config->service.io_threads = kDiskCacheThreads;
  config->service.stream.prefetch_bytes = absl::GetFlag(FLAGS_prefetch_bytes);
  if (config->service.stream.prefetch_bytes < 0) {
    return absl::InvalidArgumentError("--prefetch_bytes must be >= 0");
  }
  config->service.stream.prefetch.merge_gap =
      absl::GetFlag(FLAGS_prefetch_merge_gap);
  if (config->service.stream.prefetch.merge_gap < 0) {
    return absl::InvalidArgumentError("--prefetch_merge_gap must be >= 0");
  }
  if (config->service.stream.prefetch_bytes == 0) {
    config->service.io_threads = 0;
  }
  if (absl::GetFlag(FLAGS_cache_bytes) < 1) {
    return absl::InvalidArgumentError("--cache_bytes must be >= 1");
  }
  return absl::OkStatus();
}

// Workers, streams, batches and memory.
absl::Status ReadCapacity(Config* config) {
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) {
    return absl::InvalidArgumentError("--threads must be >= 0");
  }
  if (threads == 0) {
    // The CPUs this process may use (after --cpus, or taskset's).
    absl::StatusOr<std::vector<int>> cpus = stoker::common::AllowedCpus();
    threads = cpus.ok() ? std::max<int>(1, static_cast<int>(cpus->size()))
                        : std::max(1u, std::thread::hardware_concurrency());
  }
  config->service.worker_threads = threads;
  config->service.max_streams = absl::GetFlag(FLAGS_max_streams);
  if (config->service.max_streams < 1) {
    return absl::InvalidArgumentError("--max_streams must be >= 1");
  }
  config->service.max_batch_bytes = absl::GetFlag(FLAGS_max_batch_bytes);
  if (config->service.max_batch_bytes < 1) {
    return absl::InvalidArgumentError("--max_batch_bytes must be >= 1");
  }
  config->service.stream.max_inflight_batches =
      absl::GetFlag(FLAGS_inflight_batches);
  if (config->service.stream.max_inflight_batches < 1) {
    return absl::InvalidArgumentError("--inflight_batches must be >= 1");
  }
  const int64_t memory = absl::GetFlag(FLAGS_max_memory_bytes);
  if (memory < 0) {
    return absl::InvalidArgumentError("--max_memory_bytes must be >= 0");
  }
  config->service.max_memory_bytes =
      memory > 0 ? memory : AvailableMemoryBytes() / 2;
  config->service.raw_cache_bytes = absl::GetFlag(FLAGS_raw_cache_bytes);
  if (config->service.raw_cache_bytes < 0) {
    return absl::InvalidArgumentError("--raw_cache_bytes must be >= 0");
  }
  return absl::OkStatus();
}

// Timeouts, decoding and logging.
absl::Status ReadBehaviour(Config* config) {
  config->server.grpc.stream_idle_timeout =
      absl::GetFlag(FLAGS_stream_idle_timeout);
  if (config->server.grpc.stream_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stream_idle_timeout must be > 0");
  }
  config->drain_grace = absl::GetFlag(FLAGS_drain_grace);
  if (config->drain_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--drain_grace must be >= 0");
  }
  config->service.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  config->service.processor.dct_scaling = absl::GetFlag(FLAGS_dct_scaling);
  // Video fields decode untrusted bytes (image/video_decoder.h).
  stoker::image::ConfigureFfmpeg();
  config->service.processor.max_image_pixels =
      absl::GetFlag(FLAGS_max_image_pixels);
  if (config->service.processor.max_image_pixels < 1) {
    return absl::InvalidArgumentError("--max_image_pixels must be >= 1");
  }
  stoker::image::VideoLimits& video = config->service.video;
  video.max_frame_pixels = absl::GetFlag(FLAGS_video_max_pixels);
  video.max_frames = absl::GetFlag(FLAGS_video_max_frames);
  video.max_duration_s = absl::GetFlag(FLAGS_video_max_seconds);
  video.max_streams = absl::GetFlag(FLAGS_video_max_streams);
  if (video.max_frame_pixels < 1 || video.max_frames < 1 ||
      !(video.max_duration_s > 0) || video.max_streams < 1) {
    return absl::InvalidArgumentError(
        "--video_max_pixels, --video_max_frames, --video_max_seconds and "
        "--video_max_streams must be positive");
  }
  const std::string level = absl::GetFlag(FLAGS_log_level);
  config->log_level = spdlog::level::from_str(level);
  if (config->log_level == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log_level must be trace, debug, info, warn, error or off, got '",
        level, "'"));
  }
  return absl::OkStatus();
}

// Every flag, validated once; the first bad flag is the one reported.
absl::StatusOr<Config> ReadConfig(const std::vector<std::string>& datasets) {
  Config config;
  absl::Status status = ReadListening(&config);
  if (status.ok()) status = ReadJobs(&config);
  if (status.ok()) status = ReadDatasets(datasets, &config);
  if (status.ok()) status = ReadStorage(&config);
  if (status.ok()) status = ReadCapacity(&config);
  if (status.ok()) status = ReadBehaviour(&config);
  if (!status.ok()) return status;
  return config;
}

// Prints a start-up error the user can fix (a flag) and returns exit 2.
int BadFlag(absl::string_view prefix, const absl::Status& status) {
  std::fprintf(stderr, "stoker_server: %s%s\n", std::string(prefix).c_str(),
               std::string(status.message()).c_str());
  return 2;
}

// Starts the --python_ops workers and registers their ops (null without
// modules).
absl::StatusOr<std::shared_ptr<PythonWorkers>> StartPythonOps(
    const std::vector<std::string>& modules, int worker_threads,
    std::shared_ptr<stoker::server::MemoryBudget> budget) {
  if (modules.empty()) return nullptr;
  stoker::server::PythonWorkersOptions options;
  options.modules = modules;
  options.python = absl::GetFlag(FLAGS_python);
  const int workers = absl::GetFlag(FLAGS_python_workers);
  if (workers < 0) {
    return absl::InvalidArgumentError("--python_workers must be >= 0");
  }
  options.workers = workers > 0 ? workers : worker_threads;
  options.op_timeout = absl::GetFlag(FLAGS_python_op_timeout);
  if (options.op_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--python_op_timeout must be positive");
  }
  options.memory_limit_bytes = absl::GetFlag(FLAGS_python_op_memory);
  if (options.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError("--python_op_memory must be >= 0");
  }
  absl::StatusOr<std::shared_ptr<PythonWorkers>> started =
      PythonWorkers::Start(options, std::move(budget));
  if (!started.ok()) return started.status();
  if (absl::Status s = stoker::image::RegisterPythonOps((*started)->ops(),
                                                        *started);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--python_ops: ", s.message()));
  }
  std::vector<std::string> names;
  for (const stoker::image::PythonOpSpec& op : (*started)->ops()) {
    names.push_back(op.usage.empty() ? op.name : op.usage);
  }
  spdlog::info("python ops from {} in {} workers ({}): {}",
               absl::StrJoin(modules, ", "), options.workers, options.python,
               absl::StrJoin(names, ", "));
  return started;
}

// Loads the --plugin libraries (before any request can name their ops;
// after the signal mask, which threads a plugin starts inherit).
absl::Status LoadPlugins(const std::vector<std::string>& plugins) {
  for (const std::string& path : plugins) {
    absl::StatusOr<stoker::image::LoadedPlugin> plugin =
        stoker::image::LoadPlugin(path);
    if (!plugin.ok()) return plugin.status();
    spdlog::info("plugin {} from {}: ops {}", plugin->name, plugin->path,
                 absl::StrJoin(plugin->ops, ", "));
  }
  return absl::OkStatus();
}

// Object storage and its caches, when a dataset is there.
struct Storage {
  std::unique_ptr<stoker::storage::ObjectStore> store;
  std::unique_ptr<stoker::storage::DiskCache> disk_cache;
  stoker::server::DatasetOptions dataset_options;
};

// --cache_dir: the sample cache, and the index cache beside it.
absl::Status OpenCaches(const std::string& dir, Storage* storage) {
  absl::StatusOr<std::unique_ptr<stoker::storage::DiskCache>> cache =
      stoker::storage::DiskCache::Open(dir, absl::GetFlag(FLAGS_cache_bytes));
  if (!cache.ok()) return cache.status();
  storage->disk_cache = *std::move(cache);
  const stoker::storage::DiskCacheStats kept = storage->disk_cache->stats();
  spdlog::info("sample cache {}: {} entries, {} bytes kept from before",
               storage->disk_cache->directory(), kept.entries, kept.bytes);
  const std::string index_dir = dir + "/stoker-index-v1";
  if (::mkdir(index_dir.c_str(), 0755) == 0 || errno == EEXIST) {
    storage->dataset_options.index.index_cache_dir = index_dir;
    storage->dataset_options.index.temp_dir = index_dir;
  } else {
    spdlog::warn("no index cache: cannot create {}: {}", index_dir,
                 std::strerror(errno));
  }
  return absl::OkStatus();
}

// --index_cache_dir, made if needed, when a dataset is a folder or list;
// empty for none.
std::string IndexCacheDir(const std::string& flag, const Config& config) {
  bool files = false;
  for (const auto& [name, glob] : config.datasets) {
    files = files || stoker::server::IsFileDatasetSpec(glob);
  }
  if (!files || flag == "none") return "";
  std::string dir = flag;
  if (dir.empty()) {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (xdg != nullptr && *xdg != '\0') {
      dir = absl::StrCat(xdg, "/stoker/index");
    } else if (home != nullptr && *home != '\0') {
      dir = absl::StrCat(home, "/.cache/stoker/index");
    } else {
      return "";
    }
  }
  if (absl::Status made = stoker::common::MakeDirectories(dir); !made.ok()) {
    spdlog::warn("no index cache: {}", std::string(made.message()));
    return "";
  }
  return dir;
}

// Opens every --dataset; the first that cannot be opened is the error.
absl::StatusOr<std::vector<std::unique_ptr<Dataset>>> OpenDatasets(
    const Config& config, const stoker::server::DatasetOptions& options) {
  std::vector<std::unique_ptr<Dataset>> opened;
  for (const auto& [name, glob] : config.datasets) {
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        Dataset::Open(name, glob, options);
    if (!dataset.ok()) return dataset.status();
    spdlog::info("dataset {}: {} samples in {} shards, {} bytes, fingerprint {}",
                 name, (*dataset)->sample_count(), (*dataset)->shard_count(),
                 (*dataset)->total_bytes(), (*dataset)->fingerprint());
    opened.push_back(*std::move(dataset));
  }
  return opened;
}

// --port_file: the ports, written once every one of them listens.
std::string PortLines(const StokerServer& server,
                      const stoker::server::MetricsExporter* metrics) {
  std::string ports = absl::StrCat("port=", server.port(), "\n");
  if (server.health_port() != 0) {
    absl::StrAppend(&ports, "health_port=", server.health_port(), "\n");
  }
  if (metrics != nullptr) {
    absl::StrAppend(&ports, "metrics_port=", metrics->port(), "\n");
  }
  return ports;
}

// Serves until the server stops. SIGTERM/SIGINT drain (a second one stops
// at once); SIGHUP is logged and ignored: there is no configuration to
// reload. `signals` are blocked in every thread; SIGUSR2 ends the signal
// thread.
void ServeUntilStopped(StokerServer* server, const sigset_t& signals,
                       absl::Duration grace) {
  std::thread drain_thread;
  std::thread signal_thread([&signals, &drain_thread, server, grace] {
    while (true) {
      int sig = 0;
      sigwait(&signals, &sig);
      if (sig == SIGUSR2) return;
      if (sig == SIGHUP) {
        spdlog::info("SIGHUP ignored: stoker_server reloads nothing; restart "
                     "it to re-index changed shards");
        continue;
      }
      if (!drain_thread.joinable()) {
        spdlog::info("signal {}: draining (up to {}), then stopping", sig,
                     absl::FormatDuration(grace));
        drain_thread = std::thread([server, grace] { server->Drain(grace); });
        continue;
      }
      spdlog::info("signal {} while draining: stopping now", sig);
      server->Shutdown();
    }
  });
  server->Wait();
  pthread_kill(signal_thread.native_handle(), SIGUSR2);
  signal_thread.join();
  if (drain_thread.joinable()) drain_thread.join();
}

void LogStopped(const StokerServer& server, bool object_storage) {
  auto stats = server.service()->stats();
  spdlog::info("stopped: {} streams served, {} refused, {} samples skipped",
               stats.streams_opened, stats.streams_refused,
               stats.skipped_samples);
  if (object_storage) {
    const stoker::v1::StorageStats s = server.service()->storage_stats();
    int64_t answered = 0;
    for (const int64_t count : s.latency_bucket_counts()) answered += count;
    spdlog::info("object storage: {} requests ({} retries, {} failed, {} "
                 "throttled) on {} connections, {} bytes, {:.1f} ms mean "
                 "latency; prefetched {} ranges, {} bytes; cache {} hits, {} "
                 "misses",
                 s.requests(), s.retries(), s.failed_requests(),
                 s.throttled_requests(), s.connections(), s.bytes(),
                 answered > 0 ? 1e3 * s.latency_sum_seconds() /
                                    static_cast<double>(answered)
                              : 0.0,
                 s.prefetch_ranges(), s.prefetch_bytes(), s.cache_hits(),
                 s.cache_misses());
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Until the datasets are open (see below): buffers of 128 KB and more
  // (sidecars, a shard's packed records) are mapped and unmapped whole,
  // so none of them stays behind in the indexing threads' malloc arenas.
  ::mallopt(M_MMAP_THRESHOLD, 128 << 10);
  stoker::common::SetUsage(
      "Serves WebDataset .tar shards as decoded, augmented uint8 batches.\n"
      "Example: stoker_server --port=50051 --dataset=train='/data/train-*.tar'");
  std::vector<std::string> datasets = ExtractRepeated("dataset", &argc, argv);
  std::vector<std::string> plugins = ExtractRepeated("plugin", &argc, argv);
  std::vector<std::string> python_ops =
      ExtractRepeated("python_ops", &argc, argv);
  absl::ParseCommandLine(argc, argv);
  for (const std::string& d : absl::GetFlag(FLAGS_dataset)) {
    datasets.push_back(d);
  }
  for (const std::string& p : absl::GetFlag(FLAGS_plugin)) {
    plugins.push_back(p);
  }
  for (const std::string& m : absl::GetFlag(FLAGS_python_ops)) {
    python_ops.push_back(m);
  }
  if (const std::string cpus = absl::GetFlag(FLAGS_cpus); !cpus.empty()) {
    absl::StatusOr<std::vector<int>> list = stoker::common::ParseCpuList(cpus);
    absl::Status pinned =
        list.ok() ? stoker::common::PinProcess(*list) : list.status();
    if (!pinned.ok()) return BadFlag("--cpus: ", pinned);
  }
  const int control_fd = absl::GetFlag(FLAGS_control_fd);
  if (control_fd >= 0 && fcntl(control_fd, F_GETFD) < 0) {
    return BadFlag("", absl::InvalidArgumentError(absl::StrCat(
                           "--control_fd=", control_fd,
                           " is not an open file descriptor")));
  }
  absl::StatusOr<Config> config = ReadConfig(datasets);
  if (!config.ok()) return BadFlag("", config.status());
  spdlog::set_level(config->log_level);

  // Signals are taken by a dedicated thread; block them everywhere else
  // (before any other thread starts). SIGUSR2 only tells that thread to end.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR2}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // After the mask, so that its thread never takes SIGTERM (which would end
  // the process without draining).
  if (control_fd >= 0) stoker::server::ExitWhenParentCloses(control_fd);

  // Datasets keep every shard open; large ones need more than the usual
  // soft limit of 1024 descriptors.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }

  if (absl::Status s = LoadPlugins(plugins); !s.ok()) {
    return BadFlag("--plugin: ", s);
  }
  Storage storage;
  if (config->any_remote) {
    absl::StatusOr<std::unique_ptr<stoker::storage::ObjectStore>> created =
        stoker::storage::ObjectStore::Create(config->storage);
    if (!created.ok()) return BadFlag("", created.status());
    storage.store = *std::move(created);
    storage.dataset_options.store = storage.store.get();
    if (const std::string dir = absl::GetFlag(FLAGS_cache_dir); !dir.empty()) {
      if (absl::Status s = OpenCaches(dir, &storage); !s.ok()) {
        return BadFlag("--cache_dir: ", s);
      }
    }
    config->service.store = storage.store.get();
    config->service.disk_cache = storage.disk_cache.get();
  }

  if (storage.dataset_options.index.index_cache_dir.empty()) {
    storage.dataset_options.index.index_cache_dir =
        IndexCacheDir(absl::GetFlag(FLAGS_index_cache_dir), *config);
  }
  absl::StatusOr<std::vector<std::unique_ptr<Dataset>>> opened =
      OpenDatasets(*config, storage.dataset_options);
  if (!opened.ok()) {
    spdlog::error("{}", opened.status().ToString());
    return 1;
  }
  // Tuned for batches only now: indexing held the sidecars and packed
  // records of a chunk of shards at once (in the indexing threads' malloc
  // arenas), and the tuned allocator would keep up to 256 MB of that freed
  // memory. glibc's defaults give most of it back; hand back the rest.
  ::malloc_trim(0);
  stoker::common::TuneMallocForLargeBuffers();
  absl::StatusOr<std::unique_ptr<DataService>> service =
      DataService::Create(config->service, *std::move(opened));
  if (!service.ok()) {
    spdlog::error("{}", service.status().ToString());
    return 1;
  }
  absl::StatusOr<std::shared_ptr<PythonWorkers>> python_workers =
      StartPythonOps(python_ops, config->service.worker_threads,
                     (*service)->budget());
  if (!python_workers.ok()) return BadFlag("", python_workers.status());
  absl::StatusOr<std::unique_ptr<StokerServer>> server =
      StokerServer::Start(config->server, *std::move(service));
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    // Bad TLS flags are the user's to fix, like any other bad flag.
    return absl::IsInvalidArgument(server.status()) ? 2 : 1;
  }
  std::unique_ptr<stoker::server::MetricsExporter> metrics;
  if (const int port = absl::GetFlag(FLAGS_metrics_port); port >= 0) {
    absl::StatusOr<std::unique_ptr<stoker::server::MetricsExporter>> started =
        stoker::server::MetricsExporter::Start(
            absl::StrCat(absl::GetFlag(FLAGS_host), ":", port),
            (*server)->service());
    if (!started.ok()) {
      spdlog::error("{}", started.status().ToString());
      return 1;
    }
    metrics = *std::move(started);
    if (*python_workers != nullptr) {
      metrics->Add(stoker::server::PythonOpsCollector(*python_workers));
    }
    spdlog::info("metrics on port {} (/metrics)", metrics->port());
  }
  if ((*server)->health_port() != 0) {
    spdlog::info("health checks (plaintext) on port {}",
                 (*server)->health_port());
  }
  const std::string ports = PortLines(**server, metrics.get());
  if (const std::string port_file = absl::GetFlag(FLAGS_port_file);
      !port_file.empty()) {
    if (absl::Status s =
            stoker::common::WriteFileAtomically(port_file, ports);
        !s.ok()) {
      spdlog::error("--port_file: {}", s.ToString());
      (*server)->Shutdown();
      (*server)->Wait();
      return 2;
    }
  }
  if (control_fd >= 0) {
    if (absl::Status s = stoker::server::SendToParent(control_fd, ports);
        !s.ok()) {
      spdlog::error("{}", s.ToString());
      (*server)->Shutdown();
      (*server)->Wait();
      return 2;
    }
  }
  spdlog::info("stoker_server listening on port {} with {} worker threads, "
               "memory budget {} MiB",
               (*server)->port(), config->service.worker_threads,
               config->service.max_memory_bytes >> 20);
  ServeUntilStopped(server->get(), signals, config->drain_grace);
  LogStopped(**server, storage.store != nullptr);
  if (*python_workers != nullptr) {
    (*python_workers)->Stop();
    const PythonWorkers::Stats s = (*python_workers)->stats();
    spdlog::info("python ops: {} calls, {} raised, {} crashed, {} timed out, "
                 "{} over the memory limit; {} workers started",
                 s.calls, s.failed, s.crashed, s.timed_out, s.out_of_memory,
                 s.started);
  }
  return 0;
}
