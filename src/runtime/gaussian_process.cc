#include "runtime/gaussian_process.h"

#include <cmath>
#include <limits>

#include "ronde/errors.h"

namespace ronde::runtime {
namespace {

// Length scales tried by fit(), on the unit cube: from "only neighbours matter" to "nearly
// linear over the whole range".
constexpr double kLengthScales[] = {0.08, 0.12, 0.18, 0.27, 0.4, 0.6, 0.9, 1.4};
constexpr double kPi = 3.14159265358979323846;

// Solves L z = b in place (L lower-triangular, row-major n x n).
void forwardSubstitute(const std::vector<double>& l, size_t n, std::vector<double>* b) {
  for (size_t i = 0; i < n; ++i) {
    double sum = (*b)[i];
    for (size_t k = 0; k < i; ++k) sum -= l[i * n + k] * (*b)[k];
    (*b)[i] = sum / l[i * n + i];
  }
}

// Solves L^T z = b in place.
void backSubstitute(const std::vector<double>& l, size_t n, std::vector<double>* b) {
  for (size_t i = n; i-- > 0;) {
    double sum = (*b)[i];
    for (size_t k = i + 1; k < n; ++k) sum -= l[k * n + i] * (*b)[k];
    (*b)[i] = sum / l[i * n + i];
  }
}

}  // namespace

GaussianProcess::GaussianProcess(double noise) : noise_(noise) {
  RONDE_CHECK(noise > 0 && std::isfinite(noise),
              "the Gaussian process noise must be a positive number, not " << noise);
}

double GaussianProcess::kernel(const std::vector<double>& a, const std::vector<double>& b) const {
  double squared = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = (a[i] - b[i]) / length_scales_[i];
    squared += d * d;
  }
  return std::exp(-0.5 * squared);
}

double GaussianProcess::factor(const std::vector<double>& normalised) {
  const size_t n = x_.size();
  chol_.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double sum = kernel(x_[i], x_[j]) + (i == j ? noise_ : 0.0);
      for (size_t k = 0; k < j; ++k) sum -= chol_[i * n + k] * chol_[j * n + k];
      // The noise on the diagonal keeps the matrix positive definite; the guard only
      // protects against rounding.
      chol_[i * n + j] = i == j ? std::sqrt(std::max(sum, 1e-12)) : sum / chol_[j * n + j];
    }
  }
  alpha_ = normalised;
  forwardSubstitute(chol_, n, &alpha_);
  double log_det = 0;
  double fit = 0;
  for (size_t i = 0; i < n; ++i) {
    log_det += std::log(chol_[i * n + i]);
    fit += alpha_[i] * alpha_[i];
  }
  backSubstitute(chol_, n, &alpha_);
  return -0.5 * fit - log_det - 0.5 * static_cast<double>(n) * std::log(2 * kPi);
}

void GaussianProcess::fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  RONDE_CHECK(x.size() == y.size() && !x.empty(),
              "a Gaussian process needs as many scores as points, and at least one");
  for (const auto& point : x) {
    RONDE_CHECK(point.size() == x.front().size(), "points of a Gaussian process differ in size");
  }
  x_ = x;
  const auto n = static_cast<double>(y.size());
  double mean = 0;
  for (double v : y) mean += v;
  mean /= n;
  double variance = 0;
  for (double v : y) variance += (v - mean) * (v - mean);
  variance /= n;
  y_mean_ = mean;
  // Equal scores (or one sample) carry no scale: keep the prior's.
  y_scale_ = variance > 0 ? std::sqrt(variance) : (mean != 0 ? std::abs(mean) : 1.0);
  std::vector<double> normalised;
  for (double v : y) normalised.push_back((v - y_mean_) / y_scale_);

  const size_t dims = x.front().size();
  double best_likelihood = -std::numeric_limits<double>::infinity();
  std::vector<double> best_scales;
  for (double scale : kLengthScales) {
    length_scales_.assign(dims, scale);
    const double likelihood = factor(normalised);
    if (likelihood > best_likelihood) {
      best_likelihood = likelihood;
      best_scales = length_scales_;
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < dims; ++d) {
      length_scales_ = best_scales;
      for (double scale : kLengthScales) {
        length_scales_[d] = scale;
        const double likelihood = factor(normalised);
        if (likelihood > best_likelihood) {
          best_likelihood = likelihood;
          best_scales = length_scales_;
        }
      }
    }
  }
  length_scales_ = best_scales;
  factor(normalised);
}

GaussianProcess::Prediction GaussianProcess::predict(const std::vector<double>& point) const {
  const size_t n = x_.size();
  if (n == 0) return {0.0, 1.0};
  std::vector<double> k(n);
  double mean = 0;
  for (size_t i = 0; i < n; ++i) {
    k[i] = kernel(point, x_[i]);
    mean += k[i] * alpha_[i];
  }
  forwardSubstitute(chol_, n, &k);
  double explained = 0;
  for (double v : k) explained += v * v;
  const double variance = std::max(1.0 - explained, 0.0);
  return {y_mean_ + y_scale_ * mean, y_scale_ * std::sqrt(variance)};
}

}  // namespace ronde::runtime
