// _stoker: the C++ half of the `stoker` Python package. Users import
// `stoker` (client/python/stoker/__init__.py), which validates arguments,
// documents the API and turns the DLPack views made here into torch tensors.
//
// What lives here: the pipeline binding (interruptible waits with the GIL
// released), zero-copy DLPack producers that own their DeviceBatch, the
// status -> exception mapping and small helpers (cursor parsing, checksum,
// log level).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

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
#include "client/checksum.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/cursor.h"
#include "client/device_loader.h"
#include "client/python/pipeline.h"
#include "client/server_list.h"
#include "common/transform_spec.h"
#include "spdlog/spdlog.h"

namespace py = pybind11;

// DLPack v0.6 ABI (github.com/dmlc/dlpack, include/dlpack/dlpack.h), the
// version PyTorch >= 1.10 consumes as a "dltensor" capsule. Declared here
// because the ABI is frozen and no Debian package ships the header alone.
extern "C" {
struct DLDevice {
  int32_t device_type;  // DLDeviceType, an int-sized enum
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
}

namespace stoker::client::python {
namespace {

constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;
constexpr uint8_t kDLInt = 0;
constexpr uint8_t kDLUInt = 1;
constexpr uint8_t kDLFloat = 2;
constexpr uint8_t kDLBfloat = 4;

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

// --- DLPack producers ---

// One delivered batch, shared by its image and label views and by every
// DLPack capsule made from them; released (on the stream of its last
// WaitOn, see client/device_loader.h) when the last of them goes away, on
// whichever thread that is. Needs no GIL.
struct BatchHolder {
  explicit BatchHolder(DeviceBatch b) : batch(std::move(b)) {}
  DeviceBatch batch;
};

struct ManagedContext {
  std::shared_ptr<BatchHolder> holder;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> strides{};
  DLManagedTensor tensor{};
};

void DeleteManaged(DLManagedTensor* self) {
  delete static_cast<ManagedContext*>(self->manager_ctx);
}

// Frees a capsule nobody consumed; a consumer renames it "used_dltensor"
// and calls the deleter itself.
void DestroyCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(
      PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr && managed->deleter != nullptr) {
    managed->deleter(managed);
  }
}

DLDataType ToDLDataType(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return {kDLUInt, 8, 1};
    case DType::kFloat32:
      return {kDLFloat, 32, 1};
    case DType::kFloat16:
      return {kDLFloat, 16, 1};
    case DType::kBFloat16:
      return {kDLBfloat, 16, 1};
  }
  return {kDLUInt, 8, 1};
}

// The images or the labels of a batch as a DLPack producer
// (__dlpack__ / __dlpack_device__), for torch.from_dlpack and other
// consumers. Images have the logical shape (N, C, H, W); channels-last
// batches get NHWC strides. Labels are int64 of shape (N,).
class TensorView {
 public:
  TensorView(std::shared_ptr<BatchHolder> holder, bool labels)
      : holder_(std::move(holder)), labels_(labels) {}

  const DeviceBatch& batch() const { return holder_->batch; }
  bool cuda() const { return batch().device() == DeviceKind::kCuda; }

  std::array<int64_t, 4> LogicalShape() const {
    const HostBatch& info = batch().info();
    return {info.n, info.channels, info.height, info.width};
  }
  std::array<int64_t, 4> LogicalStrides() const {
    const HostBatch& info = batch().info();
    const int64_t h = info.height, w = info.width, c = info.channels;
    if (batch().layout() == Layout::kNHWC) return {h * w * c, 1, w * c, c};
    return {c * h * w, h * w, w, 1};
  }

  py::tuple Shape() const {
    if (labels_) return py::make_tuple(batch().size());
    const auto s = LogicalShape();
    return py::make_tuple(s[0], s[1], s[2], s[3]);
  }
  std::string DTypeName() const {
    return labels_ ? "int64" : std::string(client::DTypeName(batch().dtype()));
  }
  std::string Device() const {
    return cuda() ? absl::StrCat("cuda:", batch().device_id()) : "cpu";
  }

  py::tuple DLPackDevice() const {
    return py::make_tuple(cuda() ? kDLCUDA : kDLCPU,
                          cuda() ? batch().device_id() : 0);
  }

  // The array-API __dlpack__: for CUDA the consumer's `stream` waits (on the
  // GPU) for the batch to be ready, and the batch's release is recorded on
  // it. None means the legacy default stream, -1 "do not synchronize" (the
  // consumer must then synchronize itself before using or releasing).
  py::capsule DLPack(py::object stream, py::kwargs kwargs) {
    for (auto item : kwargs) {
      const std::string key = py::str(item.first);
      if (key == "max_version") continue;  // the legacy capsule is allowed
      if (key == "copy") {
        if (!item.second.is_none() && item.second.cast<bool>()) {
          PyErr_SetString(PyExc_BufferError,
                          "stoker batches are exported without a copy only");
          throw py::error_already_set();
        }
        continue;
      }
      if (key == "dl_device") {
        if (!item.second.is_none() &&
            !DLPackDevice().equal(
                py::tuple(py::reinterpret_borrow<py::object>(item.second)))) {
          PyErr_SetString(PyExc_BufferError,
                          "stoker batches cannot be moved to another device");
          throw py::error_already_set();
        }
        continue;
      }
      throw py::type_error(
          absl::StrCat("__dlpack__() got an unexpected keyword argument '",
                       key, "'"));
    }
    if (!batch().valid()) {
      ThrowStatus(absl::FailedPreconditionError("the batch was released"));
    }
    if (cuda()) {
      int64_t value = 0;
      if (!stream.is_none()) value = stream.cast<int64_t>();
      if (value != -1) {
        // 1 and 2 are the runtime's own handles for the legacy and the
        // per-thread default stream; 0 / None is the legacy one too.
        const auto handle = reinterpret_cast<CudaStream>(
            static_cast<uintptr_t>(value));
        absl::Status s = holder_->batch.WaitOn(handle);
        if (!s.ok()) ThrowStatus(s);
      }
    }
    auto context = std::make_unique<ManagedContext>();
    context->holder = holder_;
    DLTensor& t = context->tensor.dl_tensor;
    t.device.device_type = cuda() ? kDLCUDA : kDLCPU;
    t.device.device_id = cuda() ? batch().device_id() : 0;
    t.byte_offset = 0;
    if (labels_) {
      t.data = const_cast<int64_t*>(batch().labels());
      t.ndim = 1;
      t.dtype = {kDLInt, 64, 1};
      context->shape[0] = batch().size();
      context->strides[0] = 1;
    } else {
      t.data = batch().data();
      t.ndim = 4;
      t.dtype = ToDLDataType(batch().dtype());
      context->shape = LogicalShape();
      context->strides = LogicalStrides();
    }
    t.shape = context->shape.data();
    t.strides = context->strides.data();
    context->tensor.manager_ctx = context.get();
    context->tensor.deleter = &DeleteManaged;
    DLManagedTensor* managed = &context->tensor;
    PyObject* capsule = PyCapsule_New(managed, "dltensor", &DestroyCapsule);
    if (capsule == nullptr) throw py::error_already_set();
    context.release();  // now owned by the capsule (or its consumer)
    return py::reinterpret_steal<py::capsule>(capsule);
  }

 private:
  std::shared_ptr<BatchHolder> holder_;
  bool labels_;
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
  d["server"] = info.server;
  d["skipped"] = skipped;
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
  int batch_size = 256;
  std::string transform;
  uint64_t seed = 0;
  bool shuffle = true;
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
  double stall_timeout_s = 10;
  double unavailable_timeout_s = 30;
  int output_slots = 4;
  int pinned_slots = 0;
};

absl::Duration PositiveSeconds(const char* name, double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0) {
    ThrowInvalid(absl::StrCat(name, " must be a positive number of seconds, "
                              "got ", seconds));
  }
  return absl::Seconds(seconds);
}

