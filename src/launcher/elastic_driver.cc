#include "launcher/elastic_driver.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "launcher/elastic_discovery.h"
#include "launcher/elastic_input.h"
#include "launcher/job_secret.h"
#include "launcher/launcher_messages.h"
#include "launcher/network_address.h"
#include "launcher/output_streamer.h"
#include "launcher/process_group.h"
#include "launcher/signal_watcher.h"
#include "launcher/ssh.h"
#include "launcher/worker_env.h"
#include "rendezvous/elastic_assignment.h"
#include "runtime/liveness_monitor.h"
#include "ronde/errors.h"
#include "ronde/store.h"

extern char** environ;

namespace ronde::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

constexpr int kExitBadInput = 2;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(Seconds(s));
}

std::vector<std::string> currentEnvironment() {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  return environment;
}

std::string hostPart(const std::string& host) { return host.substr(host.find('@') + 1); }

struct Worker {
  int id = 0;  // "w<id>" in the store; the prefix of its output lines
  std::string host;
  bool remote = false;
  std::unique_ptr<ChildProcess> child;
  int rank = -1;          // in the newest generation; -1: not placed yet
  bool stopping = false;  // stopped by the driver: its exit is no failure
  Clock::time_point kill_at;
};

class ElasticDriver {
 public:
  ElasticDriver(const RunOptions& options, SignalWatcher& signals, OutputStreamer& output)
      : options_(options),
        elastic_(options.elastic),
        signals_(signals),
        output_(output),
        random_(std::random_device{}()) {}

  int run();

 private:
  void startJobStore();
  void pollOnce();
  void onSignals();
  void onDiscovery(const DiscoveryResult& result);
  void maybeStartDiscovery();
  void reap();
  // Keeps `host` from new workers for a cooldown drawn from --blacklist-cooldown-range, or
  // for good; returns how long, as the report says it.
  std::string blacklist(const std::string& host);
  void checkResetRequests();
  void removeSilentWorkers();
  void reform();
  void publish(const std::vector<Worker*>& world);
  bool spawn(Worker& worker);
  void stopWorker(Worker& worker);
  void stopAll(int exit_code);
  void killOverdue();
  bool usable(const std::string& host) const;
  size_t liveCount() const;
  std::string idOf(const Worker& worker) const { return "w" + std::to_string(worker.id); }

  const RunOptions& options_;
  const ElasticOptions& elastic_;
  SignalWatcher& signals_;
  OutputStreamer& output_;
  std::mt19937 random_;

  std::string secret_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  int store_port_ = 0;
  std::string bind_address_;
  SshOptions ssh_;
  std::string directory_;
  std::vector<std::string> environment_;

  std::unique_ptr<DiscoveryRun> discovery_;
  Clock::time_point next_discovery_{};
  bool discovered_ = false;       // one discovery succeeded
  std::vector<HostSlots> hosts_;  // from the last discovery that succeeded
  std::string last_discovery_error_;
  std::map<std::string, Clock::time_point> blacklist_;  // host -> allowed back at

  std::vector<std::unique_ptr<Worker>> workers_;  // every worker ever started, by id
  int64_t generation_ = 0;
  std::vector<int> current_world_;  // ids of the newest generation's workers, sorted
  int resets_ = 0;
  bool reform_needed_ = true;
  bool finishing_ = false;  // a worker finished training: no new generations
  bool stopping_ = false;
  int exit_code_ = 0;
  Clock::time_point started_at_ = Clock::now();
  std::optional<Clock::time_point> short_since_;  // fewer than --min-np slots since then
};

