#include "support/simulated_hosts.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <thread>

namespace ronde::testing {

RankSpec simulatedHostsSpec(const HostLayout& layout) {
  RankSpec s;
  s.hosts = layout.hosts;
  s.size = static_cast<int>(s.hosts.size());
  s.timeout_seconds = 300;
  s.shm_chunk_bytes = 64 * 1024;
  return s;
}

void expectKilledRankNamed(const RankSpec& spec, int victim,
                           const std::function<void(Communicator&)>& setup,
                           const std::function<void(Communicator&)>& collective) {
  const std::string victim_host = spec.hosts[static_cast<size_t>(victim)];
  auto outcomes = runRanksRaw(spec, [&](Communicator& comm) {
    setup(comm);
    collective(comm);
    if (comm.rank() == victim) {
      std::thread killer([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        ::kill(::getpid(), SIGKILL);
      });
      for (;;) collective(comm);
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      for (;;) collective(comm);
    } catch (const Error& e) {
      const std::string what = e.what();
      if (e.code() != ErrorCode::kPeerLost ||
          what.find("rank " + std::to_string(victim)) == std::string::npos ||
          what.find(victim_host) == std::string::npos) {
        throw std::runtime_error(std::string("expected peer-lost naming rank ") +
                                 std::to_string(victim) + " on " + victim_host + ", got " +
                                 errorCodeName(e.code()) + ": " + what);
      }
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(15)) {
      throw std::runtime_error("the dead rank was noticed too late");
    }
  });
  EXPECT_EQ(outcomes[static_cast<size_t>(victim)].signal, SIGKILL);
  for (const auto& o : outcomes) {
    if (o.rank != victim) {
      EXPECT_EQ(o.exit_code, 0) << "rank " << o.rank << ": " << o.message;
    }
  }
}

}  // namespace ronde::testing
