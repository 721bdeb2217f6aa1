// mpirun's command for `ronde run --mpi` (mpi_launch.h): built without running it, so the
// Hydra (MPICH) form is checked here too.
#include "launcher/mpi_launch.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

using Words = std::vector<std::string>;

std::vector<MpiRank> twoRanksOnTwoHosts() {
  return {{"a", 1, {{"RONDE_RANK", "0"}, {"RONDE_SIZE", "2"}, {"RONDE_SECRET", "s3"}}},
          {"b", 1, {{"RONDE_RANK", "1"}, {"RONDE_SIZE", "2"}, {"RONDE_SECRET", "s3"}}}};
}

bool contains(const Words& words, const Words& run) {
  return std::search(words.begin(), words.end(), run.begin(), run.end()) != words.end();
}

TEST(MpiLaunch, SplitsLikeTheShell) {
  EXPECT_EQ(splitShellWords("", "--mpi-args"), Words{});
  EXPECT_EQ(splitShellWords("  -x FOO=bar\t--map-by  ppr:6:node ", "--mpi-args"),
            (Words{"-x", "FOO=bar", "--map-by", "ppr:6:node"}));
  EXPECT_EQ(splitShellWords(R"(-x 'A=b c' -x "D=e \"f\"" G\ H '')", "--mpi-args"),
            (Words{"-x", "A=b c", "-x", "D=e \"f\"", "G H", ""}));
  EXPECT_EQ(splitShellWords(R"('a\b' "c\d")", "--mpi-args"), (Words{"a\\b", "c\\d"}));
  try {
    splitShellWords("-x \"A=1", "--binding-args");
    FAIL() << "an unclosed quote was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--binding-args '-x \"A=1': unclosed \""),
              std::string::npos)
        << error.what();
  }
}

TEST(MpiLaunch, SharedVariablesAreTheOnesEqualOnEveryRank) {
  EXPECT_EQ(sharedVariables(twoRanksOnTwoHosts()),
            (EnvList{{"RONDE_SIZE", "2"}, {"RONDE_SECRET", "s3"}}));
}

TEST(MpiLaunch, OpenMpiHasOneContextPerRankAndExportsSharedNames) {
  MpirunOptions options;
  options.as_root = true;
  options.mpi_args = {"-x", "FOO=bar"};
  options.command = {"python", "train.py"};
  const std::vector<MpiRank> ranks = twoRanksOnTwoHosts();
  const Words argv = mpirunArgv(options, ranks, sharedVariables(ranks));
  // Where, the default binding, the shared names, the rank's own values, --mpi-args, command.
  const Words context0 = {"-np", "1", "-H", "a:1", "-bind-to", "none", "-map-by", "slot",
                          "-x", "RONDE_SIZE", "-x", "RONDE_SECRET", "-x", "RONDE_RANK=0",
                          "-x", "FOO=bar", "python", "train.py", ":"};
  EXPECT_EQ(Words(argv.begin(), argv.begin() + 8),
            (Words{"mpirun", "--allow-run-as-root", "--tag-output", "-mca", "pml", "ob1", "-mca",
                   "btl"}));
  EXPECT_TRUE(contains(argv, context0));
  EXPECT_TRUE(contains(argv, {"-H", "b:1"}));
  EXPECT_TRUE(contains(argv, {"-x", "RONDE_RANK=1", "-x", "FOO=bar", "python", "train.py"}));
  EXPECT_EQ(argv.back(), "train.py");
  for (const std::string& word : argv) EXPECT_EQ(word.find("s3"), std::string::npos) << word;
}

TEST(MpiLaunch, OpenMpiFlagsFollowTheOptions) {
  MpirunOptions options;
  options.binding_args = {"-bind-to", "core"};
  options.output_directory = "out";
  options.prefix_timestamp = true;
  options.remote_hosts = true;
  options.ssh_port = 2222;
  options.ssh_identity_file = "/k";
  options.ssh_options = {"UserKnownHostsFile=/dev/null"};
  options.command = {"true"};
  const Words argv = mpirunArgv(options, {{"a", 2, {}}}, {});
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--allow-run-as-root"), 0);
  EXPECT_TRUE(contains(argv, {"--timestamp-output"}));
  EXPECT_TRUE(contains(argv, {"-mca", "plm_rsh_args",
                              "-o BatchMode=yes -o StrictHostKeyChecking=no -p 2222 -i /k "
                              "-o UserKnownHostsFile=/dev/null"}));
  EXPECT_TRUE(contains(argv, {"--output-filename", "out"}));
  EXPECT_TRUE(contains(argv, {"-H", "a:2", "-bind-to", "core", "true"}));
  EXPECT_FALSE(contains(argv, {"-bind-to", "none"}));
  EXPECT_FALSE(contains(argv, {"btl_tcp_if_include"}));
}

TEST(MpiLaunch, NetworkInterfaceLimitsOpenMpisTcp) {
  MpirunOptions options;
  options.command = {"true"};
  options.network_interface = "eth1";
  EXPECT_TRUE(contains(mpirunArgv(options, {{"a", 1, {}}}, {}),
                       {"-mca", "btl_tcp_if_include", "eth1"}));
  options.network_interface = "10.1.2.3";
  EXPECT_TRUE(contains(mpirunArgv(options, {{"a", 1, {}}}, {}),
                       {"-mca", "btl_tcp_if_include", "10.1.2.3/32"}));
}

TEST(MpiLaunch, HydraUsesEnvAndGenvlistAndItsOwnBinding) {
  MpirunOptions options;
  options.flavour = MpiFlavour::kHydra;
  options.as_root = true;
  options.binding_args = {"-bind-to", "core"};  // ignored for Hydra, as horovodrun does
  options.command = {"true"};
  const std::vector<MpiRank> ranks = twoRanksOnTwoHosts();
  const Words argv = mpirunArgv(options, ranks, sharedVariables(ranks));
  EXPECT_EQ(Words(argv.begin(), argv.begin() + 4),
            (Words{"mpirun", "-l", "-genvlist", "RONDE_SIZE,RONDE_SECRET"}));
  EXPECT_TRUE(contains(argv, {"-n", "1", "-host", "a", "-bind-to", "none", "-map-by", "slot",
                              "-env", "RONDE_RANK", "0", "true", ":", "-n", "1", "-host", "b"}));
  EXPECT_FALSE(contains(argv, {"--allow-run-as-root"}));
  EXPECT_FALSE(contains(argv, {"-bind-to", "core"}));
}

}  // namespace
}  // namespace ronde::launcher
