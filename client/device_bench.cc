// Benchmarks the GPU side of the client:
//   1. host->device copy GB/s through the device loader's pinned pool path
//      (uint8 NHWC batches, no conversion) vs plain cudaMemcpy and
//      cudaMemcpyAsync from pinned memory of the same size, in alternating
//      rounds;
//   2. the conversion kernel's GB/s (bytes read + written per second) for
//      every dtype and layout, next to the device's own memory bandwidth
//      (a large device-to-device cudaMemcpy) measured in the same run;
//   3. the fraction of time a synthetic GPU consumer (a spin kernel of
//      --consumer_us per batch) waits for data when batches are already on
//      the host (a source that hands out pre-filled pinned batches).
// Without a GPU it says so, measures the host conversion and exits 0.
//
//   bazel run -c opt //client:device_bench -- --consumer_us=20000

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/batch_source.h"
#include "client/convert.h"
#include "client/convert_kernels.h"
#include "client/cuda_runtime.h"
#include "client/device_loader.h"
#include "client/host_batch.h"
#include "common/command_line.h"

ABSL_FLAG(int, batch, 256, "Images per batch.");
ABSL_FLAG(int, height, 224, "Image height.");
ABSL_FLAG(int, width, 224, "Image width.");
ABSL_FLAG(int, batches, 40, "Batches per loader measurement.");
ABSL_FLAG(int, iters, 20, "Repetitions per kernel / memcpy measurement.");
ABSL_FLAG(int, host_iters, 2, "Repetitions per host conversion measurement.");
ABSL_FLAG(int64_t, consumer_us, 20000,
          "GPU time of the synthetic consumer per batch, in microseconds.");
ABSL_FLAG(std::string, dtype, "float32", "Loader output dtype for (3).");
ABSL_FLAG(std::string, layout, "NCHW", "Loader output layout for (3).");
ABSL_FLAG(int, device_id, 0, "CUDA device.");
ABSL_FLAG(int, output_slots, 4, "DeviceLoaderOptions.output_slots.");
ABSL_FLAG(int, pinned_slots, 4, "DeviceLoaderOptions.pinned_slots.");

