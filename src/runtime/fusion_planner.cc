#include "runtime/fusion_planner.h"

#include <map>
#include <tuple>

namespace ronde::runtime {

namespace {

bool fusableKind(uint8_t kind) {
  return kind == static_cast<uint8_t>(RequestKind::kAllreduce) ||
         kind == static_cast<uint8_t>(RequestKind::kAllgather) ||
         kind == static_cast<uint8_t>(RequestKind::kBroadcast) ||
         kind == static_cast<uint8_t>(RequestKind::kReducescatter);
}

// The bytes a request adds to its fusion buffer: an allgather's whole output, a
// reducescatter's whole input.
int64_t fusedBytes(const Response& r) {
  const Descriptor& d = r.descriptor();
  int64_t elements = d.numel();
  if (d.kind == static_cast<uint8_t>(RequestKind::kAllgather)) {
    elements = 0;
    for (const auto& dr : r.agreement->per_rank) {
      if (dr) elements += dr->numel();
    }
  }
  return elements * static_cast<int64_t>(dataTypeSize(d.dtype));
}

}  // namespace

std::vector<ExecutionUnit> planExecution(const std::vector<Response>& responses,
                                         int64_t fusion_threshold_bytes,
                                         int64_t max_tensor_bytes) {
  // Host and CUDA tensors never share a buffer; every rank agrees on a tensor's device kind
  // (the negotiation checks it), not on its device index.
  using Key = std::tuple<int32_t, uint8_t, DataType, ReduceOp, double, double, int32_t, uint8_t>;
  std::vector<ExecutionUnit> units;
  std::vector<int64_t> unit_bytes;
  std::map<Key, size_t> open;  // fusion key -> unit still accepting tensors
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    const Descriptor& d = r.descriptor();
    const int64_t bytes = fusedBytes(r);
    const bool fusable = r.error.empty() && fusableKind(d.kind) && fusion_threshold_bytes > 0 &&
                         (max_tensor_bytes <= 0 || bytes <= max_tensor_bytes);
    if (fusable) {
      Key key{d.process_set, d.kind,      d.dtype, d.op,
              d.prescale,    d.postscale, d.root,  static_cast<uint8_t>(d.device.kind)};
      auto it = open.find(key);
      if (it != open.end() && unit_bytes[it->second] + bytes <= fusion_threshold_bytes) {
        units[it->second].responses.push_back(i);
        unit_bytes[it->second] += bytes;
        continue;
      }
      open[key] = units.size();
    }
    units.push_back({{i}});
    unit_bytes.push_back(bytes);
  }
  return units;
}

}  // namespace ronde::runtime
