#ifndef STOKER_CLIENT_FIELD_SPEC_H_
#define STOKER_CLIENT_FIELD_SPEC_H_

// The text form of a request's fields, for stoker_fetch --fields and
// stoker.Loader(fields=...):
//
//   image=jpg;jpeg;png:image, mask=seg.png:mask:channels=1:fill=255,
//   caption=txt:text, meta=json:bytes:empty, label=cls:class:skip
//
// Fields are separated by commas; each is NAME=EXTENSIONS:ROLE[:OPTION...].
//   EXTENSIONS  one or more member extensions separated by ';', tried in
//               order, case-insensitive, without the leading dot.
//   ROLE        image | mask | class | bytes | text (bytes that the Python
//               module hands back as str, decoded as UTF-8).
//   OPTION      error | skip | empty (what a sample without the member
//               does; default error), channels=N (mask, 1..4, default 1),
//               fill=V (mask, 0..255, default 0), transform=PIPELINE
//               (image: this view's own pipeline, torchvision syntax),
//               repeats=N (image: N views per sample, each with its own
//               random parameters).
// Commas inside parentheses belong to the pipeline. Several image fields
// are views of one decode (multi-crop):
//   global=jpg:image:transform=RandomResizedCrop(224, scale=(0.4, 1)):repeats=2,
//   local=jpg:image:transform=RandomResizedCrop(96, scale=(0.05, 0.4)):repeats=6
// The server checks the rest (an image field, unique names, ...).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/stoker.pb.h"

namespace stoker::client {

struct ParsedField {
  v1::FieldSpec spec;
  // Role "text": bytes on the wire, str in Python.
  bool text = false;
};

// InvalidArgument naming the field and what is wrong.
absl::StatusOr<std::vector<ParsedField>> ParseFields(absl::string_view text);

// The specs alone, for LoaderOptions::fields.
std::vector<v1::FieldSpec> FieldSpecs(const std::vector<ParsedField>& fields);

// Canonical text form of specs (role bytes for text fields, every option
// that differs from its default, pipelines in FormatTransform's form); it
// parses back to the same specs. Part of a loader's plan identity.
std::string FormatFields(const std::vector<v1::FieldSpec>& specs);

// The payload of a full batch of `batch_size` samples of `fields` (see
// server/sample_fields.h): every image field (its own transform's output
// size, or `transform`'s; times its repeats), every mask (the first image
// field's size, times its channels), and `bytes_value_bytes` per value of
// each bytes field. INVALID_ARGUMENT naming an image field whose pipeline
// has no fixed output size.
absl::StatusOr<size_t> FieldPayloadBytes(
    const std::vector<v1::FieldSpec>& fields,
    const v1::TransformPipeline& transform, int batch_size,
    size_t bytes_value_bytes);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_FIELD_SPEC_H_
