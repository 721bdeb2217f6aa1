// The autotuner inside a running job: rank 0 changes the knobs while the ranks train, every
// rank applies them at the same cycle, results stay exact throughout (against the closed-form
// sums), and the log records the warm-up, every sample and the final choice.
#include <gtest/gtest.h>

#include <unistd.h>
#include <fstream>
#include <string>

#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

TEST(RuntimeAutotune, KnobsChangeMidRunOnEveryRankAndResultsStayExact) {
  const std::string log_path =
      ::testing::TempDir() + "/runtime_autotune_" + std::to_string(getpid()) + ".csv";
  Settings settings = runtimeTestSettings();
  settings.autotune = true;
  settings.autotune_log = log_path;
  settings.autotune_warmup_samples = 1;
  settings.autotune_steps_per_sample = 2;
  settings.autotune_max_samples = 8;
  // One host of 2 and 3 ranks, and two simulated hosts of 2 (TCP across: every knob tuned).
  const std::vector<std::vector<std::string>> layouts = {
      {"h", "h"}, {"h", "h", "h"}, {"hostA", "hostA", "hostB", "hostB"}};
  for (const auto& hosts : layouts) {
    const int size = static_cast<int>(hosts.size());
    RankSpec spec;
    spec.size = size;
    spec.hosts = hosts;
    runRuntimeRanks(spec, settings, [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
      constexpr int kTensors = 12;
      // 256 B to 8 KiB, and two of 128 KiB and 1 MiB on either side of the largest fused
      // tensor's range, so that the tuner's choices move them in and out of the buffer.
      auto elements = [](int i) -> size_t {
        if (i == 10) return size_t{32} << 10;
        if (i == 11) return size_t{256} << 10;
        return static_cast<size_t>(64 << (i % 6));
      };
      int knob_changes = 0;
      int comm_changes = 0;
      RuntimeStats last = rt->stats();
      for (int step = 0; step < 120; ++step) {
        std::vector<std::shared_ptr<HostTensor>> tensors;
        std::vector<std::shared_ptr<Handle>> handles;
        for (int i = 0; i < kTensors; ++i) {
          const size_t n = elements(i);
          auto t = filledFloats(n, static_cast<float>(ctx.rank * 3 + i + step));
          Request r;
          r.name = "grad" + std::to_string(i);
          r.input = r.output = t;
          tensors.push_back(t);
          handles.push_back(rt->enqueue(std::move(r)));
        }
        for (int i = 0; i < kTensors; ++i) {
          handles[static_cast<size_t>(i)]->wait();
          const float* got = tensors[static_cast<size_t>(i)]->as<float>();
          const size_t n = elements(i);
          for (size_t e = 0; e < n; e += 13) {
            // sum over ranks of (3 rank + i + step + e)
            const float want = static_cast<float>(3 * ctx.size * (ctx.size - 1) / 2 +
                                                  ctx.size * (i + step + static_cast<int>(e)));
            REQUIRE(got[e] == want, "step " << step << " tensor " << i << " element " << e << ": "
                                            << got[e] << " != " << want);
          }
        }
        const RuntimeStats now = rt->stats();
        if (now.fusion_threshold_bytes != last.fusion_threshold_bytes ||
            now.fusion_max_tensor_bytes != last.fusion_max_tensor_bytes ||
            now.cycle_time_ms != last.cycle_time_ms || now.response_cache != last.response_cache)
          ++knob_changes;
        if (!(now.communicator_tuning == last.communicator_tuning)) ++comm_changes;
        // (Not compared with rt->communicator().tuning() here: the background thread may
        // apply the next choice between the two reads. comm_tuning_test checks that the
        // communicator runs with what setTuning was given.)
        last = now;
      }
      REQUIRE(knob_changes >= 3, "the knobs changed only " << knob_changes << " times");
      REQUIRE(comm_changes >= 2,
              "the communicator's knobs changed only " << comm_changes << " times");
      const CommTuning& tuning = last.communicator_tuning;
      REQUIRE(tuning.small_allreduce_bytes >= 4096 && tuning.small_allreduce_bytes <= (1 << 20),
              "cutoff " << tuning.small_allreduce_bytes);
      REQUIRE(tuning.shm_chunk_bytes >= 4096 && tuning.shm_chunk_bytes <= (1 << 20),
              "shm chunk " << tuning.shm_chunk_bytes);
      REQUIRE(tuning.tcp_chunk_bytes >= 4096, "tcp chunk " << tuning.tcp_chunk_bytes);
      // Every rank ends with the same knobs: compare them through the runtime itself.
      constexpr int kKnobs = 11;
      auto mine = std::make_shared<HostTensor>(DataType::kFloat64, std::vector<int64_t>{kKnobs});
      double* v = mine->as<double>();
      v[0] = static_cast<double>(last.fusion_threshold_bytes);
      v[1] = last.cycle_time_ms;
      v[2] = last.response_cache ? 1 : 0;
      v[3] = static_cast<double>(tuning.small_allreduce_bytes);
      v[4] = static_cast<double>(tuning.shm_chunk_bytes);
      v[5] = static_cast<double>(tuning.tcp_chunk_bytes);
      v[6] = tuning.hierarchical_allreduce ? 1 : 0;
      v[7] = tuning.shm_direct_read ? 1 : 0;
      v[8] = static_cast<double>(tuning.hierarchical_chunk_bytes);
      v[9] = static_cast<double>(last.fusion_max_tensor_bytes);
      v[10] = tuning.hierarchical_allgather ? 1 : 0;
      auto low = std::make_shared<HostTensor>(*mine);
      Request a;
      a.name = "knobs.min";
      a.input = a.output = low;
      a.op = ReduceOp::kMin;
      rt->enqueue(std::move(a))->wait();
      Request b;
      b.name = "knobs.max";
      b.input = b.output = mine;
      b.op = ReduceOp::kMax;
      rt->enqueue(std::move(b))->wait();
      for (int k = 0; k < kKnobs; ++k)
        REQUIRE(low->as<double>()[k] == mine->as<double>()[k], "ranks disagree on knob " << k);
    });

    std::ifstream log(log_path);
    ASSERT_TRUE(log.good()) << log_path;
    std::string line;
    int warmups = 0, samples = 0, finals = 0;
    while (std::getline(log, line)) {
      warmups += line.find(",warmup,") != std::string::npos;
      samples += line.find(",sample,") != std::string::npos;
      finals += line.find(",final,") != std::string::npos;
    }
    EXPECT_EQ(warmups, 1) << size << " ranks";
    EXPECT_EQ(samples, 8) << size << " ranks";
    EXPECT_EQ(finals, 1) << size << " ranks";
  }
}

}  // namespace
}  // namespace ronde::testing
