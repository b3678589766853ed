// stoker_fetch: streams epochs from Stoker servers and reports throughput.
// See docs/user-guide.md; `--help` lists the flags.

#include <sys/stat.h>

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/checksum.h"
#include "client/cursor.h"
#include "client/field_spec.h"
#include "client/loader.h"
#include "client/local_servers.h"
#include "common/cpu_list.h"
#include "client/server_list.h"
#include "common/command_line.h"
#include "image/ops/transform.h"
#include "common/malloc_tuning.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, servers, "",
          "Comma-separated host:port, dns:///name:port and/or local (servers "
          "started on this host; see --local_shards). Default: local when "
          "--local_shards is set.");
ABSL_FLAG(std::string, local_shards, "",
          "The shards local servers serve as --dataset: a path pattern such "
          "as '/data/train-*.tar', a brace range or an http(s):// or s3:// "
          "URL.");
ABSL_FLAG(int, local_cores, 0,
          "CPUs for local servers: the N highest-numbered this process may "
          "use; 0 = the machine's CPUs this process is not pinned to, or, "
          "if it is not pinned, all but one.");
ABSL_FLAG(std::string, local_cpus, "",
          "CPUs for local servers as a list such as 2-5 (any the cgroup "
          "allows, also outside this process's affinity); overrides "
          "--local_cores.");
ABSL_FLAG(int, local_servers, 1,
          "Local server processes sharing those CPUs.");
ABSL_FLAG(std::vector<std::string>, local_server_flags, {},
          "More stoker_server flags for local servers, comma-separated, e.g. "
          "--local_server_flags=--s3_endpoint=http://minio:9000.");
ABSL_FLAG(bool, shared_memory, true,
          "Offer servers on this host shared memory for the batches (no "
          "socket copy); see LoaderOptions::shared_memory.");
ABSL_FLAG(std::string, server_binary, "",
          "The stoker_server program for local servers; default "
          "$STOKER_SERVER, next to this program, or on PATH.");
ABSL_FLAG(std::string, dataset, "", "Dataset name on the servers.");
ABSL_FLAG(std::string, mixture, "",
          "Instead of --dataset, a weighted mixture of the servers' "
          "datasets: NAME:WEIGHT,NAME:WEIGHT,... (e.g. web:0.7,books:0.2,"
          "code:0.1; weights are relative). --keys_out then writes "
          "'<epoch> <dataset>/<key>'.");
ABSL_FLAG(std::string, mixture_mode, "cycle",
          "cycle: a source that runs out starts its next epoch, reshuffled, "
          "and an epoch is --mixture_epoch_samples samples; first_exhausted: "
          "an epoch ends just before its first exhausted source repeats.");
ABSL_FLAG(std::string, mixture_unit, "sample",
          "What draws a source: each sample, or each global batch (batch: "
          "every rank's batch of a step from one source).");
ABSL_FLAG(int64_t, mixture_epoch_samples, 0,
          "cycle mode: samples per epoch (0: the sources' total).");
ABSL_FLAG(int, batch_size, 256, "Samples per batch.");
ABSL_FLAG(int, epochs, 1, "Epochs to stream.");
ABSL_FLAG(int64_t, start_epoch, 0, "First epoch number.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the shuffle and augmentations.");
ABSL_FLAG(std::string, transform,
          "RandomResizedCrop(224)|RandomHorizontalFlip()",
          "Transform pipeline, steps separated by '|'.");
ABSL_FLAG(bool, shuffle, true, "Shuffle the sample order every epoch.");
ABSL_FLAG(std::string, cache_mode, "none",
          "For diagnosis: none, replay (servers resend each range's first "
          "batch: measures the network and this client) or cached_raw "
          "(servers keep raw sample bytes in memory: measures decode and "
          "transform without storage).");
ABSL_FLAG(int64_t, shuffle_window, 0,
          "With --shuffle: 0 shuffles the whole dataset; N > 0 shuffles the "
          "shards, then the samples within windows of N (shuffle=blocks, "
          "mostly sequential reads for shards in object storage).");
