#include "server/tar_scanner.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kBlock = 512;

enum class Magic { kPosix, kGnu, kV7 };

// One tar entry as the test writes it.
struct Entry {
  std::string name;
  std::string data;
  char type = '0';
  Magic magic = Magic::kPosix;
  std::string prefix;                 // ustar name prefix
  std::optional<int64_t> size_field;  // header size if not data.size()
  bool base256 = false;               // GNU base-256 size field
};

void PutOctal(char* field, int len, int64_t value) {
  std::snprintf(field, len, "%0*llo", len - 1,
                static_cast<unsigned long long>(value));
}

std::string Header(const Entry& e) {
  std::string h(kBlock, '\0');
  std::memcpy(h.data(), e.name.data(), std::min<size_t>(e.name.size(), 100));
  PutOctal(&h[100], 8, 0644);
  PutOctal(&h[108], 8, 0);
  PutOctal(&h[116], 8, 0);
  const int64_t size = e.size_field.value_or(e.data.size());
  if (e.base256) {
    h[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) {
      h[135 - i] = static_cast<char>((size >> (8 * i)) & 0xff);
    }
  } else {
    PutOctal(&h[124], 12, size);
  }
  PutOctal(&h[136], 12, 0);
  h[156] = e.type;
  if (e.magic == Magic::kPosix) std::memcpy(&h[257], "ustar\0" "00", 8);
  if (e.magic == Magic::kGnu) std::memcpy(&h[257], "ustar  \0", 8);
  std::memcpy(&h[345], e.prefix.data(), std::min<size_t>(e.prefix.size(), 155));
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(&h[148], 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

std::string Padded(const std::string& data) {
  return data + std::string((kBlock - data.size() % kBlock) % kBlock, '\0');
}

// The entries, then the end-of-archive marker if `end_marker`.
std::string Tar(const std::vector<Entry>& entries, bool end_marker = true) {
  std::string out;
  for (const Entry& e : entries) out += Header(e) + Padded(e.data);
  if (end_marker) out += std::string(2 * kBlock, '\0');
  return out;
}

// A pax record "<len> <key>=<value>\n".
std::string PaxRecord(const std::string& key, const std::string& value) {
  const std::string body = absl::StrCat(" ", key, "=", value, "\n");
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) {
    len = std::to_string(len).size() + body.size();
  }
  return absl::StrCat(len, body);
}

// Offset of the header of the `i`th entry of `entries` in Tar(entries).
int64_t HeaderOffset(const std::vector<Entry>& entries, size_t i) {
  int64_t at = 0;
  for (size_t j = 0; j < i; ++j) {
    at += kBlock + static_cast<int64_t>(Padded(entries[j].data).size());
  }
  return at;
}

// An archive in memory, with a record of every read.
class FakeSource {
 public:
  explicit FakeSource(std::string data) : data_(std::move(data)) {}

  TarScanner::ReadFunction Reader() {
    return [this](int64_t offset, int64_t size,
                  char* dst) -> absl::StatusOr<int64_t> {
      reads_.emplace_back(offset, size);
      if (fail_at_ >= 0 && offset + size > fail_at_) {
        return absl::UnavailableError("injected read error");
      }
      const int64_t n = std::max<int64_t>(
          0, std::min<int64_t>(size, static_cast<int64_t>(data_.size()) -
                                         offset));
      std::memcpy(dst, data_.data() + offset, n);
      return n;
    };
  }

  int64_t size() const { return data_.size(); }
  // Reads that touch bytes at or after `offset` fail from now on.
  void FailReadsFrom(int64_t offset) { fail_at_ = offset; }
  const std::vector<std::pair<int64_t, int64_t>>& reads() const {
    return reads_;
  }

 private:
  const std::string data_;
  int64_t fail_at_ = -1;
  std::vector<std::pair<int64_t, int64_t>> reads_;
};

// "member NAME @OFFSET+SIZE", "cut NAME @OFFSET+SIZE" or
// "corrupt @OFFSET+SIZE REASON".
std::string Describe(const TarScanner::Event& event) {
  switch (event.kind) {
    case TarScanner::Event::Kind::kMember:
      return absl::StrCat(event.member.cut_off ? "cut " : "member ",
                          event.member.name, " @", event.member.offset, "+",
                          event.member.size);
    case TarScanner::Event::Kind::kCorruptRegion:
      return absl::StrCat("corrupt @", event.region.offset, "+",
                          event.region.size, " ", event.region.reason);
    case TarScanner::Event::Kind::kEnd:
      return "end";
  }
  return "?";
}

class TarScannerTest : public ::testing::Test {
 protected:
  // Scans `data` to the end; the events before kEnd, described.
  std::vector<std::string> ScanAll(const std::string& data) {
    source_.emplace(data);
    scanner_.emplace(source_->Reader(), source_->size(), "test.tar");
    std::vector<std::string> events;
    for (int i = 0; i < 1000; ++i) {
      absl::StatusOr<TarScanner::Event> event = scanner_->Next();
      EXPECT_TRUE(event.ok()) << event.status();
      if (!event.ok() || event->kind == TarScanner::Event::Kind::kEnd) break;
      events.push_back(Describe(*event));
    }
    return events;
  }

  // The first error of scanning `data`, or OK.
  absl::Status ScanError(const std::string& data) {
    source_.emplace(data);
    scanner_.emplace(source_->Reader(), source_->size(), "test.tar");
    for (int i = 0; i < 1000; ++i) {
      absl::StatusOr<TarScanner::Event> event = scanner_->Next();
      if (!event.ok()) return event.status();
      if (event->kind == TarScanner::Event::Kind::kEnd) break;
    }
    return absl::OkStatus();
  }

  std::optional<FakeSource> source_;
  std::optional<TarScanner> scanner_;
};

TEST_F(TarScannerTest, ReportsUstarMembersWithDataOffsetsAndSizes) {
  const std::vector<Entry> entries = {
      {"a.cls", "3\n"},
      {"a.jpg", std::string(1000, 'j')},
      {"n.jpg", "x", '0', Magic::kPosix, "some/dir"},
      {"old.jpg", "v7", '\0', Magic::kV7},
      {"c.jpg", "contiguous", '7'},
  };
  EXPECT_THAT(ScanAll(Tar(entries)),
              ElementsAre("member a.cls @512+2", "member a.jpg @1536+1000",
                          "member some/dir/n.jpg @3072+1",
                          "member old.jpg @4096+2", "member c.jpg @5120+10"));
  EXPECT_THAT(scanner_->truncation(), IsEmpty());
}

TEST_F(TarScannerTest, NeverReadsMemberDataOfAnIntactArchive) {
  const std::vector<Entry> entries = {{"a.jpg", std::string(5000, 'j')},
                                      {"a.cls", "1"}};
  ScanAll(Tar(entries));
  // Header reads only, then the scan past the end marker for more headers.
  for (const auto& [offset, size] : source_->reads()) {
    EXPECT_FALSE(offset < HeaderOffset(entries, 1) && offset + size > 512)
        << "read " << size << " bytes at " << offset;
  }
  ASSERT_FALSE(source_->reads().empty());
  EXPECT_EQ(source_->reads().front().first, 0);
  EXPECT_EQ(source_->reads().front().second, 512);
}

TEST_F(TarScannerTest, GnuLongNameNamesTheNextMember) {
  const std::string long_name = std::string(150, 'd') + "/k.jpg";
  const std::vector<Entry> entries = {
      {"././@LongLink", long_name + '\0', 'L', Magic::kGnu},
      {long_name.substr(0, 100), "img", '0', Magic::kGnu},
      {"short.cls", "1", '0', Magic::kGnu},
  };
  EXPECT_THAT(ScanAll(Tar(entries)),
              ElementsAre(absl::StrCat("member ", long_name, " @1536+3"),
                          "member short.cls @2560+1"));
}

TEST_F(TarScannerTest, GnuBase256SizeIsRead) {
  Entry big{"a.jpg", std::string(700, 'j')};
  big.base256 = true;
  EXPECT_THAT(ScanAll(Tar({big, {"a.cls", "1"}})),
              ElementsAre("member a.jpg @512+700", "member a.cls @2048+1"));
}

TEST_F(TarScannerTest, PaxPathAndSizeOverrideTheNextHeaderOnly) {
  const std::string long_name = std::string(130, 'r') + ".png";
  const std::string pax =
      PaxRecord("path", long_name) + PaxRecord("size", "5") +
      PaxRecord("mtime", "1.5");
  // The pax size (5) wins over the header's (0); the data is 5 bytes.
  Entry member{"cut-down.png", "12345"};
  member.size_field = 0;
  const std::vector<Entry> entries = {
      {"PaxHeaders/x", pax, 'x'}, member, {"next.cls", "1"}};
  EXPECT_THAT(ScanAll(Tar(entries)),
              ElementsAre(absl::StrCat("member ", long_name, " @1536+5"),
                          "member next.cls @2560+1"));
}

TEST_F(TarScannerTest, GlobalPaxHeadersLinksAndDirectoriesAreNotMembers) {
  const std::vector<Entry> entries = {
      {"pax_global_header", PaxRecord("path", "ignored.jpg"), 'g'},
      {"dir/", "", '5'},
      {"dir/link.jpg", "", '2'},
      {"././@LongLink", "long-link-target", 'K', Magic::kGnu},
      {"dir/hard.jpg", "", '1'},
      {"dir/a.jpg", "A"},
  };
  EXPECT_THAT(ScanAll(Tar(entries)),
              ElementsAre(absl::StrCat("member dir/a.jpg @",
                                       HeaderOffset(entries, 5) + 512, "+1")));
}

TEST_F(TarScannerTest, NonTarInputIsDataLoss) {
  absl::Status status = ScanError("tiny");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("test.tar"));
  EXPECT_THAT(status.message(), HasSubstr("shorter than one header"));

  EXPECT_EQ(ScanError("").code(), absl::StatusCode::kDataLoss);

  std::string bad_checksum = Tar({{"a.jpg", "A"}});
  bad_checksum[1] ^= 0x04;
  status = ScanError(bad_checksum);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("bad header checksum"));

  Entry bad_size{"a.jpg", "A"};
  bad_size.size_field = 0;
  std::string data = Header(bad_size);
  std::memcpy(&data[124], "12x45678901", 11);  // Then fix the checksum.
  std::memset(&data[148], ' ', 8);
  unsigned sum = 0;
  for (char c : data) sum += static_cast<unsigned char>(c);
  std::snprintf(&data[148], 8, "%06o", sum);
  status = ScanError(data + std::string(1024, '\0'));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("bad size field"));
}

