// Jobs that used to hang become errors on every rank: a deadlock (every rank blocked on a
// request another rank never submits) and a non-allreduce request while a rank has joined.
// What must stay a plain wait stays one: a rank that is computing is not deadlocked, and the
// detector can be turned off. Each case at 2, 3 and 4 ranks where it has that many.
#include <gtest/gtest.h>

#include <thread>

#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

constexpr auto kWait = std::chrono::seconds(20);  // far above any detection time used here

Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t) {
  Request r;
  r.name = name;
  r.input = r.output = t;
  return r;
}

Request barrierNamed(const std::string& name) {
  Request r;
  r.kind = RequestKind::kBarrier;
  r.name = name;
  return r;
}

// The error a wait ends with ("" when it succeeds); its code in *code.
std::string errorOf(const std::shared_ptr<Handle>& h, ErrorCode* code = nullptr) {
  try {
    h->wait(kWait);
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

Settings detectorSettings() {
  Settings s = runtimeTestSettings();
  s.stall_check_seconds = 0.4;  // the detector's time; the stall inspector stays quiet
  return s;
}

// After a case: the runtime still runs collectives, with the right sum.
void stillWorks(std::unique_ptr<Runtime>& rt, RuntimeContext& ctx, const std::string& name) {
  auto t = filledFloats(3, 1.0f);
  rt->enqueue(allreduceOf(name, t))->wait(kWait);
  REQUIRE(t->as<float>()[0] == static_cast<float>(ctx.size), "after the case: "
                                                                 << t->as<float>()[0]);
}

class RuntimeHangs : public ::testing::TestWithParam<int> {};

// Rank 0 waits in a barrier; every other rank waits for an allreduce rank 0 never submits.
TEST_P(RuntimeHangs, OneSidedWaitsFailEveryRankNamingWhatEachWaitsFor) {
  RankSpec spec;
  spec.size = GetParam();
  runRuntimeRanks(spec, detectorSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    ::freopen("/dev/null", "w", stderr);
    stillWorks(rt, ctx, "before");
    auto h = ctx.rank == 0 ? rt->enqueue(barrierNamed("b"))
                           : rt->enqueue(allreduceOf("grad.3", filledFloats(4, 1.0f)));
    ErrorCode code = ErrorCode::kInternal;
    std::string error = errorOf(h, &code);
    REQUIRE(code == ErrorCode::kMismatch, "rank " << ctx.rank << ": '" << error << "'");
    REQUIRE(error.find("deadlock") != std::string::npos, error);
    REQUIRE(error.find("rank 0 waits in barrier 'b', which rank 1") != std::string::npos, error);
    for (int r = 1; r < ctx.size; ++r) {
      std::string expected =
          "rank " + std::to_string(r) + " waits for allreduce 'grad.3', which rank 0 never";
      REQUIRE(error.find(expected) != std::string::npos, "missing '" << expected << "': " << error);
    }
    // Both names are free again on every rank, and the runtime runs on.
    stillWorks(rt, ctx, "grad.3");
    rt->enqueue(barrierNamed("b"))->wait(kWait);
  });
}

// A rank with a request pending that does not wait on it (it computes) is not deadlocked:
// the others wait, for several detection times, and everything completes.
TEST_P(RuntimeHangs, ARankThatComputesIsNotDeadlocked) {
  RankSpec spec;
  spec.size = GetParam();
  runRuntimeRanks(spec, detectorSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    ::freopen("/dev/null", "w", stderr);
    auto x = filledFloats(2, 1.0f);
    auto y = filledFloats(2, 1.0f);
    if (ctx.rank == ctx.size - 1) {
      auto later = rt->enqueue(allreduceOf("y", y));
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // 5 detection times
      rt->enqueue(allreduceOf("x", x))->wait(kWait);
      later->wait(kWait);
    } else {
      std::string error = errorOf(rt->enqueue(allreduceOf("x", x)));
      REQUIRE(error.empty(), "rank " << ctx.rank << ": " << error);
      rt->enqueue(allreduceOf("y", y))->wait(kWait);
    }
    REQUIRE(x->as<float>()[0] == static_cast<float>(ctx.size), "x: " << x->as<float>()[0]);
    REQUIRE(y->as<float>()[0] == static_cast<float>(ctx.size), "y: " << y->as<float>()[0]);
  });
}

