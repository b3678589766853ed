#include "image/sample_processor.h"

#include <algorithm>
#include <climits>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace stoker::image {
namespace {

// Buffers larger than this are freed after the sample instead of being kept
// for the next one.
constexpr size_t kMaxKeptScratchBytes = size_t{64} << 20;

absl::Status CheckPlanShape(const SamplePlan& plan) {
  if (absl::Status s = ValidateWarp(plan.source_warp); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad source warp: ", s.message()));
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    if (step.kind == PlanStep::Kind::kWarp) {
      if (absl::Status s = ValidateWarp(step.warp); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad warp at step ", i, ": ", s.message()));
      }
    } else if (step.kind == PlanStep::Kind::kCustom) {
      if (step.custom.kernel == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("custom step ", i, " has no kernel"));
      }
    } else if (step.pixel.kernel == nullptr ||
               step.pixel.kernel->apply == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("pixel step ", i, " has no kernel"));
    }
  }
  return absl::OkStatus();
}

uint8_t* Reserve(std::vector<uint8_t>* buffer, size_t bytes) {
  if (buffer->size() < bytes) buffer->resize(bytes);
  return buffer->data();
}

}  // namespace

SampleProcessor::SampleProcessor(const SampleProcessorOptions& options)
    : options_(options) {}

absl::StatusOr<ImageHeader> SampleProcessor::Probe(absl::string_view bytes,
                                                   bool is_jpeg) const {
  absl::StatusOr<ImageHeader> header = ProbeImage(bytes);
  if (!header.ok()) {
    if (!is_jpeg) return header.status();
    return absl::DataLossError(
        absl::StrCat("not a JPEG image (", header.status().message(), ")"));
  }
  if (header->pixels() > options_.max_image_pixels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ImageCodecName(header->codec), " header claims ", header->width, "x",
        header->height, " = ", header->pixels(),
        " pixels, over the limit of ", options_.max_image_pixels,
        " (--max_image_pixels); refused before decoding"));
  }
  return header;
}

absl::StatusOr<ImageInfo> SampleProcessor::ReadInfo(absl::string_view bytes,
                                                    bool is_jpeg) {
  absl::StatusOr<ImageHeader> header = Probe(bytes, is_jpeg);
  if (!header.ok()) return header.status();
  return ImageInfo{static_cast<int>(header->width),
                   static_cast<int>(header->height)};
}

absl::Status SampleProcessor::Decode(
    absl::string_view bytes, const ImageHeader& header,
    absl::Span<const WarpStep* const> warps) {
  const ImageInfo size{static_cast<int>(header.width),
                       static_cast<int>(header.height)};
  if (header.codec != ImageCodec::kJpeg) {
    return DecodeWithOpenCV(bytes, size, &decoded_);
  }
  // One decode serves every warp: the finest scale any of them allows, and
  // the box around the regions they read.
  int denom = 8;
  for (const WarpStep* warp : warps) {
    denom = std::min(denom,
                     options_.dct_scaling ? ChooseScaleDenom(*warp) : 1);
  }
  JpegDecoder::Region region{0, 0, INT_MAX, INT_MAX};  // clipped by Decode
  if (options_.partial_decode) {
    int x0 = INT_MAX, y0 = INT_MAX, x1 = 0, y1 = 0;
    for (const WarpStep* warp : warps) {
      const PixelRect r = WarpReadRegion(*warp, size.width, size.height, denom);
      if (r.empty()) continue;
      x0 = std::min(x0, r.x);
      y0 = std::min(y0, r.y);
      x1 = std::max(x1, r.x + r.width);
      y1 = std::max(y1, r.y + r.height);
    }
    // Empty only when the warps read nothing (all fill, refused by the
    // caller); a pixel still checks that the bytes decode.
    region = x0 >= x1 ? JpegDecoder::Region{0, 0, 1, 1}
                      : JpegDecoder::Region{x0, y0, x1 - x0, y1 - y0};
  }
  if (absl::Status s = jpeg_.Decode(bytes, region, denom, &decoded_); !s.ok()) {
    return s;
  }
  if (decoded_.full_width != size.width || decoded_.full_height != size.height) {
    // libjpeg read another frame header than the probe (e.g. a second SOF).
    return absl::DataLossError(absl::StrCat(
        "JPEG decodes as ", decoded_.full_width, "x", decoded_.full_height,
        " but its first frame header claims ", size.width, "x", size.height));
  }
  return absl::OkStatus();
}