TEST_F(TarScannerTest, AllZeroFirstBlockIsAnEmptyArchive) {
  EXPECT_THAT(ScanAll(std::string(10 * 512, '\0')), IsEmpty());
  EXPECT_THAT(scanner_->truncation(), IsEmpty());
}

TEST_F(TarScannerTest, BadChecksumSkipsOnlyThatMemberWhenItsSizeParses) {
  const std::vector<Entry> entries = {
      {"a.cls", "0"}, {"b.jpg", std::string(1000, 'b')}, {"c.cls", "2"}};
  std::string data = Tar(entries);
  const int64_t bad = HeaderOffset(entries, 1);
  data[bad + 1] ^= 0x04;
  EXPECT_THAT(ScanAll(data),
              ElementsAre("member a.cls @512+1",
                          absl::StrCat("corrupt @", bad, "+1536 bad checksum"),
                          "member c.cls @3072+1"));
  EXPECT_THAT(scanner_->truncation(), IsEmpty());
}

TEST_F(TarScannerTest, ResyncsAtTheNextValidHeaderAfterGarbage) {
  const std::vector<Entry> entries = {
      {"a.cls", "0"}, {"b.jpg", std::string(1000, 'b')}, {"c.cls", "2"}};
  std::string data = Tar(entries);
  const int64_t bad = HeaderOffset(entries, 1);
  data.replace(bad, 512, std::string(512, 'z'));
  EXPECT_THAT(ScanAll(data),
              ElementsAre("member a.cls @512+1",
                          absl::StrCat("corrupt @", bad, "+1536 bad checksum"),
                          "member c.cls @3072+1"));

  // A readable checksum but an unparsable size: scanned forward too.
  Entry bad_size{"b.jpg", std::string(1000, 'b')};
  std::string header = Header(bad_size);
  std::memcpy(&header[124], "zzzzzzzzzzz", 11);
  std::memset(&header[148], ' ', 8);
  unsigned sum = 0;
  for (char c : header) sum += static_cast<unsigned char>(c);
  std::snprintf(&header[148], 8, "%06o", sum);
  data = Tar(entries);
  data.replace(bad, 512, header);
  EXPECT_THAT(ScanAll(data),
              ElementsAre("member a.cls @512+1",
                          absl::StrCat("corrupt @", bad, "+1536 bad size field"),
                          "member c.cls @3072+1"));
}

