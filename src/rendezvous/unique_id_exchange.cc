#include "rendezvous/unique_id_exchange.h"

#include <algorithm>

#include "ronde/errors.h"

namespace ronde {

Bytes exchangeUniqueId(Store& store, const UniqueIdExchange& exchange,
                       const std::function<Bytes()>& make, Deadline deadline) {
  Bytes id;
  if (exchange.rank == exchange.root) {
    id = make();
    store.set(exchange.key, id);
  } else {
    const auto left = std::chrono::duration_cast<Duration>(deadline.at() - Deadline::Clock::now());
    try {
      id = store.get(exchange.key, std::max(left, Duration(1)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
      throw makeError(ErrorCode::kTimeout, "rank ", exchange.rank, " waited in vain for '",
                      exchange.key, "' from ", exchange.root_name,
                      ", which makes the communicator's id: did it start and reach init? (",
                      e.what(), ")");
    }
  }
  if (exchange.expected_bytes != 0 && id.size() != exchange.expected_bytes) {
    throw makeError(ErrorCode::kMismatch, "'", exchange.key, "' from ", exchange.root_name, " has ",
                    id.size(), " bytes where rank ", exchange.rank, " expects ",
                    exchange.expected_bytes,
                    ": the ranks run different builds of the library behind it");
  }
  return id;
}

}  // namespace ronde
