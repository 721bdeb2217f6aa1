#include "runtime/fusion_planner.h"

#include <map>
#include <tuple>

namespace ronde::runtime {

std::vector<ExecutionUnit> planExecution(const std::vector<Response>& responses,
                                         int64_t fusion_threshold_bytes) {
  using Key = std::tuple<int32_t, DataType, ReduceOp, double, double, int>;
  std::vector<ExecutionUnit> units;
  std::vector<int64_t> unit_bytes;
  std::map<Key, size_t> open;  // fusion key -> unit still accepting tensors
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    const Descriptor& d = r.descriptor();
    bool fusable = r.error.empty() && d.kind == static_cast<uint8_t>(RequestKind::kAllreduce) &&
                   d.device.kind == Device::Kind::kCpu && fusion_threshold_bytes > 0;
    int64_t bytes = d.numel() * static_cast<int64_t>(dataTypeSize(d.dtype));
    if (fusable) {
      Key key{d.process_set, d.dtype, d.op, d.prescale, d.postscale, 0};
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
