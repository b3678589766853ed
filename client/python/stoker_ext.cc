// _stoker: the C++ half of the `stoker` Python package. Users import
// `stoker` (client/python/stoker/__init__.py), which validates arguments,
// documents the API and allocates the torch tensors that batches are
// converted into.
//
// What lives here: bindings only. The pipeline binding (interruptible
// waits with the GIL released), the staged batch's (client/staged_batch.h:
// conversion into caller-allocated tensors on the caller's CUDA stream),
// the status -> exception mapping and small helpers (cursor parsing,
// checksum, log level).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/batch_ops.h"
#include "client/checksum.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/cursor.h"
#include "client/device_loader.h"
#include "client/field_spec.h"
#include "client/host_replay.h"
#include "client/python/pipeline.h"
#include "client/server_list.h"
#include "client/staged_batch.h"
#include "image/ops/transform.h"
#include "spdlog/spdlog.h"

namespace py = pybind11;

namespace stoker::client::python {
namespace {

// How long one wait for a batch lasts before Python gets to run its signal
// handlers (Ctrl-C).
constexpr absl::Duration kSignalCheckInterval = absl::Milliseconds(100);

// --- Errors ---

// The exception types, created once at import (module state, like every
// extension's exception objects); strong references held for the process.
struct ErrorTypes {
  PyObject* base = nullptr;                 // StokerError(RuntimeError)
  PyObject* invalid_argument = nullptr;     // also a ValueError
  PyObject* not_found = nullptr;            // also a LookupError
  PyObject* unavailable = nullptr;
  PyObject* failed_precondition = nullptr;
  PyObject* data_loss = nullptr;
  PyObject* resource_exhausted = nullptr;
  PyObject* cancelled = nullptr;
  PyObject* unauthenticated = nullptr;
  PyObject* permission_denied = nullptr;  // also a PermissionError
};
ErrorTypes& Errors() {
  static ErrorTypes* const types = new ErrorTypes();
  return *types;
}

PyObject* ErrorTypeFor(absl::StatusCode code) {
  const ErrorTypes& e = Errors();
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return e.invalid_argument;
    case absl::StatusCode::kNotFound:
      return e.not_found;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return e.unavailable;
    case absl::StatusCode::kFailedPrecondition:
      return e.failed_precondition;
    case absl::StatusCode::kDataLoss:
      return e.data_loss;
    case absl::StatusCode::kResourceExhausted:
      return e.resource_exhausted;
    case absl::StatusCode::kCancelled:
      return e.cancelled;
    case absl::StatusCode::kUnauthenticated:
      return e.unauthenticated;
    case absl::StatusCode::kPermissionDenied:
      return e.permission_denied;
    default:
      return e.base;
  }
}

// Raises the Python exception for `status` (see stoker/__init__.py for the
// hierarchy); `code` carries the status code name ("UNAVAILABLE").
[[noreturn]] void ThrowStatus(const absl::Status& status) {
  PyObject* type = ErrorTypeFor(status.code());
  py::object exc = py::reinterpret_borrow<py::object>(type)(
      std::string(status.message()));
  exc.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

[[noreturn]] void ThrowInvalid(const std::string& message) {
  ThrowStatus(absl::InvalidArgumentError(message));
}

PyObject* MakeErrorType(py::module_& m, const char* name, py::tuple bases,
                        const char* doc) {
  PyObject* type = PyErr_NewExceptionWithDoc(
      absl::StrCat("stoker.", name).c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // adds its own reference
  return type;
}

// --- Batches handed to Python ---

// client::StagedBatch (client/staged_batch.h) with Python types: one
// delivered batch that convert_into converts into the caller's tensors on
// the caller's stream. Single use; not thread-safe.
// Host memory for the tensors stoker.Loader(device="cpu") yields, reused
// between batches: a fresh 10-150 MB tensor per batch costs a page fault
// and a page zeroing per 4 KiB, as much CPU as converting into it. A
// HostBuffer goes back to its cache when the tensor made of it
// (torch.frombuffer keeps it) is freed; the cache keeps at most
// `max_cached_bytes` of them.
struct HostBuffer {
  PixelBuffer memory;
};

class HostBuffers {
 public:
  explicit HostBuffers(size_t max_cached_bytes) : cache_(max_cached_bytes) {}
  HostBuffer Take(size_t bytes) {
    absl::StatusOr<PixelBuffer> memory = cache_.Allocate(bytes);
    if (!memory.ok()) ThrowStatus(memory.status());
    return HostBuffer{*std::move(memory)};
  }

 private:
  HeapPixelAllocator cache_;
};

class PyStagedBatch {
 public:
  PyStagedBatch(DeviceBatch batch, const ConvertOptions& output)
      : batch_(std::move(batch), output) {}

  // (n, c, h, w), the logical shape of the images.
  py::tuple Shape() const {
    const std::array<int64_t, 4> shape = batch_.shape();
    return py::make_tuple(shape[0], shape[1], shape[2], shape[3]);
  }

  // Whether convert_into writes soft labels (n x num_classes float32).
  bool SoftLabels() const { return batch_.soft_labels(); }

  // Requests with fields: (name, role, shape, is_image) of every field in
  // request order (see StagedBatch::fields and field_is_image). Empty for a
  // classic request.
  py::list Fields() const {
    py::list out;
    const std::vector<FieldBatch>& fields = batch_.fields();
    for (size_t i = 0; i < fields.size(); ++i) {
      const FieldBatch& f = fields[i];
      py::tuple shape(f.shape.size());
      for (size_t d = 0; d < f.shape.size(); ++d) shape[d] = f.shape[d];
      out.append(py::make_tuple(f.name, FieldRoleName(f.role), shape,
                                batch_.field_is_image(i)));
    }
    return out;
  }

  // The n values of bytes field i: bytes, or with `text` str decoded as
  // UTF-8 with errors="surrogateescape" (an invalid byte b becomes the lone
  // surrogate U+DC00 + b, so s.encode("utf-8", "surrogateescape") gives the
  // exact bytes back). Call before convert_into, which releases the batch.
  py::list Values(size_t i, bool text) const {
    absl::StatusOr<BytesValues> values = batch_.Values(i);
    if (!values.ok()) ThrowStatus(values.status());
    py::list out(values->size());
    for (size_t j = 0; j < values->size(); ++j) {
      const absl::string_view v = (*values)[j];
      const auto size = static_cast<Py_ssize_t>(v.size());
      PyObject* value =
          text ? PyUnicode_DecodeUTF8(v.data(), size, "surrogateescape")
               : PyBytes_FromStringAndSize(v.data(), size);
      if (value == nullptr) throw py::error_already_set();
      out[j] = py::reinterpret_steal<py::object>(value);
    }
    return out;
  }

  // images, labels, fields: addresses of the caller's tensors on the
  // batch's device, 0 for none (see StagedTargets); stream: the
  // cudaStream_t the caller will use them on (0 = the legacy default
  // stream), ignored on the CPU.
  void ConvertInto(uintptr_t images, uintptr_t labels, uintptr_t stream,
                   const std::vector<uintptr_t>& fields) {
    StagedTargets to;
    to.images = reinterpret_cast<void*>(images);
    to.labels = reinterpret_cast<void*>(labels);
    to.fields = fields;
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = batch_.ConvertInto(to, reinterpret_cast<CudaStream>(stream));
    }
    if (!s.ok()) ThrowStatus(s);
  }

 private:
  StagedBatch batch_;
};

// --- Pipeline binding ---

py::dict BatchInfo(const DeviceBatch& batch) {
  const HostBatch& info = batch.info();
  py::list skipped;
  for (const SkippedSample& s : info.skipped) {
    py::dict d;
    d["sample_index"] = s.sample_index;
    d["key"] = s.key;
    d["shard"] = s.shard;
    d["reason"] = s.reason;
    skipped.append(d);
  }
  py::dict d;
  d["epoch"] = info.epoch;
  d["batch_index"] = info.batch_index;
  d["keys"] = info.keys;
  d["sample_indices"] = info.sample_indices;
  // A mixture: each sample's source (its index in Loader.sources).
  d["sources"] = info.sources;
  d["labels"] = info.labels;
  d["server"] = info.server;
  d["skipped"] = skipped;
  // Video fields: per sample, the frame times (clip by clip) and the frame
  // rate; the frames the servers decoded for the batch.
  for (const FieldBatch& f : info.fields) {
    if (f.role != v1::FIELD_ROLE_VIDEO) continue;
    if (!d.contains("video")) d["video"] = py::dict();
    const size_t per =
        info.n > 0 ? f.frame_times.size() / static_cast<size_t>(info.n) : 0;
    py::list times;
    for (int i = 0; i < info.n; ++i) {
      times.append(std::vector<double>(f.frame_times.begin() + per * i,
                                       f.frame_times.begin() + per * (i + 1)));
    }
    py::dict v;
    v["frame_times"] = times;
    v["fps"] = f.video_fps;
    v["frames_decoded"] = f.frames_decoded;
    v["frames_delivered"] = static_cast<int64_t>(f.frame_times.size());
    d["video"].cast<py::dict>()[py::str(f.name)] = v;
  }
  const BatchOpsParams& ops = batch.batch_ops();
  if (!ops.erase.empty()) {
    py::list erase;
    for (const EraseBox& box : ops.erase) {
      if (box.height > 0 && box.width > 0) {
        erase.append(py::make_tuple(box.top, box.left, box.height, box.width));
      } else {
        erase.append(py::none());
      }
    }
    d["erase"] = erase;
  }
  if (ops.soft_labels) {
    const MixParams& m = ops.mix;
    py::dict mix;
    mix["mode"] = std::string(MixModeName(m.mode));
    mix["lam"] = m.lambda;
    mix["weights"] = py::make_tuple(m.self_weight, m.partner_weight);
    mix["box"] = m.mode == MixMode::kCutMix
                     ? py::object(py::make_tuple(m.y0, m.y1, m.x0, m.x1))
                     : py::object(py::none());
    mix["partner"] = "flip";
    d["mix"] = mix;
  }
  return d;
}

Cursor ParseCursorOrThrow(const std::string& text) {
  absl::StatusOr<Cursor> cursor = Cursor::Parse(text);
  if (!cursor.ok()) ThrowStatus(cursor.status());
  return *std::move(cursor);
}

// Settings as stoker.Loader passes them (already checked there; checked
// again here, so the binding is safe on its own).
struct Settings {
  std::string servers;
  std::string dataset;
  // A mixture instead of `dataset` (LoaderOptions::mixture): names,
  // weights and transforms ("" = `transform`), one each per source; mode
  // "cycle" or "first_exhausted", unit "sample" or "batch".
  std::vector<std::string> mixture_names;
  std::vector<double> mixture_weights;
  std::vector<std::string> mixture_transforms;
  std::string mixture_mode = "cycle";
  std::string mixture_unit = "sample";
  int64_t mixture_epoch_samples = 0;
  // Local servers of a mixture: each source's shards (as local_shards).
  std::vector<std::string> local_mixture_shards;
  // "local" among the servers (client/local_servers.h): the shards, the
  // CPUs (empty: ChooseLocalCpus(local_cores)), the number of server
  // processes and the program (empty: FindServerBinary()).
  std::string local_shards;
  int local_cores = 0;
  std::vector<int> local_cpus;
  int local_servers = 1;
  std::string server_binary;
  std::vector<std::string> server_flags;
  // Offer servers on this host shared memory (LoaderOptions).
  bool shared_memory = true;
  int batch_size = 256;
  std::string transform;
  // The text form of client/field_spec.h; empty: a classic request.
  std::string fields;
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t shuffle_window = 0;
  // none, replay or cached_raw (stoker.diagnose).
  std::string cache_mode = "none";
  bool drop_last = false;
  int rank = 0;
  int world_size = 1;
  std::string device = "cpu";
  std::string dtype = "float32";
  bool channels_last = false;
  std::array<float, 3> mean{};
  std::array<float, 3> std{};
  int prefetch = 8;
  int batches_per_request = 4;
  int streams_per_server = 2;
  bool in_order = true;
  bool fail_on_bad_sample = false;
  // TLS (client/channel.h); empty: plaintext.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  // Bearer token (server/auth.h); empty: none.
  std::string token;
  double stall_timeout_s = 10;
  double unavailable_timeout_s = 30;
  int output_slots = 4;
  int pinned_slots = 0;
  // Batch ops (client/batch_ops.h).
  double erasing_p = 0;
  std::array<double, 2> erasing_scale{0.02, 0.33};
  std::array<double, 2> erasing_ratio{0.3, 3.3};
  std::array<float, 3> erasing_value{0, 0, 0};
  bool erasing_random = false;
  double mixup_alpha = 0;
  double cutmix_alpha = 0;
  double mix_prob = 1;
  double switch_prob = 0.5;
  double label_smoothing = 0;
  int num_classes = 0;
};

absl::Duration PositiveSeconds(const char* name, double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0) {
    ThrowInvalid(absl::StrCat(name, " must be a positive number of seconds, "
                              "got ", seconds));
  }
  return absl::Seconds(seconds);
}

// The pipeline's options (its device loader only stages the uint8 NHWC
// batches on the device) and the conversion Python asked for, which
// StagedBatch::ConvertInto applies into the caller's tensors.
struct Configured {
  PipelineOptions pipeline;
  ConvertOptions output;
};

Configured ToOptions(const Settings& s) {
  Configured configured;
  PipelineOptions& o = configured.pipeline;
  LoaderOptions& l = o.loader;
  absl::StatusOr<std::vector<ServerSpec>> servers = ParseServerList(s.servers);
  if (!servers.ok()) {
    ThrowInvalid(absl::StrCat("servers: ", servers.status().message()));
  }
  l.servers = *std::move(servers);
  l.local.shards = s.local_shards;
  l.local.cpus = s.local_cpus;
  l.local.cores = s.local_cores;
  l.local.count = s.local_servers;
  l.local.binary = s.server_binary;
  l.local.flags = s.server_flags;
  l.shared_memory = s.shared_memory;
  if (s.dataset.empty() == s.mixture_names.empty()) {
    ThrowInvalid("give a dataset name or a mixture of datasets");
  }
  l.dataset = s.dataset;
  if (s.mixture_weights.size() != s.mixture_names.size() ||
      s.mixture_transforms.size() != s.mixture_names.size()) {
    ThrowInvalid("a mixture needs a weight and a transform per source");
  }
  for (size_t i = 0; i < s.mixture_names.size(); ++i) {
    v1::MixtureSource& source = l.mixture.emplace_back();
    source.set_dataset(s.mixture_names[i]);
    source.set_weight(s.mixture_weights[i]);
    if (!s.mixture_transforms[i].empty()) {
      absl::StatusOr<v1::TransformPipeline> t = image::ParseTransform(
          s.mixture_transforms[i], image::kClientTransformChecks);
      if (!t.ok()) {
        ThrowInvalid(absl::StrCat("the transform of '", s.mixture_names[i],
                                  "': ", t.status().message()));
      }
      *source.mutable_transform() = *std::move(t);
    }
  }
  absl::StatusOr<v1::MixtureMode> mode = ParseMixtureMode(s.mixture_mode);
  if (!mode.ok()) ThrowStatus(mode.status());
  l.mixture_mode = *mode;
  absl::StatusOr<v1::MixtureUnit> unit = ParseMixtureUnit(s.mixture_unit);
  if (!unit.ok()) ThrowStatus(unit.status());
  l.mixture_unit = *unit;
  // Checked with the other options by Loader::Create.
  l.mixture_epoch_samples = s.mixture_epoch_samples;
  if (!s.local_mixture_shards.empty()) {
    if (s.local_mixture_shards.size() != s.mixture_names.size()) {
      ThrowInvalid("local servers of a mixture need shards per source");
    }
    for (size_t i = 0; i < s.mixture_names.size(); ++i) {
      l.local.datasets.emplace_back(s.mixture_names[i],
                                    s.local_mixture_shards[i]);
    }
  }
  absl::StatusOr<v1::TransformPipeline> transform =
      image::ParseTransform(s.transform, image::kClientTransformChecks);
  if (!transform.ok()) {
    ThrowInvalid(absl::StrCat("transform: ", transform.status().message()));
  }
  l.transform = *std::move(transform);
  if (!s.fields.empty()) {
    absl::StatusOr<std::vector<ParsedField>> fields = ParseFields(s.fields);
    if (!fields.ok()) {
      ThrowInvalid(absl::StrCat("fields: ", fields.status().message()));
    }
    l.fields = FieldSpecs(*fields);
  }
  l.batch_size = s.batch_size;
  l.seed = s.seed;
  l.shuffle = s.shuffle;
  l.shuffle_window = s.shuffle_window;
  absl::StatusOr<v1::CacheMode> cache_mode = ParseCacheMode(s.cache_mode);
  if (!cache_mode.ok()) ThrowInvalid(std::string(cache_mode.status().message()));
  l.cache_mode = *cache_mode;
  l.drop_last = s.drop_last;
  l.rank = s.rank;
  l.world_size = s.world_size;
  l.prefetch_batches = s.prefetch;
  l.batches_per_request = s.batches_per_request;
  l.streams_per_server = s.streams_per_server;
  l.in_order = s.in_order;
  l.fail_on_bad_sample = s.fail_on_bad_sample;
  l.tls.ca_file = s.tls_ca;
  l.tls.cert_file = s.tls_cert;
  l.tls.key_file = s.tls_key;
  l.token = s.token;
  l.stall_timeout = PositiveSeconds("stall_timeout", s.stall_timeout_s);
  l.unavailable_deadline =
      PositiveSeconds("unavailable_timeout", s.unavailable_timeout_s);

  DeviceLoaderOptions& d = o.device;
  if (absl::Status st = ParseDevice(s.device, &d.device, &d.device_id);
      !st.ok()) {
    ThrowInvalid(absl::StrCat("device: ", st.message()));
  }
  absl::StatusOr<DType> dtype = ParseDType(s.dtype);
  if (!dtype.ok()) ThrowInvalid(absl::StrCat("dtype: ", dtype.status().message()));
  ConvertOptions& out = configured.output;
  out.dtype = *dtype;
  out.layout = s.channels_last ? Layout::kNHWC : Layout::kNCHW;
  out.mean = s.mean;
  out.std = s.std;
  if (absl::Status st = ValidateConvertOptions(out); !st.ok()) {
    ThrowStatus(st);
  }
  d.convert.dtype = DType::kUint8;
  d.convert.layout = Layout::kNHWC;
  if (s.output_slots < 1) {
    ThrowInvalid(absl::StrCat("output_slots must be >= 1, got ",
                              s.output_slots));
  }
  d.output_slots = s.output_slots;
  if (s.pinned_slots < 0) {
    ThrowInvalid(absl::StrCat("pinned_slots must be >= 0 (0: prefetch + 2), "
                              "got ", s.pinned_slots));
  }
  d.pinned_slots = s.pinned_slots;

  // The device loader stages uint8 pixels, so it only draws the batch ops
  // (keyed by the seed and rank: Pipeline::Create sets them); StagedBatch
  // applies them after converting into the caller's tensor.
  BatchOpsOptions& ops = d.batch_ops;
  ops.erasing.probability = s.erasing_p;
  ops.erasing.scale_min = s.erasing_scale[0];
  ops.erasing.scale_max = s.erasing_scale[1];
  ops.erasing.ratio_min = s.erasing_ratio[0];
  ops.erasing.ratio_max = s.erasing_ratio[1];
  ops.erasing.fill =
      s.erasing_random ? EraseFill::kNormal : EraseFill::kConstant;
  ops.erasing.value = s.erasing_value;
  ops.mix.mixup_alpha = s.mixup_alpha;
  ops.mix.cutmix_alpha = s.cutmix_alpha;
  ops.mix.mix_prob = s.mix_prob;
  ops.mix.switch_prob = s.switch_prob;
  ops.mix.label_smoothing = s.label_smoothing;
  ops.mix.num_classes = s.num_classes;
  if (absl::Status st = ValidateBatchOpsOptions(ops); !st.ok()) {
    ThrowStatus(st);
  }
  if (ops.enabled() && out.dtype == DType::kUint8) {
    ThrowInvalid(
        "random_erasing, mixup_alpha and cutmix_alpha need a float dtype "
        "(float32, float16 or bfloat16): uint8 output holds raw pixels, not "
        "normalized values");
  }
  d.apply_batch_ops = false;
  return configured;
}

// The caching ladder's "host cached" rung (stoker.diagnose): one uint8 NHWC
// batch replayed through the copy and conversion the loader built from the
// same settings runs (client/host_replay.h).
class PyHostReplay {
 public:
  // pixels: the address of shape (n, h, w, c) uint8 values in host memory;
  // labels: of n int64 values. Both are copied.
  PyHostReplay(const Settings& settings, uintptr_t pixels, uintptr_t labels,
               const std::array<int64_t, 4>& shape) {
    const Configured configured = ToOptions(settings);
    HostReplayOptions options;
    options.device = configured.pipeline.device.device;
    options.device_id = configured.pipeline.device.device_id;
    options.output = configured.output;
    absl::StatusOr<std::unique_ptr<HostReplay>> replay = HostReplay::Create(
        reinterpret_cast<const uint8_t*>(pixels),
        reinterpret_cast<const int64_t*>(labels),
        ImageShape{shape[0], shape[1], shape[2], shape[3]}, options);
    if (!replay.ok()) ThrowStatus(replay.status());
    replay_ = *std::move(replay);
  }