int ElasticDriver::run() {
  try {
    checkElasticInput(options_);
    checkDiscoveryScript(elastic_.discovery_script);
    startJobStore();
  } catch (const Error& error) {
    report(error.what());
    const bool bad_input =
        error.code() == ErrorCode::kInvalidArgument || error.code() == ErrorCode::kConfig;
    return bad_input ? kExitBadInput : 1;
  }

  while (true) {
    pollOnce();
    killOverdue();
    if (stopping_ || finishing_) {
      if (liveCount() == 0) break;
      continue;
    }
    maybeStartDiscovery();
    checkResetRequests();
    if (reform_needed_) reform();
  }
  // Output written just before the last exits is still in the pipes.
  auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!output_.allClosed() && Clock::now() < deadline) pollOnce();
  output_.flushAll();
  for (auto& worker : workers_) {
    if (worker->child) worker->child->signalGroup(SIGKILL);
  }
  return exit_code_;
}

void ElasticDriver::startJobStore() {
  secret_ = makeSecret();
  bind_address_ = options_.network_interface.empty()
                      ? std::string("0.0.0.0")
                      : addressOfInterface(options_.network_interface);
  server_ = std::make_unique<TcpStoreServer>(bind_address_, 0, secret_);
  store_port_ = server_->port();
  std::string self = bind_address_ == "0.0.0.0" ? "127.0.0.1" : bind_address_;
  store_ = makeTcpStore(self, store_port_, secret_, std::chrono::seconds(10));
  ssh_.port = options_.ssh_port;
  ssh_.identity_file = options_.ssh_identity_file;
  ssh_.options = options_.ssh_options;
  ssh_.connect_timeout_seconds =
      std::max(1, static_cast<int>(std::ceil(std::min(options_.start_timeout_seconds, 3600.0))));
  char buffer[4096];
  if (::getcwd(buffer, sizeof(buffer)) == nullptr) {
    throw makeError(ErrorCode::kIo, "getcwd: ", std::strerror(errno));
  }
  directory_ = buffer;
  environment_ = currentEnvironment();
}

void ElasticDriver::pollOnce() {
  std::vector<pollfd> fds;
  size_t streams = output_.appendPollFds(&fds);
  fds.push_back({signals_.fd(), POLLIN, 0});
  if (discovery_ && discovery_->fd() >= 0) fds.push_back({discovery_->fd(), POLLIN, 0});
  int ready = ::poll(fds.data(), fds.size(), 20);
  if (ready < 0 && errno != EINTR) throw makeError(ErrorCode::kIo, "poll: ", std::strerror(errno));
  if (ready > 0) output_.handle(fds.data(), streams);
  onSignals();
  if (discovery_) {
    if (std::optional<DiscoveryResult> result = discovery_->poll()) {
      discovery_.reset();
      onDiscovery(*result);
    }
  }
  reap();
}

void ElasticDriver::onSignals() {
  for (int sig : signals_.drain()) {
    if (sig == SIGCHLD) continue;
    if (!stopping_) {
      report("received signal ", sig, ", stopping ", liveCount(), " worker",
             liveCount() == 1 ? "" : "s");
      stopAll(128 + sig);
    } else {
      for (auto& worker : workers_) {
        if (worker->child && !worker->child->exited()) worker->child->signalGroup(SIGKILL);
      }
    }
  }
}

void ElasticDriver::maybeStartDiscovery() {
  if (discovery_ || Clock::now() < next_discovery_) return;
  next_discovery_ = Clock::now() + seconds(elastic_.discovery_interval_seconds);
  discovery_ = std::make_unique<DiscoveryRun>(elastic_.discovery_script, environment_,
                                              elastic_.slots_per_host,
                                              std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  Seconds(elastic_.discovery_timeout_seconds)));
}

