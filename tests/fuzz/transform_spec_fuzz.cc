// Fuzz target for the transform pipeline text form (image/ops/transform.h).
// The input is used twice: as text for ParseTransform, and as a serialized
// v1::TransformPipeline, as a server receives it on the wire.
//
// Checked, beyond "no crash, no sanitizer report", as the header promises:
// ParseTransform fails only with InvalidArgument and what it returns passes
// ValidatePipeline and has an OutputSize; every parsed pipeline round-trips:
// ParseTransform(FormatTransform(p)) equals p; a valid wire pipeline (its
// arguments in any order, defaults left out) formats as text that parses
// and formats back to the same text. FormatTransform never fails on any
// pipeline, valid or not; a valid pipeline can be planned.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "image/ops/transform.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/stoker.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace stoker::image {
namespace {

using fuzz::FuzzCheck;

// `exact`: the pipeline is canonical (as ParseTransform makes it), so the
// round trip must give it back field for field.
void CheckRoundTrip(v1::TransformPipeline pipeline, absl::string_view origin,
                    bool exact) {
  // Unknown wire fields have no text form; they are not part of "equal".
  pipeline.DiscardUnknownFields();
  const std::string text = FormatTransform(pipeline);
  absl::StatusOr<v1::TransformPipeline> again = ParseTransform(text);
  FuzzCheck(again.ok(), absl::StrCat("valid pipeline ", origin, " formats as '",
                                     text, "', which does not parse: ",
                                     again.status().ToString()));
  FuzzCheck(
      !exact ||
          google::protobuf::util::MessageDifferencer::Equals(pipeline, *again),
      absl::StrCat("round trip of a pipeline ", origin, " through '", text,
                   "' changed it from {", pipeline.ShortDebugString(), "} to {",
                   again->ShortDebugString(), "}"));
  const std::string text_again = FormatTransform(*again);
  FuzzCheck(text_again == text,
            absl::StrCat("formatting is not stable: '", text, "' then '",
                         text_again, "'"));
}

void Run(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<v1::TransformPipeline> parsed = ParseTransform(text);
  if (parsed.ok()) {
    const absl::Status valid = ValidatePipeline(*parsed);
    FuzzCheck(valid.ok(), absl::StrCat("ParseTransform accepted a pipeline "
                                       "that ValidatePipeline refuses: ",
                                       valid.ToString()));
    FuzzCheck(OutputSize(*parsed).ok(), "parsed pipeline has no OutputSize");
    CheckRoundTrip(*parsed, "parsed from text", /*exact=*/true);
    absl::StatusOr<Transform> transform = Transform::Create(*parsed);
    FuzzCheck(transform.ok(), "a parsed pipeline cannot be created");
    const SamplePlan plan = transform->Plan(37, 23, size, /*trace=*/true);
    FuzzCheck(plan.out_width() == transform->output_size().width &&
                  plan.out_height() == transform->output_size().height,
              "a plan's output size differs from the pipeline's");
  } else {
    FuzzCheck(absl::IsInvalidArgument(parsed.status()),
              absl::StrCat("ParseTransform failed with a code other than "
                           "InvalidArgument: ",
                           parsed.status().ToString()));
  }

  v1::TransformPipeline wire;
  if (!wire.ParseFromArray(data, static_cast<int>(size))) return;
  const std::string formatted = FormatTransform(wire);
  const absl::Status valid = ValidatePipeline(wire);
  absl::StatusOr<std::pair<int, int>> out = OutputSize(wire);
  FuzzCheck(valid.ok() == out.ok(),
            "OutputSize and ValidatePipeline disagree on a wire pipeline");
  if (valid.ok()) {
    FuzzCheck(out->first >= 1 && out->first <= kMaxTransformSize &&
                  out->second >= 1 && out->second <= kMaxTransformSize,
              absl::StrCat("OutputSize ", out->first, "x", out->second,
                           " of a valid pipeline is out of range"));
    CheckRoundTrip(wire, "from the wire", /*exact=*/false);
  } else {
    FuzzCheck(absl::IsInvalidArgument(valid),
              absl::StrCat("ValidatePipeline failed with a code other than "
                           "InvalidArgument: ",
                           valid.ToString()));
  }
}

}  // namespace
}  // namespace stoker::image

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::image::Run(data, size);
  return 0;
}
