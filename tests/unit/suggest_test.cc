// links: tessera_core
// tests/unit/suggest_test.cc — the one "did you mean" (runtime/core/suggest.h) that config keys
// and values and chaos scenario keys and fault kinds share.
#include "runtime/core/suggest.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(Suggest, AnAdjacentTranspositionIsOneEdit) {
  EXPECT_EQ(EditDistance("keep_lats", "keep_last"), 1);
  EXPECT_EQ(DidYouMean("keep_lats", {"keep_every", "keep_last"}), " (did you mean \"keep_last\"?)");
}

TEST(Suggest, CaseDoesNotCount) {
  EXPECT_EQ(EditDistance("Kill_Rank", "kill_rank"), 0);
  EXPECT_EQ(ClosestWord("KILL_RANK", {"stop_rank", "kill_rank"}), "kill_rank");
}

TEST(Suggest, AFaultKindTypoSuggestsTheKind) {
  EXPECT_EQ(DidYouMean("kill_rnak", {"kill_rank", "stop_rank", "slow_rank"}), " (did you mean \"kill_rank\"?)");
}

TEST(Suggest, NothingCloseMeansNoSuggestion) {
  EXPECT_EQ(DidYouMean("completely_else", {"kill_rank", "stop_rank"}), "");
  EXPECT_EQ(DidYouMean("x", {"lr"}), "");  // a rewrite of every character is noise
  EXPECT_EQ(DidYouMean("steps", {}), "");
}

TEST(Suggest, TiesGoToTheEarlierCandidate) {
  EXPECT_EQ(ClosestWord("stepz", {"steps", "stepy"}), "steps");
  EXPECT_EQ(ClosestWord("stepz", {"stepy", "steps"}), "stepy");
}

}  // namespace
}  // namespace tessera
