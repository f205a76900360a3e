// optimizer/zero.h and optimizer/offload.h: ShardedAdamW stepping every rank's pieces (master
// weights, in place in a flat buffer, in place in separate buffers; offload none and cpu) ==
// one AdamW over the whole flat buffer, bit for bit, for 1..4 ranks; padding is never touched;
// the packed state is accounted as kOptimizerState. (offload cpu steps in kOffloadChunk pieces;
// the state on disk is tested in offload_file_test.cc.)
// links: tessera_optimizer
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "optimizer/grad_clip.h"
#include "optimizer/offload.h"
#include "optimizer/zero.h"

namespace tessera {
namespace {

std::vector<float> Ramp(int64_t n, float scale, float phase) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = scale * static_cast<float>(((i * 7919 + 13) % 201) - 100) / 100.0f + phase;
  }
  return v;
}

AdamWConfig Cfg(OptimizerOffload offload = OptimizerOffload::kNone) {
  AdamWConfig c;
  c.lr = 1e-2f;
  c.weight_decay = 0.1f;
  c.offload = offload;
  return c;
}

// Units of sizes that are multiples of nothing, one smaller than any piece, one empty.
std::vector<int64_t> UnitBounds() {
  std::vector<int64_t> b{0};
  for (int64_t s : {int64_t{1000}, int64_t{3}, int64_t{0}, int64_t{2 * kNormBlock + 17},
                    int64_t{555}}) {
    b.push_back(b.back() + s);
  }
  return b;
}

// Parameters of varied size over the whole buffer, crossing unit and piece boundaries, decay
// on every other one, with gaps (covered by no range: no decay).
std::vector<ParamRange> Ranges(int64_t n) {
  std::vector<ParamRange> r;
  int64_t off = 0;
  for (int i = 0; off < n; ++i) {
    const int64_t len = std::min<int64_t>(n - off, 50 + (i * 4409) % 9000);
    if (i % 5 != 4) r.push_back({off, len, i % 2 == 0, "p" + std::to_string(i)});
    off += len;
  }
  return r;
}

enum class Mode { kMaster, kInPlaceFlat, kSeparateBuffers };

std::string Name(Mode m) {
  return m == Mode::kMaster ? "master" : m == Mode::kInPlaceFlat ? "in-place" : "separate";
}

constexpr float kSentinel = 12345.0f;  // beyond a piece's real elements and in grad padding