  // (n, c, h, w), the logical shape of the images.
  py::tuple Shape() const {
    const ImageShape& s = replay_->shape();
    return py::make_tuple(s.n, s.channels, s.height, s.width);
  }

  // As StagedBatch::ConvertInto for a classic batch (labels: n int64).
  void ConvertInto(uintptr_t images, uintptr_t labels, uintptr_t stream) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = replay_->ConvertInto(reinterpret_cast<void*>(images),
                               reinterpret_cast<int64_t*>(labels),
                               reinterpret_cast<CudaStream>(stream));
    }
    if (!s.ok()) ThrowStatus(s);
  }

 private:
  std::unique_ptr<HostReplay> replay_;
};

class PyPipeline {
 public:
  explicit PyPipeline(const Settings& settings) {
    const Configured configured = ToOptions(settings);
    output_ = configured.output;
    absl::StatusOr<std::unique_ptr<Pipeline>> created;
    {
      py::gil_scoped_release release;
      created = Pipeline::Create(configured.pipeline);
    }
    if (!created.ok()) ThrowStatus(created.status());
    pipeline_ = *std::move(created);
  }

  int64_t num_batches() { return Get()->num_batches(); }
  int64_t dataset_samples() { return Get()->dataset_samples(); }
  std::vector<std::string> classes() { return Get()->classes(); }
  std::string plan_id() { return Get()->plan_id(); }
  // The data plan's parts (client/cursor.h PlanFacts), for state dicts.
  py::dict plan_facts() {
    const PlanFacts f = Get()->facts();
    py::dict d;
    d["dataset"] = f.dataset;
    d["fingerprint"] = f.fingerprint;
    d["transform"] = f.transform;
    d["fields"] = f.fields;
    d["seed"] = f.seed;
    d["shuffle"] = f.shuffle;
    d["shuffle_window"] = f.window;
    d["mixture"] = f.mixture;
    return d;
  }

