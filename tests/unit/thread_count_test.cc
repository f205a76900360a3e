// links: tessera_kernels
// tests/unit/thread_count_test.cc — the thread-count rule (runtime/kernels/cpu/thread_count.h):
// train.threads, then OMP_NUM_THREADS, then cores / ranks on this host, then all cores; never
// below 1; and the banner's words for each.
#include "runtime/kernels/cpu/thread_count.h"

#include <gtest/gtest.h>

namespace tessera::cpu {
namespace {

ThreadInputs Inputs(int cores, int local_ranks, std::optional<std::string> omp = std::nullopt,
                    int config_threads = 0) {
  ThreadInputs in;
  in.cores = cores;
  in.host_cores = cores;
  in.local_ranks = local_ranks;
  in.omp_num_threads = std::move(omp);
  in.config_threads = config_threads;
  return in;
}

TEST(ThreadCount, OneProcessUsesEveryCore) {
  const ThreadChoice c = ChooseThreads(Inputs(8, 1));
  EXPECT_EQ(c.count, 8);
  EXPECT_FALSE(c.per_rank);
  EXPECT_EQ(c.Describe(), "8 (all 8 cores)");
}

TEST(ThreadCount, RanksOnOneHostShareItsCores) {
  const ThreadChoice c = ChooseThreads(Inputs(2, 2));
  EXPECT_EQ(c.count, 1);
  EXPECT_TRUE(c.per_rank);
  EXPECT_EQ(c.Describe(), "1 per rank (2 cores / 2 ranks on this host)");
  EXPECT_EQ(ChooseThreads(Inputs(16, 4)).count, 4);
}

TEST(ThreadCount, CoresThatDoNotDivideRoundDown) {
  EXPECT_EQ(ChooseThreads(Inputs(7, 2)).count, 3);
}

TEST(ThreadCount, MoreRanksThanCoresStillGetOneThread) {
  const ThreadChoice c = ChooseThreads(Inputs(2, 4));
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(c.Describe(), "1 per rank (2 cores / 4 ranks on this host, at least 1)");
  EXPECT_EQ(ChooseThreads(Inputs(1, 3)).Describe(), "1 per rank (1 core / 3 ranks on this host, at least 1)");
}

TEST(ThreadCount, ARankBoundToFewerCoresThanItsShareRunsOnThoseCores) {
  ThreadInputs in = Inputs(1, 2);
  in.host_cores = 16;  // mpirun bound this rank to one core of 16
  const ThreadChoice c = ChooseThreads(in);
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(c.Describe(), "1 per rank (bound to 1 core; 16 cores / 2 ranks on this host)");
}

TEST(ThreadCount, ARankBoundToItsShareOfTheHostSaysTheDivision) {
  ThreadInputs in = Inputs(1, 2);
  in.host_cores = 2;  // mpirun -np 2 on 2 cores binds each rank to one
  EXPECT_EQ(ChooseThreads(in).Describe(), "1 per rank (2 cores / 2 ranks on this host)");
  in = Inputs(8, 2);
  in.host_cores = 16;  // bound to a socket of 8
  EXPECT_EQ(ChooseThreads(in).Describe(), "8 per rank (16 cores / 2 ranks on this host)");
}

TEST(ThreadCount, OneProcessBoundToSomeCoresUsesThoseCores) {
  ThreadInputs in = Inputs(2, 1);
  in.host_cores = 64;
  EXPECT_EQ(ChooseThreads(in).Describe(), "2 (bound to 2 of 64 cores)");
  EXPECT_EQ(ChooseThreads(Inputs(1, 1)).Describe(), "1 (the 1 core)");
}

TEST(ThreadCount, ExplicitOmpNumThreadsWinsOverTheDivision) {
  const ThreadChoice c = ChooseThreads(Inputs(2, 4, "2"));
  EXPECT_EQ(c.count, 2);
  EXPECT_EQ(c.Describe(), "2 per rank (OMP_NUM_THREADS=2)");
  EXPECT_EQ(ChooseThreads(Inputs(8, 1, "3")).Describe(), "3 (OMP_NUM_THREADS=3)");
}

TEST(ThreadCount, OmpNumThreadsListCountsItsOuterLevel) {
  EXPECT_EQ(ChooseThreads(Inputs(8, 1, "4,2")).count, 4);
  EXPECT_EQ(ChooseThreads(Inputs(8, 1, " 5 ")).count, 5);
}

TEST(ThreadCount, OmpNumThreadsThatIsNotAPositiveNumberIsIgnored) {
  for (const char* bad : {"", "0", "-2", "two", "2x", ",3"}) {
    const ThreadChoice c = ChooseThreads(Inputs(2, 2, std::string(bad)));
    EXPECT_EQ(c.count, 1) << bad;
    EXPECT_EQ(c.reason, "2 cores / 2 ranks on this host") << bad;
  }
  EXPECT_EQ(ChooseThreads(Inputs(6, 1, "0")).count, 6);
}

TEST(ThreadCount, TrainThreadsWinsOverEverything) {
  const ThreadChoice c = ChooseThreads(Inputs(2, 4, "1", 3));
  EXPECT_EQ(c.count, 3);
  EXPECT_EQ(c.Describe(), "3 per rank (train.threads)");
  EXPECT_EQ(ChooseThreads(Inputs(8, 1, std::nullopt, 2)).Describe(), "2 (train.threads)");
}

TEST(ThreadCount, NonsenseInputsNeverGiveFewerThanOneThread) {
  EXPECT_EQ(ChooseThreads(Inputs(0, 0)).count, 1);
  EXPECT_EQ(ChooseThreads(Inputs(-3, 5)).count, 1);
  EXPECT_EQ(ChooseThreads(Inputs(4, -1)).count, 4);
}

TEST(ThreadCount, EnvironmentReaderSeesAtLeastOneCoreAndPassesTheConfigThrough) {
  const ThreadInputs in = ThreadInputsFromEnvironment(5);
  EXPECT_GE(in.cores, 1);
  EXPECT_GE(in.host_cores, in.cores);
  EXPECT_GE(in.local_ranks, 1);
  EXPECT_EQ(in.config_threads, 5);
}

}  // namespace
}  // namespace tessera::cpu
