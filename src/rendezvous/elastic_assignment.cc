#include "rendezvous/elastic_assignment.h"

#include <cstdlib>
#include <sstream>
#include <thread>

#include "common/deadline.h"
#include "ronde/errors.h"
#include "ronde/settings.h"

namespace ronde {

std::string elasticAssignmentKey(int64_t generation, const std::string& worker_id) {
  return "elastic/gen/" + std::to_string(generation) + "/assign/" + worker_id;
}

std::string elasticJoinedKey(const std::string& worker_id) {
  return "elastic/worker/" + worker_id + "/joined";
}

std::string elasticResetRequestKey(int64_t generation) {
  return "elastic/reset_request/" + std::to_string(generation);
}

std::string elasticWorldPrefix(int64_t generation) {
  return "elastic/gen/" + std::to_string(generation) + "/world";
}

std::string formatElasticAssignment(const ElasticAssignment& a) {
  std::ostringstream out;
  out << a.rank << " " << a.size << " " << a.local_rank << " " << a.local_size << " "
      << a.cross_rank << " " << a.cross_size << " " << a.hostname;
  return out.str();
}

ElasticAssignment parseElasticAssignment(const std::string& key, const std::string& text,
                                         int64_t generation) {
  ElasticAssignment a;
  a.generation = generation;
  std::istringstream in(text);
  std::string rest;
  bool ok = static_cast<bool>(in >> a.rank >> a.size >> a.local_rank >> a.local_size >>
                              a.cross_rank >> a.cross_size >> a.hostname) &&
            !(in >> rest) && a.size > 0 && a.rank >= 0 && a.rank < a.size && a.local_size > 0 &&
            a.local_rank >= 0 && a.local_rank < a.local_size && a.cross_size > 0 &&
            a.cross_rank >= 0 && a.cross_rank < a.cross_size;
  if (!ok) {
    throw makeError(ErrorCode::kInvalidArgument, "store key '", key, "' holds '", text,
                    "', not an elastic assignment");
  }
  return a;
}

int64_t publishedElasticGeneration(Store& store) { return store.add(kElasticGenerationKey, 0); }

ElasticAssignment awaitElasticAssignment(Store& store, const std::string& worker_id,
                                         Duration timeout) {
  int64_t last = 0;
  Bytes value;
  if (store.tryGet(elasticJoinedKey(worker_id), &value)) {
    last = std::stoll(std::string(value.begin(), value.end()));
  }
  Deadline deadline = Deadline::after(timeout);
  bool requested = false;
  for (;;) {
    int64_t published = publishedElasticGeneration(store);
    if (published > last) {
      // Assignments are written before their generation is published: a worker missing from
      // the newest one is being stopped by the driver, or waits for the next.
      std::string key = elasticAssignmentKey(published, worker_id);
      if (store.tryGet(key, &value)) {
        ElasticAssignment a =
            parseElasticAssignment(key, std::string(value.begin(), value.end()), published);
        store.setString(elasticJoinedKey(worker_id), std::to_string(published));
        return a;
      }
    } else if (!requested && last > 0) {
      store.add(elasticResetRequestKey(last), 1);
      requested = true;
    }
    if (deadline.expired()) {
      throw makeError(ErrorCode::kTimeout, "elastic worker ", worker_id, " waited ",
                      timeout.count() / 1000.0,
                      " s for the driver to give it a place in a "
                      "generation after ",
                      last, " (newest published: ", published, ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

ElasticWorkerView::ElasticWorkerView() {
  Settings s = Settings::fromEnvironment();
  if (!s.elastic || s.elastic_worker_id.empty() || s.store_address.empty()) {
    throw makeError(ErrorCode::kConfig,
                    "not an elastic worker: start the job with `ronde run "
                    "--host-discovery-script ...` (RONDE_ELASTIC, RONDE_ELASTIC_WORKER_ID and "
                    "RONDE_STORE_ADDRESS are set there)");
  }
  worker_id_ = s.elastic_worker_id;
  size_t colon = s.store_address.rfind(':');
  int port = colon == std::string::npos ? 0 : std::atoi(s.store_address.c_str() + colon + 1);
  if (port <= 0 || port > 65535) {
    throw makeError(ErrorCode::kConfig, "RONDE_STORE_ADDRESS='", s.store_address,
                    "' is not host:port");
  }
  std::string host = s.store_address.substr(0, colon);
  store_ = makeTcpStore(host, port, s.secret,
                        Duration(static_cast<int64_t>(s.start_timeout_seconds * 1000)));
}

int64_t ElasticWorkerView::published() { return publishedElasticGeneration(*store_); }

int64_t ElasticWorkerView::joined() {
  Bytes value;
  if (!store_->tryGet(elasticJoinedKey(worker_id_), &value)) return 0;
  return std::stoll(std::string(value.begin(), value.end()));
}

}  // namespace ronde
