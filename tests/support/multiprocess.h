// Runs one test body in N real processes (forked from the test), joined by a Communicator
// that meets through a TCP store served by a process of its own (forked first, so that no
// thread exists at any fork: sanitizers hang otherwise). Each child reports its failure text to
// the parent, which fails the gtest with it, and kills the lot if they outlive the timeout.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ronde/communicator.h"

namespace ronde::testing {

struct RankSpec {
  int size = 2;
  TransportKind transport = TransportKind::kAuto;
  // hosts[r]: forced host identity of rank r; empty: all on one host.
  std::vector<std::string> hosts;
  int timeout_seconds = 120;               // the whole run, enforced by the parent
  int collective_timeout_ms = 60000;       // CommOptions::timeout in the children
  int64_t shm_chunk_bytes = 0;             // 0: default
  int64_t small_allreduce_bytes = -1;      // -1: default
  std::optional<bool> shm_direct_read;     // CommOptions::shm_direct_read
  std::string secret;
  // CommOptions::store_server_rank in the children, for bodies that serve their store
  // themselves (as rank 0 does under mpirun); -1: the test's own store process serves it.
  int store_server_rank = -1;
};

struct ChildOutcome {
  int rank = 0;
  int exit_code = 0;     // -1 when killed by a signal
  int signal = 0;
  std::string message;   // what the child reported (failure text)
};

// Body runs in each child; returning means success, throwing or failing an EXPECT means
// failure. The communicator is built before the body runs.
using RankBody = std::function<void(Communicator& comm)>;

// Runs and returns each child's outcome (no gtest assertions made).
std::vector<ChildOutcome> runRanksRaw(const RankSpec& spec, const RankBody& body);

// Like runRanksRaw, but the body builds what it needs itself from the port of the store the
// test serves (for harnesses that own their communicators, or build several).
using ProcessBody = std::function<void(int rank, int store_port)>;
std::vector<ChildOutcome> runProcessesRaw(const RankSpec& spec, const ProcessBody& body);

// What a child of runRanks does to meet the others: the store client and the communicator.
std::shared_ptr<Store> connectStore(const RankSpec& spec, int port);
std::unique_ptr<Communicator> makeCommunicator(const RankSpec& spec, int rank, int size,
                                               std::shared_ptr<Store> store);

// Runs and adds a gtest failure for every child that did not succeed.
void runRanks(const RankSpec& spec, const RankBody& body);

// In a child: the port of the test's store server.
int rendezvousPort();

// In a child: report a failure message (gtest EXPECTs in children are not seen by the parent).
void reportFailure(const std::string& message);

std::string transportLabel(TransportKind kind);

}  // namespace ronde::testing