ABSL_FLAG(bool, drop_last, false, "Drop each epoch's last partial batch.");
ABSL_FLAG(int, rank, 0, "This process's rank, 0 <= rank < world_size.");
ABSL_FLAG(int, world_size, 1, "Number of ranks sharing each epoch.");
ABSL_FLAG(int, prefetch, 8, "Batches fetched ahead of the consumer.");
ABSL_FLAG(int, batches_per_request, 4, "Batches per server request.");
ABSL_FLAG(int, streams_per_server, 2, "Concurrent streams per server.");
ABSL_FLAG(bool, in_order, true,
          "Deliver batches in index order (false: as they arrive).");
ABSL_FLAG(bool, fail_on_bad_sample, false,
          "Fail on a corrupt or unlabeled sample instead of skipping it.");
ABSL_FLAG(double, stall_timeout_s, 10,
          "Seconds without data before a server's stream is reissued.");
ABSL_FLAG(double, unavailable_deadline_s, 30,
          "Seconds with every server failing before giving up.");
ABSL_FLAG(double, resolve_interval_s, 5,
          "Seconds between lookups of dns:/// names (servers join and "
          "leave with their records).");
ABSL_FLAG(std::string, fields, "",
          "The sample's outputs, e.g. 'image=jpg;png:image, "
          "mask=seg.png:mask, caption=txt:text, label=cls:class' (see "
          "client/field_spec.h). Empty: image and .cls label.");
ABSL_FLAG(std::string, fields_out, "",
          "With --fields: write every delivered sample's fields to this "
          "directory as <epoch>/<key>.<field> (image and masks as PPM/PGM/"
          "PAM, class values as text, bytes as received; '/' in keys becomes "
          "'_').");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that signed the servers' certificates: connect with "
          "TLS (default plaintext).");
ABSL_FLAG(std::string, tls_cert, "",
          "Mutual TLS: this client's PEM certificate chain (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS: the PEM key of --tls_cert.");
ABSL_FLAG(std::string, token_file, "",
          "File holding this job's bearer token, for servers with "
          "--auth_tokens_file (default: the STOKER_TOKEN environment "
          "variable, if set).");
ABSL_FLAG(std::string, keys_out, "",
          "If set, writes '<epoch> <key>' per delivered sample to this file "
          "(flushed after every batch).");
ABSL_FLAG(int64_t, stop_after_batches, 0,
          "If > 0, stops after this many batches and prints the resume "
          "cursor as the last line.");
ABSL_FLAG(std::string, resume_from, "",
          "A cursor printed by --stop_after_batches: continue from there. "
          "Another rank's cursor, or one from a job of another world size or "
          "batch size, continues that epoch elastically; several cursors "
          "separated by spaces (every rank's of one job) continue exactly "
          "even when its ranks stopped at different batches.");
ABSL_FLAG(bool, checksum, false,
          "Print checksum=<hex> over delivered pixels, labels and sample "
          "indices (delivery order) before the summary.");
ABSL_FLAG(double, step_ms, 0,
          "Simulated training step: wait this long after each batch.");
ABSL_FLAG(std::string, log_level, "warn",
          "trace, debug, info, warn, error or off.");

namespace {

using stoker::client::Checksum;
using stoker::client::Cursor;
using stoker::client::HostBatch;
using stoker::client::Loader;
using stoker::client::LoaderOptions;

// --servers and the local servers' flags.
absl::Status ReadServers(LoaderOptions* options) {
  std::string server_list = absl::GetFlag(FLAGS_servers);
  options->local.shards = absl::GetFlag(FLAGS_local_shards);
  if (server_list.empty() && !options->local.shards.empty()) {
    server_list = "local";
  }
  const std::string cpu_list = absl::GetFlag(FLAGS_local_cpus);
  absl::StatusOr<std::vector<int>> cpus =
      cpu_list.empty()
          ? stoker::client::ChooseLocalCpus(absl::GetFlag(FLAGS_local_cores))
          : stoker::common::ParseCpuList(cpu_list);
  if (!cpus.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(cpu_list.empty() ? "--local_cores: " : "--local_cpus: ",
                     cpus.status().message()));
  }
  options->local.cpus = *std::move(cpus);
  options->local.count = absl::GetFlag(FLAGS_local_servers);
  options->local.binary = absl::GetFlag(FLAGS_server_binary);
  options->local.flags = absl::GetFlag(FLAGS_local_server_flags);
  options->shared_memory = absl::GetFlag(FLAGS_shared_memory);
  absl::StatusOr<std::vector<stoker::client::ServerSpec>> servers =
      stoker::client::ParseServerList(server_list);
  if (!servers.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--servers: ", servers.status().message()));
  }
  options->servers = *std::move(servers);
  return absl::OkStatus();
}

