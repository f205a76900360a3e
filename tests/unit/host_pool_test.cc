// runtime/supervisor/host_pool.h: spares held back from the hostfile, by-slot rank placement,
// the incarnation hostfile, a lost host (one the probe says does not answer, among the failed
// ranks' hosts) replaced by a spare in its place, and the refusals; HostAnswers on this
// machine's loopback (a refused connection is an answer).
// links: tessera_supervisor
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/supervisor/host_pool.h"

namespace tessera {
namespace {

std::vector<HostfileEntry> Hosts(std::vector<std::pair<std::string, int>> hs) {
  std::vector<HostfileEntry> out;
  int line = 1;
  for (auto& [h, s] : hs) out.push_back({h, s, line++});
  return out;
}

TEST(HostPool, PlacesRanksBySlotAndReplacesALostHostInItsPlace) {
  std::set<std::string> down;
  auto probe = [&](const std::string& h) { return down.count(h) == 0; };
  auto pool = HostPool::Create(Hosts({{"a", 2}, {"b", 2}, {"c", 2}, {"s1", 2}, {"s2", 2}}), 2, 5,
                               "/h", probe);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(pool->active().size(), 3u);
  EXPECT_EQ(pool->spares_left(), 2);
  EXPECT_EQ(pool->HostOfRank(0), "a");
  EXPECT_EQ(pool->HostOfRank(2), "b");
  EXPECT_EQ(pool->HostOfRank(4), "c");
  // Every host running a rank is probed, whichever rank failed first; those that do not
  // answer are lost. Spares are not probed.
  EXPECT_TRUE(pool->LostHosts().empty());
  down = {"b", "s2"};
  EXPECT_EQ(pool->LostHosts(), std::vector<std::string>{"b"});
  EXPECT_EQ(pool->Replace("b"), "s1");
  EXPECT_EQ(pool->HostOfRank(2), "s1");  // the spare takes b's ranks
  EXPECT_EQ(pool->HostOfRank(4), "c");
  EXPECT_EQ(pool->spares_left(), 1);
  const std::string dir = ::testing::TempDir();
  auto path = pool->WriteHostfile(dir, 3);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  std::ifstream in(*path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "# incarnation 3: the hosts in use (spares left: 1)\na slots=2\ns1 slots=2\nc slots=2\n");
  EXPECT_EQ(pool->Replace("s1"), "s2");
  EXPECT_EQ(pool->Replace("s2"), "");  // none left
}

TEST(HostPool, ALostHostThatAnswersAgainRejoinsAsASpareOrAsAnActiveHost) {
  std::set<std::string> down;
  auto probe = [&](const std::string& h) { return down.count(h) == 0; };
  auto pool = HostPool::Create(Hosts({{"a", 1}, {"b", 1}, {"s", 1}}), 1, 2, "/h", probe);
  ASSERT_TRUE(pool.ok());
  down = {"b"};
  EXPECT_EQ(pool->Replace("b"), "s");
  EXPECT_TRUE(pool->Rejoin().empty());  // still down
  down.clear();
  auto back = pool->Rejoin();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].host, "b");
  EXPECT_FALSE(back[0].active);  // a spare took its place: b is the spare now
  EXPECT_EQ(pool->spares_left(), 1);
  EXPECT_TRUE(pool->Rejoin().empty());  // once
  // Elastic: a removed host comes back to the end of the active hosts.
  down = {"a"};
  pool->Remove("a");
  EXPECT_EQ(pool->slots(), 1);
  down.clear();
  back = pool->Rejoin();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(back[0].active);
  ASSERT_EQ(pool->active().size(), 2u);
  EXPECT_EQ(pool->active()[1].host, "a");
  EXPECT_EQ(pool->slots(), 2);
  // Every host silent at once: the probe is suspect, nobody is lost.
  down = {"s", "a", "b"};
  EXPECT_TRUE(pool->LostHosts().empty());
}

TEST(HostPool, RefusesTooFewHostsOrSlots) {
  auto too_few = HostPool::Create(Hosts({{"a", 4}}), 1, 2, "/h");
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.status().message().find("1 host(s) cannot hold 1 spare(s)"), std::string::npos);
  auto slots = HostPool::Create(Hosts({{"a", 1}, {"b", 1}, {"s", 8}}), 1, 3, "/h");
  ASSERT_FALSE(slots.ok());
  EXPECT_EQ(slots.status().message(),
            "hostfile /h: 2 slots on the 2 host(s) not held as spares, for 3 ranks");
}

TEST(HostPool, LoopbackAnswersAndANameThatResolvesToNothingDoesNot) {
  EXPECT_TRUE(HostAnswers("127.0.0.1", 2.0));  // port 1 refuses: the host is there
  EXPECT_FALSE(HostAnswers("no-such-host.invalid", 2.0));
}

}  // namespace
}  // namespace tessera
