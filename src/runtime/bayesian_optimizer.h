// Bayesian optimisation on the unit cube: a Gaussian process models the score of the points
// sampled so far, and the next point is the one of greatest expected improvement over the
// best score seen. Deterministic for a given seed, so a run can be reproduced from its log.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/gaussian_process.h"

namespace ronde::runtime {

class BayesianOptimizer {
 public:
  BayesianOptimizer(size_t dimensions, double noise, uint64_t seed);

  void addSample(const std::vector<double>& point, double score);
  // The next point to try. The first few come from a low-discrepancy sequence (the model
  // knows nothing yet); after that, the maximiser of expected improvement.
  std::vector<double> suggest();
  // The sampled point whose modelled score is highest: with noisy scores the model's mean is a
  // better judge than the single luckiest measurement.
  std::vector<double> best() const;

  size_t samples() const { return points_.size(); }
  size_t dimensions() const { return dimensions_; }

 private:
  double expectedImprovement(const std::vector<double>& point, double best_mean) const;
  std::vector<double> halton(uint64_t index) const;

  size_t dimensions_;
  GaussianProcess model_;
  std::mt19937_64 random_;
  std::vector<std::vector<double>> points_;
  std::vector<double> scores_;
  uint64_t halton_index_ = 1;
  // Per dimension, a shuffle of the digits 1..p-1 of its prime p (0 stays 0): the plain
  // sequence's early points move in lockstep in dimensions of large primes (the first
  // three are 1/11, 2/11, 3/11 against 1/13, 2/13, 3/13), which leaves the knobs listed
  // last all low and confounded in the initial design.
  std::vector<std::vector<int>> digit_shuffles_;
};

// E[max(f - best, 0)] for f ~ N(mean, stddev^2), less `xi` (a small margin that prefers
// exploring to re-measuring the incumbent).
double expectedImprovement(double mean, double stddev, double best, double xi);

}  // namespace ronde::runtime
