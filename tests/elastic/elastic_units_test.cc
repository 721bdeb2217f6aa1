// The elastic driver's parsing (discovery output, per-generation assignments) and the store a
// generation forms through.
#include <gtest/gtest.h>

#include <thread>

#include "launcher/cli.h"
#include "launcher/elastic_discovery.h"
#include "rendezvous/elastic_assignment.h"
#include "rendezvous/formation_store.h"
#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

std::string errorOf(const std::string& output) {
  try {
    parseDiscoveryOutput(output, "disc.sh", 2);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Discovery, HostsWithAndWithoutSlots) {
  auto hosts = parseDiscoveryOutput("a:4\n# a comment\n\n  b  \nuser@c:1 # trailing\n", "d", 2);
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "a");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].name, "b");
  EXPECT_EQ(hosts[1].slots, 2);  // --slots-per-host
  EXPECT_EQ(hosts[2].name, "user@c");
  EXPECT_EQ(hosts[2].slots, 1);
}

TEST(Discovery, GarbageNamesTheScriptAndTheLine) {
  EXPECT_EQ(errorOf("a:1\nb c\n"),
            "host discovery script disc.sh line 2: 'b c' is not 'host' or 'host:slots'");
  EXPECT_EQ(errorOf("a:x"),
            "host discovery script disc.sh line 1: 'a:x' has a slot count that is not a whole "
            "number");
  EXPECT_EQ(errorOf("a:0"),
            "host discovery script disc.sh line 1: 'a:0' has no slots (the count "
            "must be at least 1)");
  EXPECT_EQ(errorOf("a\na:3"),
            "host discovery script disc.sh line 2: 'a:3' names a host listed "
            "before");
  EXPECT_EQ(errorOf(":3"),
            "host discovery script disc.sh line 1: ':3' is not 'host' or "
            "'host:slots'");
  EXPECT_EQ(errorOf("a:99999999999"),
            "host discovery script disc.sh line 1: 'a:99999999999' has a slot count that is not "
            "a whole number");
}

TEST(Discovery, EmptyOutputIsNoHosts) {
  EXPECT_TRUE(parseDiscoveryOutput("\n# none\n", "d", 1).empty());
}

int cooldownTakesTwo(const std::string& name, void*) {
  if (name == "--blacklist-cooldown-range") return 2;
  if (name == "--num-proc" || name == "--host-discovery-script") return 1;  // -np is --num-proc
  return name == "--verbose" ? 0 : -1;
}

TEST(ElasticCommandLine, CooldownRangeTakesTwoValuesBeforeTheCommand) {
  SplitArguments split = splitRunArguments(
      {"-np", "4", "--blacklist-cooldown-range", "3", "4", "--verbose", "python", "x.py"},
      cooldownTakesTwo, nullptr);
  EXPECT_EQ(split.options,
            (std::vector<std::string>{"--num-proc", "4", "--blacklist-cooldown-range", "3", "4",
                                      "--verbose"}));
  EXPECT_EQ(split.command, (std::vector<std::string>{"python", "x.py"}));
}

}  // namespace
}  // namespace ronde::launcher

namespace ronde {
namespace {

TEST(ElasticAssignment, RoundTrips) {
  ElasticAssignment a{7, 2, 5, 1, 2, 0, 3, "hostB"};
  std::string text = formatElasticAssignment(a);
  ElasticAssignment b = parseElasticAssignment("k", text, 7);
  EXPECT_EQ(b.generation, 7);
  EXPECT_EQ(b.rank, 2);
  EXPECT_EQ(b.size, 5);
  EXPECT_EQ(b.local_rank, 1);
  EXPECT_EQ(b.local_size, 2);
  EXPECT_EQ(b.cross_rank, 0);
  EXPECT_EQ(b.cross_size, 3);
  EXPECT_EQ(b.hostname, "hostB");
}

TEST(ElasticAssignment, MalformedIsAnErrorNamingTheKey) {
  for (const char* text : {"", "1 2 3", "5 5 0 1 0 1 h", "0 1 0 1 0 1 h extra", "x 1 0 1 0 1 h"}) {
    try {
      parseElasticAssignment("elastic/gen/1/assign/w0", text, 1);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("elastic/gen/1/assign/w0"), std::string::npos);
    }
  }
}

TEST(ElasticAssignment, AWorkerWaitsForAGenerationThatPlacesIt) {
  auto store = makeMemoryStore();
  ElasticAssignment a{1, 0, 1, 0, 1, 0, 1, "h"};
  store->setString(elasticAssignmentKey(1, "w0"), formatElasticAssignment(a));
  store->add(kElasticGenerationKey, 1);
  EXPECT_EQ(awaitElasticAssignment(*store, "w0", Duration(1000)).generation, 1);
  // Joined 1 already: nothing newer, so it asks for a reset of 1 and times out naming both.
  try {
    awaitElasticAssignment(*store, "w0", Duration(50));
    ADD_FAILURE() << "no newer generation, yet it returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(error.what()).find("elastic worker w0"), std::string::npos);
  }
  Bytes requests;
  EXPECT_TRUE(store->tryGet(elasticResetRequestKey(1), &requests));
}

// Generation 1 forms through a FormationStore; a key that never comes would hold it for the
// whole timeout, but the driver publishing generation 2 fails the wait with kPeerLost
// naming both (the retryable code), and a key set meanwhile is still found.
TEST(FormationStore, ANewerGenerationEndsTheWaitAndDisarmedItPassesThrough) {
  auto root = makeMemoryStore();
  root->add(kElasticGenerationKey, 1);
  auto world = std::make_shared<PrefixStore>(root, elasticWorldPrefix(1));
  FormationStore formation(world, root, 1, Duration(20));
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    world->setString("host/1", "h1");
  });
  EXPECT_EQ(formation.getString("host/1", Duration(10000)), "h1");  // found across slices
  peer.join();
  try {
    formation.getString("host/2", Duration(100));
    ADD_FAILURE() << "a key never set was returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);  // nothing newer: the caller's own timeout
  }
  std::thread driver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    root->add(kElasticGenerationKey, 1);
  });
  try {
    formation.getString("host/2", Duration(60000));
    ADD_FAILURE() << "a key never set was returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kPeerLost) << error.what();
    EXPECT_NE(std::string(error.what()).find("generation 1 was replaced by generation 2"),
              std::string::npos)
        << error.what();
  }
  driver.join();
  EXPECT_THROW(formation.add("counter", 1), Error);
  formation.disarm();  // formed: the running world's store calls go through
  EXPECT_EQ(formation.add("counter", 1), 1);
  Bytes value;
  EXPECT_TRUE(formation.tryGet("host/1", &value));
  try {
    formation.getString("host/2", Duration(50));
    ADD_FAILURE() << "a key never set was returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);
  }
}

}  // namespace
}  // namespace ronde
