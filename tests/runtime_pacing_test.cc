// When cycles start: a request on an idle runtime starts one at once rather than waiting out
// the cycle time. Each test sets a cycle time (60 s) far longer than any wait it allows, so a
// request that waited for the clock fails the wait instead of passing slowly.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

constexpr auto kWait = std::chrono::seconds(20);  // a third of the cycle time

Settings slowClockSettings() {
  Settings s = runtimeTestSettings();
  s.cycle_time_ms = 60000;
  return s;
}

Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t) {
  Request r;
  r.kind = RequestKind::kAllreduce;
  r.name = name;
  r.input = r.output = t;
  return r;
}

// A wait far shorter than the cycle: it fails when the request waited for the clock.
void waitShort(Handle& handle, const std::string& what) {
  try {
    handle.wait(kWait);
  } catch (const Error& e) {
    throw std::runtime_error(what + " did not complete well within the 60 s cycle: " + e.what());
  }
}

// Sum over ranks of filledFloats(n, rank + salt) at element e.
float expectedSum(int size, int salt, size_t e) {
  return static_cast<float>(size * (salt + static_cast<int>(e)) + size * (size - 1) / 2);
}

// (ranks, transport): shared memory waits by spinning then sleeping, TCP in poll().
using PacingLayout = std::pair<int, TransportKind>;

class RuntimePacing : public ::testing::TestWithParam<PacingLayout> {
 protected:
  RankSpec spec() const {
    RankSpec s;
    s.size = GetParam().first;
    s.transport = GetParam().second;
    return s;
  }
};

TEST_P(RuntimePacing, LoneRequestsBackToBackDoNotWaitForTheClock) {
  runRuntimeRanks(
      spec(), slowClockSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        // The first is negotiated in full, the rest come from the response cache.
        for (int i = 0; i < 30; ++i) {
          auto t = filledFloats(1024, static_cast<float>(ctx.rank + i));
          auto h = rt->enqueue(allreduceOf("lone", t));
          waitShort(*h, "allreduce " + std::to_string(i));
          for (size_t e = 0; e < 1024; e += 101)
            REQUIRE(t->as<float>()[e] == expectedSum(ctx.size, i, e), "allreduce " << i);
        }
      });
}

TEST_P(RuntimePacing, ARankArrivingLateIsMetWhenItsRequestArrives) {
  runRuntimeRanks(
      spec(), slowClockSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        // Each round another rank is late: the others wait for it in negotiation, and it joins
        // them when its own request arrives.
        for (int round = 0; round < 2 * ctx.size; ++round) {
          if (round % ctx.size == ctx.rank)
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
          auto t = filledFloats(300, static_cast<float>(ctx.rank + round));
          auto h = rt->enqueue(allreduceOf("late", t));
          waitShort(*h, "round " + std::to_string(round));
          for (size_t e = 0; e < 300; e += 13)
            REQUIRE(t->as<float>()[e] == expectedSum(ctx.size, round, e), "round " << round);
        }
      });
}

TEST_P(RuntimePacing, ManyTensorStepsWithSkewedArrivalsStayCorrect) {
  runRuntimeRanks(
      spec(), slowClockSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        // Gradients arrive in the same order everywhere (as a backward pass gives them), each rank
        // with its own jitter, so ranks keep running ahead of each other mid-step.
        constexpr int kTensors = 60;
        std::mt19937 rng(static_cast<unsigned>(ctx.rank + 7));
        std::uniform_int_distribution<int> jitter_us(0, 300);
        for (int step = 0; step < 4; ++step) {
          std::vector<std::shared_ptr<HostTensor>> tensors;
          std::vector<std::shared_ptr<Handle>> handles;
          for (int i = 0; i < kTensors; ++i) {
            if (i % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(jitter_us(rng)));
            tensors.push_back(
                filledFloats(static_cast<size_t>(1 + 53 * i), static_cast<float>(ctx.rank + i)));
            handles.push_back(
                rt->enqueue(allreduceOf("grad." + std::to_string(i), tensors.back())));
          }
          for (int i = 0; i < kTensors; ++i) {
            waitShort(*handles[static_cast<size_t>(i)],
                      "step " + std::to_string(step) + " tensor " + std::to_string(i));
            const float* got = tensors[static_cast<size_t>(i)]->as<float>();
            for (size_t e = 0; e < static_cast<size_t>(1 + 53 * i); e += 17)
              REQUIRE(got[e] == expectedSum(ctx.size, i, e), "step " << step << " tensor " << i);
          }
        }
      });
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RuntimePacing,
    ::testing::Values(PacingLayout{1, TransportKind::kAuto}, PacingLayout{2, TransportKind::kAuto},
                      PacingLayout{3, TransportKind::kAuto}, PacingLayout{3, TransportKind::kTcp}),
    [](const ::testing::TestParamInfo<PacingLayout>& info) {
      return transportLabel(info.param.second) + "_" + std::to_string(info.param.first);
    });

}  // namespace
}  // namespace ronde::testing
