// The autotuner's parts against independent expectations: the Gaussian process against the
// function it was fitted to, expected improvement against its closed form at known points,
// the optimiser against the known maximum of a noisy test function, and the whole tuner
// against a simulated job whose step time depends on the knobs in a known way.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include "ronde/errors.h"
#include "runtime/autotuner.h"
#include "runtime/bayesian_optimizer.h"
#include "runtime/gaussian_process.h"

namespace ronde::runtime {
namespace {

TEST(GaussianProcess, RecoversASmoothFunctionBetweenItsSamples) {
  auto f = [](double x) { return 5 + 3 * std::sin(6 * x); };
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 0; i <= 10; ++i) {
    x.push_back({i / 10.0});
    y.push_back(f(i / 10.0));
  }
  GaussianProcess gp(1e-4);
  gp.fit(x, y);
  for (double at : {0.05, 0.33, 0.61, 0.97}) {
    const auto p = gp.predict({at});
    EXPECT_NEAR(p.mean, f(at), 0.15) << "at " << at;
    EXPECT_LT(p.stddev, 0.3) << "at " << at;
  }
  // Far outside the samples the model knows only its prior: the scores' spread.
  EXPECT_GT(gp.predict({3.0}).stddev, 1.5);
}

TEST(GaussianProcess, NoiseKeepsItFromChasingOutliers) {
  // Noisy measurements of a constant: the model's mean stays near the constant.
  std::mt19937_64 random(7);
  std::normal_distribution<double> noise(0, 1);
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 0; i < 20; ++i) {
    x.push_back({(i % 10) / 10.0});
    y.push_back(10 + noise(random));
  }
  GaussianProcess gp(0.8);
  gp.fit(x, y);
  for (double at : {0.0, 0.45, 0.9}) EXPECT_NEAR(gp.predict({at}).mean, 10, 0.8);
}

TEST(ExpectedImprovement, MatchesTheClosedForm) {
  // At mean == best with stddev 1: E[max(Z, 0)] = pdf(0) = 1/sqrt(2 pi).
  EXPECT_NEAR(expectedImprovement(3, 1, 3, 0), 0.3989422804, 1e-9);
  // Certain outcomes: the gain itself, or nothing.
  EXPECT_DOUBLE_EQ(expectedImprovement(5, 0, 3, 0), 2);
  EXPECT_DOUBLE_EQ(expectedImprovement(1, 0, 3, 0), 0);
  // mean - best = 1, stddev 1: 1 * Phi(1) + phi(1) = 0.8413447461 + 0.2419707245.
  EXPECT_NEAR(expectedImprovement(4, 1, 3, 0), 1.0833154706, 1e-9);
}

// A noisy test function on the unit square with one peak at (0.7, 0.25).
double peak(const std::vector<double>& p) {
  const double dx = p[0] - 0.7, dy = p[1] - 0.25;
  return 100 * std::exp(-(dx * dx + dy * dy) / 0.08);
}

TEST(BayesianOptimizer, FindsTheMaximumOfANoisyFunctionInFewSamples) {
  for (uint64_t seed : {1, 2, 3}) {
    BayesianOptimizer optimizer(2, 0.05, seed);
    std::mt19937_64 random(seed);
    std::normal_distribution<double> noise(0, 2);
    for (int i = 0; i < 20; ++i) {
      const auto p = optimizer.suggest();
      ASSERT_EQ(p.size(), 2u);
      for (double v : p) ASSERT_TRUE(v >= 0 && v <= 1) << v;
      optimizer.addSample(p, peak(p) + noise(random));
    }
    EXPECT_GT(peak(optimizer.best()), 90) << "seed " << seed;
  }
}

constexpr int64_t kSimulatedTensorBytes = 256 << 10;

// One step of a simulated job under `tuner`'s current knobs: 5 cycles of 10 tensors of
// 256 KiB, the step lasting `stepSeconds(knobs)`. `afterCycle(cycle, changed)` sees each cycle
// and whether the tuner changed its knobs at its end.
void simulateStep(Autotuner& tuner, Autotuner::Clock::time_point& now,
                  const std::function<double(const TuningKnobs&)>& stepSeconds,
                  const std::function<void(int, bool)>& afterCycle) {
  constexpr int kCycles = 5, kPerCycle = 10;
  const double cycle = stepSeconds(tuner.knobs()) / kCycles;
  for (int c = 0; c < kCycles; ++c) {
    std::vector<uint64_t> ids;
    for (int t = 0; t < kPerCycle; ++t) ids.push_back(static_cast<uint64_t>(c * kPerCycle + t));
    now += std::chrono::duration_cast<Autotuner::Clock::duration>(
        std::chrono::duration<double>(cycle));
    afterCycle(c, tuner.cycleDone(kPerCycle * kSimulatedTensorBytes, ids, now).has_value());
  }
}