// Turned off, the detector leaves a deadlock a wait (which here times out).
TEST_P(RuntimeHangs, TheDetectorTurnedOffLeavesAWait) {
  RankSpec spec;
  spec.size = GetParam();
  Settings settings = detectorSettings();
  settings.deadlock_check_disable = true;
  runRuntimeRanks(spec, settings, [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    ::freopen("/dev/null", "w", stderr);
    auto h = ctx.rank == 0 ? rt->enqueue(barrierNamed("b"))
                           : rt->enqueue(allreduceOf("grad.3", filledFloats(4, 1.0f)));
    ErrorCode code = ErrorCode::kInternal;
    std::string error;
    try {
      h->wait(std::chrono::milliseconds(2000));
    } catch (const Error& e) {
      code = e.code();
      error = e.what();
    }
    REQUIRE(code == ErrorCode::kTimeout, "rank " << ctx.rank << ": '" << error << "'");
  });
}

// Rank 1 joins; the active ranks submit allgathers under names that do not match (their
// counters got out of step). Each can never run beside the joined rank: each fails at once
// on the rank that submitted it, instead of waiting for a peer that submits another name.
TEST_P(RuntimeHangs, AllgathersOutOfStepFailWhileARankHasJoined) {
  RankSpec spec;
  spec.size = GetParam();
  if (spec.size < 3) GTEST_SKIP() << "needs two active ranks beside the joined one";
  runRuntimeRanks(spec, runtimeTestSettings(),
                  [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
                    ::freopen("/dev/null", "w", stderr);
                    Request join;
                    join.kind = RequestKind::kJoin;
                    if (ctx.rank == 1) {
                      rt->enqueue(join)->wait(kWait);
                      return;
                    }
                    Request g;
                    g.kind = RequestKind::kAllgather;
                    g.name = "allgather.noname." + std::to_string(ctx.rank);
                    g.input = filledFloats(2, 1.0f);
                    std::string error = errorOf(rt->enqueue(g));
                    REQUIRE(error.find("joined") != std::string::npos,
                            "rank " << ctx.rank << ": '" << error << "'");
                    rt->enqueue(join)->wait(kWait);
                  });
}

// The same name submitted twice before the first completes. Rank 0 always submits its second
// before its first can complete (the others submit their first only after that), so it refuses
// at once. In odd rounds the other ranks submit their second only once their first completed,
// so they accept it: the case that hung (it waited for rank 0 forever). In even rounds they
// submit it at once, and refuse or accept as the race goes. Every rank's second must end in
// an error, never in a wait; the first completes everywhere, with the right sum, and the
// runtime runs on.
TEST_P(RuntimeHangs, ADuplicateInFlightNameFailsOnEveryRankThatSubmittedIt) {
  RankSpec spec;
  spec.size = GetParam();
  runRuntimeRanks(spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt,
                                                  RuntimeContext& ctx) {
    ::freopen("/dev/null", "w", stderr);
    int refused_here = 0;
    for (int round = 0; round < 10; ++round) {
      const std::string name = "dup." + std::to_string(round);
      const std::string rank0_done = "test/dup-rank0/" + std::to_string(round);
      if (ctx.rank != 0) ctx.store->getString(rank0_done, kWait);
      auto first_tensor = filledFloats(2, 1.0f);
      auto first = rt->enqueue(allreduceOf(name, first_tensor));
      if (ctx.rank != 0 && round % 2 == 1) first->wait(kWait);
      std::string error;
      ErrorCode code = ErrorCode::kInternal;
      try {
        auto second = rt->enqueue(allreduceOf(name, filledFloats(2, 1.0f)));
        error = errorOf(second, &code);  // accepted: the first completed here
      } catch (const Error& e) {
        code = e.code();
        error = e.what();
        ++refused_here;
      }
      if (ctx.rank == 0) ctx.store->setString(rank0_done, "1");
      REQUIRE(code == ErrorCode::kInvalidArgument,
              "round " << round << ", rank " << ctx.rank << ": '" << error << "'");
      REQUIRE(error.find("in flight") != std::string::npos, error);
      first->wait(kWait);
      REQUIRE(first_tensor->as<float>()[0] == static_cast<float>(ctx.size),
              "round " << round << ": " << first_tensor->as<float>()[0]);
      stillWorks(rt, ctx, "after." + std::to_string(round));
    }
    if (ctx.rank == 0) REQUIRE(refused_here == 10, "rank 0 refused " << refused_here);
  });
}

