// Host lists, hostfiles and rank placement, against horovodrun's behaviour.
#include "launcher/host_list.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "launcher/cli.h"
#include "launcher/ssh.h"
#include "launcher/worker_env.h"
#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

std::string errorOf(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    return error.what();
  }
  return "(no error)";
}

TEST(HostList, ParsesHostsAndSlots) {
  auto hosts = parseHostList("worker-0:2, worker-1:4,10.0.0.3");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "worker-0");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].name, "worker-1");
  EXPECT_EQ(hosts[1].slots, 4);
  EXPECT_EQ(hosts[2].name, "10.0.0.3");
  EXPECT_EQ(hosts[2].slots, 1);
}

TEST(HostList, NamesTheMalformedPiece) {
  EXPECT_EQ(errorOf([] { parseHostList("a:x"); }),
            "-H a:x: slot count 'x' is not a positive integer");
  EXPECT_EQ(errorOf([] { parseHostList("a:0"); }),
            "-H a:0: slot count '0' is not a positive integer");
  EXPECT_EQ(errorOf([] { parseHostList("a:2,,b:1"); }), "-H a:2,,b:1: empty entry (stray comma?)");
  EXPECT_EQ(errorOf([] { parseHostList("a:2,"); }), "-H a:2,: empty entry (stray comma?)");
  EXPECT_EQ(errorOf([] { parseHostList(":2"); }), "-H :2: empty host name");
  EXPECT_EQ(errorOf([] { parseHostList("a b:2"); }), "-H a b:2: 'a b' is not a valid host name");
  EXPECT_EQ(errorOf([] { parseHostList("a:1,a:2"); }),
            "-H a:1,a:2: host 'a' is listed more than once");
}

TEST(HostFile, ParsesHorovodAndOpenMpiFormats) {
  auto hosts =
      parseHostFile("# cluster\nnode1 slots=4\n\nnode2 slots=2 max_slots=8\nnode3\n", "hosts.txt");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[2].name, "node3");
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_EQ(errorOf([] { parseHostFile("node1 slots=4\nnode2 slots=two\n", "h"); }),
            "h:2: slot count 'two' is not a positive integer");
  EXPECT_EQ(errorOf([] { parseHostFile("node1 cpus=4\n", "h"); }),
            "h:1: unexpected 'cpus=4' (expected 'host slots=N')");
  EXPECT_EQ(errorOf([] { parseHostFile("# nothing\n", "h"); }), "h: no hosts listed");
}

// Bad input of issue 40: each is refused, naming what is wrong in full.
TEST(HostFile, RefusesANulByteNamingTheWholeLine) {
  EXPECT_EQ(errorOf([] { parseHostFile(std::string("node1\nno\0de2 slots=2\n", 21), "h"); }),
            "h:2: the line 'no\\x00de2 slots=2' has a NUL byte");
}

TEST(HostFile, RefusesSlotsGivenTwice) {
  EXPECT_EQ(errorOf([] { parseHostFile("node1 slots=2 slots=3\n", "h"); }),
            "h:1: slots given twice ('node1 slots=2 slots=3')");
}

TEST(HostList, RefusesAnEmptyListAndAUserWithoutAHost) {
  EXPECT_EQ(errorOf([] { parseHostList(""); }), "-H '': empty host list");
  EXPECT_EQ(errorOf([] { parseHostList("user@:2"); }),
            "-H user@:2: 'user@' is not a valid host name");
  EXPECT_EQ(errorOf([] { parseHostList("@node:2"); }),
            "-H @node:2: '@node' is not a valid host name");
  EXPECT_EQ(errorOf([] { parseHostList("a@b@c"); }), "-H a@b@c: 'a@b@c' is not a valid host name");
  EXPECT_EQ(parseHostList("user@node:2")[0].name, "user@node");
}

TEST(Placement, FillsHostsInOrder) {
  auto placements = placeRanks({{"a", 2}, {"b", 2}, {"c", 4}}, 5);
  ASSERT_EQ(placements.size(), 5u);
  const char* expected_hosts[] = {"a", "a", "b", "b", "c"};
  const int local_ranks[] = {0, 1, 0, 1, 0};
  const int local_sizes[] = {2, 2, 2, 2, 1};
  const int cross_ranks[] = {0, 0, 1, 1, 2};
  const int cross_sizes[] = {3, 2, 3, 2, 3};
  for (int rank = 0; rank < 5; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(placements[rank].rank, rank);
    EXPECT_EQ(placements[rank].size, 5);
    EXPECT_EQ(placements[rank].host, expected_hosts[rank]);
    EXPECT_EQ(placements[rank].local_rank, local_ranks[rank]);
    EXPECT_EQ(placements[rank].local_size, local_sizes[rank]);
    EXPECT_EQ(placements[rank].cross_rank, cross_ranks[rank]);
    EXPECT_EQ(placements[rank].cross_size, cross_sizes[rank]);
  }
}

TEST(Placement, LeavesOutHostsWithoutRanks) {
  auto placements = placeRanks({{"a", 4}, {"b", 4}}, 3);
  ASSERT_EQ(placements.size(), 3u);
  for (const auto& placement : placements) {
    EXPECT_EQ(placement.host, "a");
    EXPECT_EQ(placement.cross_size, 1);
    EXPECT_EQ(placement.local_size, 3);
  }
}

