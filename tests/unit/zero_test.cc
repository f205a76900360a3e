// optimizer/zero.h and optimizer/offload.h: partition arithmetic with padding, ShardedAdamW
// over every partition == one AdamW over the whole buffer (bit for bit), and the chunked host
// ("offload") step == AdamW::Step for chunk sizes that do and do not divide the buffer.
// links: tessera_optimizer
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "optimizer/offload.h"
#include "optimizer/zero.h"

namespace tessera {
namespace {

std::vector<float> Ramp(int64_t n, float scale, float phase) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(((i * 7919 + 13) % 201) - 100) / 100.0f + phase;
  return v;
}

std::vector<ParamRange> Ranges(int64_t n) {
  // Three parameters, decay on the middle one, one element of padding at the end.
  return {{0, n / 3, false, "a"}, {n / 3, n / 3, true, "b"}, {2 * (n / 3), n - 2 * (n / 3) - 1, false, "c"}};
}

AdamWConfig Cfg() {
  AdamWConfig c;
  c.lr = 1e-2f;
  c.weight_decay = 0.1f;
  return c;
}

TEST(Partitioning, EqualPaddedPartitionsAlignedAndClipped) {
  Partitioning p(100, 4, 16);
  EXPECT_EQ(p.padded_size(), 32);  // ceil(100/4) = 25 -> 32
  EXPECT_EQ(p.padded_total(), 128);
  EXPECT_EQ(p.begin(3), 96);
  EXPECT_EQ(p.real_end(2), 96);
  EXPECT_EQ(p.real_end(3), 100);
  EXPECT_EQ(p.real_size(3), 4);
  Partitioning small(10, 4, 16);  // partitions 1..3 are all padding
  EXPECT_EQ(small.real_size(0), 10);
  EXPECT_EQ(small.real_size(1), 0);
  EXPECT_EQ(small.real_begin(2), 10);
  EXPECT_EQ(Partitioning(0, 2, 8).padded_size(), 8);
}

TEST(ClipParamRanges, ClipsAndShifts) {
  const auto r = ClipParamRanges({{0, 10, false, "a"}, {10, 10, true, "b"}, {20, 5, false, "c"}}, 5, 15);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].offset, 0);
  EXPECT_EQ(r[0].size, 5);
  EXPECT_FALSE(r[0].decay);
  EXPECT_EQ(r[1].offset, 5);
  EXPECT_EQ(r[1].size, 5);
  EXPECT_TRUE(r[1].decay);
}

TEST(ShardedAdamW, PartitionsStepLikeOneAdamW) {
  const int64_t n = 1000;
  for (int ranks : {1, 2, 3, 4}) {
    std::vector<float> p_ref = Ramp(n, 1.0f, 0.1f), p = p_ref;
    AdamW whole(Cfg(), n, Ranges(n), nullptr);
    Partitioning part(n, ranks, 64);
    std::vector<std::unique_ptr<ShardedAdamW>> shards;
    for (int r = 0; r < ranks; ++r) {
      shards.push_back(std::make_unique<ShardedAdamW>(Cfg(), part.real_begin(r), part.real_end(r),
                                                      Ranges(n), nullptr));
    }
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = Ramp(n, 0.5f, 0.01f * step);
      whole.Step(p_ref.data(), g.data(), 1e-2f);
      for (auto& s : shards) s->Step(p.data(), g.data() + s->begin(), 1e-2f);
    }
    EXPECT_EQ(std::memcmp(p.data(), p_ref.data(), n * sizeof(float)), 0) << ranks << " ranks";
  }
}

TEST(Offload, ChunkedHostStepEqualsStep) {
  const int64_t n = 5000;
  for (int64_t chunk : {int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{1} << 22}) {
    std::vector<float> p_ref = Ramp(n, 1.0f, 0.0f), p = p_ref;
    AdamW a(Cfg(), n, Ranges(n), nullptr), b(Cfg(), n, Ranges(n), nullptr);
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = Ramp(n, 0.3f, 0.02f * step);
      a.Step(p_ref.data(), g.data(), 3e-3f);
      StepOffloaded(b, p.data(), g.data(), 3e-3f, chunk);
    }
    EXPECT_EQ(b.step(), 3);
    EXPECT_EQ(std::memcmp(p.data(), p_ref.data(), n * sizeof(float)), 0) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace tessera