void SampleProcessor::ReleaseLargeBuffers() {
  if (decoded_.pixels.capacity() > kMaxKeptScratchBytes) {
    std::vector<uint8_t>().swap(decoded_.pixels);
  }
  for (std::vector<uint8_t>& image : images_) {
    if (image.capacity() > kMaxKeptScratchBytes) {
      std::vector<uint8_t>().swap(image);
    }
  }
  for (auto& pair : mask_images_) {
    for (std::vector<uint8_t>& image : pair) {
      if (image.capacity() > kMaxKeptScratchBytes) {
        std::vector<uint8_t>().swap(image);
      }
    }
  }
  warper_.ReleaseBuffersOver(kMaxKeptScratchBytes);
}

absl::Status SampleProcessor::RunCustomStep(const CustomStep& step,
                                            const ImageView& image,
                                            const MaskView* mask) const {
  // A copy: the plan stays untouched, so it replays the same numbers.
  common::CounterRng rng = step.rng;
  return step.kernel->Apply(rng, image, mask);
}

absl::Status SampleProcessor::Process(absl::string_view bytes, bool is_jpeg,
                                      const SamplePlan& plan, uint8_t* dst,
                                      SampleTimings* timings) {
  const SamplePlan* plans[] = {&plan};
  uint8_t* dsts[] = {dst};
  return ProcessViews(bytes, is_jpeg, plans, dsts, timings);
}

absl::Status SampleProcessor::ProcessViews(
    absl::string_view bytes, bool is_jpeg,
    absl::Span<const SamplePlan* const> plans, absl::Span<uint8_t* const> dsts,
    SampleTimings* timings, absl::Span<const MaskJob> masks) {
  if (plans.empty() || plans.size() != dsts.size()) {
    return absl::InvalidArgumentError("one destination per plan is needed");
  }
  std::vector<const WarpStep*> warps;
  for (size_t v = 0; v < plans.size(); ++v) {
    if (dsts[v] == nullptr) {
      return absl::InvalidArgumentError("null destination");
    }
    if (absl::Status s = CheckPlanShape(*plans[v]); !s.ok()) return s;
    warps.push_back(&plans[v]->source_warp);
  }
  const int64_t t0 = timings != nullptr ? common::SteadyNowNs() : 0;
  absl::StatusOr<ImageHeader> header = Probe(bytes, is_jpeg);
  if (!header.ok()) return header.status();
  const int width = static_cast<int>(header->width);
  const int height = static_cast<int>(header->height);
  for (const MaskJob& job : masks) {
    if (job.source->width != width || job.source->height != height) {
      return absl::DataLossError(absl::StrCat(
          "mask is ", job.source->width, "x", job.source->height,
          " but its image is ", width, "x", height));
    }
  }
  for (const WarpStep* warp : warps) {
    if (!WarpReadsInput(*warp, width, height)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan does not fit the ", width, "x", height,
          " image: no output pixel of its source warp maps inside it"));
    }
  }
  // A rare large image's buffers are given back rather than kept per worker
  // for the server's life.
  absl::Cleanup release_large = [this] { ReleaseLargeBuffers(); };
  if (absl::Status s = Decode(bytes, *header, warps); !s.ok()) {
    if (absl::IsInvalidArgument(s)) {
      // The decode region missed the image entirely.
      return absl::InvalidArgumentError(
          absl::StrCat("plan reads outside the image: ", s.message()));
    }
    return s;
  }
  const int64_t t1 = timings != nullptr ? common::SteadyNowNs() : 0;
  for (size_t v = 0; v < plans.size(); ++v) {
    if (absl::Status s = RunPlan(*plans[v], dsts[v],
                                 v == 0 ? masks : absl::Span<const MaskJob>());
        !s.ok()) {
      return s;
    }
  }
  if (timings != nullptr) {
    const int64_t t2 = common::SteadyNowNs();
    timings->decode_ns = t1 - t0;
    timings->transform_ns = t2 - t1;
  }
  return absl::OkStatus();
}

