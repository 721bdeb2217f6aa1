// One rank makes an opaque id and every rank of the group reads it through the store: how NCCL
// communicators are formed (ncclUniqueId, 128 bytes) with ronde's own rendezvous instead of
// MPI or a second bootstrap network. The store must be the group's own (prefixed per
// generation and process set), so that an id is never read by a later communicator.
#pragma once

#include <functional>
#include <string>

#include "common/deadline.h"
#include "ronde/store.h"

namespace ronde {

struct UniqueIdExchange {
  std::string key;            // e.g. "nccl/unique_id"
  int rank = 0;               // this rank
  int root = 0;               // the rank that makes the id
  std::string root_name;      // "rank 0 (host a)", for errors
  size_t expected_bytes = 0;  // the id's size; 0: any
};

// On the root: make() and publish its bytes; elsewhere: wait for them until `deadline`.
// Error(kTimeout) naming the key, this rank and the root when the id does not come;
// Error(kMismatch) when its size is not expected_bytes (ranks built against different
// libraries).
Bytes exchangeUniqueId(Store& store, const UniqueIdExchange& exchange,
                       const std::function<Bytes()>& make, Deadline deadline);

}  // namespace ronde