// --mixture and its mode flags.
absl::Status ReadMixture(LoaderOptions* options) {
  for (absl::string_view item :
       absl::StrSplit(absl::GetFlag(FLAGS_mixture), ',', absl::SkipEmpty())) {
    const size_t colon = item.rfind(':');
    double weight = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtod(item.substr(colon + 1), &weight)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mixture: '", item, "' is not NAME:WEIGHT"));
    }
    stoker::v1::MixtureSource& source = options->mixture.emplace_back();
    source.set_dataset(std::string(item.substr(0, colon)));
    source.set_weight(weight);
  }
  absl::StatusOr<stoker::v1::MixtureMode> mode =
      stoker::client::ParseMixtureMode(absl::GetFlag(FLAGS_mixture_mode));
  if (!mode.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mixture_mode: ", mode.status().message()));
  }
  absl::StatusOr<stoker::v1::MixtureUnit> unit =
      stoker::client::ParseMixtureUnit(absl::GetFlag(FLAGS_mixture_unit));
  if (!unit.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mixture_unit: ", unit.status().message()));
  }
  options->mixture_mode = *mode;
  options->mixture_unit = *unit;
  // Checked with the other options by Loader::Create.
  options->mixture_epoch_samples = absl::GetFlag(FLAGS_mixture_epoch_samples);
  return absl::OkStatus();
}

absl::StatusOr<LoaderOptions> ReadOptions() {
  LoaderOptions options;
  if (absl::Status s = ReadServers(&options); !s.ok()) return s;
  options.dataset = absl::GetFlag(FLAGS_dataset);
  if (absl::Status s = ReadMixture(&options); !s.ok()) return s;
  if (options.dataset.empty() == options.mixture.empty()) {
    return absl::InvalidArgumentError(
        "give --dataset or --mixture (one of them)");
  }
  absl::StatusOr<stoker::v1::TransformPipeline> transform =
      stoker::image::ParseTransform(absl::GetFlag(FLAGS_transform),
                                    stoker::image::kClientTransformChecks);
  if (!transform.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transform: ", transform.status().message()));
  }
  if (absl::Status s = stoker::image::ValidatePipeline(
          *transform, stoker::image::kClientTransformChecks);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transform: ", s.message()));
  }
  options.transform = *std::move(transform);
  if (!absl::GetFlag(FLAGS_fields).empty()) {
    absl::StatusOr<std::vector<stoker::client::ParsedField>> fields =
        stoker::client::ParseFields(absl::GetFlag(FLAGS_fields));
    if (!fields.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fields: ", fields.status().message()));
    }
    options.fields = stoker::client::FieldSpecs(*fields);
  } else if (!absl::GetFlag(FLAGS_fields_out).empty()) {
    return absl::InvalidArgumentError("--fields_out needs --fields");
  }
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.shuffle = absl::GetFlag(FLAGS_shuffle);
  options.shuffle_window = absl::GetFlag(FLAGS_shuffle_window);
  absl::StatusOr<stoker::v1::CacheMode> cache_mode =
      stoker::client::ParseCacheMode(absl::GetFlag(FLAGS_cache_mode));
  if (!cache_mode.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cache_mode: ", cache_mode.status().message()));
  }
  options.cache_mode = *cache_mode;
  if (options.shuffle_window < 0) {
    return absl::InvalidArgumentError("--shuffle_window must be >= 0");
  }
  options.drop_last = absl::GetFlag(FLAGS_drop_last);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.prefetch_batches = absl::GetFlag(FLAGS_prefetch);
  options.batches_per_request = absl::GetFlag(FLAGS_batches_per_request);
  options.streams_per_server = absl::GetFlag(FLAGS_streams_per_server);
  options.in_order = absl::GetFlag(FLAGS_in_order);
  options.fail_on_bad_sample = absl::GetFlag(FLAGS_fail_on_bad_sample);
  options.tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  if (const std::string path = absl::GetFlag(FLAGS_token_file);
      !path.empty()) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    options.token = std::string(absl::StripAsciiWhitespace(text.str()));
    if (!in || options.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file '", path, "' holds no token"));
    }
  } else if (const char* env = std::getenv("STOKER_TOKEN"); env != nullptr) {
    options.token = std::string(absl::StripAsciiWhitespace(env));
  }
  const double stall = absl::GetFlag(FLAGS_stall_timeout_s);
  const double deadline = absl::GetFlag(FLAGS_unavailable_deadline_s);
  const double resolve = absl::GetFlag(FLAGS_resolve_interval_s);
  if (!(stall > 0) || !(deadline > 0) || !(resolve > 0)) {
    return absl::InvalidArgumentError(
        "--stall_timeout_s, --unavailable_deadline_s and "
        "--resolve_interval_s must be > 0");
  }
  options.stall_timeout = absl::Seconds(stall);
  options.unavailable_deadline = absl::Seconds(deadline);
  options.resolve_interval = absl::Seconds(resolve);
  if (absl::GetFlag(FLAGS_epochs) < 1) {
    return absl::InvalidArgumentError("--epochs must be >= 1");
  }
  if (absl::GetFlag(FLAGS_start_epoch) < 0) {
    return absl::InvalidArgumentError("--start_epoch must be >= 0");
  }
  if (absl::GetFlag(FLAGS_stop_after_batches) < 0) {
    return absl::InvalidArgumentError("--stop_after_batches must be >= 0");
  }
  return options;
}