void ElasticDriver::onDiscovery(const DiscoveryResult& result) {
  if (!result.ok) {
    // Said once per distinct failure, not every second; the job keeps its hosts.
    if (result.error != last_discovery_error_) {
      report(result.error, discovered_ ? "; keeping the current hosts" : "");
      last_discovery_error_ = result.error;
    }
    return;
  }
  if (!last_discovery_error_.empty()) {
    report("host discovery script ", elastic_.discovery_script, " works again");
    last_discovery_error_.clear();
  }
  discovered_ = true;
  bool changed = result.hosts.size() != hosts_.size();
  for (size_t i = 0; !changed && i < hosts_.size(); ++i) {
    changed = hosts_[i].name != result.hosts[i].name || hosts_[i].slots != result.hosts[i].slots;
  }
  hosts_ = result.hosts;
  if (changed) reform_needed_ = true;
  // A blacklisted host whose cooldown ended counts as a change too.
  for (auto it = blacklist_.begin(); it != blacklist_.end();) {
    if (Clock::now() >= it->second) {
      report("host ", it->first, " may run workers again (cooldown over)");
      it = blacklist_.erase(it);
      reform_needed_ = true;
    } else {
      ++it;
    }
  }
}

bool ElasticDriver::usable(const std::string& host) const {
  auto found = blacklist_.find(host);
  return found == blacklist_.end() || Clock::now() >= found->second;
}

size_t ElasticDriver::liveCount() const {
  size_t live = 0;
  for (const auto& worker : workers_) {
    if (worker->child && !worker->child->exited()) ++live;
  }
  return live;
}

std::string ElasticDriver::blacklist(const std::string& host) {
  // The host is suspect: it leaves the job for the cooldown (or for good).
  Clock::time_point until = Clock::time_point::max();
  std::string pause = "for the rest of the job";
  if (elastic_.cooldown_given) {
    std::uniform_real_distribution<double> draw(elastic_.cooldown_low_seconds,
                                                elastic_.cooldown_high_seconds);
    double s = draw(random_);
    until = Clock::now() + seconds(s);
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", s);
    pause = std::string("for ") + text + " s";
  }
  blacklist_[host] = until;
  return pause;
}

void ElasticDriver::reap() {
  for (auto& owned : workers_) {
    Worker& worker = *owned;
    if (!worker.child || worker.child->exited() || !worker.child->poll()) continue;
    worker.child->signalGroup(SIGTERM);  // whatever it left in its process group
    worker.child->closeStdin();
    int status = worker.child->waitStatus();
    bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    std::string who = "worker " + idOf(worker) + " (rank " + std::to_string(worker.rank) +
                      ") on host " + worker.host;
    if (worker.stopping || stopping_) {
      if (options_.verbose) report(who, " stopped: ", describeWaitStatus(status));
      continue;
    }
    if (!failed) {
      if (!finishing_ && options_.verbose) report(who, " finished; waiting for the others");
      finishing_ = true;
      continue;
    }
    if (finishing_) {
      report(who, " ", describeWaitStatus(status), " after training finished");
      exit_code_ = exitCodeForWaitStatus(status);
      continue;
    }
    const std::string pause = blacklist(worker.host);
    // Its other workers stay (survivors keep their processes); no new one starts there.
    report(who, " ", describeWaitStatus(status), "; host ", worker.host, " blacklisted ", pause,
           ", re-forming the world without it");
    reform_needed_ = true;
  }
}

void ElasticDriver::checkResetRequests() {
  if (generation_ == 0 || reform_needed_) return;
  Bytes value;
  if (store_->tryGet(elasticResetRequestKey(generation_), &value)) {
    reform_needed_ = true;  // a worker of this generation lost a peer or failed a collective
  }
}

