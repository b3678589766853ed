#ifndef STOKER_SERVER_TAR_SCANNER_H_
#define STOKER_SERVER_TAR_SCANNER_H_

// Scanning the headers of a POSIX tar archive, one event at a time: a
// member (its name, where its data is and how long it is) or a corrupt
// stretch that was skipped. Knows nothing about samples; ShardIndex::Build
// (server/shard_reader.h) feeds the members to a SampleGrouper.
//
// Tar dialects understood: ustar (including the 155-byte name prefix), GNU
// (long names in 'L' entries, base-256 sizes) and pax ('x' extended headers;
// their "path" and "size" records are honoured, global 'g' headers are
// skipped, and so are GNU long link names 'K'). Directories, links, devices
// and other non-regular entries are skipped, never reported.
//
// I/O pattern: one 512-byte read per header; GNU long names and pax records
// (at most kMaxMetaMemberBytes) are read whole; member data is never read,
// except in 64 KiB chunks when looking for the next valid header after a
// corrupt one or after an all-zero block.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace stoker::server {

// A stretch of a shard that indexing skipped because a tar header in it was
// corrupt. Plain value type.
struct CorruptRegion {
  // Byte offset of the corrupt header (512-aligned).
  int64_t offset = 0;
  // Bytes skipped: from `offset` to the next valid header found (or to the
  // end of the file if none was found).
  int64_t size = 0;
  // What was wrong with the header: "bad checksum", "bad size field",
  // "unparsable pax record", "<n>-byte long-name record" (or "pax record"),
  // or "all-zero block with more members after it".
  std::string reason;
};

// Reads the headers of one tar archive through a read function and reports
// its regular-file members and the stretches it had to skip, in file order.
//
// Not thread-safe: one scanner is used by one thread at a time. Owns no
// file descriptor; the read function (and whatever it reads) must outlive
// the scanner. Movable, not copyable.
//
// Resynchronisation. Normal parsing goes from header to header by the sizes
// in the headers, so member data is never taken for a header. When a header
// after the first is corrupt (bad checksum, unparsable size field, an
// unparsable pax record or a GNU long-name/pax record larger than
// kMaxMetaMemberBytes), the scanner reports a corrupt region and resumes:
//   - right after the corrupt header's member if its size field still
//     parses and the block it points to is a valid header (a damaged name
//     or mode, the common case; the member's data is not scanned);
//   - otherwise at the next 512-aligned block that is a valid header:
//     correct checksum, parsable size, a known type flag, a name, and
//     ustar/GNU magic or an old-style (v7) header.
// A corrupt pax or long-name record (or a header of that type with a bad
// checksum) also loses the member it names, whose own header holds at most
// a cut-down name: that member is not reported and the region is extended
// over it. An all-zero block where a header is due ends the archive only if
// no valid header follows it anywhere in the file; otherwise it is reported
// as a corrupt region ("all-zero block with more members after it").
//
// Truncation. When a header, header data (long name, pax record) or member
// data runs past the end of the file, or the file ends without an
// end-of-archive marker, the scan ends and truncation() says why. A member
// whose data is cut off is still reported, with `cut_off` set, as the last
// member.
class TarScanner {
 public:
  // GNU long names and pax records are read into memory; one larger than
  // this many bytes is treated as a corrupt header rather than trusted.
  static constexpr int64_t kMaxMetaMemberBytes = 1 << 20;

  // Reads up to `size` bytes at byte `offset` of the archive into `dst` and
  // returns how many were read: fewer only at the end of the data. An error
  // is passed on by Next() unchanged, so it should name the archive.
  using ReadFunction =
      std::function<absl::StatusOr<int64_t>(int64_t offset, int64_t size,
                                            char* dst)>;

  // A regular-file member.
  struct Member {
    // Its path in the archive: a pax "path" record, else a GNU long name,
    // else the header's name (joined to the ustar prefix, if any).
    std::string name;
    // Byte offset of its data in the archive and its size in bytes (a pax
    // "size" record overrides the header's).
    int64_t offset = 0;
    int64_t size = 0;
    // The data runs past the end of the file: this is the last member
    // reported, and truncation() names it.
    bool cut_off = false;
  };

  struct Event {
    enum class Kind {
      kMember,         // `member` is set.
      kCorruptRegion,  // `region` is set.
      kEnd,            // The scan is over; see truncation().
    };
    Kind kind = Kind::kEnd;
    Member member;
    CorruptRegion region;
  };