absl::Status SampleProcessor::ProcessFrame(DecodedImage& frame,
                                           const SamplePlan& plan,
                                           uint8_t* dst) {
  if (dst == nullptr) return absl::InvalidArgumentError("null destination");
  if (absl::Status s = CheckPlanShape(plan); !s.ok()) return s;
  if (frame.scale_denom != 1 || frame.src_x0 != 0 || frame.src_y0 != 0 ||
      frame.width != frame.full_width || frame.height != frame.full_height) {
    return absl::InvalidArgumentError("a frame must be a whole image");
  }
  if (!WarpReadsInput(plan.source_warp, frame.width, frame.height)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan does not fit the ", frame.width, "x", frame.height,
        " frame: no output pixel of its source warp maps inside it"));
  }
  std::swap(decoded_, frame);
  absl::Status s = RunPlan(plan, dst, {});
  std::swap(decoded_, frame);
  return s;
}

absl::Status SampleProcessor::RunPlan(const SamplePlan& plan, uint8_t* dst,
                                      absl::Span<const MaskJob> masks) {
  // The last warp writes straight into dst; earlier ones into the ping-pong
  // buffers. Pixel steps work in place on whatever is current.
  int last_warp = -1;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    if (plan.steps[i].kind == PlanStep::Kind::kWarp) {
      last_warp = static_cast<int>(i);
    }
  }
  const auto target = [&](const WarpStep& warp, int step_index,
                          int buffer) -> uint8_t* {
    if (step_index == last_warp) return dst;
    return Reserve(&images_[buffer],
                   3 * static_cast<size_t>(warp.out_width) * warp.out_height);
  };
  const auto unsupported = [](const absl::Status& s) {
    // Only limits the shape checks do not cover (e.g. shrinking by more
    // than 4096) get here.
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported plan: ", s.message()));
  };

  WarpSource source;
  source.pixels = decoded_.pixels.data();
  source.width = decoded_.width;
  source.height = decoded_.height;
  source.stride = decoded_.stride;
  source.origin_x = decoded_.src_x0;
  source.origin_y = decoded_.src_y0;
  source.scale_x = decoded_.scale_x;
  source.scale_y = decoded_.scale_y;
  source.input_width = decoded_.full_width;
  source.input_height = decoded_.full_height;
  int buffer = 0;
  ImageView current;
  current.width = plan.source_warp.out_width;
  current.height = plan.source_warp.out_height;
  current.stride = 3 * current.width;
  current.data = target(plan.source_warp, -1, buffer);
  if (absl::Status s = warper_.Warp(plan.source_warp, source, current.data,
                                    current.stride);
      !s.ok()) {
    return unsupported(s);
  }
  // Masks take every warp of the image, nearest-neighbour, in step with it
  // (so a custom step sees the mask aligned with the image).
  if (mask_images_.size() < masks.size()) mask_images_.resize(masks.size());
  std::vector<MaskView> mask_views(masks.size());
  const auto warp_masks = [&](const WarpStep& warp, int step_index,
                              int buffer) {
    for (size_t k = 0; k < masks.size(); ++k) {
      const MaskJob& job = masks[k];
      const int c = job.source->channels;
      uint8_t* out =
          step_index == last_warp
              ? job.dst
              : Reserve(&mask_images_[k][buffer], static_cast<size_t>(c) *
                                                      warp.out_width *
                                                      warp.out_height);
      const bool first = step_index < 0;
      WarpNearest(warp, first ? job.source->pixels.data() : mask_views[k].data,
                  first ? job.source->width : mask_views[k].width,
                  first ? job.source->height : mask_views[k].height, c,
                  job.fill, out);
      mask_views[k] = MaskView{out, warp.out_width, warp.out_height, c,
                               c * warp.out_width};
    }
  };
  warp_masks(plan.source_warp, -1, buffer);
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    if (step.kind == PlanStep::Kind::kPixel) {
      step.pixel.kernel->apply(step.pixel.args, current);
      continue;
    }
    if (step.kind == PlanStep::Kind::kCustom) {
      if (absl::Status s = RunCustomStep(
              step.custom, current,
              mask_views.empty() ? nullptr : &mask_views.front());
          !s.ok()) {
        return s;
      }
      continue;
    }
    buffer = 1 - buffer;
    ImageView next;
    next.width = step.warp.out_width;
    next.height = step.warp.out_height;
    next.stride = 3 * next.width;
    next.data = target(step.warp, static_cast<int>(i), buffer);
    if (absl::Status s = warper_.Warp(
            step.warp,
            WholeImage(current.data, current.width, current.height,
                       current.stride),
            next.data, next.stride);
        !s.ok()) {
      return unsupported(s);
    }
    warp_masks(step.warp, static_cast<int>(i), buffer);
    current = next;
  }
  return absl::OkStatus();
}

}  // namespace stoker::image