TEST_F(TarScannerTest, MemberDataThatLooksLikeATarIsNotScannedWhenSizeParses) {
  const std::string inner = Tar({{"evil.cls", "66"}, {"evil.jpg", "EVIL"}});
  const std::vector<Entry> entries = {
      {"a.cls", "0"}, {"b.jpg", inner}, {"c.cls", "2"}};
  std::string data = Tar(entries);
  const int64_t bad = HeaderOffset(entries, 1);
  data[bad + 1] ^= 0x04;
  const std::vector<std::string> events = ScanAll(data);
  EXPECT_THAT(events, ElementsAre("member a.cls @512+1",
                                  absl::StrCat("corrupt @", bad, "+",
                                               512 + inner.size(),
                                               " bad checksum"),
                                  absl::StrCat("member c.cls @",
                                               HeaderOffset(entries, 2) + 512,
                                               "+1")));
}

TEST_F(TarScannerTest, CorruptPaxRecordLosesTheMemberItNames) {
  const std::string long_name = std::string(130, 'r') + ".jpg";
  std::string pax = PaxRecord("path", long_name);
  pax[0] = 'x';  // "x44 path=..." has no parsable length.
  const std::vector<Entry> entries = {{"a.cls", "0"},
                                      {"PaxHeaders/x", pax, 'x'},
                                      {long_name.substr(30), "R"},
                                      {"c.cls", "2"}};
  const int64_t bad = HeaderOffset(entries, 1);
  // The region covers the pax entry and the member it named.
  EXPECT_THAT(ScanAll(Tar(entries)),
              ElementsAre("member a.cls @512+1",
                          absl::StrCat("corrupt @", bad,
                                       "+2048 unparsable pax record"),
                          "member c.cls @3584+1"));
}