  // From saved cursors: this rank's own, or any rank's of a synchronous
  // job, or every rank's (see Pipeline::Start).
  void Start(const std::vector<std::string>& cursor_texts) {
    std::vector<Cursor> cursors;
    for (const std::string& text : cursor_texts) {
      cursors.push_back(ParseCursorOrThrow(text));
    }
    std::shared_ptr<Pipeline> p = Get();
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = p->Start(cursors);
    }
    if (!s.ok()) ThrowStatus(s);
  }

  void StartEpoch(int64_t epoch) {
    std::shared_ptr<Pipeline> p = Get();
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = p->StartEpoch(epoch);
    }
    if (!s.ok()) ThrowStatus(s);
  }

  int64_t epoch_batches() { return Get()->epoch_batches(); }

  // (StagedBatch, info dict), or None at the end of the epoch.
  py::object Next() {
    std::shared_ptr<Pipeline> p = Get();
    std::optional<DeviceBatch> batch;
    while (!batch.has_value()) {
      absl::StatusOr<std::optional<DeviceBatch>> r;
      {
        py::gil_scoped_release release;
        r = p->Next(kSignalCheckInterval);
      }
      if (!r.ok()) {
        if (absl::IsOutOfRange(r.status())) return py::none();
        ThrowStatus(r.status());
      }
      if (r->has_value()) {
        batch = std::move(**r);
      } else if (PyErr_CheckSignals() != 0) {
        // Ctrl-C (or another signal handler raised): stop fetching so the
        // exception propagates promptly; the next epoch starts afresh and
        // the cursor still describes what was delivered.
        py::error_already_set error;
        {
          py::gil_scoped_release release;
          p->Abandon();
        }
        throw error;
      }
    }
    py::dict info = BatchInfo(*batch);
    return py::make_tuple(PyStagedBatch(*std::move(batch), output_), info);
  }

  void Abandon() {
    std::shared_ptr<Pipeline> p = Get();
    py::gil_scoped_release release;
    p->Abandon();
  }

  void Close() {
    std::shared_ptr<Pipeline> p = std::move(pipeline_);
    py::gil_scoped_release release;
    p.reset();
  }
  bool closed() const { return pipeline_ == nullptr; }

  std::string CursorText() { return Get()->cursor().Serialize(); }

  py::dict Stats() {
    const PipelineStats s = Get()->stats();
    py::dict d;
    d["server_read_s"] = s.loader.server_read_ns * 1e-9;
    d["server_decode_s"] = s.loader.server_decode_ns * 1e-9;
    d["server_transform_s"] = s.loader.server_transform_ns * 1e-9;
    d["network_bytes"] = s.loader.pixel_bytes;
    d["client_wait_s"] = absl::ToDoubleSeconds(s.consumer_wait);
    d["batches"] = s.batches;
    d["samples"] = s.samples;
    d["skipped_samples"] = s.skipped_samples;
    d["stream_failures"] = s.loader.stream_failures;
    d["stalls"] = s.loader.stalls;
    d["reissued_batches"] = s.loader.reissued_batches;
    d["duplicate_batches_dropped"] = s.loader.duplicate_batches_dropped;
    d["shared_memory_batches"] = s.loader.shared_memory_batches;
    d["received_batches"] = s.loader.batches;
    d["convert_wait_s"] = absl::ToDoubleSeconds(s.loader.consumer_wait);
    d["rebuilds"] = s.rebuilds;
    d["batches_by_server"] = s.loader.batches_by_server;
    // A mixture: samples yielded per source.
    const std::vector<v1::MixtureSource>& mixture =
        Get()->options().loader.mixture;
    py::dict by_source;
    for (size_t i = 0; i < mixture.size(); ++i) {
      by_source[py::str(mixture[i].dataset())] = s.samples_by_source[i];
    }
    d["samples_by_source"] = by_source;
    return d;
  }

 private:
  std::shared_ptr<Pipeline> Get() const {
    if (pipeline_ == nullptr) ThrowInvalid("the loader is closed");
    return pipeline_;
  }

  // Copied by every call, so close() from another thread never frees the
  // pipeline under a running call.
  std::shared_ptr<Pipeline> pipeline_;
  // The conversion the caller asked for (dtype, layout, normalization).
  ConvertOptions output_;
};

