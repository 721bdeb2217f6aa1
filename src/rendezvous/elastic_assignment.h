// Elastic jobs: the driver (`ronde run --host-discovery-script`) forms a new world for every
// generation and tells each worker its place through the store, not through fixed variables.
//
// Keys, all written by the driver except where said:
//   elastic/generation                 the newest published generation (a counter, 0: none)
//   elastic/gen/<G>/assign/<worker>    "rank size local_rank local_size cross_rank cross_size
//                                       hostname" for each worker of generation G, written
//                                       before G is published
//   elastic/gen/<G>/world/...          the communicator's own keys for generation G
//   elastic/worker/<worker>/joined     (worker) the last generation this worker joined
//   elastic/reset_request/<G>          (worker) counts workers of G that need a new world
// A worker id is stable for the life of its process; ranks change with every generation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ronde/elastic.h"
#include "ronde/store.h"

namespace ronde {

struct ElasticAssignment {
  int64_t generation = 0;
  int rank = 0;
  int size = 0;
  int local_rank = 0;
  int local_size = 0;
  int cross_rank = 0;
  int cross_size = 0;
  std::string hostname;
};

inline constexpr const char* kElasticGenerationKey = "elastic/generation";

std::string elasticAssignmentKey(int64_t generation, const std::string& worker_id);
std::string elasticJoinedKey(const std::string& worker_id);
std::string elasticResetRequestKey(int64_t generation);
// The prefix under which generation G's communicator keeps its keys.
std::string elasticWorldPrefix(int64_t generation);

std::string formatElasticAssignment(const ElasticAssignment& assignment);
// Throws Error(kInvalidArgument) naming `key` when `text` is not a well-formed assignment.
ElasticAssignment parseElasticAssignment(const std::string& key, const std::string& text,
                                         int64_t generation);

// The newest published generation, without waiting (0 while none is).
int64_t publishedElasticGeneration(Store& store);

// Waits for a published generation newer than the one `worker_id` last joined that assigns
// it a place, records that it joins it, and returns the assignment. When nothing newer is
// published it asks the driver for a new world once (reset_request of its last generation).
// Throws Error(kTimeout) naming the worker and the generations after `timeout`.
ElasticAssignment awaitElasticAssignment(Store& store, const std::string& worker_id,
                                         Duration timeout);

}  // namespace ronde
