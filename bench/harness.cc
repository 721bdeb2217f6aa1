#include "harness.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace ronde::bench {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void usageError(const std::string& program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  std::exit(2);
}

}  // namespace

const char* collectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kBroadcast:
      return "broadcast";
  }
  return "?";
}

double busBandwidthFactor(Collective collective, int ranks) {
  switch (collective) {
    case Collective::kAllreduce:
      return 2.0 * (ranks - 1) / ranks;
    case Collective::kAllgather:
      return static_cast<double>(ranks - 1) / ranks;
    case Collective::kBroadcast:
      return 1.0;
  }
  return 1.0;
}

Args::Args(int argc, char** argv) : program_(argc > 0 ? argv[0] : "bench") {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      usageError(program_, "expected --name=value, got '" + arg + "'");
    }
    values_[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  std::string value = it->second;
  values_.erase(it);
  return value;
}

int Args::getInt(const std::string& name, int fallback) {
  const std::string text = get(name, "");
  if (text.empty()) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0') usageError(program_, "--" + name + " wants an integer, got '" + text + "'");
  return static_cast<int>(value);
}

int64_t Args::getBytes(const std::string& name, int64_t fallback) {
  const std::string text = get(name, "");
  if (text.empty()) return fallback;
  const int64_t value = parseBytes(text);
  if (value < 0) usageError(program_, "--" + name + " wants a size like 4K, got '" + text + "'");
  return value;
}

std::vector<size_t> Args::getSizes() {
  const std::string text = get("sizes", "4K:256M");
  const size_t colon = text.find(':');
  const int64_t low = parseBytes(text.substr(0, colon));
  const int64_t high = colon == std::string::npos ? low : parseBytes(text.substr(colon + 1));
  if (low <= 0 || high < low) usageError(program_, "--sizes wants LOW:HIGH, got '" + text + "'");
  std::vector<size_t> sizes;
  for (int64_t bytes = low; bytes <= high; bytes *= 4) sizes.push_back(static_cast<size_t>(bytes));
  return sizes;
}

std::vector<Collective> Args::getCollectives(const std::string& fallback) {
  std::string text = get("collectives", fallback);
  std::vector<Collective> collectives;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string name = text.substr(start, comma - start);
    bool known = false;
    for (Collective c : {Collective::kAllreduce, Collective::kAllgather, Collective::kBroadcast}) {
      if (name == collectiveName(c)) {
        collectives.push_back(c);
        known = true;
      }
    }
    if (!known) usageError(program_, "unknown collective '" + name + "'");
    start = comma + 1;
  }
  return collectives;
}

void Args::finish() {
  if (!values_.empty()) usageError(program_, "unknown flag --" + values_.begin()->first);
}

int64_t parseBytes(const std::string& text) {
  if (text.empty()) return -1;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  const std::string suffix = end;
  if (suffix.empty()) return value;
  if (suffix == "K") return value << 10;
  if (suffix == "M") return value << 20;
  if (suffix == "G") return value << 30;
  return -1;
}

std::string formatBytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + units[unit];
}

Timing timeCollective(const RankOps& ops, size_t bytes, int trials, double trial_seconds) {
  // The warm-up absorbs page faults, lazy connection set-up and buffer growth; a second
  // round as long then measures one collective so that every trial lasts about
  // trial_seconds.
  const int warmup =
      static_cast<int>(std::clamp<size_t>((size_t{16} << 20) / std::max<size_t>(bytes, 1), 1, 20));
  ops.barrier();
  for (int i = 0; i < warmup; ++i) ops.run();
  ops.barrier();
  auto start = Clock::now();
  for (int i = 0; i < warmup; ++i) ops.run();
  const double per_op = ops.max(secondsSince(start) / warmup);

  Timing timing;
  timing.trials = trials;
  // Every rank sees the same per_op (a max over ranks), so they agree on the count.
  timing.iterations = static_cast<int>(std::clamp(trial_seconds / per_op, 1.0, 2000.0));
  std::vector<double> seconds;
  for (int trial = 0; trial < trials; ++trial) {
    ops.barrier();
    start = Clock::now();
    for (int i = 0; i < timing.iterations; ++i) ops.run();
    seconds.push_back(ops.max(secondsSince(start) / timing.iterations));
  }
  std::sort(seconds.begin(), seconds.end());
  timing.median_seconds = seconds[seconds.size() / 2];
  timing.best_seconds = seconds.front();
  return timing;
}

void fillAllreduceInput(float* data, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank + 1 + i % 7);
}

size_t countAllreduceErrors(const float* data, size_t count, int ranks) {
  size_t errors = 0;
  for (size_t i = 0; i < count; ++i) {
    const float want =
        static_cast<float>(ranks * (ranks + 1) / 2 + ranks * static_cast<int>(i % 7));
    if (data[i] != want) ++errors;
  }
  return errors;
}

void fillAllgatherInput(float* data, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank * 1024 + i % 1021);
}

size_t countAllgatherErrors(const float* data, size_t count_per_rank, int ranks) {
  size_t errors = 0;
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < count_per_rank; ++i) {
      if (data[r * count_per_rank + i] != static_cast<float>(r * 1024 + i % 1021)) ++errors;
    }
  }
  return errors;
}

void fillBroadcastRoot(float* data, size_t count) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(1 + i % 13);
}

size_t countBroadcastErrors(const float* data, size_t count) {
  size_t errors = 0;
  for (size_t i = 0; i < count; ++i) {
    if (data[i] != static_cast<float>(1 + i % 13)) ++errors;
  }
  return errors;
}

void printResult(const std::string& impl, const std::string& transport, Collective collective,
                 int ranks, size_t bytes, const Timing& timing) {
  const double busbw = busBandwidthFactor(collective, ranks) * bytes / timing.median_seconds / 1e9;
  std::printf(
      "RESULT impl=%s transport=%s collective=%s ranks=%d bytes=%zu iterations=%d trials=%d "
      "us=%.3f best_us=%.3f busbw=%.3f\n",
      impl.c_str(), transport.c_str(), collectiveName(collective), ranks, bytes, timing.iterations,
      timing.trials, timing.median_seconds * 1e6, timing.best_seconds * 1e6, busbw);
  std::fflush(stdout);
}

void printMemcpyResult(size_t bytes, const Timing& timing) {
  std::printf(
      "RESULT impl=memcpy transport=- collective=memcpy ranks=1 bytes=%zu iterations=%d "
      "trials=%d us=%.3f best_us=%.3f busbw=%.3f\n",
      bytes, timing.iterations, timing.trials, timing.median_seconds * 1e6,
      timing.best_seconds * 1e6, bytes / timing.median_seconds / 1e9);
  std::fflush(stdout);
}

namespace {

void bindToCpu(int rank) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int cpus = CPU_COUNT(&allowed);
  int wanted = rank % cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (wanted-- == 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      if (sched_setaffinity(0, sizeof(one), &one) != 0) std::perror("sched_setaffinity");
      return;
    }
  }
}

}  // namespace

int runForkedRanks(int ranks, bool bind, const std::function<int(int rank)>& body) {
  const pid_t parent = getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      for (pid_t child : children) kill(child, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      if (bind) bindToCpu(rank);
      int code = 1;
      try {
        code = body(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d failed: %s\n", rank, e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    children.push_back(pid);
  }
  // A failed rank would leave the others waiting on it: end them all at the first failure.
  int failures = 0;
  for (size_t left = children.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (failures++ == 0) {
        for (pid_t child : children) {
          if (child != pid) kill(child, SIGKILL);
        }
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace ronde::bench