void SetLogLevel(const std::string& level) {
  static const char* const kLevels[] = {"trace", "debug", "info",    "warn",
                                        "error", "critical", "off"};
  for (const char* name : kLevels) {
    if (level == name) {
      spdlog::set_level(spdlog::level::from_str(level));
      return;
    }
  }
  ThrowInvalid(absl::StrCat("unknown log level '", level,
                            "'; use trace, debug, info, warn, error, "
                            "critical or off"));
}

// The fields' text form as dicts: name, role ("image", "mask", "class",
// "bytes" or "text"), missing ("error", "skip" or "empty"), channels (masks),
// repeats and own_transform (images: views per sample; a pipeline of its
// own).
py::list ParseFieldsList(const std::string& text) {
  absl::StatusOr<std::vector<ParsedField>> fields = ParseFields(text);
  if (!fields.ok()) {
    ThrowInvalid(absl::StrCat("fields: ", fields.status().message()));
  }
  py::list out;
  for (const ParsedField& f : *fields) {
    py::dict d;
    d["name"] = f.spec.name();
    d["role"] = f.text ? "text" : FieldRoleName(f.spec.role());
    switch (f.spec.missing()) {
      case v1::MISSING_POLICY_SKIP:
        d["missing"] = "skip";
        break;
      case v1::MISSING_POLICY_EMPTY:
        d["missing"] = "empty";
        break;
      default:
        d["missing"] = "error";
    }
    d["channels"] = std::max(1, static_cast<int>(f.spec.channels()));
    d["repeats"] = std::max(1, static_cast<int>(f.spec.repeats()));
    d["own_transform"] = !f.spec.transform().steps().empty();
    out.append(d);
  }
  return out;
}