// Writes one batch's fields under dir/<epoch>/ (see --fields_out).
absl::Status WriteFields(const std::string& dir, int64_t epoch,
                         const stoker::client::HostBatch& batch) {
  const std::string epoch_dir = absl::StrCat(dir, "/", epoch);
  ::mkdir(dir.c_str(), 0755);
  ::mkdir(epoch_dir.c_str(), 0755);
  const uint8_t* payload = batch.pixels.data();
  for (int i = 0; i < batch.n; ++i) {
    std::string key = batch.keys[i];
    for (char& c : key) {
      if (c == '/') c = '_';
    }
    for (const stoker::client::FieldBatch& field : batch.fields) {
      std::string path = absl::StrCat(epoch_dir, "/", key, ".", field.name);
      std::string header;
      const char* data = nullptr;
      size_t size = 0;
      std::string text;
      switch (field.role) {
        case stoker::v1::FIELD_ROLE_IMAGE:
        case stoker::v1::FIELD_ROLE_MASK:
        case stoker::v1::FIELD_ROLE_VIDEO: {
          // (n, [views or clips,] [frames,] h, w, c): a sample's views and
          // frames are stacked top to bottom in one picture.
          const size_t d = field.shape.size();
          int h = field.shape[d - 3];
          const int w = field.shape[d - 2], c = field.shape[d - 1];
          for (size_t k = 1; k + 3 < d; ++k) h *= field.shape[k];
          size = static_cast<size_t>(h) * w * c;
          data = reinterpret_cast<const char*>(payload + field.data_offset +
                                               size * i);
          if (c == 1 || c == 3) {
            absl::StrAppend(&path, c == 1 ? ".pgm" : ".ppm");
            header = absl::StrCat(c == 1 ? "P5" : "P6", "\n", w, " ", h,
                                  "\n255\n");
          } else {
            absl::StrAppend(&path, ".pam");
            header = absl::StrCat("P7\nWIDTH ", w, "\nHEIGHT ", h,
                                  "\nDEPTH ", c, "\nMAXVAL 255\nENDHDR\n");
          }
          break;
        }
        case stoker::v1::FIELD_ROLE_CLASS:
          text = absl::StrCat(field.labels[i], "\n");
          data = text.data();
          size = text.size();
          break;
        default:
          data = reinterpret_cast<const char*>(payload + field.data_offset +
                                               field.offsets[i]);
          size = static_cast<size_t>(field.offsets[i + 1] - field.offsets[i]);
          break;
      }
      std::ofstream out(path, std::ios::binary);
      out << header;
      out.write(data, static_cast<std::streamsize>(size));
      if (!out) {
        return absl::UnavailableError(
            absl::StrCat("--fields_out: cannot write ", path));
      }
    }
  }
  return absl::OkStatus();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "stoker_fetch: %s\n", status.ToString().c_str());
  return absl::IsInvalidArgument(status) ? 2 : 1;
}