TEST(Placement, RefusesMoreRanksThanSlots) {
  EXPECT_EQ(errorOf([] {
              placeRanks({{"a", 2}, {"b", 1}}, 4);
            }),
            "-np 4: more ranks than slots (3 slots on 2 hosts)");
  EXPECT_EQ(errorOf([] {
              placeRanks({{"a", 2}}, 0);
            }),
            "-np 0: the number of ranks must be positive");
}

TEST(Placement, SlotsOfABigHostfileAddUpWithoutOverflow) {
  // 2200 hosts of 999999 slots: 2.2e9 slots in all, past INT_MAX.
  std::vector<HostSlots> hosts;
  for (int i = 0; i < 2200; ++i) hosts.push_back({"node-" + std::to_string(i), 999999});
  auto placed = placeRanks(hosts, 3);
  ASSERT_EQ(placed.size(), 3u);
  for (const RankPlacement& p : placed) {
    EXPECT_EQ(p.host, "node-0");
    EXPECT_EQ(p.local_size, 3);
  }
}

TEST(WorkerEnv, PassesVariablesAsAsked) {
  auto lookup = [](const std::string& name) -> const char* {
    return name == "HOME" ? "/home/me" : nullptr;
  };
  auto env = resolvePassedVariables({"HOME", "A=1", "B=x=y", "A=2"}, lookup);
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0], (std::pair<std::string, std::string>("HOME", "/home/me")));
  EXPECT_EQ(env[1], (std::pair<std::string, std::string>("A", "2")));
  EXPECT_EQ(env[2], (std::pair<std::string, std::string>("B", "x=y")));
  EXPECT_EQ(errorOf([&] { resolvePassedVariables({"UNSET"}, lookup); }),
            "-x UNSET: UNSET is not set here; write -x UNSET=VALUE to give it a value");
  EXPECT_EQ(errorOf([&] { resolvePassedVariables({"1X=2"}, lookup); }),
            "-x 1X=2: '1X' is not a valid environment variable name");
}

TEST(WorkerEnv, SetsIdentityAndHorovodAliases) {
  RankPlacement placement{"b", 3, 4, 1, 2, 1, 2};
  JobEnvironment job{"s3cret", "eth1", {{"RONDE_CYCLE_TIME", "2"}}, {{"X", "1"}}};
  auto env = workerVariables(placement, "b", "10.0.0.1:5000", job);
  std::map<std::string, std::string> map(env.begin(), env.end());
  EXPECT_EQ(map["RONDE_RANK"], "3");
  EXPECT_EQ(map["HOROVOD_RANK"], "3");
  EXPECT_EQ(map["RONDE_SIZE"], "4");
  EXPECT_EQ(map["HOROVOD_LOCAL_RANK"], "1");
  EXPECT_EQ(map["RONDE_CROSS_SIZE"], "2");
  EXPECT_EQ(map["RONDE_HOSTNAME"], "b");
  EXPECT_EQ(map["RONDE_STORE_ADDRESS"], "10.0.0.1:5000");
  EXPECT_EQ(map["RONDE_SECRET"], "s3cret");
  EXPECT_EQ(map["RONDE_INTERFACE"], "eth1");
  EXPECT_EQ(map["RONDE_CYCLE_TIME"], "2");
  EXPECT_EQ(map["X"], "1");
}

TEST(Ssh, QuotesForTheRemoteShellAndKeepsTheSecretOffTheCommandLine) {
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  std::string command = remoteWorkerCommand("/work dir", {{"RONDE_SECRET", "s3cret"}, {"A", "x y"}},
                                            {"python3", "-c", "print('hi')"});
  EXPECT_EQ(command.find("s3cret"), std::string::npos);
  EXPECT_EQ(command.rfind("cd '/work dir' && exec sh -c ", 0), 0u);
  EXPECT_NE(command.find(" ronde-worker env 'A=x y' 'python3' '-c' 'print('\\''hi'\\'')'"),
            std::string::npos);
}

int takesValue(const std::string& name, void*) {
  if (name == "--num-proc" || name == "-H" || name == "-x") return 1;
  if (name == "--verbose") return 0;
  return -1;
}

TEST(Cli, SplitsOptionsFromTheCommand) {
  auto split =
      splitRunArguments({"-np", "4", "-H", "a:2,b:2", "-xFOO", "--verbose", "python3", "-np", "x"},
                        takesValue, nullptr);
  EXPECT_EQ(split.options,
            (std::vector<std::string>{"--num-proc", "4", "-H", "a:2,b:2", "-xFOO", "--verbose"}));
  EXPECT_EQ(split.command, (std::vector<std::string>{"python3", "-np", "x"}));
  split = splitRunArguments({"-np=2", "--", "-weird"}, takesValue, nullptr);
  EXPECT_EQ(split.options, (std::vector<std::string>{"--num-proc=2"}));
  EXPECT_EQ(split.command, (std::vector<std::string>{"-weird"}));
}

}  // namespace
}  // namespace ronde::launcher
