#include "collectives/op_descriptor.h"

#include <sstream>

namespace ronde {

const char* collectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAlltoall: return "alltoall";
    case CollectiveKind::kReducescatter: return "reducescatter";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "collective";
}

uint64_t hashCounts(const std::vector<size_t>& counts) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the counts
  for (size_t c : counts) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (static_cast<uint64_t>(c) >> (8 * byte)) & 0xff;
      h *= 1099511628211ULL;
    }
  }
  return h ^ counts.size();
}

std::string describeOp(const OpDescriptor& d) {
  std::ostringstream out;
  out << collectiveKindName(d.kind) << " #" << d.op_index;
  if (d.kind == CollectiveKind::kBarrier) return out.str();
  // An alltoall's counts are each rank's own splits, which the descriptor does not carry.
  if (d.kind == CollectiveKind::kAlltoall) return out.str() + " (" + dataTypeName(d.type) + ")";
  out << " (" << d.count << " x " << dataTypeName(d.type);
  if (d.kind == CollectiveKind::kAllreduce || d.kind == CollectiveKind::kReducescatter) {
    out << ", " << reduceOpName(d.op);
  }
  if (d.kind == CollectiveKind::kBroadcast) out << ", root " << d.root;
  out << ")";
  return out.str();
}

std::string describeDifference(const OpDescriptor& a, const OpDescriptor& b) {
  std::ostringstream out;
  auto add = [&](const char* what, const auto& x, const auto& y) {
    if (x == y) return;
    if (out.tellp() > 0) out << ", ";
    out << what << " " << x << " vs " << y;
  };
  if (a.kind != b.kind) {
    add("collective", std::string(collectiveKindName(a.kind)), std::string(collectiveKindName(b.kind)));
    return out.str();
  }
  add("element count", a.count, b.count);
  add("dtype", std::string(dataTypeName(a.type)), std::string(dataTypeName(b.type)));
  add("op", std::string(reduceOpName(a.op)), std::string(reduceOpName(b.op)));
  add("root", a.root, b.root);
  add("prescale", a.prescale, b.prescale);
  add("postscale", a.postscale, b.postscale);
  if (a.tuning_hash != b.tuning_hash) {
    if (out.tellp() > 0) out << ", ";
    out << "communicator tuning differs (setTuning not applied alike on every rank)";
  }
  if (a.counts_hash != b.counts_hash && a.count == b.count) {
    if (out.tellp() > 0) out << ", ";
    out << "per-rank counts differ";
  }
  return out.str();
}

}  // namespace ronde