TEST_F(TarScannerTest, OversizedLongNameRecordIsCorruptAndLosesItsMember) {
  Entry long_name{"././@LongLink", "x.jpg", 'L', Magic::kGnu};
  long_name.size_field = TarScanner::kMaxMetaMemberBytes + 1;
  const std::vector<Entry> entries = {
      {"a.cls", "0"}, long_name, {"x.jpg", "X"}, {"c.cls", "2"}};
  const int64_t bad = HeaderOffset(entries, 1);
  EXPECT_THAT(ScanAll(Tar(entries)),
              ElementsAre("member a.cls @512+1",
                          absl::StrCat("corrupt @", bad, "+2048 ",
                                       TarScanner::kMaxMetaMemberBytes + 1,
                                       "-byte long-name record"),
                          "member c.cls @3584+1"));
}

TEST_F(TarScannerTest, ZeroBlockFollowedByHeadersIsDamageNotTheEnd) {
  // Two archives joined with cat(1): the first one's end marker is damage.
  const std::string first = Tar({{"a.jpg", "A"}});
  const std::string data = first + Tar({{"b.jpg", "B"}});
  EXPECT_THAT(
      ScanAll(data),
      ElementsAre("member a.jpg @512+1",
                  "corrupt @1024+1024 all-zero block with more members after "
                  "it",
                  "member b.jpg @2560+1"));
  EXPECT_THAT(scanner_->truncation(), IsEmpty());
}

