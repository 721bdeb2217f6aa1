// The cost of the runtime's liveness heartbeats for the job's store: N ranks' monitors, each
// with its own TCP client, against one TcpStoreServer, all in this process (as the launcher's
// server and the ranks' clients would be on one host). Prints, per N, the store requests per
// second and the CPU they take (this process: server and clients together, getrusage).
//
//   liveness_bench [--ranks 8,32,64,128] [--seconds 5] [--timeout 1.0]
//
// The default timeout of 1 s beats every 200 ms; the runtime's default of 10 s beats every
// second, a fifth of these rates. Nobody goes silent: this measures the steady state.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/liveness_monitor.h"

namespace {

using ronde::Bytes;
using ronde::Duration;
using ronde::Store;

// Forwards to the client and counts the requests.
class CountingStore final : public Store {
 public:
  CountingStore(std::shared_ptr<Store> inner, std::atomic<long>* requests)
      : inner_(std::move(inner)), requests_(requests) {}
  void set(const std::string& key, const Bytes& value) override {
    ++*requests_;
    inner_->set(key, value);
  }
  Bytes get(const std::string& key, Duration timeout) override {
    ++*requests_;
    return inner_->get(key, timeout);
  }
  bool tryGet(const std::string& key, Bytes* value) override {
    ++*requests_;
    return inner_->tryGet(key, value);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    ++*requests_;
    return inner_->add(key, delta);
  }
  void erase(const std::string& key) override {
    ++*requests_;
    inner_->erase(key);
  }

 private:
  std::shared_ptr<Store> inner_;
  std::atomic<long>* requests_;
};

double cpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::vector<int> parseList(const char* text) {
  std::vector<int> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(std::atoi(item.c_str()));
  return values;
}

void measure(int ranks, double seconds, double timeout) {
  ronde::TcpStoreServer server("127.0.0.1", 0, "");
  std::atomic<long> requests{0};
  std::atomic<int> reports{0};
  std::vector<std::unique_ptr<ronde::runtime::LivenessMonitor>> monitors;
  for (int r = 0; r < ranks; ++r) {
    auto client = ronde::makeTcpStore("127.0.0.1", server.port(), "", Duration(10000));
    auto store = std::make_shared<CountingStore>(client, &requests);
    monitors.push_back(std::make_unique<ronde::runtime::LivenessMonitor>(
        store, r, ranks, timeout, [&](int, double, const std::function<void()>&) { ++reports; },
        [&](const ronde::Error&) { ++reports; }));
  }
  // One timeout first, so that every monitor is past its first round.
  std::this_thread::sleep_for(std::chrono::duration<double>(timeout));
  const long requests_before = requests.load();
  const double cpu_before = cpuSeconds();
  const auto began = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  const double cpu = cpuSeconds() - cpu_before;
  const long done = requests.load() - requests_before;
  monitors.clear();
  std::printf("| %d | %.0f | %.1f%% | %.1f | %d |\n", ranks, static_cast<double>(done) / wall,
              100.0 * cpu / wall, 1e6 * cpu / static_cast<double>(done), reports.load());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks{8, 32, 64, 128};
  double seconds = 5;
  double timeout = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ranks")) ranks = parseList(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--timeout")) timeout = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  std::printf("| ranks | store requests/s | CPU (of one core) | us per request | reports |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int n : ranks) measure(n, seconds, timeout);
  return 0;
}
