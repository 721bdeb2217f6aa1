#include "runtime/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>

#include "ronde/errors.h"

namespace ronde::runtime {
namespace {

// How the acquisition is maximised: many random candidates, then a pattern search from the
// best few. EI is cheap (a few dozen kernel evaluations) next to a training step.
constexpr int kCandidates = 2000;
constexpr int kRefined = 5;
constexpr double kXi = 0.01;
// Points drawn from the Halton sequence before the model is trusted.
constexpr size_t kInitialPoints = 3;

constexpr int kPrimes[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};

}  // namespace

double expectedImprovement(double mean, double stddev, double best, double xi) {
  const double gain = mean - best - xi;
  if (stddev <= 1e-12) return std::max(gain, 0.0);
  const double z = gain / stddev;
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * 3.14159265358979323846);
  return gain * cdf + stddev * pdf;
}

BayesianOptimizer::BayesianOptimizer(size_t dimensions, double noise, uint64_t seed)
    : dimensions_(dimensions), model_(noise), random_(seed) {
  RONDE_CHECK(
      dimensions > 0 && dimensions <= std::size(kPrimes),
      "the optimiser handles 1 to " << std::size(kPrimes) << " dimensions, not " << dimensions);
  // Its own generator, so that the candidates' draws below do not depend on the dimensions.
  std::mt19937_64 shuffler(seed ^ 0x9e3779b97f4a7c15ULL);
  for (size_t d = 0; d < dimensions_; ++d) {
    std::vector<int> digits(static_cast<size_t>(kPrimes[d]));
    for (size_t i = 0; i < digits.size(); ++i) digits[i] = static_cast<int>(i);
    std::shuffle(digits.begin() + 1, digits.end(), shuffler);
    digit_shuffles_.push_back(std::move(digits));
  }
}

std::vector<double> BayesianOptimizer::halton(uint64_t index) const {
  std::vector<double> point(dimensions_);
  for (size_t d = 0; d < dimensions_; ++d) {
    double fraction = 1;
    double value = 0;
    for (uint64_t i = index; i > 0; i /= static_cast<uint64_t>(kPrimes[d])) {
      fraction /= kPrimes[d];
      value += fraction * digit_shuffles_[d][i % static_cast<uint64_t>(kPrimes[d])];
    }
    point[d] = value;
  }
  return point;
}

void BayesianOptimizer::addSample(const std::vector<double>& point, double score) {
  RONDE_CHECK(point.size() == dimensions_,
              "a sample of " << point.size() << " dimensions for an optimiser of " << dimensions_);
  points_.push_back(point);
  scores_.push_back(score);
  model_.fit(points_, scores_);
}

double BayesianOptimizer::expectedImprovement(const std::vector<double>& point,
                                              double best_mean) const {
  const GaussianProcess::Prediction p = model_.predict(point);
  // The margin scales with the scores, so that it means the same for bytes/s of any size.
  const double scale = std::max(std::abs(best_mean), 1e-300);
  return runtime::expectedImprovement(p.mean, p.stddev, best_mean, kXi * scale);
}

std::vector<double> BayesianOptimizer::suggest() {
  if (points_.size() < kInitialPoints) return halton(halton_index_++);
  double best_mean = -std::numeric_limits<double>::infinity();
  for (const auto& point : points_) best_mean = std::max(best_mean, model_.predict(point).mean);

  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::pair<double, std::vector<double>>> ranked;
  for (int c = 0; c < kCandidates; ++c) {
    std::vector<double> point(dimensions_);
    for (double& v : point) v = unit(random_);
    ranked.emplace_back(expectedImprovement(point, best_mean), std::move(point));
  }
  std::partial_sort(ranked.begin(), ranked.begin() + kRefined, ranked.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  ranked.resize(kRefined);
  // Pattern search: move one coordinate at a time while that improves, halving the step.
  for (auto& [value, point] : ranked) {
    for (double step = 0.1; step > 0.005; step /= 2) {
      bool moved = true;
      while (moved) {
        moved = false;
        for (size_t d = 0; d < dimensions_; ++d) {
          for (double direction : {-1.0, 1.0}) {
            std::vector<double> next = point;
            next[d] = std::clamp(next[d] + direction * step, 0.0, 1.0);
            const double next_value = expectedImprovement(next, best_mean);
            if (next_value > value) {
              value = next_value;
              point = std::move(next);
              moved = true;
            }
          }
        }
      }
    }
  }
  const auto winner = std::max_element(
      ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Nothing left to gain anywhere: the model is sure of every point. Explore instead of
  // re-measuring the incumbent.
  if (winner->first <= 0) return halton(halton_index_++);
  return winner->second;
}

std::vector<double> BayesianOptimizer::best() const {
  RONDE_CHECK(!points_.empty(), "the optimiser has no samples yet");
  size_t best = 0;
  double best_mean = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < points_.size(); ++i) {
    const double mean = model_.predict(points_[i]).mean;
    if (mean > best_mean) {
      best_mean = mean;
      best = i;
    }
  }
  return points_[best];
}

}  // namespace ronde::runtime
