// Gaussian-process regression over points of the unit cube, the model behind the autotuner.
//
// Scores are noisy (one sample is a few training steps on a machine doing other things), so
// the model does not interpolate them: `noise` is added to the kernel's diagonal, as a
// variance on the normalised scale (scores are shifted to mean 0 and scaled to variance 1
// before fitting). The kernel is the squared exponential with a length scale per dimension
// (a knob that does not matter gets a long one, and stops hiding the others); fit() picks the
// scales from a small grid by the log marginal likelihood, one shared scale first, then each
// dimension in turn. A library would run a gradient optimiser; for a few dozen points the
// grid is as good and far less code.
#pragma once

#include <cstddef>
#include <vector>

namespace ronde::runtime {

class GaussianProcess {
 public:
  explicit GaussianProcess(double noise);

  // Replaces the model with one fitted to scores y[i] at points x[i] (all of one dimension).
  void fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y);

  struct Prediction {
    double mean = 0;    // in the scores' own units
    double stddev = 0;  // likewise
  };
  // The posterior at `point`; before any fit, the prior (mean 0, stddev 1).
  Prediction predict(const std::vector<double>& point) const;

  const std::vector<double>& lengthScales() const { return length_scales_; }
  size_t samples() const { return x_.size(); }

 private:
  double kernel(const std::vector<double>& a, const std::vector<double>& b) const;
  // Factors K + noise*I for the current length scales; returns the log marginal likelihood.
  double factor(const std::vector<double>& normalised);

  double noise_;
  std::vector<double> length_scales_;
  double y_mean_ = 0;
  double y_scale_ = 1;
  std::vector<std::vector<double>> x_;
  std::vector<double> chol_;   // lower-triangular factor, row-major n x n
  std::vector<double> alpha_;  // (K + noise*I)^-1 * normalised scores
};

}  // namespace ronde::runtime
