// Finding the job from the environment: `ronde run` sets RONDE_*; mpirun and srun set their
// own variables, and then rank 0 serves the rendezvous store itself.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "backends/backend_registry.h"
#include "comm/elastic_world.h"
#include "comm/external_launcher.h"
#include "common/deadline.h"
#include "common/logging.h"
#include "common/net_address.h"

namespace ronde {
namespace {

// Without `ronde run`, rank 0 serves the store. With RONDE_STORE_ADDRESS it listens there (the
// only way across hosts); otherwise, on one host, it picks a free port and leaves it in a file
// named after the job, which it deletes once all ranks have met.
std::shared_ptr<Store> selfServedStore(const Settings& s, const ExternalLauncher& launcher,
                                       std::shared_ptr<TcpStoreServer>* server,
                                       std::string* port_file) {
  Duration timeout(static_cast<int64_t>(s.start_timeout_seconds * 1000));
  if (!s.store_address.empty()) {
    std::string host;
    int port = 0;
    splitHostPort(s.store_address, &host, &port);
    if (s.rank == 0) *server = std::make_shared<TcpStoreServer>("0.0.0.0", port, s.secret);
    return makeTcpStore(host, port, s.secret, timeout);
  }
  std::string directory = "/tmp/ronde-" + launcher.job_id;
  *port_file = directory + "/store-port";
  if (s.rank == 0) {
    *server = std::make_shared<TcpStoreServer>("127.0.0.1", 0, s.secret);
    ::mkdir(directory.c_str(), 0700);
    std::string temp = *port_file + ".tmp";
    {
      std::ofstream out(temp);
      out << (*server)->port() << "\n";
    }
    std::rename(temp.c_str(), port_file->c_str());
    return makeTcpStore("127.0.0.1", (*server)->port(), s.secret, timeout);
  }
  Deadline deadline = Deadline::after(timeout);
  for (;;) {
    std::ifstream in(*port_file);
    int port = 0;
    if (in >> port && port > 0) return makeTcpStore("127.0.0.1", port, s.secret, timeout);
    if (deadline.expired()) {
      throw makeError(ErrorCode::kTimeout, "rank ", s.rank, " started by ", launcher.name,
                      " found no rendezvous from rank 0 in ", *port_file,
                      "; across hosts set RONDE_STORE_ADDRESS=<rank 0 host>:<port>");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::unique_ptr<Communicator> Communicator::fromEnvironment() {
  Settings s = Settings::fromEnvironment();
  configureLogging(s);
  if (s.elastic) return elasticCommunicator(s);
  // mpirun's or srun's variables give the rank when RONDE_RANK does not. With RONDE_RANK
  // (`ronde run --mpi` sets it for ranks mpirun starts) they still tell who started the
  // ranks, which the MPI backend needs; the store is then the launcher's, not rank 0's.
  ExternalLauncher launcher;
  const bool rank_given = s.rank >= 0;
  if (!rank_given || s.cpu_operations == CpuOperations::kMpi) {
    launcher = detectExternalLauncher();
  }
  if (!rank_given) {
    s.rank = launcher.rank;
    s.size = launcher.size;
  }
  if (s.rank < 0) {
    s.rank = 0;
    s.size = 1;
  }
  if (s.size < 1 || s.rank >= s.size) {
    throw makeError(ErrorCode::kConfig, "rank ", s.rank, " is out of range for size ", s.size);
  }
  CommOptions options = CommOptions::fromSettings(s);
  options.rank = s.rank;
  options.size = s.size;
  std::shared_ptr<TcpStoreServer> server;
  std::string port_file;
  if (s.size > 1) {
    Duration timeout(static_cast<int64_t>(s.start_timeout_seconds * 1000));
    if (!rank_given && !launcher.name.empty()) {
      options.store = selfServedStore(s, launcher, &server, &port_file);
      options.store_server_rank = 0;
    } else if (!s.store_address.empty()) {
      std::string host;
      int port = 0;
      splitHostPort(s.store_address, &host, &port);
      options.store = makeTcpStore(host, port, s.secret, timeout);
      // Bind the data plane to the address that reaches the store: it reaches the peers too.
      if (options.interface.empty() && host != "127.0.0.1" && host != "localhost") {
        options.interface = localAddressToward(host, port);
      }
    } else if (!s.store_directory.empty()) {
      options.store = makeFileStore(s.store_directory);
    } else {
      throw makeError(ErrorCode::kConfig, "RONDE_SIZE=", s.size,
                      " but no rendezvous: set RONDE_STORE_ADDRESS or RONDE_STORE_DIRECTORY, "
                      "or start the job with `ronde run`, mpirun or srun");
    }
    // Each init of a rank is the next generation of the job (shutdown then init, as Horovod's
    // tests do): its keys live under gen/<n>/, counted per rank in the store itself, so no
    // host record, port, shm segment name or abort reason of an earlier init is read.
    options.generation = options.store->add("generation/rank" + std::to_string(s.rank), 1);
    options.store =
        std::make_shared<PrefixStore>(options.store, "gen/" + std::to_string(options.generation));
  }
  // The backend is chosen before any rank meets the others, so a bad choice fails fast.
  const Backend& backend = chooseBackend(options.backend, launcher.name);
  setLogPrefix(rankLogPrefix(s.rank));
  std::unique_ptr<Communicator> comm = backend.create(options);
  if (!port_file.empty()) {
    // Every rank has met (the communicator is built), so nobody needs the port file now. The
    // second barrier keeps every rank here until it is gone: a rank that raced ahead to its next
    // init (a second communicator beside this one) would read this store's port and meet no one.
    comm->barrier();
    if (s.rank == 0) {
      std::remove(port_file.c_str());
      ::rmdir(port_file.substr(0, port_file.rfind('/')).c_str());
    }
    comm->barrier();
  }
  if (server) comm->holdUntilDestroyed(server);
  return comm;
}

}  // namespace ronde