PipelineOptions ToOptions(const Settings& s) {
  PipelineOptions o;
  LoaderOptions& l = o.loader;
  absl::StatusOr<std::vector<ServerSpec>> servers = ParseServerList(s.servers);
  if (!servers.ok()) {
    ThrowInvalid(absl::StrCat("servers: ", servers.status().message()));
  }
  l.servers = *std::move(servers);
  if (s.dataset.empty()) ThrowInvalid("dataset must be a non-empty name");
  l.dataset = s.dataset;
  absl::StatusOr<v1::TransformPipeline> transform =
      common::ParseTransform(s.transform);
  if (!transform.ok()) {
    ThrowInvalid(absl::StrCat("transform: ", transform.status().message()));
  }
  l.transform = *std::move(transform);
  l.batch_size = s.batch_size;
  l.seed = s.seed;
  l.shuffle = s.shuffle;
  l.drop_last = s.drop_last;
  l.rank = s.rank;
  l.world_size = s.world_size;
  l.prefetch_batches = s.prefetch;
  l.batches_per_request = s.batches_per_request;
  l.streams_per_server = s.streams_per_server;
  l.in_order = s.in_order;
  l.fail_on_bad_sample = s.fail_on_bad_sample;
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
  d.convert.dtype = *dtype;
  d.convert.layout = s.channels_last ? Layout::kNHWC : Layout::kNCHW;
  d.convert.mean = s.mean;
  d.convert.std = s.std;
  if (absl::Status st = ValidateConvertOptions(d.convert); !st.ok()) {
    ThrowStatus(st);
  }
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
  return o;
}

class PyPipeline {
 public:
  explicit PyPipeline(const Settings& settings) {
    const PipelineOptions options = ToOptions(settings);
    absl::StatusOr<std::unique_ptr<Pipeline>> created;
    {
      py::gil_scoped_release release;
      created = Pipeline::Create(options);
    }
    if (!created.ok()) ThrowStatus(created.status());
    pipeline_ = *std::move(created);
  }