void CheckShardedEqualsWhole(int ranks, int64_t align, Mode mode, OptimizerOffload offload) {
  SCOPED_TRACE(std::to_string(ranks) + " ranks, align " + std::to_string(align) + ", " +
               Name(mode) + ", offload " + OptimizerOffloadName(offload));
  const ShardLayout layout(UnitBounds(), ranks, align);
  const int64_t n = layout.num_params();
  const std::vector<ParamRange> ranges = Ranges(n);
  std::vector<float> p_ref = Ramp(n, 1.0f, 0.1f);
  const std::vector<float> p_init = p_ref;
  AdamW whole(Cfg(), n, ranges, nullptr);

  std::vector<std::unique_ptr<ShardedAdamW>> shards;
  for (int r = 0; r < ranks; ++r) {
    shards.push_back(std::make_unique<ShardedAdamW>(Cfg(offload), layout, r, ranges,
                                                    mode == Mode::kMaster, nullptr));
    if (mode == Mode::kMaster) shards[r]->LoadMaster(p_init.data());
  }
  std::vector<float> p_flat = p_init;  // kInPlaceFlat: every rank's pieces point in here
  // kSeparateBuffers: [rank][unit] holds the piece's real values, then sentinels.
  std::vector<std::vector<std::vector<float>>> separate(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (int u = 0; u < layout.num_units(); ++u) {
      std::vector<float> buf(layout.piece_real(u, r) + 8, kSentinel);
      std::copy_n(p_init.begin() + std::min(layout.piece_begin(u, r), n),
                  layout.piece_real(u, r), buf.begin());
      separate[r].push_back(std::move(buf));
    }
  }

  for (int step = 0; step < 4; ++step) {
    const std::vector<float> g = Ramp(n, 0.5f, 0.01f * step);
    const float lr = 1e-2f * (step + 1);
    whole.Step(p_ref.data(), g.data(), lr);
    for (int r = 0; r < ranks; ++r) {
      const std::vector<float> packed_g = [&] {
        std::vector<float> pg(layout.packed_size(), kSentinel);  // padding must not be read
        for (int u = 0; u < layout.num_units(); ++u) {
          std::copy_n(g.begin() + std::min(layout.piece_begin(u, r), n), layout.piece_real(u, r),
                      pg.begin() + layout.packed_offset(u));
        }
        return pg;
      }();
      std::vector<float*> pieces;
      if (mode == Mode::kInPlaceFlat) {
        for (int u = 0; u < layout.num_units(); ++u) {
          pieces.push_back(layout.piece_real(u, r) > 0 ? p_flat.data() + layout.piece_begin(u, r)
                                                       : nullptr);
        }
      } else if (mode == Mode::kSeparateBuffers) {
        for (auto& buf : separate[r]) pieces.push_back(buf.data());
      }
      ASSERT_TRUE(shards[r]->Step(pieces, packed_g.data(), lr).ok());
    }
  }

  // Reassemble the flat buffer from the ranks and check padding and sentinels.
  std::vector<float> got = mode == Mode::kInPlaceFlat ? p_flat : std::vector<float>(n, NAN);
  for (int r = 0; r < ranks; ++r) {
    ShardedAdamW& s = *shards[r];
    EXPECT_EQ(s.adamw().step(), 4);
    EXPECT_EQ(s.adamw().num_params(), layout.packed_size());
    const float* m = s.adamw().exp_avg().f32();
    const float* v = s.adamw().exp_avg_sq().f32();
    for (int u = 0; u < layout.num_units(); ++u) {
      const int64_t real = layout.piece_real(u, r), off = layout.packed_offset(u);
      const float* values = mode == Mode::kMaster           ? s.master(u)
                            : mode == Mode::kSeparateBuffers ? separate[r][u].data()
                                                             : nullptr;
      if (values) std::copy_n(values, real, got.begin() + layout.piece_begin(u, r));
      for (int64_t i = real; i < layout.piece_size(u); ++i) {
        ASSERT_EQ(m[off + i], 0.0f) << "moment padding touched, unit " << u;
        ASSERT_EQ(v[off + i], 0.0f) << "moment padding touched, unit " << u;
        if (mode == Mode::kMaster) {
          ASSERT_EQ(s.master(u)[i], 0.0f) << "master padding, unit " << u;
        }
      }
      if (mode == Mode::kSeparateBuffers) {
        for (int64_t i = real; i < real + 8; ++i) ASSERT_EQ(separate[r][u][i], kSentinel);
      }
    }
  }
  EXPECT_EQ(std::memcmp(got.data(), p_ref.data(), n * sizeof(float)), 0);
}

TEST(ShardedAdamW, EveryRankSteppingItsPiecesEqualsOneAdamW) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int64_t align : {int64_t{1}, int64_t{64}, kNormBlock}) {
      for (Mode mode : {Mode::kMaster, Mode::kInPlaceFlat, Mode::kSeparateBuffers}) {
        for (OptimizerOffload off : {OptimizerOffload::kNone, OptimizerOffload::kCpu}) {
          CheckShardedEqualsWhole(ranks, align, mode, off);
        }
      }
    }
  }
}

