#include "client/checksum.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "client/host_batch.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

class ChecksumTest : public ::testing::Test {
 protected:
  // 100 bytes: three 32-byte blocks and a 4-byte tail.
  static std::vector<uint8_t> Data100() {
    std::vector<uint8_t> d(100);
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 7 + 3);
    return d;
  }

  // 4109 bytes: 128 blocks and a 13-byte tail.
  static std::vector<uint8_t> BigData() {
    std::vector<uint8_t> d(4096 + 13);
    for (size_t i = 0; i < d.size(); ++i) {
      d[i] = static_cast<uint8_t>((i * i + 5 * i) % 251);
    }
    return d;
  }

  static uint64_t Digest(const std::vector<uint8_t>& data) {
    Checksum c;
    c.Update(data.data(), data.size());
    return c.value();
  }

  // n samples of 2x2x3 pixels with distinct labels and indices.
  static HostBatch MakeBatch(int n, int salt = 0) {
    HostBatch b;
    b.n = n;
    b.height = 2;
    b.width = 2;
    b.channels = 3;
    b.pixels = PixelBuffer::Allocate(b.pixel_bytes());
    for (size_t i = 0; i < b.pixel_bytes(); ++i) {
      b.pixels.data()[i] = static_cast<uint8_t>(i * 13 + 1 + salt);
    }
    for (int i = 0; i < n; ++i) {
      b.labels.push_back(i * 3 - 7 + salt);
      b.sample_indices.push_back(i * int64_t{1000003} + (int64_t{1} << 33) +
                                 salt);
      b.keys.push_back("key" + std::to_string(i));
    }
    return b;
  }

  static uint64_t BatchDigest(const HostBatch& batch) {
    Checksum c;
    c.AddBatch(batch);
    return c.value();
  }

  template <typename T>
  static std::vector<uint8_t> LittleEndian(const std::vector<T>& values) {
    std::vector<uint8_t> out;
    for (T v : values) {
      auto u = static_cast<std::make_unsigned_t<T>>(v);
      for (size_t i = 0; i < sizeof(T); ++i) {
        out.push_back(static_cast<uint8_t>(u >> (8 * i)));
      }
    }
    return out;
  }
};

// Golden values of the current algorithm, pinned so that an accidental
// change (which changes every digest users have recorded) is caught.
TEST_F(ChecksumTest, MatchesGoldenValues) {
  EXPECT_EQ(Digest(Data100()), 0xbac754b9bb987b21ULL);
  EXPECT_EQ(Digest(BigData()), 0xbf2b50a96aedb92cULL);
  const std::vector<uint8_t> first = Data100();
  const std::vector<uint8_t> second = BigData();
  Checksum two;
  two.Update(first.data(), first.size());
  two.Update(second.data(), second.size());
  EXPECT_EQ(two.value(), 0x141bad5c2bb16e90ULL);
  EXPECT_EQ(two.Hex(), "141bad5c2bb16e90");
  EXPECT_EQ(BatchDigest(MakeBatch(16)), 0xdc246416d64389b7ULL);
}

TEST_F(ChecksumTest, HexIsValueAsSixteenDigits) {
  Checksum c;
  c.Update("abc", 3);
  char expected[17];
  std::snprintf(expected, sizeof(expected), "%016llx",
                static_cast<unsigned long long>(c.value()));
  EXPECT_EQ(c.Hex(), expected);
}

TEST_F(ChecksumTest, SameBytesGiveSameDigest) {
  EXPECT_EQ(Digest(Data100()), Digest(Data100()));
  EXPECT_EQ(Digest(BigData()), Digest(BigData()));
  Checksum a, b;
  for (int i = 0; i < 3; ++i) {
    a.AddBatch(MakeBatch(16, i));
    b.AddBatch(MakeBatch(16, i));
  }
  EXPECT_EQ(a.value(), b.value());
  EXPECT_EQ(a.Hex(), b.Hex());
}

TEST_F(ChecksumTest, EveryOneBitChangeChangesDigest) {
  const std::vector<uint8_t> data = Data100();
  const uint64_t base = Digest(data);
  std::set<uint64_t> seen = {base};
  for (size_t byte = 0; byte < data.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> flipped = data;
      flipped[byte] ^= static_cast<uint8_t>(1u << bit);
      const uint64_t d = Digest(flipped);
      EXPECT_NE(d, base) << "byte " << byte << " bit " << bit;
      seen.insert(d);
    }
  }
  EXPECT_EQ(seen.size(), 1u + 8 * data.size());
}