py::dict ParseCursorDict(const std::string& text) {
  const Cursor cursor = ParseCursorOrThrow(text);
  py::dict d;
  d["plan_id"] = cursor.plan_id;
  d["epoch"] = cursor.epoch;
  d["next_batch"] = cursor.next_batch;
  d["delivered_after"] = cursor.delivered_after;
  d["rank"] = cursor.cut.rank;
  d["world_size"] = cursor.cut.world_size;
  d["batch_size"] = cursor.cut.batch_size;
  d["drop_last"] = cursor.cut.drop_last;
  d["consumed_prefix"] = cursor.cut.consumed_prefix;
  d["consumed_after"] = cursor.cut.consumed_after;
  return d;
}

void ChecksumUpdate(Checksum& checksum, py::buffer data) {
  Py_buffer view;
  if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
    throw py::error_already_set();
  }
  {
    py::gil_scoped_release release;
    checksum.Update(view.buf, static_cast<size_t>(view.len));
  }
  PyBuffer_Release(&view);
}

}  // namespace
}  // namespace stoker::client::python

PYBIND11_MODULE(_stoker, m) {
  using namespace stoker::client;          // NOLINT(build/namespaces)
  using namespace stoker::client::python;  // NOLINT(build/namespaces)
  m.doc() = "C++ half of the stoker package; import stoker instead.";

  ErrorTypes& e = Errors();
  e.base = MakeErrorType(
      m, "StokerError", py::make_tuple(py::handle(PyExc_RuntimeError)),
      "An error reported by Stoker; `code` holds the status code name.");
  py::handle base(e.base);
  e.invalid_argument = MakeErrorType(
      m, "InvalidArgumentError",
      py::make_tuple(base, py::handle(PyExc_ValueError)),
      "A bad argument, option, transform, cursor or state dict.");
  e.not_found = MakeErrorType(
      m, "NotFoundError", py::make_tuple(base, py::handle(PyExc_LookupError)),
      "The servers do not hold the requested dataset.");
  e.unavailable = MakeErrorType(
      m, "UnavailableError", py::make_tuple(base),
      "No server could be reached (within unavailable_timeout).");
  e.failed_precondition = MakeErrorType(
      m, "FailedPreconditionError", py::make_tuple(base),
      "The system is not in a state to do this (e.g. device='cuda' without "
      "a GPU, servers holding different data).");
  e.data_loss = MakeErrorType(m, "DataLossError", py::make_tuple(base),
                              "Corrupt data (with fail_on_bad_sample).");
  e.resource_exhausted = MakeErrorType(
      m, "ResourceExhaustedError", py::make_tuple(base),
      "Out of memory or buffers.");
  e.cancelled = MakeErrorType(m, "CancelledError", py::make_tuple(base),
                              "The operation was cancelled.");
  e.unauthenticated = MakeErrorType(
      m, "UnauthenticatedError", py::make_tuple(base),
      "The servers require a bearer token and got none or an unknown one.");
  e.permission_denied = MakeErrorType(
      m, "PermissionDeniedError",
      py::make_tuple(base, py::handle(PyExc_PermissionError)),
      "This job's token does not cover the dataset.");

  py::class_<PyStagedBatch>(m, "StagedBatch",
                            "One received batch; convert_into fills the "
                            "caller's tensors (see stoker.Loader).")
      .def_property_readonly("shape", &PyStagedBatch::Shape)
      .def_property_readonly("soft_labels", &PyStagedBatch::SoftLabels)
      .def_property_readonly("fields", &PyStagedBatch::Fields)
      .def("values", &PyStagedBatch::Values, py::arg("index"), py::arg("text"))
      .def("convert_into", &PyStagedBatch::ConvertInto, py::arg("images"),
           py::arg("labels"), py::arg("stream"),
           py::arg("fields") = std::vector<uintptr_t>());

  py::class_<HostBuffer>(m, "HostBuffer", py::buffer_protocol())
      .def_buffer([](HostBuffer& b) {
        return py::buffer_info(
            b.memory.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
            {static_cast<py::ssize_t>(b.memory.size())}, {1},
            /*readonly=*/false);
      });

  py::class_<HostBuffers>(m, "HostBuffers")
      .def(py::init<size_t>(), py::arg("max_cached_bytes"))
      .def("take", &HostBuffers::Take, py::arg("bytes"));

  py::class_<Settings>(m, "Settings")
      .def(py::init<>())
      .def_readwrite("servers", &Settings::servers)
      .def_readwrite("dataset", &Settings::dataset)
      .def_readwrite("mixture_names", &Settings::mixture_names)
      .def_readwrite("mixture_weights", &Settings::mixture_weights)
      .def_readwrite("mixture_transforms", &Settings::mixture_transforms)
      .def_readwrite("mixture_mode", &Settings::mixture_mode)
      .def_readwrite("mixture_unit", &Settings::mixture_unit)
      .def_readwrite("mixture_epoch_samples", &Settings::mixture_epoch_samples)
      .def_readwrite("local_mixture_shards", &Settings::local_mixture_shards)
      .def_readwrite("local_shards", &Settings::local_shards)
      .def_readwrite("local_cores", &Settings::local_cores)
      .def_readwrite("local_cpus", &Settings::local_cpus)
      .def_readwrite("local_servers", &Settings::local_servers)
      .def_readwrite("server_binary", &Settings::server_binary)
      .def_readwrite("server_flags", &Settings::server_flags)
      .def_readwrite("shared_memory", &Settings::shared_memory)
      .def_readwrite("batch_size", &Settings::batch_size)
      .def_readwrite("transform", &Settings::transform)
      .def_readwrite("fields", &Settings::fields)
      .def_readwrite("seed", &Settings::seed)
      .def_readwrite("shuffle", &Settings::shuffle)
      .def_readwrite("shuffle_window", &Settings::shuffle_window)
      .def_readwrite("cache_mode", &Settings::cache_mode)
      .def_readwrite("drop_last", &Settings::drop_last)
      .def_readwrite("rank", &Settings::rank)
      .def_readwrite("world_size", &Settings::world_size)
      .def_readwrite("device", &Settings::device)
      .def_readwrite("dtype", &Settings::dtype)
      .def_readwrite("channels_last", &Settings::channels_last)
      .def_readwrite("mean", &Settings::mean)
      .def_readwrite("std", &Settings::std)
      .def_readwrite("prefetch", &Settings::prefetch)
      .def_readwrite("batches_per_request", &Settings::batches_per_request)
      .def_readwrite("streams_per_server", &Settings::streams_per_server)
      .def_readwrite("in_order", &Settings::in_order)
      .def_readwrite("fail_on_bad_sample", &Settings::fail_on_bad_sample)
      .def_readwrite("tls_ca", &Settings::tls_ca)
      .def_readwrite("tls_cert", &Settings::tls_cert)
      .def_readwrite("tls_key", &Settings::tls_key)
      .def_readwrite("token", &Settings::token)
      .def_readwrite("stall_timeout_s", &Settings::stall_timeout_s)
      .def_readwrite("unavailable_timeout_s", &Settings::unavailable_timeout_s)
      .def_readwrite("output_slots", &Settings::output_slots)
      .def_readwrite("pinned_slots", &Settings::pinned_slots)
      .def_readwrite("erasing_p", &Settings::erasing_p)
      .def_readwrite("erasing_scale", &Settings::erasing_scale)
      .def_readwrite("erasing_ratio", &Settings::erasing_ratio)
      .def_readwrite("erasing_value", &Settings::erasing_value)
      .def_readwrite("erasing_random", &Settings::erasing_random)
      .def_readwrite("mixup_alpha", &Settings::mixup_alpha)
      .def_readwrite("cutmix_alpha", &Settings::cutmix_alpha)
      .def_readwrite("mix_prob", &Settings::mix_prob)
      .def_readwrite("switch_prob", &Settings::switch_prob)
      .def_readwrite("label_smoothing", &Settings::label_smoothing)
      .def_readwrite("num_classes", &Settings::num_classes);

  py::class_<PyPipeline>(m, "Pipeline")
      .def(py::init<const Settings&>())
      .def_property_readonly("num_batches", &PyPipeline::num_batches)
      .def_property_readonly("dataset_samples", &PyPipeline::dataset_samples)
      .def_property_readonly("classes", &PyPipeline::classes)
      .def_property_readonly("plan_id", &PyPipeline::plan_id)
      .def_property_readonly("closed", &PyPipeline::closed)
      .def("start", &PyPipeline::Start, py::arg("cursors"))
      .def_property_readonly("epoch_batches", &PyPipeline::epoch_batches)
      .def_property_readonly("plan_facts", &PyPipeline::plan_facts)
      .def("start_epoch", &PyPipeline::StartEpoch, py::arg("epoch"))
      .def("next", &PyPipeline::Next)
      .def("abandon", &PyPipeline::Abandon)
      .def("close", &PyPipeline::Close)
      .def("cursor", &PyPipeline::CursorText)
      .def("stats", &PyPipeline::Stats);

  py::class_<PyHostReplay>(m, "HostReplay",
                           "One uint8 batch replayed through the loader's "
                           "copy and conversion (stoker.diagnose).")
      .def(py::init<const Settings&, uintptr_t, uintptr_t,
                    const std::array<int64_t, 4>&>(),
           py::arg("settings"), py::arg("pixels"), py::arg("labels"),
           py::arg("shape"))
      .def_property_readonly("shape", &PyHostReplay::Shape)
      .def("convert_into", &PyHostReplay::ConvertInto, py::arg("images"),
           py::arg("labels"), py::arg("stream"));

  py::class_<Checksum>(m, "Checksum",
                       "The digest stoker_fetch --checksum prints (see "
                       "client/checksum.h).")
      .def(py::init<>())
      .def("update", &ChecksumUpdate, py::arg("data"))
      .def("hex", &Checksum::Hex)
      .def_property_readonly("value", &Checksum::value);

  m.def("parse_cursor", &ParseCursorDict, py::arg("text"));
  m.def("parse_fields", &ParseFieldsList, py::arg("text"));
  m.def("set_log_level", &SetLogLevel, py::arg("level"));
  m.def("cuda_device_count", [] { return CudaDeviceCount(); });

  // The library logs lifecycle events at info; Python programs get warnings
  // and errors unless they ask for more (stoker.set_log_level).
  spdlog::set_level(spdlog::level::warn);
}