// A simulated job: every step submits the same 50 tensors of 256 KiB, in cycles of 10; its
// step time is least at fusion threshold 8 MiB and cycle time 2 ms, with the cache on.
struct SimulatedJob {
  static constexpr int64_t kTensorBytes = kSimulatedTensorBytes;

  static double stepSeconds(const TuningKnobs& k) {
    const double f = std::log2(static_cast<double>(k.fusion_threshold_bytes) / (8 << 20));
    const double c = std::log2(k.cycle_time_ms / 2.0);
    return 0.01 * (1 + 0.15 * f * f + 0.1 * c * c + (k.response_cache ? 0 : 0.3));
  }

  // Runs one step under `tuner`'s current knobs; counts the knobs' changes in `changes`.
  void step(Autotuner* tuner, Autotuner::Clock::time_point* now, int* changes) {
    simulateStep(*tuner, *now, stepSeconds, [&](int cycle, bool changed) {
      if (!changed) return;
      ++*changes;
      // Knobs change only where a step begins (a repeated tensor), never mid-step.
      EXPECT_EQ(cycle, 0);
    });
  }
};

TEST(Autotuner, ConvergesNearTheBestKnobsOfASimulatedJob) {
  const std::string log_path = testing::TempDir() + "/autotune_test_log.csv";
  AutotuneOptions options;
  options.warmup_samples = 2;
  options.steps_per_sample = 3;
  options.max_samples = 25;
  options.noise = 0.05;  // the simulation is exact
  options.log_path = log_path;
  options.tune_small_allreduce = true;  // the job does not care: it must not confuse the tuner
  TuningKnobs initial;
  initial.fusion_threshold_bytes = 128 << 20;
  initial.cycle_time_ms = 1;
  initial.response_cache = true;
  initial.small_allreduce_bytes = 64 << 10;
  initial.tcp_chunk_bytes = 1 << 20;
  Autotuner tuner(options, initial);
  EXPECT_EQ(tuner.tunedKnobs(),
            (std::vector<std::string>{"fusion_threshold_bytes", "cycle_time_ms", "response_cache",
                                      "small_allreduce_bytes"}));

  SimulatedJob job;
  auto now = Autotuner::Clock::time_point{};
  int changes = 0;
  for (int s = 0; s < 1000 && !tuner.finished(); ++s) job.step(&tuner, &now, &changes);
  ASSERT_TRUE(tuner.finished());
  EXPECT_EQ(tuner.samplesTaken(), 25);
  EXPECT_GT(changes, 5);
  const double best = SimulatedJob::stepSeconds({8 << 20, 2.0, true, true, 0, 0});
  const double chosen = SimulatedJob::stepSeconds(tuner.knobs());
  EXPECT_LT(chosen, best * 1.05) << "fusion " << tuner.knobs().fusion_threshold_bytes << " cycle "
                                 << tuner.knobs().cycle_time_ms;
  EXPECT_LT(chosen, SimulatedJob::stepSeconds(initial));
  // Knobs it does not tune stay as they were.
  EXPECT_EQ(tuner.knobs().tcp_chunk_bytes, 1 << 20);

  // Finished: it changes nothing any more.
  const TuningKnobs final_knobs = tuner.knobs();
  for (int s = 0; s < 20; ++s) job.step(&tuner, &now, &changes);
  EXPECT_EQ(tuner.knobs(), final_knobs);

  std::ifstream log(log_path);
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line.rfind("sample,phase,fusion_threshold_bytes,", 0), 0u) << line;
  int warmups = 0, samples = 0, finals = 0;
  while (std::getline(log, line)) {
    if (line.find(",warmup,") != std::string::npos) ++warmups;
    if (line.find(",sample,") != std::string::npos) {
      ++samples;
      // The score column is bytes / seconds of the same line.
      std::stringstream fields(line);
      std::vector<std::string> f;
      for (std::string v; std::getline(fields, v, ',');) f.push_back(v);
      ASSERT_EQ(f.size(), 16u);
      EXPECT_NEAR(std::stod(f[15]), std::stod(f[13]) / std::stod(f[14]), std::stod(f[15]) * 1e-3);
      // Every window is 3 steps of 50 tensors.
      EXPECT_EQ(std::stoll(f[13]), 3 * 50 * SimulatedJob::kTensorBytes);
      EXPECT_EQ(f[12], "1");  // hierarchical_allgather: not tuned, as it was
    }
    if (line.find(",final,") != std::string::npos) ++finals;
  }
  EXPECT_EQ(warmups, 2);
  EXPECT_EQ(samples, 25);
  EXPECT_EQ(finals, 1);
}

