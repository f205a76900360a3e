// tests/unit/retention_test.cc — StepsToDelete: keep_last, keep_every milestones, the newest
// always kept, input in any order.
// links: tessera_checkpoint
#include "checkpoint/retention.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

using Steps = std::vector<int64_t>;

TEST(Retention, KeepLastDeletesTheOlderOnesAscending) {
  EXPECT_EQ(StepsToDelete({100, 200, 300, 400, 500}, {.keep_last = 3, .keep_every = 0}),
            (Steps{100, 200}));
  EXPECT_EQ(StepsToDelete({100, 200, 300, 400, 500}, {.keep_last = 1, .keep_every = 0}),
            (Steps{100, 200, 300, 400}));
}

TEST(Retention, NothingToDeleteWhenThereAreFewEnough) {
  EXPECT_EQ(StepsToDelete({}, {.keep_last = 3, .keep_every = 0}), Steps{});
  EXPECT_EQ(StepsToDelete({7}, {.keep_last = 3, .keep_every = 0}), Steps{});
  EXPECT_EQ(StepsToDelete({7, 8, 9}, {.keep_last = 3, .keep_every = 0}), Steps{});
}

TEST(Retention, KeepEveryKeepsMilestonesBeyondKeepLast) {
  // Steps 100..1000; milestones every 500 (500, 1000); keep the 2 newest (900, 1000).
  Steps committed;
  for (int64_t s = 100; s <= 1000; s += 100) committed.push_back(s);
  EXPECT_EQ(StepsToDelete(committed, {.keep_last = 2, .keep_every = 500}),
            (Steps{100, 200, 300, 400, 600, 700, 800}));
  // Step 0 is a multiple of everything: a milestone too.
  EXPECT_EQ(StepsToDelete({0, 10, 20, 30}, {.keep_last = 1, .keep_every = 1000}), (Steps{10, 20}));
}

TEST(Retention, NeverTheNewestWhateverTheSettings) {
  // keep_last is documented >= 1; a 0 or negative value from a careless caller still keeps
  // the one checkpoint a restart needs.
  for (int64_t keep_last : {0, -5}) {
    EXPECT_EQ(StepsToDelete({10, 20, 30}, {.keep_last = keep_last, .keep_every = 0}), (Steps{10, 20}));
    EXPECT_EQ(StepsToDelete({42}, {.keep_last = keep_last, .keep_every = 0}), Steps{});
  }
  // The newest is kept even when it is no milestone.
  EXPECT_EQ(StepsToDelete({100, 150}, {.keep_last = 1, .keep_every = 100}), Steps{});
  EXPECT_EQ(StepsToDelete({100, 150, 170}, {.keep_last = 1, .keep_every = 100}), (Steps{150}));
}

TEST(Retention, UnorderedInputGivesTheSameAnswer) {
  const RetentionPolicy p{.keep_last = 2, .keep_every = 300};
  const Steps sorted = StepsToDelete({100, 200, 300, 400, 500, 600, 700}, p);
  EXPECT_EQ(sorted, (Steps{100, 200, 400, 500}));
  EXPECT_EQ(StepsToDelete({500, 100, 700, 300, 200, 600, 400}, p), sorted);
  EXPECT_EQ(StepsToDelete({700, 600, 500, 400, 300, 200, 100}, p), sorted);
}

}  // namespace
}  // namespace tessera