// A stopped (SIGSTOP) or wedged worker neither exits nor closes its sockets: only its
// heartbeat stops. Its peers' liveness monitors find it and record which rank it is
// (LivenessMonitor::silentKey, in the generation's world store) before they abort and ask for
// a new world. Without acting on that the driver would re-form with the silent worker in the
// world, and the others would wait the start timeout for it, generation after generation. So
// it is treated as a worker that failed: its host is blacklisted and the process killed
// (SIGKILL: a stopped process cannot act on SIGTERM).
void ElasticDriver::removeSilentWorkers() {
  if (generation_ == 0) return;
  for (auto& owned : workers_) {
    Worker& worker = *owned;
    if (!worker.child || worker.child->exited() || worker.stopping || worker.rank < 0 ||
        !std::binary_search(current_world_.begin(), current_world_.end(), worker.id)) {
      continue;
    }
    Bytes reporter;
    const std::string key = elasticWorldPrefix(generation_) + "/" +
                            runtime::LivenessMonitor::silentKey(worker.rank);
    if (!store_->tryGet(key, &reporter)) continue;
    const std::string pause = blacklist(worker.host);
    report("worker ", idOf(worker), " (rank ", worker.rank, ") on host ", worker.host,
           " stopped answering (its heartbeat, noticed by rank ",
           std::string(reporter.begin(), reporter.end()), " of generation ", generation_,
           "); host ", worker.host, " blacklisted ", pause,
           ", killing the worker and re-forming the world without it");
    worker.stopping = true;
    worker.kill_at = Clock::now();
    if (worker.remote) worker.child->closeStdin();  // the remote wrapper kills it there
    worker.child->signalGroup(SIGKILL);
  }
}

void ElasticDriver::reform() {
  if (!discovered_) {
    if (Clock::now() - started_at_ > seconds(elastic_.elastic_timeout_seconds)) {
      report("no host discovery succeeded in --elastic-timeout ", elastic_.elastic_timeout_seconds,
             " s; stopping");
      stopAll(1);
    }
    return;
  }
  removeSilentWorkers();
  const int min_np = elastic_.min_np > 0 ? elastic_.min_np : options_.num_ranks;
  const size_t max_np = elastic_.max_np > 0 ? static_cast<size_t>(elastic_.max_np) : SIZE_MAX;

  std::map<std::string, int> listed;  // every discovered host: survivors may stay there
  std::map<std::string, int> slots;   // hosts where new workers may start
  for (const HostSlots& host : hosts_) {
    listed[host.name] = host.slots;
    if (usable(host.name)) slots[host.name] = host.slots;
  }
  // Survivors first, in their old rank order; those whose host left (or shrank) are stopped.
  std::vector<Worker*> survivors;
  for (auto& worker : workers_) {
    if (worker->child && !worker->child->exited() && !worker->stopping) {
      survivors.push_back(worker.get());
    }
  }
  std::stable_sort(survivors.begin(), survivors.end(), [](const Worker* a, const Worker* b) {
    return (a->rank < 0 ? INT32_MAX : a->rank) < (b->rank < 0 ? INT32_MAX : b->rank);
  });
  std::map<std::string, int> used;
  std::vector<Worker*> world;
  for (Worker* worker : survivors) {
    auto found = listed.find(worker->host);
    if (found == listed.end() || used[worker->host] >= found->second || world.size() >= max_np) {
      report("stopping worker ", idOf(*worker), " on host ", worker->host,
             found == listed.end() ? " (host no longer discovered)"
                                   : " (beyond the slots or --max-np)");
      stopWorker(*worker);
      continue;
    }
    ++used[worker->host];
    world.push_back(worker);
  }
  size_t free_slots = 0;
  for (const HostSlots& host : hosts_) {
    if (slots.count(host.name) != 0)
      free_slots += static_cast<size_t>(slots[host.name] - used[host.name]);
  }
  size_t target = std::min(max_np, world.size() + free_slots);
  bool first = generation_ == 0;
  if (first && target < static_cast<size_t>(options_.num_ranks) &&
      Clock::now() - started_at_ < seconds(elastic_.elastic_timeout_seconds)) {
    return;  // the first world waits for -np slots, up to --elastic-timeout
  }
  if (target < static_cast<size_t>(min_np)) {
    if (!short_since_) {
      short_since_ = Clock::now();
      report("only ", target, " slot", target == 1 ? "" : "s", " available, fewer than --min-np ",
             min_np, "; waiting up to --elastic-timeout ", elastic_.elastic_timeout_seconds,
             " s for more");
    } else if (Clock::now() - *short_since_ > seconds(elastic_.elastic_timeout_seconds)) {
      report("fewer than --min-np ", min_np, " slots for --elastic-timeout ",
             elastic_.elastic_timeout_seconds, " s; stopping the job");
      stopAll(1);
    }
    return;
  }
  short_since_.reset();
  for (const HostSlots& host : hosts_) {
    if (slots.count(host.name) == 0) continue;
    while (world.size() < target && used[host.name] < slots[host.name]) {
      ++used[host.name];
      auto worker = std::make_unique<Worker>();
      worker->id = static_cast<int>(workers_.size());
      worker->host = host.name;
      worker->remote = !isLocalHost(hostPart(host.name));
      world.push_back(worker.get());
      workers_.push_back(std::move(worker));
    }
  }
  reform_needed_ = false;
  // Nothing changed (a discovery repeating itself, a host beyond --max-np): keep the world.
  Bytes value;
  bool forced = !first && store_->tryGet(elasticResetRequestKey(generation_), &value);
  std::vector<int> ids;
  for (const Worker* worker : world) ids.push_back(worker->id);
  std::sort(ids.begin(), ids.end());
  if (!first && !forced && ids == current_world_) return;
  current_world_ = ids;
  if (!first) {
    ++resets_;
    if (elastic_.reset_limit >= 0 && resets_ > elastic_.reset_limit) {
      report("--reset-limit ", elastic_.reset_limit, " exceeded: the world would re-form for the ",
             resets_, "th time; stopping the job");
      stopAll(1);
      return;
    }
  }
  publish(world);
}

