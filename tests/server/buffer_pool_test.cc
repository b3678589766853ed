#include "server/buffer_pool.h"

#include <utility>

#include "gtest/gtest.h"

namespace stoker::server {
namespace {

TEST(BufferPoolTest, CapacitiesArePowersOfTwoFrom64KiB) {
  BufferPool pool(1 << 30);
  EXPECT_EQ(pool.Take(1).capacity(), size_t{64} << 10);
  EXPECT_EQ(pool.Take(size_t{64} << 10).capacity(), size_t{64} << 10);
  EXPECT_EQ(pool.Take((size_t{64} << 10) + 1).capacity(), size_t{128} << 10);
  EXPECT_EQ(pool.Take(size_t{3} << 20).capacity(), size_t{4} << 20);
}

TEST(BufferPoolTest, FreedBuffersAreReusedForTheirSize) {
  BufferPool pool(1 << 30);
  char* first = nullptr;
  {
    PooledBuffer b = pool.Take(100000);
    first = b.data();
    b.data()[99999] = 7;  // writable over the size asked for
  }
  EXPECT_EQ(pool.kept_bytes(), 128 << 10);
  PooledBuffer other_size = pool.Take(10);
  EXPECT_NE(other_size.data(), first);
  PooledBuffer same_size = pool.Take(70000);
  EXPECT_EQ(same_size.data(), first);
  EXPECT_EQ(pool.kept_bytes(), 0);
}

TEST(BufferPoolTest, KeepsNoMoreThanItsLimit) {
  BufferPool pool(200 << 10);
  {
    PooledBuffer a = pool.Take(64 << 10);
    PooledBuffer b = pool.Take(64 << 10);
    PooledBuffer c = pool.Take(64 << 10);
    PooledBuffer d = pool.Take(64 << 10);
  }
  EXPECT_EQ(pool.kept_bytes(), 192 << 10);
}

TEST(BufferPoolTest, MovedBuffersGoBackOnce) {
  BufferPool pool(1 << 30);
  {
    PooledBuffer a = pool.Take(1);
    PooledBuffer b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    PooledBuffer c;
    c = std::move(b);
  }
  EXPECT_EQ(pool.kept_bytes(), 64 << 10);
}

}  // namespace
}  // namespace stoker::server
