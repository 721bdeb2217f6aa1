// Trains a small MLP on the handwritten digits scikit-learn ships (1,797 8x8 images), with
// LibTorch and ronde's DistributedOptimizer.
//
//   train_digits                      one process
//   ronde run -np 2 train_digits      two processes: same accuracy, each on half the data
//
// The distributed recipe: shard the data by rank, scale the learning rate by the number of
// ranks, broadcast the initial state from rank 0, checkpoint on rank 0 only, average the
// metrics over ranks.
#include <dlfcn.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ronde/torch.h"

namespace {

struct Options {
  int epochs = 30;
  int batch_size = 32;  // per rank
  double lr = 0.05;     // for one rank; scaled by the number of ranks
  std::string data = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
  std::string checkpoint = "/tmp/ronde_digits_cc.pt";
};

Options parseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--epochs") options.epochs = std::stoi(value());
    else if (arg == "--batch-size") options.batch_size = std::stoi(value());
    else if (arg == "--lr") options.lr = std::stod(value());
    else if (arg == "--data") options.data = value();
    else if (arg == "--checkpoint") options.checkpoint = value();
    else throw std::runtime_error("unknown option " + arg +
                                  " (--epochs --batch-size --lr --data --checkpoint)");
  }
  return options;
}

struct Digits {
  torch::Tensor train_x, train_y, test_x, test_y;
};

// Reads the gzip'd CSV (64 pixels in 0..16, then the label) and splits it 80/20 the same way
// on every rank.
Digits loadDigits(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  char line[4096];
  while (gzgets(file, line, sizeof line) != nullptr) {
    std::istringstream fields(line);
    std::string field;
    std::vector<float> row;
    while (std::getline(fields, field, ',')) row.push_back(std::stof(field));
    if (row.size() != 65) continue;
    for (int i = 0; i < 64; ++i) pixels.push_back(row[i] / 16.0f);
    labels.push_back(static_cast<int64_t>(row[64]));
  }
  gzclose(file);
  int64_t n = static_cast<int64_t>(labels.size());
  torch::Tensor x = torch::from_blob(pixels.data(), {n, 64}).clone();
  torch::Tensor y = torch::from_blob(labels.data(), {n}, torch::kInt64).clone();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(0));
  torch::Tensor index = torch::from_blob(order.data(), {n}, torch::kInt64).clone();
  int64_t n_test = n / 5;
  torch::Tensor test = index.narrow(0, 0, n_test), train = index.narrow(0, n_test, n - n_test);
  return {x.index_select(0, train), y.index_select(0, train), x.index_select(0, test),
          y.index_select(0, test)};
}

// Ranks sharing a host split its cores: torch's pool and OpenBLAS's alike.
void pinThreads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads);
  }
}

std::string progressBar(int epoch, int epochs, int done, int total) {
  const int width = 24;
  int filled = width * done / std::max(total, 1);
  std::ostringstream out;
  char head[32];
  std::snprintf(head, sizeof head, "epoch %2d/%d [", epoch, epochs);
  out << head << std::string(filled, '#') << std::string(width - filled, '.') << "] "
      << 100 * done / std::max(total, 1) << "%";
  return out.str();
}

int run(const Options& options) {
  auto runtime = ronde::Runtime::init();
  int rank = runtime->rank(), size = runtime->size();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  pinThreads(static_cast<int>(std::max(1L, cores / std::max(1, runtime->localSize()))));
  ronde::libtorch::Collectives collectives(*runtime);
  bool verbose = rank == 0;

  Digits data = loadDigits(options.data);
  // Shard: rank r takes every size-th training example.
  torch::Tensor mine = torch::arange(rank, data.train_x.size(0), size);
  torch::Tensor shard_x = data.train_x.index_select(0, mine);
  torch::Tensor shard_y = data.train_y.index_select(0, mine);
  int64_t steps = (data.train_x.size(0) + options.batch_size * size - 1) /
                  (options.batch_size * size);

  torch::manual_seed(42 + rank);  // different on purpose: the broadcast below fixes it
  torch::nn::Sequential model(torch::nn::Linear(64, 128), torch::nn::ReLU(),
                              torch::nn::Linear(128, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 10));
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(options.lr * size).momentum(0.9));
  ronde::libtorch::broadcastParameters(*runtime, ronde::libtorch::named(model->named_parameters()));
  ronde::libtorch::broadcastOptimizerState(*runtime, sgd);
  ronde::libtorch::DistributedOptimizer optimizer(
      *runtime, sgd, ronde::libtorch::named(model->named_parameters()));

  if (verbose) {
    std::cout << "training on " << size << " rank(s): " << data.train_x.size(0) << " train / "
              << data.test_x.size(0) << " test examples, " << steps << " steps per epoch"
              << std::endl;
  }
  bool tty = isatty(STDOUT_FILENO);
  double accuracy = 0;
  torch::manual_seed(7);  // the same shuffles on every rank
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    auto began = std::chrono::steady_clock::now();
    torch::Tensor order = torch::randperm(shard_x.size(0), torch::kInt64);
    double loss_sum = 0, seen = 0;
    model->train();
    for (int64_t step = 0; step < steps; ++step) {
      int64_t start = (step * options.batch_size) % order.size(0);
      int64_t count = std::min<int64_t>(options.batch_size, order.size(0) - start);
      torch::Tensor batch = order.narrow(0, start, count);
      torch::Tensor x = shard_x.index_select(0, batch), y = shard_y.index_select(0, batch);
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      optimizer.step();
      loss_sum += loss.item<double>() * count;
      seen += count;
      if (verbose && tty) {
        std::cout << "\r" << progressBar(epoch, options.epochs, step + 1, steps) << std::flush;
      }
    }
    // Evaluate on this rank's share of the test set; sum the counts over ranks.
    model->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor test_rows = torch::arange(rank, data.test_x.size(0), size);
    torch::Tensor logits = model->forward(data.test_x.index_select(0, test_rows));
    torch::Tensor labels = data.test_y.index_select(0, test_rows);
    double test_loss =
        torch::nn::functional::cross_entropy(
            logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    double correct = logits.argmax(1).eq(labels).sum().item<double>();
    torch::Tensor totals = collectives.allreduce(
        "metrics", torch::tensor({loss_sum, seen, test_loss, correct}, torch::kFloat64),
        ronde::ReduceOp::kSum);
    auto t = totals.accessor<double, 1>();
    accuracy = t[3] / data.test_x.size(0);
    if (verbose) {
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      char tail[160];
      std::snprintf(tail, sizeof tail,
                    "  loss %.4f  test loss %.4f  test accuracy %.2f%%  (%.2fs)", t[0] / t[1],
                    t[2] / data.test_x.size(0), 100 * accuracy, seconds);
      std::cout << (tty ? "\r" : "") << progressBar(epoch, options.epochs, steps, steps) << tail
                << std::endl;
      torch::save(model, options.checkpoint);
      torch::save(sgd, options.checkpoint + ".optimizer");
    }
  }

  torch::Tensor digest = torch::zeros({1}, torch::kFloat64);
  for (const auto& p : model->parameters()) digest += p.detach().to(torch::kFloat64).sum();
  torch::Tensor everyone = collectives.allgather("digest", digest);
  if (verbose) {
    bool same = everyone.eq(everyone[0]).all().item<bool>();
    std::printf("final test accuracy %.2f%% on %d rank(s); parameters identical on all ranks: %s\n",
                100 * accuracy, size, same ? "true" : "false");
  }
  runtime->shutdown();
  return accuracy >= 0.95 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parseOptions(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "train_digits: " << e.what() << std::endl;
    return 2;
  }
}