void ElasticDriver::publish(const std::vector<Worker*>& unordered) {
  // Ranks of a host are contiguous; hosts come in the order of their lowest surviving rank,
  // so a survivor is rank 0 whenever there is one.
  std::vector<std::string> host_order;
  std::map<std::string, std::vector<Worker*>> by_host;
  for (Worker* worker : unordered) {
    if (by_host.count(worker->host) == 0) host_order.push_back(worker->host);
    by_host[worker->host].push_back(worker);
  }
  std::vector<Worker*> world;
  for (const std::string& host : host_order) {
    for (Worker* worker : by_host[host]) world.push_back(worker);
  }
  const int64_t generation = generation_ + 1;
  const int size = static_cast<int>(world.size());
  std::map<int, int> hosts_with_local_rank;  // local rank -> hosts that have it
  for (const std::string& host : host_order) {
    for (size_t i = 0; i < by_host[host].size(); ++i) ++hosts_with_local_rank[static_cast<int>(i)];
  }
  std::map<int, int> next_cross;
  std::string summary;
  for (int rank = 0; rank < size; ++rank) {
    Worker& worker = *world[static_cast<size_t>(rank)];
    const auto& peers = by_host[worker.host];
    ElasticAssignment a;
    a.generation = generation;
    a.rank = rank;
    a.size = size;
    a.local_rank = static_cast<int>(std::find(peers.begin(), peers.end(), &worker) - peers.begin());
    a.local_size = static_cast<int>(peers.size());
    a.cross_rank = next_cross[a.local_rank]++;
    a.cross_size = hosts_with_local_rank[a.local_rank];
    std::string name = hostPart(worker.host);
    a.hostname = name == "localhost" ? localHostName() : name;
    store_->setString(elasticAssignmentKey(generation, idOf(worker)), formatElasticAssignment(a));
    worker.rank = rank;
    summary += (rank == 0 ? "" : " ") + idOf(worker) + "@" + worker.host;
  }
  // Published last: a worker that sees the number finds its assignment already there.
  generation_ = store_->add(kElasticGenerationKey, 1);
  RONDE_CHECK(generation_ == generation, "generation " << generation_ << " != " << generation);
  report("generation ", generation_, ": ", size, " worker", size == 1 ? "" : "s", " [", summary,
         "]");
  for (Worker* worker : world) {
    if (!worker->child && !spawn(*worker)) {
      blacklist_[worker->host] = Clock::time_point::max();
      reform_needed_ = true;
    }
  }
}

