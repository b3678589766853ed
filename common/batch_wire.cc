#include "common/batch_wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace stoker::common {
namespace {

constexpr int kBatchField = 1;   // StreamBatchesResponse.batch
constexpr int kPixelsField = 15;  // Batch.pixels
constexpr int kWireVarint = 0;
constexpr int kWireFixed64 = 1;
constexpr int kWireLen = 2;
constexpr int kWireFixed32 = 5;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

size_t VarintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

// Sequential reader over a list of chunks.
class ChunkReader {
 public:
  explicit ChunkReader(absl::Span<const ByteChunk> chunks) : chunks_(chunks) {
    for (const ByteChunk& c : chunks) total_ += c.size;
    SkipEmpty();
  }

  size_t position() const { return position_; }
  size_t remaining() const { return total_ - position_; }
  bool AtEnd() const { return chunk_ >= chunks_.size(); }

  bool ReadByte(uint8_t* byte) {
    if (AtEnd()) return false;
    *byte = chunks_[chunk_].data[offset_];
    Advance(1);
    return true;
  }

  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte)) return false;
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  // Copies `n` bytes to `out` (or skips them when out is null).
  bool Read(size_t n, uint8_t* out) {
    if (n > remaining()) return false;
    while (n > 0) {
      if (AtEnd()) return false;
      const ByteChunk& c = chunks_[chunk_];
      size_t take = std::min(n, c.size - offset_);
      if (out != nullptr) {
        std::memcpy(out, c.data + offset_, take);
        out += take;
      }
      Advance(take);
      n -= take;
    }
    return true;
  }

  bool AppendTo(size_t n, std::string* out) {
    if (n > remaining()) return false;
    size_t old = out->size();
    out->resize(old + n);
    return Read(n, reinterpret_cast<uint8_t*>(&(*out)[old]));
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    position_ += n;
    if (offset_ == chunks_[chunk_].size) {
      ++chunk_;
      offset_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (chunk_ < chunks_.size() && chunks_[chunk_].size == 0) ++chunk_;
  }

  absl::Span<const ByteChunk> chunks_;
  size_t chunk_ = 0;
  size_t offset_ = 0;
  size_t position_ = 0;
  size_t total_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("malformed StreamBatchesResponse: ", what));
}

// Copies one field's value (after its tag, already appended to `rest`) into
// `rest`.
absl::Status CopyFieldValue(int wire_type, ChunkReader* reader,
                            std::string* rest) {
  switch (wire_type) {
    case kWireVarint: {
      uint64_t v;
      if (!reader->ReadVarint(&v)) return Malformed("truncated varint");
      AppendVarint(v, rest);
      return absl::OkStatus();
    }
    case kWireFixed64:
      if (!reader->AppendTo(8, rest)) return Malformed("truncated fixed64");
      return absl::OkStatus();
    case kWireFixed32:
      if (!reader->AppendTo(4, rest)) return Malformed("truncated fixed32");
      return absl::OkStatus();
    case kWireLen: {
      uint64_t len;
      if (!reader->ReadVarint(&len)) return Malformed("truncated length");
      AppendVarint(len, rest);
      if (!reader->AppendTo(len, rest)) return Malformed("truncated field");
      return absl::OkStatus();
    }
    default:
      return Malformed(absl::StrCat("unsupported wire type ", wire_type));
  }
}

absl::Status DecodeBatch(ChunkReader* reader, size_t end, const PixelSink& sink,
                         v1::Batch* batch) {
  std::string rest;
  bool have_pixels = false;
  while (reader->position() < end) {
    uint64_t tag;
    if (!reader->ReadVarint(&tag)) return Malformed("truncated tag");
    int field = static_cast<int>(tag >> 3);
    int wire_type = static_cast<int>(tag & 7);
    if (field == kPixelsField && wire_type == kWireLen) {
      if (have_pixels) return Malformed("pixels field repeated");
      uint64_t len;
      if (!reader->ReadVarint(&len)) return Malformed("truncated length");
      if (reader->position() > end || len > end - reader->position()) {
        return Malformed("pixels overrun");
      }
      absl::StatusOr<uint8_t*> dst = sink(len);
      if (!dst.ok()) return dst.status();
      if (!reader->Read(len, *dst)) return Malformed("truncated pixels");
      have_pixels = true;
      continue;
    }
    AppendVarint(tag, &rest);
    if (absl::Status s = CopyFieldValue(wire_type, reader, &rest); !s.ok()) {
      return s;
    }
  }
  if (reader->position() != end) return Malformed("batch length mismatch");
  if (!have_pixels) {
    absl::StatusOr<uint8_t*> dst = sink(0);
    if (!dst.ok()) return dst.status();
  }
  if (!batch->ParseFromString(rest)) return Malformed("bad batch fields");
  return absl::OkStatus();
}

}  // namespace

std::string EncodeBatchPrefix(const v1::Batch& header, size_t pixel_size) {
  std::string fields = header.SerializeAsString();
  std::string pixels_tag;
  AppendVarint((kPixelsField << 3) | kWireLen, &pixels_tag);
  AppendVarint(pixel_size, &pixels_tag);
  uint64_t batch_len = fields.size() + pixels_tag.size() + pixel_size;

  std::string out;
  out.reserve(1 + VarintSize(batch_len) + fields.size() + pixels_tag.size());
  AppendVarint((kBatchField << 3) | kWireLen, &out);
  AppendVarint(batch_len, &out);
  out += fields;
  out += pixels_tag;
  return out;
}

absl::Status DecodeResponse(absl::Span<const ByteChunk> chunks,
                            const PixelSink& sink,
                            v1::StreamBatchesResponse* response) {
  response->Clear();
  ChunkReader reader(chunks);
  std::string rest;
  while (!reader.AtEnd()) {
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) return Malformed("truncated tag");
    int field = static_cast<int>(tag >> 3);
    int wire_type = static_cast<int>(tag & 7);
    if (field == kBatchField && wire_type == kWireLen) {
      uint64_t len;
      if (!reader.ReadVarint(&len)) return Malformed("truncated length");
      if (response->has_batch()) return Malformed("batch field repeated");
      absl::Status s = DecodeBatch(&reader, reader.position() + len, sink,
                                   response->mutable_batch());
      if (!s.ok()) return s;
      continue;
    }
    AppendVarint(tag, &rest);
    if (absl::Status s = CopyFieldValue(wire_type, &reader, &rest); !s.ok()) {
      return s;
    }
  }
  if (!rest.empty()) {
    v1::StreamBatchesResponse other;
    if (!other.ParseFromString(rest)) return Malformed("bad response fields");
    response->MergeFrom(other);
  }
  return absl::OkStatus();
}

}  // namespace stoker::common
