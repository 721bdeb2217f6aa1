// An elastic worker's communicator: its place in the world comes from the driver for each
// generation (rendezvous/elastic_assignment.h), not from RONDE_RANK/RONDE_SIZE.
#include "comm/elastic_world.h"

#include "backends/native/native_communicator.h"
#include "common/deadline.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "rendezvous/elastic_assignment.h"
#include "rendezvous/formation_store.h"

namespace ronde {

std::unique_ptr<Communicator> elasticCommunicator(const Settings& s) {
  if (s.store_address.empty() || s.elastic_worker_id.empty()) {
    throw makeError(ErrorCode::kConfig,
                    "RONDE_ELASTIC=1 needs RONDE_STORE_ADDRESS and RONDE_ELASTIC_WORKER_ID, "
                    "which `ronde run --host-discovery-script` sets");
  }
  std::string host;
  int port = 0;
  splitHostPort(s.store_address, &host, &port);
  Duration start_timeout(static_cast<int64_t>(s.start_timeout_seconds * 1000));
  std::shared_ptr<Store> store = makeTcpStore(host, port, s.secret, start_timeout);
  // A peer that dies while the world forms fails the formation here: at once when the driver
  // has published the next generation meanwhile (FormationStore), otherwise at the start
  // timeout. This worker then takes the next generation instead of failing its process.
  Duration elastic_timeout(static_cast<int64_t>(s.elastic_timeout_seconds * 1000));
  Deadline deadline = Deadline::after(elastic_timeout);
  for (;;) {
    ElasticAssignment a = awaitElasticAssignment(*store, s.elastic_worker_id, elastic_timeout);
    CommOptions options = CommOptions::fromSettings(s);
    options.rank = a.rank;
    options.size = a.size;
    options.hostname = a.hostname;
    if (options.interface.empty() && host != "127.0.0.1" && host != "localhost") {
      options.interface = localAddressToward(host, port);
    }
    // Every generation meets under its own prefix and names its shm segment after itself, so
    // nothing of a broken world is read by the next.
    options.generation = a.generation;
    auto formation = std::make_shared<FormationStore>(
        std::make_shared<PrefixStore>(store, elasticWorldPrefix(a.generation)), store,
        a.generation);
    options.store = formation;
    try {
      setLogPrefix(rankLogPrefix(a.rank));
      auto comm = std::make_unique<NativeCommunicator>(options);
      formation->disarm();
      return comm;
    } catch (const Error& error) {
      bool retry = error.code() == ErrorCode::kPeerLost || error.code() == ErrorCode::kTimeout;
      if (!retry || deadline.expired()) throw;
      log(LogLevel::kWarning, "elastic worker ", s.elastic_worker_id, ": generation ", a.generation,
          " did not form (", error.what(), "); waiting for the next");
    }
  }
}

}  // namespace ronde