TEST(ShardedAdamW, FoldedGradScaleEqualsScalingTheGradientsFirst) {
  const int ranks = 3;
  const ShardLayout layout(UnitBounds(), ranks, 64);
  const int64_t n = layout.num_params();
  const std::vector<ParamRange> ranges = Ranges(n);
  const float scale = 0.25f + 1.0f / 3.0f;  // not a power of two: the rounding is exercised
  for (OptimizerOffload off : {OptimizerOffload::kNone, OptimizerOffload::kCpu}) {
    std::vector<float> p_ref = Ramp(n, 1.0f, 0.1f);
    AdamW whole(Cfg(), n, ranges, nullptr);
    std::vector<std::unique_ptr<ShardedAdamW>> shards;
    for (int r = 0; r < ranks; ++r) {
      shards.push_back(std::make_unique<ShardedAdamW>(Cfg(off), layout, r, ranges, true, nullptr));
      shards[r]->LoadMaster(p_ref.data());
    }
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = Ramp(n, 0.5f, 0.01f * step);
      std::vector<float> g_scaled = g;
      ScaleInPlace(g_scaled.data(), n, scale);
      whole.Step(p_ref.data(), g_scaled.data(), 1e-2f);
      for (int r = 0; r < ranks; ++r) {
        std::vector<const float*> grads;
        for (int u = 0; u < layout.num_units(); ++u) {
          grads.push_back(g.data() + std::min(layout.piece_begin(u, r), n));
        }
        ASSERT_TRUE(shards[r]->Step({}, grads, 1e-2f, scale).ok());
      }
    }
    for (int r = 0; r < ranks; ++r) {
      for (int u = 0; u < layout.num_units(); ++u) {
        const int64_t real = layout.piece_real(u, r);
        if (real == 0) continue;
        EXPECT_EQ(std::memcmp(shards[r]->master(u), p_ref.data() + layout.piece_begin(u, r),
                              real * sizeof(float)), 0)
            << "rank " << r << " unit " << u;
      }
    }
  }
}

TEST(ShardedAdamW, PackedStateIsAccountedAsOptimizerState) {
  const ShardLayout layout(UnitBounds(), 3, kNormBlock);
  const int64_t packed_bytes = layout.packed_size() * int64_t{sizeof(float)};
  const std::vector<ParamRange> ranges = Ranges(layout.num_params());
  MemoryTracker tracker;
  {
    ShardedAdamW moments_only(Cfg(), layout, 1, ranges, false, &tracker);
    EXPECT_EQ(tracker.current(MemoryKind::kOptimizerState), size_t(2 * packed_bytes));
    EXPECT_FALSE(moments_only.keeps_master());
    EXPECT_EQ(moments_only.rank(), 1);
  }
  EXPECT_EQ(tracker.current(MemoryKind::kOptimizerState), 0u);
  {
    ShardedAdamW with_master(Cfg(), layout, 2, ranges, true, &tracker);
    EXPECT_EQ(tracker.current(MemoryKind::kOptimizerState), size_t(3 * packed_bytes));
    EXPECT_TRUE(with_master.keeps_master());
    EXPECT_EQ(with_master.layout().packed_size(), layout.packed_size());
  }
  EXPECT_EQ(tracker.current(MemoryKind::kOptimizerState), 0u);
  EXPECT_EQ(tracker.current(MemoryKind::kParameters), 0u);
}

TEST(ShardedAdamW, LoadMasterCopiesPiecesAndZeroesPadding) {
  const ShardLayout layout(UnitBounds(), 4, 64);
  const std::vector<float> full = Ramp(layout.num_params(), 1.0f, 0.5f);
  for (int r = 0; r < 4; ++r) {
    ShardedAdamW s(Cfg(), layout, r, Ranges(layout.num_params()), true, nullptr);
    for (int u = 0; u < layout.num_units(); ++u) {
      std::fill_n(s.master(u), layout.piece_size(u), kSentinel);
    }
    s.LoadMaster(full.data());
    for (int u = 0; u < layout.num_units(); ++u) {
      const int64_t real = layout.piece_real(u, r);
      for (int64_t i = 0; i < layout.piece_size(u); ++i) {
        const float want = i < real ? full[layout.piece_begin(u, r) + i] : 0.0f;
        ASSERT_EQ(s.master(u)[i], want) << "rank " << r << " unit " << u << " elem " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tessera