  int64_t num_batches() { return Get()->num_batches(); }
  int64_t dataset_samples() { return Get()->dataset_samples(); }
  std::string plan_id() { return Get()->plan_id(); }

  void Start(const std::string& cursor_text) {
    const Cursor cursor = ParseCursorOrThrow(cursor_text);
    std::shared_ptr<Pipeline> p = Get();
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = p->Start(cursor);
    }
    if (!s.ok()) ThrowStatus(s);
  }

  void StartEpoch(int64_t epoch) {
    std::shared_ptr<Pipeline> p = Get();
    Cursor cursor;
    cursor.plan_id = p->plan_id();
    cursor.epoch = epoch;
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = p->Start(cursor);
    }
    if (!s.ok()) ThrowStatus(s);
  }

  // (images view, labels view, info dict), or None at the end of the epoch.
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
        if (absl::IsResourceExhausted(r.status())) {
          ThrowStatus(absl::ResourceExhaustedError(absl::StrCat(
              "every one of the loader's ", p->options().device.output_slots,
              " output buffers is held by tensors of earlier batches; drop "
              "them (or .clone() the ones you keep) or raise output_slots")));
        }
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
    auto holder = std::make_shared<BatchHolder>(*std::move(batch));
    return py::make_tuple(TensorView(holder, /*labels=*/false),
                          TensorView(holder, /*labels=*/true), info);
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
    d["received_batches"] = s.loader.batches;
    d["convert_wait_s"] = absl::ToDoubleSeconds(s.loader.consumer_wait);
    d["rebuilds"] = s.rebuilds;
    d["batches_by_server"] = s.loader.batches_by_server;
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

py::dict ParseCursorDict(const std::string& text) {
  const Cursor cursor = ParseCursorOrThrow(text);
  py::dict d;
  d["plan_id"] = cursor.plan_id;
  d["epoch"] = cursor.epoch;
  d["next_batch"] = cursor.next_batch;
  d["delivered_after"] = cursor.delivered_after;
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
      "Out of memory or buffers (e.g. all output buffers held by tensors).");
  e.cancelled = MakeErrorType(m, "CancelledError", py::make_tuple(base),
                              "The operation was cancelled.");

  py::class_<TensorView>(m, "TensorView",
                         "Images or labels of one batch as a DLPack "
                         "producer (no copy).")
      .def("__dlpack__", &TensorView::DLPack, py::arg("stream") = py::none())
      .def("__dlpack_device__", &TensorView::DLPackDevice)
      .def_property_readonly("shape", &TensorView::Shape)
      .def_property_readonly("dtype", &TensorView::DTypeName)
      .def_property_readonly("device", &TensorView::Device);

  py::class_<Settings>(m, "Settings")
      .def(py::init<>())
      .def_readwrite("servers", &Settings::servers)
      .def_readwrite("dataset", &Settings::dataset)
      .def_readwrite("batch_size", &Settings::batch_size)
      .def_readwrite("transform", &Settings::transform)
      .def_readwrite("seed", &Settings::seed)
      .def_readwrite("shuffle", &Settings::shuffle)
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
      .def_readwrite("stall_timeout_s", &Settings::stall_timeout_s)
      .def_readwrite("unavailable_timeout_s", &Settings::unavailable_timeout_s)
      .def_readwrite("output_slots", &Settings::output_slots)
      .def_readwrite("pinned_slots", &Settings::pinned_slots);

  py::class_<PyPipeline>(m, "Pipeline")
      .def(py::init<const Settings&>())
      .def_property_readonly("num_batches", &PyPipeline::num_batches)
      .def_property_readonly("dataset_samples", &PyPipeline::dataset_samples)
      .def_property_readonly("plan_id", &PyPipeline::plan_id)
      .def_property_readonly("closed", &PyPipeline::closed)
      .def("start", &PyPipeline::Start, py::arg("cursor"))
      .def("start_epoch", &PyPipeline::StartEpoch, py::arg("epoch"))
      .def("next", &PyPipeline::Next)
      .def("abandon", &PyPipeline::Abandon)
      .def("close", &PyPipeline::Close)
      .def("cursor", &PyPipeline::CursorText)
      .def("stats", &PyPipeline::Stats);

  py::class_<Checksum>(m, "Checksum",
                       "The digest stoker_fetch --checksum prints (see "
                       "client/checksum.h).")
      .def(py::init<>())
      .def("update", &ChecksumUpdate, py::arg("data"))
      .def("hex", &Checksum::Hex)
      .def_property_readonly("value", &Checksum::value);

  m.def("parse_cursor", &ParseCursorDict, py::arg("text"));
  m.def("set_log_level", &SetLogLevel, py::arg("level"));
  m.def("cuda_device_count", [] { return CudaDeviceCount(); });

  // The library logs lifecycle events at info; Python programs get warnings
  // and errors unless they ask for more (stoker.set_log_level).
  spdlog::set_level(spdlog::level::warn);
}