bool ElasticDriver::spawn(Worker& worker) {
  EnvList variables;
  variables.emplace_back("RONDE_ELASTIC", "1");
  variables.emplace_back("RONDE_ELASTIC_WORKER_ID", idOf(worker));
  std::string name = hostPart(worker.host);
  variables.emplace_back("RONDE_HOSTNAME", name == "localhost" ? localHostName() : name);
  std::string address = "127.0.0.1";
  if (bind_address_ != "0.0.0.0") {
    address = bind_address_;
  } else if (worker.remote) {
    address = sourceAddressToward(name);
  }
  variables.emplace_back("RONDE_STORE_ADDRESS", address + ":" + std::to_string(store_port_));
  variables.emplace_back("RONDE_SECRET", secret_);
  // A worker waits for its next world at most as long as the driver waits for slots.
  variables.emplace_back(
      "RONDE_ELASTIC_TIMEOUT_SECONDS",
      std::to_string(static_cast<int64_t>(elastic_.elastic_timeout_seconds) + 30));
  if (!options_.network_interface.empty()) {
    variables.emplace_back("RONDE_INTERFACE", options_.network_interface);
  }
  for (const auto& entry : options_.settings) variables.push_back(entry);
  try {
    for (const auto& entry : resolvePassedVariables(
             options_.env_requests, [](const std::string& n) { return std::getenv(n.c_str()); })) {
      variables.push_back(entry);
    }
    SpawnRequest request;
    std::string stdin_data;
    if (worker.remote) {
      EnvList remote = forwardedSettings(environ, variables);
      remote.insert(remote.end(), variables.begin(), variables.end());
      request = {
          sshArgv(ssh_, worker.host, remoteWorkerCommand(directory_, remote, options_.command)),
          environment_,
          true,
          {}};
      stdin_data = remoteStdinPreamble(secret_);
    } else {
      request = {options_.command, mergeEnvironment(environ, variables), false, {}};
    }
    worker.child = std::make_unique<ChildProcess>(ChildProcess::spawn(request));
    if (!stdin_data.empty()) worker.child->writeStdin(stdin_data);
  } catch (const Error& error) {
    report("cannot start worker ", idOf(worker), " on host ", worker.host, ": ", error.what());
    return false;
  }
  output_.add(worker.id, StreamKind::kStdout, worker.child->takeStdout());
  output_.add(worker.id, StreamKind::kStderr, worker.child->takeStderr());
  if (options_.verbose) {
    report("worker ", idOf(worker), " started on ", worker.host,
           worker.remote ? " (ssh)" : " (local)", ", pid ", worker.child->pid());
  }
  return true;
}

void ElasticDriver::stopWorker(Worker& worker) {
  if (worker.stopping || !worker.child || worker.child->exited()) return;
  worker.stopping = true;
  worker.kill_at = Clock::now() + seconds(options_.grace_seconds);
  if (worker.remote) {
    worker.child->closeStdin();  // the remote wrapper stops the worker and exits
  } else {
    worker.child->signalGroup(SIGTERM);
  }
}

void ElasticDriver::stopAll(int exit_code) {
  if (!stopping_) exit_code_ = exit_code;
  stopping_ = true;
  for (auto& worker : workers_) stopWorker(*worker);
}

void ElasticDriver::killOverdue() {
  for (auto& worker : workers_) {
    if (worker->stopping && worker->child && !worker->child->exited() &&
        Clock::now() >= worker->kill_at) {
      worker->child->signalGroup(SIGKILL);
    }
  }
}

}  // namespace

int runElasticJob(const RunOptions& options) {
  // Before any thread exists (the store server's), so that every thread blocks the signals.
  SignalWatcher signals;
  try {
    OutputStreamer output({options.output_directory, options.prefix_timestamp, 1000});
    ElasticDriver driver(options, signals, output);
    return driver.run();
  } catch (const Error& error) {
    report(error.what());
    return 1;
  }
}

}  // namespace ronde::launcher
