#include "support/stopped_rank_checks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "support/runtime_harness_require.h"

namespace ronde::testing {

std::string thisHost() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

bool isStopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream s;
  s << in.rdbuf();
  const std::string stat = s.str();
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
}

Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t) {
  Request r;
  r.name = name;
  r.input = r.output = t;
  return r;
}

std::string requirePeerLost(Handle& handle, int silent, const std::string& host) {
  bool lost = false;
  std::string what;
  try {
    handle.wait(std::chrono::seconds(8));
    what = "the request succeeded";
  } catch (const Error& e) {
    what = std::string(errorCodeName(e.code())) + ": " + e.what();
    lost = e.code() == ErrorCode::kPeerLost;
  }
  const std::string named =
      "rank " + std::to_string(silent) + " on host " + host + " has not answered";
  REQUIRE(lost && what.find(named) != std::string::npos,
          "expected kPeerLost naming '" << named << "', got " << what);
  return what;
}

void expectKilledAndOthersPassed(const std::vector<ChildOutcome>& outcomes, int killed) {
  for (const ChildOutcome& o : outcomes) {
    if (o.rank == killed) {
      EXPECT_EQ(o.signal, SIGKILL) << "rank " << o.rank << " (the stopped one): " << o.message;
    } else {
      EXPECT_EQ(o.exit_code, 0) << "rank " << o.rank << " failed: " << o.message;
    }
  }
}

}  // namespace ronde::testing