namespace stoker::client {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

#define BENCH_CHECK_OK(expr)                                       \
  do {                                                             \
    const absl::Status _s = (expr);                                \
    if (!_s.ok()) {                                                \
      std::fprintf(stderr, "%s: %s\n", #expr, _s.ToString().c_str()); \
      return 1;                                                    \
    }                                                              \
  } while (0)

// Hands out `count` batches whose pixels are pinned slots filled once up
// front (a freed slot keeps its content), so no host work is measured.
class PremadeSource : public BatchSource {
 public:
  PremadeSource(PinnedPool* pool, const ImageShape& shape, int count)
      : pool_(pool), shape_(shape), count_(count) {}

  // Writes every slot once.
  absl::Status Fill() {
    std::vector<PixelBuffer> all;
    for (int i = 0; i < pool_->slots(); ++i) {
      absl::StatusOr<PixelBuffer> b = pool_->Allocate(shape_.elements());
      if (!b.ok()) return b.status();
      for (size_t j = 0; j < b->size(); ++j) {
        b->data()[j] = static_cast<uint8_t>(j * 31 + i);
      }
      all.push_back(*std::move(b));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<HostBatch> Next() override {
    int64_t index;
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return absl::CancelledError("cancelled");
      if (produced_ == count_) return absl::OutOfRangeError("done");
      index = produced_++;
    }
    HostBatch b;
    b.batch_index = index;
    b.n = static_cast<int>(shape_.n);
    b.height = static_cast<int>(shape_.height);
    b.width = static_cast<int>(shape_.width);
    b.channels = static_cast<int>(shape_.channels);
    absl::StatusOr<PixelBuffer> pixels = pool_->Allocate(b.pixel_bytes());
    if (!pixels.ok()) return pixels.status();
    b.pixels = *std::move(pixels);
    b.labels.assign(b.n, 7);
    return b;
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

 private:
  PinnedPool* const pool_;
  const ImageShape shape_;
  const int count_;
  absl::Mutex mu_;
  int produced_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

const DType kDTypes[] = {DType::kUint8, DType::kFloat32, DType::kFloat16,
                         DType::kBFloat16};
const Layout kLayouts[] = {Layout::kNCHW, Layout::kNHWC};

int HostConversion(const ImageShape& shape) {
  std::printf("host conversion (single thread), %lldx%lldx%lldx%lld uint8:\n",
              static_cast<long long>(shape.n),
              static_cast<long long>(shape.height),
              static_cast<long long>(shape.width),
              static_cast<long long>(shape.channels));
  std::vector<uint8_t> src(shape.elements());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> dst(ConvertedBytes(shape, DType::kFloat32));
  const int iters = std::max(1, absl::GetFlag(FLAGS_host_iters));
  for (DType dtype : kDTypes) {
    for (Layout layout : kLayouts) {
      ConvertOptions options;
      options.dtype = dtype;
      options.layout = layout;
      BENCH_CHECK_OK(ConvertOnHost(src.data(), shape, options, dst.data()));
      const auto start = Clock::now();
      for (int i = 0; i < iters; ++i) {
        BENCH_CHECK_OK(ConvertOnHost(src.data(), shape, options, dst.data()));
      }
      const double s = Seconds(start, Clock::now()) / iters;
      const double bytes = src.size() + ConvertedBytes(shape, dtype);
      std::printf("  %-8s %s  %8.2f ms  %7.2f GB/s\n",
                  std::string(DTypeName(dtype)).c_str(),
                  std::string(LayoutName(layout)).c_str(), s * 1e3,
                  bytes / s / 1e9);
    }
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<DeviceLoader>> MakeLoader(
    const ImageShape& shape, DType dtype, Layout layout) {
  DeviceLoaderOptions o;
  o.device = DeviceKind::kCuda;
  o.device_id = absl::GetFlag(FLAGS_device_id);
  o.convert.dtype = dtype;
  o.convert.layout = layout;
  o.max_batch_bytes = shape.elements();
  o.pinned_slots = absl::GetFlag(FLAGS_pinned_slots);
  o.output_slots = absl::GetFlag(FLAGS_output_slots);
  return DeviceLoader::Create(o);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Alternates rounds of the two paths (the link's speed drifts; a single
// measurement of each was seen to differ 2x between runs) and reports the
// median round of each.
int CopyBandwidth(const ImageShape& shape) {
  constexpr int kRounds = 5;
  const size_t bytes = shape.elements();
  const int iters = absl::GetFlag(FLAGS_iters);
  const int batches = absl::GetFlag(FLAGS_batches);
  const int slots = absl::GetFlag(FLAGS_output_slots);
  absl::StatusOr<void*> pinned = CudaHostAlloc(bytes);
  absl::StatusOr<void*> device = CudaMalloc(bytes);
  BENCH_CHECK_OK(pinned.status());
  BENCH_CHECK_OK(device.status());
  std::memset(*pinned, 1, bytes);
  BENCH_CHECK_OK(CudaMemcpy(*device, *pinned, bytes));

  absl::StatusOr<std::unique_ptr<DeviceLoader>> loader =
      MakeLoader(shape, DType::kUint8, Layout::kNHWC);
  BENCH_CHECK_OK(loader.status());
  PremadeSource source((*loader)->pinned_allocator(), shape,
                       kRounds * (batches + slots));
  BENCH_CHECK_OK(source.Fill());
  BENCH_CHECK_OK((*loader)->Start(&source));
  auto next = [&]() -> absl::Status {
    absl::StatusOr<DeviceBatch> b = (*loader)->Next();
    if (!b.ok()) return b.status();
    return b->Synchronize();
  };

  absl::StatusOr<CudaStream> stream = CudaStreamCreate();
  BENCH_CHECK_OK(stream.status());
  std::vector<double> plain, async, loaded;
  for (int round = 0; round < kRounds; ++round) {
    auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      BENCH_CHECK_OK(CudaMemcpy(*device, *pinned, bytes));
    }
    plain.push_back(bytes * static_cast<double>(iters) /
                    Seconds(start, Clock::now()) / 1e9);
    start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      BENCH_CHECK_OK(CudaMemcpyAsync(*device, *pinned, bytes, *stream));
      BENCH_CHECK_OK(CudaStreamSynchronize(*stream));
    }
    async.push_back(bytes * static_cast<double>(iters) /
                    Seconds(start, Clock::now()) / 1e9);
    // Batches converted ahead while the loader was not being read are not
    // steady state: take them untimed.
    for (int i = 0; i < slots; ++i) BENCH_CHECK_OK(next());
    start = Clock::now();
    for (int i = 0; i < batches; ++i) BENCH_CHECK_OK(next());
    loaded.push_back(bytes * static_cast<double>(batches) /
                     Seconds(start, Clock::now()) / 1e9);
  }
  (*loader)->Stop();
  CudaStreamDestroy(*stream);
  CudaFree(*device);
  CudaFreeHost(*pinned);
  const double plain_gbs = Median(plain);
  const double async_gbs = Median(async);
  const double loader_gbs = Median(loaded);
  // The loader is compared with the faster of the two plain copies.
  const double best = std::max(plain_gbs, async_gbs);
  std::printf(
      "host->device copy, %.1f MB per batch (median of %d alternating "
      "rounds):\n"
      "  plain cudaMemcpy from pinned memory         %7.2f GB/s\n"
      "  plain cudaMemcpyAsync on a stream + sync    %7.2f GB/s\n"
      "  device loader (pinned pool path)            %7.2f GB/s  (%.0f%% of "
      "the faster plain copy)\n"
      "  rounds, memcpy / async / loader GB/s:",
      bytes / 1e6, kRounds, plain_gbs, async_gbs, loader_gbs,
      100 * loader_gbs / best);
  for (int i = 0; i < kRounds; ++i) {
    std::printf(" %.1f/%.1f/%.1f", plain[i], async[i], loaded[i]);
  }
  std::printf("\n");
  return 0;
}

// Device memory bandwidth as the kernel's reference: a device-to-device
// cudaMemcpyAsync of `bytes`, counting bytes read plus bytes written.
absl::StatusOr<double> DeviceCopyGBs(size_t bytes, int iters,
                                     CudaStream stream, CudaEvent begin,
                                     CudaEvent end) {
  absl::StatusOr<void*> a = CudaMalloc(bytes);
  if (!a.ok()) return a.status();
  absl::StatusOr<void*> b = CudaMalloc(bytes);
  if (!b.ok()) {
    CudaFree(*a);
    return b.status();
  }
  absl::Status s = CudaMemsetAsync(*a, 0x5a, bytes, stream);
  for (int i = 0; s.ok() && i < 3; ++i) {
    s = CudaMemcpyAsync(*b, *a, bytes, stream);
  }
  if (s.ok()) s = CudaEventRecord(begin, stream);
  for (int i = 0; s.ok() && i < iters; ++i) {
    s = CudaMemcpyAsync(i % 2 ? *a : *b, i % 2 ? *b : *a, bytes, stream);
  }
  if (s.ok()) s = CudaEventRecord(end, stream);
  if (s.ok()) s = CudaEventSynchronize(end);
  absl::StatusOr<float> ms =
      s.ok() ? CudaEventElapsedMs(begin, end) : absl::StatusOr<float>(s);
  CudaFree(*a);
  CudaFree(*b);
  if (!ms.ok()) return ms.status();
  return 2.0 * bytes * iters / (*ms / 1e3) / 1e9;
}

int KernelBandwidth(const ImageShape& shape) {
  const int iters = absl::GetFlag(FLAGS_iters);
  // Enough distinct inputs that together they exceed the L2 cache (50 MB on
  // an H100), so every launch reads its input from device memory, as a
  // freshly copied batch is.
  constexpr int kInputs = 4;
  std::vector<void*> inputs;
  for (int i = 0; i < kInputs; ++i) {
    absl::StatusOr<void*> src = CudaMalloc(shape.elements());
    BENCH_CHECK_OK(src.status());
    inputs.push_back(*src);
  }
  absl::StatusOr<void*> dst =
      CudaMalloc(ConvertedBytes(shape, DType::kFloat32));
  BENCH_CHECK_OK(dst.status());
  absl::StatusOr<CudaStream> stream = CudaStreamCreate();
  BENCH_CHECK_OK(stream.status());
  {
    // Random pixels (a conversion does the same work for any value, but
    // zeros or constants could hide unwritten output in a check).
    std::vector<uint8_t> random(shape.elements());
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint8_t& v : random) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v = static_cast<uint8_t>(x >> 24);
    }
    for (void* in : inputs) {
      BENCH_CHECK_OK(CudaMemcpy(in, random.data(), random.size()));
    }
  }
  absl::StatusOr<CudaEvent> begin = CudaEventCreate(/*timing=*/true);
  absl::StatusOr<CudaEvent> end = CudaEventCreate(/*timing=*/true);
  BENCH_CHECK_OK(begin.status());
  BENCH_CHECK_OK(end.status());
  absl::StatusOr<double> device_gbs =
      DeviceCopyGBs(size_t{1} << 30, iters, *stream, *begin, *end);
  BENCH_CHECK_OK(device_gbs.status());
  std::printf(
      "device memory bandwidth (cudaMemcpy device->device of 1 GiB, read + "
      "written):\n  %7.0f GB/s\n",
      *device_gbs);
  std::printf("conversion kernel, %lldx%lldx%lldx%lld uint8 input "
              "(bytes read + written; %% of the device copy above):\n",
              static_cast<long long>(shape.n),
              static_cast<long long>(shape.height),
              static_cast<long long>(shape.width),
              static_cast<long long>(shape.channels));
  for (DType dtype : kDTypes) {
    for (Layout layout : kLayouts) {
      ConvertOptions options;
      options.dtype = dtype;
      options.layout = layout;
      auto input = [&](int i) {
        return static_cast<const uint8_t*>(inputs[i % kInputs]);
      };
      for (int i = 0; i < kInputs; ++i) {
        BENCH_CHECK_OK(ConvertOnDevice(input(i), shape, options, *dst,
                                       *stream));
      }
      BENCH_CHECK_OK(CudaEventRecord(*begin, *stream));
      for (int i = 0; i < iters; ++i) {
        BENCH_CHECK_OK(ConvertOnDevice(input(i), shape, options, *dst,
                                       *stream));
      }
      BENCH_CHECK_OK(CudaEventRecord(*end, *stream));
      BENCH_CHECK_OK(CudaEventSynchronize(*end));
      absl::StatusOr<float> ms = CudaEventElapsedMs(*begin, *end);
      BENCH_CHECK_OK(ms.status());
      const double per = *ms / 1e3 / iters;
      const double bytes = shape.elements() + ConvertedBytes(shape, dtype);
      const double gbs = bytes / per / 1e9;
      std::printf("  %-8s %s  %8.1f us  %7.0f GB/s  %5.1f%%\n",
                  std::string(DTypeName(dtype)).c_str(),
                  std::string(LayoutName(layout)).c_str(), per * 1e6, gbs,
                  100 * gbs / *device_gbs);
    }
  }
  CudaEventDestroy(*begin);
  CudaEventDestroy(*end);
  CudaStreamDestroy(*stream);
  for (void* in : inputs) CudaFree(in);
  CudaFree(*dst);
  return 0;
}

int ConsumerWait(const ImageShape& shape) {
  absl::StatusOr<DType> dtype = ParseDType(absl::GetFlag(FLAGS_dtype));
  absl::StatusOr<Layout> layout = ParseLayout(absl::GetFlag(FLAGS_layout));
  BENCH_CHECK_OK(dtype.status());
  BENCH_CHECK_OK(layout.status());
  const int batches = absl::GetFlag(FLAGS_batches);
  const int64_t consumer_ns = absl::GetFlag(FLAGS_consumer_us) * 1000;
  absl::StatusOr<std::unique_ptr<DeviceLoader>> loader =
      MakeLoader(shape, *dtype, *layout);
  BENCH_CHECK_OK(loader.status());
  PremadeSource source((*loader)->pinned_allocator(), shape, batches);
  BENCH_CHECK_OK(source.Fill());
  absl::StatusOr<CudaStream> consumer = CudaStreamCreate();
  BENCH_CHECK_OK(consumer.status());
  std::vector<CudaEvent> starts(batches), ends(batches);
  for (int i = 0; i < batches; ++i) {
    absl::StatusOr<CudaEvent> s = CudaEventCreate(/*timing=*/true);
    absl::StatusOr<CudaEvent> e = CudaEventCreate(/*timing=*/true);
    BENCH_CHECK_OK(s.status());
    BENCH_CHECK_OK(e.status());
    starts[i] = *s;
    ends[i] = *e;
  }
  BENCH_CHECK_OK((*loader)->Start(&source));
  double host_blocked_s = 0;
  for (int i = 0; i < batches; ++i) {
    const auto t0 = Clock::now();
    absl::StatusOr<DeviceBatch> b = (*loader)->Next();
    host_blocked_s += Seconds(t0, Clock::now());
    BENCH_CHECK_OK(b.status());
    BENCH_CHECK_OK(b->WaitOn(*consumer));
    BENCH_CHECK_OK(CudaEventRecord(starts[i], *consumer));
    BENCH_CHECK_OK(kernels::LaunchSpinKernel(consumer_ns, *consumer) == 0
                       ? absl::OkStatus()
                       : absl::InternalError("spin kernel launch failed"));
    BENCH_CHECK_OK(CudaEventRecord(ends[i], *consumer));
    // `b` is released here, recording on the consumer stream.
  }
  BENCH_CHECK_OK(CudaStreamSynchronize(*consumer));
  (*loader)->Stop();
  // The first batch's own latency is not steady state: measure from the
  // first consumer start to the last end.
  double busy_ms = 0;
  for (int i = 0; i < batches; ++i) {
    absl::StatusOr<float> ms = CudaEventElapsedMs(starts[i], ends[i]);
    BENCH_CHECK_OK(ms.status());
    busy_ms += *ms;
  }
  absl::StatusOr<float> total_ms =
      CudaEventElapsedMs(starts[0], ends[batches - 1]);
  BENCH_CHECK_OK(total_ms.status());
  std::printf(
      "synthetic consumer, %s %s, %lld us per batch, %d batches, %d output "
      "slots:\n"
      "  GPU waiting for data  %5.1f%% of %.1f ms\n"
      "  host blocked in Next  %.2f ms per batch\n",
      std::string(DTypeName(*dtype)).c_str(),
      std::string(LayoutName(*layout)).c_str(),
      static_cast<long long>(consumer_ns / 1000), batches,
      absl::GetFlag(FLAGS_output_slots),
      100.0 * std::max(0.0, 1.0 - busy_ms / *total_ms), *total_ms,
      host_blocked_s * 1e3 / batches);
  for (int i = 0; i < batches; ++i) {
    CudaEventDestroy(starts[i]);
    CudaEventDestroy(ends[i]);
  }
  CudaStreamDestroy(*consumer);
  return 0;
}

int Main() {
  const ImageShape shape{absl::GetFlag(FLAGS_batch),
                         absl::GetFlag(FLAGS_height),
                         absl::GetFlag(FLAGS_width), 3};
  BENCH_CHECK_OK(ValidateImageShape(shape));
  const int device_id = absl::GetFlag(FLAGS_device_id);
  if (absl::Status s = CheckCudaDevice(device_id); !s.ok()) {
    std::printf("no GPU present (%s)\n", std::string(s.message()).c_str());
    return HostConversion(shape);
  }
  if (absl::GetFlag(FLAGS_batches) < 1 || absl::GetFlag(FLAGS_iters) < 1) {
    std::fprintf(stderr, "--batches and --iters must be >= 1\n");
    return 1;
  }
  BENCH_CHECK_OK(CudaSetDevice(device_id));
  absl::StatusOr<std::string> name = CudaDeviceName(device_id);
  std::printf("device %d: %s\n", device_id,
              name.ok() ? name->c_str() : "unknown");
  if (int rc = CopyBandwidth(shape); rc != 0) return rc;
  if (int rc = KernelBandwidth(shape); rc != 0) return rc;
  return ConsumerWait(shape);
}

}  // namespace
}  // namespace stoker::client

int main(int argc, char** argv) {
  stoker::common::SetUsage(
      "GPU side of the client: pinned copy vs plain copies, the conversion "
      "kernel vs the device's memory bandwidth, a synthetic consumer's wait.\n"
      "Example: device_bench --consumer_us=20000");
  absl::ParseCommandLine(argc, argv);
  return stoker::client::Main();
}