  // A scanner over an archive of `file_size` bytes read by `read`; `name`
  // (a path or URL) is used in error messages.
  TarScanner(ReadFunction read, int64_t file_size, std::string name);

  TarScanner(TarScanner&&) = default;
  TarScanner& operator=(TarScanner&&) = default;
  TarScanner(const TarScanner&) = delete;
  TarScanner& operator=(const TarScanner&) = delete;

  // The next event in file order. A corrupt region is reported once its
  // extent is final (after the member it lost, if any), so regions come in
  // file order, disjoint, and before every member that follows them. After
  // kEnd, every call returns kEnd again.
  //
  // Errors:
  //   DataLoss  the archive is not a tar at all: shorter than one header
  //             (empty included), or its first header has a bad checksum or
  //             an unparsable size field ("shard '<name>' is not a tar
  //             file: ...").
  //   other     errors of the read function, unchanged.
  // After an error the scanner must not be used again.
  absl::StatusOr<Event> Next();

  // Empty unless the archive is cut short; then why the scan stopped early,
  // e.g. "member 'a.jpg' needs 10240 bytes at offset 512 but the file has
  // 4000 bytes" or "no end-of-archive marker after byte 2048". Final once
  // Next() has returned kEnd.
  const std::string& truncation() const { return truncation_; }

 private:
  // Pax extended header records that apply to the next member.
  struct PaxOverrides {
    std::optional<std::string> path;
    std::optional<int64_t> size;
  };
  // What is wrong with a corrupt header and how to resume after it.
  struct Corruption {
    std::string reason;
    // The damaged header's size field, if it still parses and may be used
    // to skip the member.
    std::optional<int64_t> size_hint;
    // The header was a pax or long-name record: it named the next member.
    bool loses_next_member = false;
  };

  // Reads the header at offset_ and advances past it, queueing the events
  // it produces (none for most headers). Sets done_ when the scan is over.
  absl::Status Step();
  // Step() for a sound header other than a pax 'x' header: a GNU long
  // name, a skipped entry or a member, whose size field says `size`.
  absl::Status StepEntry(char type, int64_t size);
  // The corruption of the header in block_ at offset_ (nullopt if it is
  // sound), or DataLoss if it is the first header.
  absl::StatusOr<std::optional<Corruption>> Check(std::optional<int64_t> size);
  // Reads a pax header's records and applies them to pax_; advances past it
  // or returns the corruption.
  absl::StatusOr<std::optional<Corruption>> ReadPax(int64_t size);
  // Reads `size` bytes of header data at `offset` into meta_; false (with
  // truncation_ set and the scan over) if they are cut off.
  absl::StatusOr<bool> ReadMeta(int64_t offset, int64_t size);
  // Where scanning resumes after the corrupt header at `bad` (see the class
  // comment); nullopt if no valid header follows.
  absl::StatusOr<std::optional<int64_t>> FindResume(
      int64_t bad, std::optional<int64_t> size_hint);
  // First block at or after `from` that looks like a valid header.
  absl::StatusOr<std::optional<int64_t>> FindNextHeader(int64_t from);
  // Reports the stretch from the corrupt header at `bad` to `resume` (or the
  // end of the file), drops pending long names and pax records, and moves
  // on to `resume` (or ends the scan).
  void SkipCorrupt(int64_t bad, std::optional<int64_t> resume,
                   std::string reason, bool loses_next_member);
  // Queues the region waiting for the member it lost, if any.
  void FlushPendingRegion();
  // Ends the scan (after flushing the pending region).
  void Finish();

  // Constant after construction.
  ReadFunction read_;
  int64_t file_size_ = 0;
  std::string name_;

  // Scan state.
  int64_t offset_ = 0;  // Next header, 512-aligned.
  bool done_ = false;
  std::string truncation_;
  std::optional<std::string> long_name_;
  PaxOverrides pax_;
  // A region whose corrupt pax/long-name record named the next member,
  // which is dropped and added to the region before it is reported.
  std::optional<CorruptRegion> pending_region_;
  std::deque<Event> ready_;
  std::string meta_;  // Long name or pax data, reused.
  std::string block_;  // The current header block, 512 bytes.
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_TAR_SCANNER_H_