TEST_F(TarScannerTest, PaddingAfterTheEndMarkerIsNotDamage) {
  const std::string data =
      Tar({{"a.jpg", "A"}}) + std::string(20 * 512, '\0');
  EXPECT_THAT(ScanAll(data), ElementsAre("member a.jpg @512+1"));
  EXPECT_THAT(scanner_->truncation(), IsEmpty());
}

TEST_F(TarScannerTest, CorruptionRunningToTheEndOfTheFileIsNotTruncation) {
  const std::vector<Entry> entries = {{"a.cls", "0"}, {"b.jpg", "B"}};
  std::string data = Tar(entries);
  const int64_t bad = HeaderOffset(entries, 1);
  data.replace(bad, data.size() - bad, std::string(data.size() - bad, 'z'));
  EXPECT_THAT(ScanAll(data),
              ElementsAre("member a.cls @512+1",
                          absl::StrCat("corrupt @", bad, "+",
                                       data.size() - bad, " bad checksum")));
  EXPECT_THAT(scanner_->truncation(), IsEmpty());
}

TEST_F(TarScannerTest, MemberCutOffByTruncationIsTheLastEvent) {
  const std::vector<Entry> entries = {{"a.cls", "0"},
                                      {"a.jpg", std::string(3000, 'j')},
                                      {"b.cls", "1"}};
  const std::string data = Tar(entries).substr(0, 1024 + 512 + 1000);
  EXPECT_THAT(ScanAll(data),
              ElementsAre("member a.cls @512+1", "cut a.jpg @1536+3000"));
  EXPECT_EQ(scanner_->truncation(),
            "member 'a.jpg' needs 3000 bytes at offset 1536 but the file has "
            "2536 bytes");
  // The end is final.
  absl::StatusOr<TarScanner::Event> again = scanner_->Next();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->kind, TarScanner::Event::Kind::kEnd);
}

TEST_F(TarScannerTest, TruncationBetweenAndInsideHeadersIsReported) {
  const std::vector<Entry> entries = {{"a.cls", "0"}, {"a.jpg", "J"}};
  const std::string whole = Tar(entries, /*end_marker=*/false);

  EXPECT_THAT(ScanAll(whole), ElementsAre("member a.cls @512+1",
                                          "member a.jpg @1536+1"));
  EXPECT_EQ(scanner_->truncation(), "no end-of-archive marker after byte 2048");

  EXPECT_THAT(ScanAll(whole.substr(0, 1024 + 100)),
              ElementsAre("member a.cls @512+1"));
  EXPECT_EQ(scanner_->truncation(),
            "header at offset 1024 is cut off; the file has 1124 bytes");

  const std::string name(200, 'n');
  const std::string cut_long_name =
      Tar({{"a.cls", "0"}, {"././@LongLink", name, 'L', Magic::kGnu}})
          .substr(0, 1024 + 512 + 100);
  EXPECT_THAT(ScanAll(cut_long_name), ElementsAre("member a.cls @512+1"));
  EXPECT_EQ(scanner_->truncation(),
            "header data at offset 1536 is cut off; the file has 1636 bytes");
}

TEST_F(TarScannerTest, ReadErrorsArePassedOn) {
  const std::vector<Entry> entries = {{"a.cls", "0"}, {"a.jpg", "J"}};
  source_.emplace(Tar(entries));
  source_->FailReadsFrom(1024);
  scanner_.emplace(source_->Reader(), source_->size(), "test.tar");
  absl::StatusOr<TarScanner::Event> first = scanner_->Next();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Describe(*first), "member a.cls @512+1");
  absl::StatusOr<TarScanner::Event> second = scanner_->Next();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("injected"));
}

}  // namespace
}  // namespace stoker::server
