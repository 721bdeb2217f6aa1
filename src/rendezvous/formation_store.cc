#include "rendezvous/formation_store.h"

#include "rendezvous/elastic_assignment.h"

namespace ronde {

FormationStore::FormationStore(std::shared_ptr<Store> inner, std::shared_ptr<Store> root,
                               int64_t generation, Duration check_interval)
    : WatchedStore(std::move(inner), check_interval),
      root_(std::move(root)),
      generation_(generation) {}

void FormationStore::check() {
  const int64_t published = publishedElasticGeneration(*root_);
  if (published > generation_) {
    throw makeError(ErrorCode::kPeerLost, "elastic generation ", generation_,
                    " was replaced by generation ", published,
                    " while it formed (a member left or the hosts changed)");
  }
}

}  // namespace ronde