TEST_F(ChecksumTest, OneBitChangeInLargeInputChangesDigest) {
  const std::vector<uint8_t> data = BigData();
  const uint64_t base = Digest(data);
  // First byte, inside blocks, block boundaries, the tail, last byte.
  for (size_t byte : {size_t{0}, size_t{31}, size_t{32}, size_t{1000},
                      size_t{2048}, size_t{4095}, size_t{4096}, size_t{4100},
                      data.size() - 1}) {
    for (int bit : {0, 7}) {
      std::vector<uint8_t> flipped = data;
      flipped[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_NE(Digest(flipped), base) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST_F(ChecksumTest, LengthMatters) {
  std::vector<uint8_t> zeros(64, 0);
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= zeros.size(); ++n) {
    Checksum c;
    c.Update(zeros.data(), n);
    seen.insert(c.value());
  }
  EXPECT_EQ(seen.size(), zeros.size() + 1);
}

TEST_F(ChecksumTest, OrderOfBatchesMatters) {
  const HostBatch a = MakeBatch(16, 1);
  const HostBatch b = MakeBatch(16, 2);
  Checksum ab, ba;
  ab.AddBatch(a);
  ab.AddBatch(b);
  ba.AddBatch(b);
  ba.AddBatch(a);
  EXPECT_NE(ab.value(), ba.value());
}

TEST_F(ChecksumTest, OrderOfUpdatesMatters) {
  const std::vector<uint8_t> x = Data100();
  const std::vector<uint8_t> y = BigData();
  Checksum xy, yx;
  xy.Update(x.data(), x.size());
  xy.Update(y.data(), y.size());
  yx.Update(y.data(), y.size());
  yx.Update(x.data(), x.size());
  EXPECT_NE(xy.value(), yx.value());
}

TEST_F(ChecksumTest, AddBatchCoversPixelsLabelsAndIndices) {
  const uint64_t base = BatchDigest(MakeBatch(16));

  HostBatch pixel = MakeBatch(16);
  pixel.pixels.data()[pixel.pixel_bytes() - 1] ^= 0x10;
  EXPECT_NE(BatchDigest(pixel), base);

  HostBatch label = MakeBatch(16);
  label.labels[3] += 1;
  EXPECT_NE(BatchDigest(label), base);

  HostBatch index = MakeBatch(16);
  index.sample_indices[15] ^= int64_t{1} << 40;
  EXPECT_NE(BatchDigest(index), base);
}

TEST_F(ChecksumTest, AddBatchIsPixelsThenLittleEndianLabelsThenIndices) {
  const HostBatch batch = MakeBatch(16);
  Checksum manual;
  manual.Update(batch.pixels.data(), batch.pixels.size());
  const std::vector<uint8_t> labels = LittleEndian(batch.labels);
  manual.Update(labels.data(), labels.size());
  const std::vector<uint8_t> indices = LittleEndian(batch.sample_indices);
  manual.Update(indices.data(), indices.size());
  EXPECT_EQ(BatchDigest(batch), manual.value());
}

TEST_F(ChecksumTest, AddBatchIgnoresKeysAndMetadata) {
  const uint64_t base = BatchDigest(MakeBatch(16));
  HostBatch other = MakeBatch(16);
  other.keys[0] = "renamed";
  other.batch_index = 99;
  other.epoch = 4;
  other.server = "elsewhere:1";
  EXPECT_EQ(BatchDigest(other), base);
}

// Known bug (client/checksum.cc, Checksum::Update): with no full 32-byte
// block, the four lanes start at state_, state_^1, state_^2, state_^3 and
// the fold Mix(l0) ^ Mix(l1+1) ^ Mix(l2+2) ^ Mix(l3+3) cancels to 0 whenever
// state_ % 4 is 1, 2 or 3 (the terms pair up), so an Update of fewer than 32
// bytes then discards everything hashed before it (only the total length
// survives). Enable once fixed (and recompute the golden values).
TEST_F(ChecksumTest, ShortUpdateKeepsEarlierData) {
  Checksum a, b;
  a.Update("a", 1);
  a.Update("z", 1);
  b.Update("b", 1);
  b.Update("z", 1);
  EXPECT_NE(a.value(), b.value());
}

TEST_F(ChecksumTest, AddBatchOfSmallBatchCoversPixelsAndLabels) {
  // n = 2: 8 bytes of labels and 16 of indices, both shorter than a block.
  const uint64_t base = BatchDigest(MakeBatch(2));
  HostBatch pixel = MakeBatch(2);
  pixel.pixels.data()[0] ^= 1;
  EXPECT_NE(BatchDigest(pixel), base);
  HostBatch label = MakeBatch(2);
  label.labels[0] += 1;
  EXPECT_NE(BatchDigest(label), base);
}

}  // namespace
}  // namespace stoker::client
