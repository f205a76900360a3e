// tests/unit/param_shards_test.cc — ParamShards (runtime/train/param_shards.h) on the in-process
// fake backend: ZeRO 1-3 on 2 ranks give the bits of one rank accumulating both micro-batches,
// and a collective that fails inside the model's forward/backward or evaluation is kept in
// status(), aborts the group, and ends the step with that error on every rank without hanging.
// links: tessera_train
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "comm/fake_communicator.h"
#include "models/param_layout.h"
#include "models/transformer.h"
#include "optimizer/grad_clip.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/param_shards.h"
#include "tests/testing/tiny_replica.h"

namespace tessera {
namespace {

using testing::BuildReplica;
using testing::Replica;

ModelConfig TinyModel(bool tied) { return testing::TinyGpt2(3, 16, tied); }

void Tokens(int64_t k, std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
  testing::TinyTokens(k, in, tgt);
}

std::unique_ptr<Replica> Build(const ModelConfig& c, int zero, DType dtype, int64_t accum,
                               Communicator* comm) {
  return BuildReplica(c, zero, dtype, comm, accum);
}

// One optimizer step over micro-batches [first, first + accum) with loss scale 1/total.
Status TrainStep(Replica& r, int64_t first, int64_t accum, int64_t total) {
  std::vector<int32_t> in, tgt;
  r.shards->BeginStep();
  for (int64_t k = 0; k < accum; ++k) {
    r.shards->BeginMicroBatch(k);
    Tokens(first + k, in, tgt);
    r.model->ForwardBackward(in.data(), tgt.data(), 1.0f / static_cast<float>(total));
    RETURN_IF_ERROR(r.shards->status());
  }
  RETURN_IF_ERROR(r.shards->FinishGradients());
  ASSIGN_OR_RETURN(double sum_sq, r.shards->GradSumOfSquares());
  (void)sum_sq;
  return r.shards->Step(1e-2f);
}

// The weights after 2 steps of one rank with accum 2 vs 2 ranks (fake backend) with accum 1.
void ExpectTwoRanksMatchOne(int zero, DType dtype, bool tied) {
  const ModelConfig c = TinyModel(tied);
  auto one = Build(c, 0, dtype, 2, nullptr);
  for (int step = 0; step < 2; ++step) ASSERT_TRUE(TrainStep(*one, 2 * step, 2, 2).ok());
  auto ref = one->shards->GatherFull(0);
  ASSERT_TRUE(ref.ok());

  auto hub = FakeHub::Create(2);
  std::vector<float> got;
  std::vector<std::thread> threads;
  std::vector<Status> results(2, Status::Ok());
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions co;
      co.name = "dp";
      co.timeout_s = 30;
      auto comm = hub->Connect(rank, co);
      auto r = Build(c, zero, dtype, 1, comm.get());
      for (int step = 0; step < 2 && results[rank].ok(); ++step) {
        results[rank] = TrainStep(*r, 2 * step + rank, 1, 2);
      }
      auto full = r->shards->GatherFull(0);
      if (!full.ok()) results[rank] = full.status();
      if (rank == 0 && full.ok()) got = *full;
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(results[0].ok()) << results[0].ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].ToString();
  ASSERT_EQ(got.size(), ref->size());
  EXPECT_EQ(0, std::memcmp(got.data(), ref->data(), got.size() * sizeof(float)))
      << "zero " << zero << " " << DTypeName(dtype) << (tied ? " tied" : " untied");
}

TEST(ParamShards, TwoRanksMatchOneRankBitForBitUnderEveryStage) {
  cpu::SetNumThreads(1);
  for (int zero : {0, 1, 2, 3}) {
    ExpectTwoRanksMatchOne(zero, DType::kF32, /*tied=*/true);
    ExpectTwoRanksMatchOne(zero, DType::kBF16, /*tied=*/false);
  }
  ExpectTwoRanksMatchOne(3, DType::kF16, /*tied=*/true);
}

// Rank 1's k-th operation fails; rank 0 must see the failure (its op times out or the group is
// aborted) within the comm timeout, from inside the model's step, and both end the step with
// an error instead of hanging.
void ExpectFailureEndsTheStep(int zero, int64_t failing_op, bool evaluate) {
  const ModelConfig c = TinyModel(true);
  auto hub = FakeHub::Create(2);
  std::vector<Status> results(2, Status::Ok());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions co;
      co.name = "dp";
      co.timeout_s = 1.0;
      FakeFault fault;
      if (rank == 1) fault = {FakeFault::Kind::kFail, failing_op};
      auto comm = hub->Connect(rank, co, fault);
      auto r = Build(c, zero, DType::kF32, 1, comm.get());
      if (evaluate) {
        std::vector<int32_t> in, tgt;
        Tokens(0, in, tgt);
        for (int i = 0; i < 3; ++i) r->model->Forward(in.data(), tgt.data());
        results[rank] = r->shards->status();
      } else {
        results[rank] = TrainStep(*r, rank, 1, 2);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(results[1].ok());
  EXPECT_FALSE(results[0].ok()) << "rank 0 did not notice rank 1's failure";
  EXPECT_NE(results[0].message().find("dp"), std::string::npos) << results[0].ToString();
}

TEST(ParamShards, FailedGatherInsideForwardEndsTheStepOnEveryRank) {
  cpu::SetNumThreads(1);
  ExpectFailureEndsTheStep(3, 1, /*evaluate=*/false);  // the embeddings' all-gather
  ExpectFailureEndsTheStep(3, 4, /*evaluate=*/false);  // a block's
}

TEST(ParamShards, FailedReduceScatterInsideBackwardEndsTheStepOnEveryRank) {
  cpu::SetNumThreads(1);
  // zero 2: parameters are replicated, so the first operations are the reduce-scatters that
  // backward launches unit by unit.
  ExpectFailureEndsTheStep(2, 1, /*evaluate=*/false);
  ExpectFailureEndsTheStep(2, 3, /*evaluate=*/false);
}

TEST(ParamShards, FailedGatherDuringEvaluationIsReported) {
  cpu::SetNumThreads(1);
  ExpectFailureEndsTheStep(3, 2, /*evaluate=*/true);
}

TEST(ParamShards, MemoryByKindFollowsTheStage) {
  cpu::SetNumThreads(1);
  const ModelConfig c = TinyModel(true);
  auto one = Build(c, 0, DType::kF32, 1, nullptr);
  EXPECT_EQ(one->memory.reserved(MemoryKind::kUnitBuffers), 0u);  // nothing to gather or stage
  auto hub = FakeHub::Create(2);
  std::vector<std::thread> threads;
  std::vector<size_t> params(2), units(2);
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto comm = hub->Connect(rank, CommOptions{});
      auto r = Build(c, 3, DType::kBF16, 1, comm.get());
      params[rank] = r->memory.reserved(MemoryKind::kParameters);
      units[rank] = r->memory.reserved(MemoryKind::kUnitBuffers);
    });
  }
  for (auto& t : threads) t.join();
  const int64_t S = ShardLayout(UnitBounds(c), 2, kNormBlock).packed_size();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_LE(params[rank], static_cast<size_t>(2 * S + Arena::kAlignment)) << rank;  // bf16 pieces
    EXPECT_GT(units[rank], 0u);
  }
}

}  // namespace
}  // namespace tessera