// The same job, where the communicator's knobs matter too: least step time at a 256 KiB
// small-allreduce cutoff (the size band where the latency-optimal algorithm still wins) and
// a 128 KiB shared-memory chunk, staging rather than direct reads (as with more ranks than
// cores). The chunk never leaves [16 KiB, the slot].
struct SimulatedCommJob : SimulatedJob {
  static double stepSeconds(const TuningKnobs& k) {
    const double s = std::log2(static_cast<double>(k.small_allreduce_bytes) / (256 << 10));
    const double c = std::log2(static_cast<double>(k.shm_chunk_bytes) / (128 << 10));
    return SimulatedJob::stepSeconds(k) + 0.01 * (0.1 * s * s + 0.1 * c * c) +
           (k.shm_direct_read ? 0.005 : 0.0);
  }
};

// Runs `tuner` to its end over simulated steps as long as `stepSeconds` says for the knobs in
// force; `check` sees the knobs after every cycle.
void tuneToTheEnd(Autotuner& tuner, const std::function<double(const TuningKnobs&)>& stepSeconds,
                  const std::function<void(const TuningKnobs&)>& check) {
  auto now = Autotuner::Clock::time_point{};
  for (int s = 0; s < 2000 && !tuner.finished(); ++s) {
    simulateStep(tuner, now, stepSeconds, [&](int, bool) { check(tuner.knobs()); });
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Autotuner, ChoosesTheCommunicatorKnobsOfASimulatedJob) {
  AutotuneOptions options;
  options.warmup_samples = 1;
  options.steps_per_sample = 1;
  options.max_samples = 40;
  options.noise = 0.05;
  options.tune_small_allreduce = true;
  options.shm_chunk_max_bytes = 1 << 20;
  options.tune_shm_direct_read = true;
  TuningKnobs initial{64 << 20, 1, true, true, 4 << 10, 1 << 20, 1 << 20, true};
  Autotuner tuner(options, initial);
  EXPECT_EQ(tuner.tunedKnobs(),
            (std::vector<std::string>{"fusion_threshold_bytes", "cycle_time_ms", "response_cache",
                                      "small_allreduce_bytes", "shm_direct_read",
                                      "shm_chunk_bytes"}));
  tuneToTheEnd(tuner, SimulatedCommJob::stepSeconds, [](const TuningKnobs& k) {
    ASSERT_GE(k.shm_chunk_bytes, 16 << 10);
    ASSERT_LE(k.shm_chunk_bytes, 1 << 20);
    ASSERT_EQ(k.shm_chunk_bytes % 4096, 0);
    ASSERT_GE(k.small_allreduce_bytes, 4096);
    ASSERT_LE(k.small_allreduce_bytes, 1 << 20);
  });
  ASSERT_TRUE(tuner.finished());
  const double best =
      SimulatedCommJob::stepSeconds({8 << 20, 2.0, true, true, 256 << 10, 0, 128 << 10, false});
  const double chosen = SimulatedCommJob::stepSeconds(tuner.knobs());
  EXPECT_LT(chosen, best * 1.1) << "small " << tuner.knobs().small_allreduce_bytes << " shm chunk "
                                << tuner.knobs().shm_chunk_bytes << " fusion "
                                << tuner.knobs().fusion_threshold_bytes << " cycle "
                                << tuner.knobs().cycle_time_ms << " direct "
                                << tuner.knobs().shm_direct_read;
  EXPECT_FALSE(tuner.knobs().shm_direct_read) << "the slower large-band algorithm was kept";
  EXPECT_LT(chosen, SimulatedCommJob::stepSeconds(initial));
  EXPECT_EQ(tuner.knobs().tcp_chunk_bytes, 1 << 20);  // not tuned: as it was
}

TEST(Autotuner, TunesCrossHostKnobsOnlyWhenAskedTo) {
  AutotuneOptions options;
  options.tune_small_allreduce = true;
  options.tune_hierarchical = true;
  options.tune_tcp_chunk = true;
  Autotuner tuner(options, {64 << 20, 1, true, true, 64 << 10, 1 << 20});
  EXPECT_EQ(tuner.tunedKnobs().size(), 7u);
  EXPECT_EQ(tuner.tunedKnobs()[4], "hierarchical_allreduce");
  EXPECT_EQ(tuner.tunedKnobs()[5], "hierarchical_allgather");
}

// A job whose step time is least at a 2 MiB hierarchical pipeline chunk: the tuner finds it,
// and every chunk it tries is whole pages within [256 KiB, 32 MiB].
TEST(Autotuner, ChoosesTheHierarchicalChunkOfASimulatedJob) {
  AutotuneOptions options;
  options.warmup_samples = 1;
  options.steps_per_sample = 1;
  options.max_samples = 30;
  options.noise = 0.05;
  options.tune_hierarchical_chunk = true;
  TuningKnobs initial{64 << 20, 1, true, true, 64 << 10, 1 << 20, 1 << 20, true, 8 << 20};
  Autotuner tuner(options, initial);
  EXPECT_EQ(tuner.tunedKnobs().back(), "hierarchical_chunk_bytes");
  auto cost = [](const TuningKnobs& k) {
    const double h = std::log2(static_cast<double>(k.hierarchical_chunk_bytes) / (2 << 20));
    return SimulatedJob::stepSeconds(k) + 0.01 * 0.1 * h * h;
  };
  tuneToTheEnd(tuner, cost, [](const TuningKnobs& k) {
    ASSERT_GE(k.hierarchical_chunk_bytes, 256 << 10);
    ASSERT_LE(k.hierarchical_chunk_bytes, 32 << 20);
    ASSERT_EQ(k.hierarchical_chunk_bytes % 4096, 0);
  });
  ASSERT_TRUE(tuner.finished());
  EXPECT_LT(cost(tuner.knobs()), cost(initial));
}

TEST(Autotuner, RejectsBadOptionsAndAnUnwritableLog) {
  AutotuneOptions zero_steps;
  zero_steps.steps_per_sample = 0;
  try {
    Autotuner tuner(zero_steps, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
  }
  AutotuneOptions bad_log;
  bad_log.log_path = "/nonexistent-directory/autotune.csv";
  try {
    Autotuner tuner(bad_log, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-directory/autotune.csv"), std::string::npos);
  }
}

// A job whose step time is least when tensors above 512 KiB skip the fusion buffer: the
// largest fused tensor is tuned on a log scale from 64 KiB to 32 MiB, and "no limit" (0)
// starts at the top of that range, not at its bottom.
TEST(Autotuner, ChoosesTheLargestFusedTensorOfASimulatedJob) {
  AutotuneOptions options;
  options.warmup_samples = 1;
  options.steps_per_sample = 1;
  options.max_samples = 40;
  options.noise = 0.05;
  options.tune_response_cache = false;
  options.tune_fusion_max_tensor = true;
  TuningKnobs initial;
  initial.fusion_threshold_bytes = 8 << 20;
  initial.cycle_time_ms = 2;
  initial.fusion_max_tensor_bytes = 0;  // Horovod's behaviour: fuse everything
  Autotuner tuner(options, initial);
  EXPECT_EQ(tuner.tunedKnobs(), (std::vector<std::string>{"fusion_threshold_bytes",
                                                          "cycle_time_ms",
                                                          "fusion_max_tensor_bytes"}));
  auto stepSeconds = [](const TuningKnobs& k) {
    const double m = std::log2(static_cast<double>(k.fusion_max_tensor_bytes == 0
                                                       ? int64_t{64} << 20
                                                       : k.fusion_max_tensor_bytes) /
                               (512 << 10));
    return SimulatedJob::stepSeconds(k) + 0.01 * 0.2 * m * m;
  };
  tuneToTheEnd(tuner, stepSeconds, [](const TuningKnobs& k) {
    const int64_t limit = k.fusion_max_tensor_bytes;
    ASSERT_TRUE(limit == 0 || (limit >= 64 << 10 && limit <= 32 << 20 && limit % 4096 == 0))
        << limit;
  });
  ASSERT_TRUE(tuner.finished());
  TuningKnobs best = initial;
  best.fusion_max_tensor_bytes = 512 << 10;
  EXPECT_LT(stepSeconds(tuner.knobs()), stepSeconds(best) * 1.1)
      << "largest fused tensor " << tuner.knobs().fusion_max_tensor_bytes << " fusion "
      << tuner.knobs().fusion_threshold_bytes << " cycle " << tuner.knobs().cycle_time_ms;
  EXPECT_LT(stepSeconds(tuner.knobs()), stepSeconds(initial));
}

}  // namespace
}  // namespace ronde::runtime