// Where each delivered batch goes besides the count: --checksum,
// --fields_out, --keys_out, the skipped-sample warnings and --step_ms.
struct Sinks {
  // A mixture's source names, for --keys_out.
  std::vector<std::string> sources;
  Checksum checksum;
  std::unique_ptr<std::ofstream> keys_out;
  absl::Duration step;
};

absl::Status Consume(int64_t epoch, const HostBatch& batch, Sinks* sinks) {
  if (absl::GetFlag(FLAGS_checksum)) sinks->checksum.AddBatch(batch);
  if (!absl::GetFlag(FLAGS_fields_out).empty()) {
    if (absl::Status s =
            WriteFields(absl::GetFlag(FLAGS_fields_out), epoch, batch);
        !s.ok()) {
      return s;
    }
  }
  if (sinks->keys_out != nullptr) {
    for (size_t i = 0; i < batch.keys.size(); ++i) {
      *sinks->keys_out << epoch << ' ';
      // (The loader checked every source against the mixture.)
      if (!batch.sources.empty()) {
        *sinks->keys_out << sinks->sources[batch.sources[i]] << '/';
      }
      *sinks->keys_out << batch.keys[i] << '\n';
    }
    // Flushed per batch: a watcher sees the epoch's progress (the process
    // tests wait for it instead of sleeping).
    sinks->keys_out->flush();
  }
  for (const auto& s : batch.skipped) {
    spdlog::warn("server skipped sample '{}' (index {}) in {}: {}", s.key,
                 s.sample_index, s.shard, s.reason);
  }
  if (sinks->step > absl::ZeroDuration()) absl::SleepFor(sinks->step);
  return absl::OkStatus();
}