// The same, with a group of two submitted twice (grouped_allreduce_async in a loop without
// synchronizing): a refused group announces a notice per member.
TEST_P(RuntimeHangs, ADuplicateInFlightGroupFailsOnEveryRankThatSubmittedIt) {
  RankSpec spec;
  spec.size = GetParam();
  runRuntimeRanks(spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt,
                                                  RuntimeContext& ctx) {
    ::freopen("/dev/null", "w", stderr);
    auto group = [](const std::string& name) {
      return std::vector<Request>{allreduceOf(name + ".a", filledFloats(2, 1.0f)),
                                  allreduceOf(name + ".b", filledFloats(2, 1.0f))};
    };
    for (int round = 0; round < 6; ++round) {
      const std::string name = "gdup." + std::to_string(round);
      const std::string rank0_done = "test/gdup-rank0/" + std::to_string(round);
      if (ctx.rank != 0) ctx.store->getString(rank0_done, kWait);
      auto first = rt->enqueueGroup(group(name));
      if (ctx.rank != 0 && round % 2 == 1) {
        for (auto& h : first) h->wait(kWait);
      }
      std::string errors;
      try {
        for (auto& h : rt->enqueueGroup(group(name))) {
          std::string error = errorOf(h);  // accepted: the first completed here
          if (error.find("in flight") != std::string::npos) errors += "x";
        }
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kInvalidArgument) errors = "xx";
      }
      if (ctx.rank == 0) ctx.store->setString(rank0_done, "1");
      REQUIRE(errors == "xx", "round " << round << ", rank " << ctx.rank << ": "
                                        << errors.size() << " of 2 members failed");
      for (auto& h : first) REQUIRE(errorOf(h).empty(), "round " << round << ": the first");
      stillWorks(rt, ctx, "gafter." + std::to_string(round));
    }
  });
}

// Rank 0 alone submits a name twice (refused: its notice takes its turn of the name); the
// first completes with every rank's. Then rank 0 submits the name again and waits, while the
// others wait in a barrier rank 0 never enters. Rank 0's request waits behind its notice for a
// turn no peer will submit: the detector must see it, name it, and fail it with the rest, not
// leave it waiting after the others were released.
TEST_P(RuntimeHangs, ARequestWaitingBehindItsRanksRefusedDuplicateIsPartOfADeadlock) {
  RankSpec spec;
  spec.size = GetParam();
  runRuntimeRanks(spec, detectorSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    ::freopen("/dev/null", "w", stderr);
    std::shared_ptr<Handle> first;
    if (ctx.rank == 0) {
      first = rt->enqueue(allreduceOf("solo", filledFloats(2, 1.0f)));
      bool refused = false;
      try {
        rt->enqueue(allreduceOf("solo", filledFloats(2, 1.0f)));
      } catch (const Error& e) {
        refused = e.code() == ErrorCode::kInvalidArgument;
      }
      REQUIRE(refused, "the duplicate was accepted");
      ctx.store->setString("test/solo-refused", "1");
    } else {
      ctx.store->getString("test/solo-refused", kWait);
      first = rt->enqueue(allreduceOf("solo", filledFloats(2, 1.0f)));
    }
    REQUIRE(errorOf(first).empty(), "the first 'solo' fails on rank " << ctx.rank);
    auto h = ctx.rank == 0 ? rt->enqueue(allreduceOf("solo", filledFloats(2, 1.0f)))
                           : rt->enqueue(barrierNamed("b.solo"));
    ErrorCode code = ErrorCode::kInternal;
    std::string error = errorOf(h, &code);
    REQUIRE(code == ErrorCode::kMismatch, "rank " << ctx.rank << ": '" << error << "'");
    REQUIRE(error.find("deadlock") != std::string::npos, error);
    REQUIRE(error.find("rank 0 waits for allreduce 'solo'") != std::string::npos, error);
    REQUIRE(error.find("refused duplicate") != std::string::npos, error);
    stillWorks(rt, ctx, "after.solo");
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, RuntimeHangs, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

}  // namespace
}  // namespace ronde::testing