// The closing lines: per-stage figures, the checksum, totals and (after
// --stop_after_batches) the resume cursor.
void PrintTotals(const Loader& loader, const Sinks& sinks, int64_t images,
                 int64_t batches, int64_t bytes, double seconds,
                 bool stopped_early) {
  stoker::client::LoaderStats stats = loader.stats();
  std::printf(
      "stages: server_read_s=%.3f server_decode_s=%.3f "
      "server_transform_s=%.3f client_wait_s=%.3f stream_failures=%lld "
      "reissued_batches=%lld shared_memory_batches=%lld\n",
      stats.server_read_ns * 1e-9, stats.server_decode_ns * 1e-9,
      stats.server_transform_ns * 1e-9,
      absl::ToDoubleSeconds(stats.consumer_wait),
      static_cast<long long>(stats.stream_failures),
      static_cast<long long>(stats.reissued_batches),
      static_cast<long long>(stats.shared_memory_batches));
  if (!sinks.sources.empty()) {
    // Samples delivered per mixture source.
    std::string line = "sources:";
    for (size_t s = 0; s < sinks.sources.size(); ++s) {
      absl::StrAppend(&line, " ", sinks.sources[s], "=",
                      stats.samples_by_source[s]);
    }
    std::printf("%s\n", line.c_str());
  }
  if (absl::GetFlag(FLAGS_checksum)) {
    std::printf("checksum=%s\n", sinks.checksum.Hex().c_str());
  }
  // This process's own CPU time (local servers are other processes).
  rusage self;
  getrusage(RUSAGE_SELF, &self);
  std::printf("client_cpu_s=%.3f\n",
              self.ru_utime.tv_sec + self.ru_utime.tv_usec * 1e-6 +
                  self.ru_stime.tv_sec + self.ru_stime.tv_usec * 1e-6);
  std::printf("images=%lld batches=%lld bytes=%lld seconds=%.3f "
              "images_per_s=%.1f\n",
              static_cast<long long>(images), static_cast<long long>(batches),
              static_cast<long long>(bytes), seconds,
              seconds > 0 ? images / seconds : 0.0);
  if (stopped_early) {
    std::printf("cursor=%s\n", loader.cursor().Serialize().c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  stoker::common::TuneMallocForReceiving();
  stoker::common::SetUsage(
      "Streams epochs from Stoker servers and prints throughput.\n"
      "Example: stoker_fetch --servers=localhost:50051 --dataset=train "
      "--epochs=2");
  absl::ParseCommandLine(argc, argv);
  const std::string level = absl::GetFlag(FLAGS_log_level);
  spdlog::set_level(spdlog::level::from_str(level));

  absl::StatusOr<LoaderOptions> options = ReadOptions();
  if (!options.ok()) return Fail(options.status());
  Sinks sinks;
  for (const stoker::v1::MixtureSource& source : options->mixture) {
    sinks.sources.push_back(source.dataset());
  }
  if (!absl::GetFlag(FLAGS_keys_out).empty()) {
    sinks.keys_out =
        std::make_unique<std::ofstream>(absl::GetFlag(FLAGS_keys_out));
    if (!*sinks.keys_out) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--keys_out: cannot write ", absl::GetFlag(FLAGS_keys_out))));
    }
  }

  absl::StatusOr<std::unique_ptr<Loader>> created = Loader::Create(*options);
  if (!created.ok()) return Fail(created.status());
  Loader& loader = **created;

  int64_t epoch = absl::GetFlag(FLAGS_start_epoch);
  int64_t last_epoch = epoch + absl::GetFlag(FLAGS_epochs) - 1;
  std::optional<std::vector<Cursor>> resume;
  for (absl::string_view text :
       absl::StrSplit(absl::GetFlag(FLAGS_resume_from), ' ',
                      absl::SkipWhitespace())) {
    absl::StatusOr<Cursor> cursor = Cursor::Parse(text);
    if (!cursor.ok()) return Fail(cursor.status());
    if (!resume.has_value()) resume.emplace();
    resume->push_back(*cursor);
    epoch = cursor->epoch;
    last_epoch = std::max(last_epoch, epoch);
  }

  const double step_ms = absl::GetFlag(FLAGS_step_ms);
  if (!(step_ms >= 0)) {
    return Fail(absl::InvalidArgumentError("--step_ms must be >= 0"));
  }
  sinks.step = absl::Milliseconds(step_ms);
  const int64_t stop_after = absl::GetFlag(FLAGS_stop_after_batches);
  int64_t images = 0, batches = 0, bytes = 0;
  bool stopped_early = false;
  const absl::Time start = absl::Now();
  for (; epoch <= last_epoch && !stopped_early; ++epoch) {
    absl::Status started = resume.has_value() ? loader.Resume(*resume)
                                              : loader.StartEpoch(epoch);
    if (!started.ok()) return Fail(started);
    if (resume.has_value()) {
      // A cursor at its epoch's end continues with the next epoch.
      epoch = loader.cursor().epoch;
      last_epoch = std::max(last_epoch, epoch);
      resume.reset();
    }
    const absl::Time epoch_start = absl::Now();
    int64_t epoch_images = 0, epoch_batches = 0, epoch_skipped = 0;
    while (true) {
      absl::StatusOr<HostBatch> batch = loader.Next();
      if (absl::IsOutOfRange(batch.status())) break;
      if (!batch.ok()) return Fail(batch.status());
      if (absl::Status s = Consume(epoch, *batch, &sinks); !s.ok()) {
        return Fail(s);
      }
      epoch_skipped += batch->skipped.size();
      epoch_images += batch->n;
      ++epoch_batches;
      bytes += batch->pixels.size();
      if (stop_after > 0 && batches + epoch_batches >= stop_after) {
        stopped_early = true;
        break;
      }
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - epoch_start);
    std::printf("epoch=%lld batches=%lld images=%lld skipped=%lld "
                "seconds=%.3f images_per_s=%.1f\n",
                static_cast<long long>(epoch),
                static_cast<long long>(epoch_batches),
                static_cast<long long>(epoch_images),
                static_cast<long long>(epoch_skipped), seconds,
                seconds > 0 ? epoch_images / seconds : 0.0);
    images += epoch_images;
    batches += epoch_batches;
  }
  PrintTotals(loader, sinks, images, batches, bytes,
              absl::ToDoubleSeconds(absl::Now() - start), stopped_early);
  return 0;
}
