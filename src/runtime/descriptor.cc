#include "runtime/descriptor.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>

namespace ronde::runtime {

const char* kindName(uint8_t kind) {
  switch (kind) {
    case static_cast<uint8_t>(RequestKind::kAllreduce):
      return "allreduce";
    case static_cast<uint8_t>(RequestKind::kAllgather):
      return "allgather";
    case static_cast<uint8_t>(RequestKind::kBroadcast):
      return "broadcast";
    case static_cast<uint8_t>(RequestKind::kAlltoall):
      return "alltoall";
    case static_cast<uint8_t>(RequestKind::kReducescatter):
      return "reducescatter";
    case static_cast<uint8_t>(RequestKind::kBarrier):
      return "barrier";
    case static_cast<uint8_t>(RequestKind::kJoin):
      return "join";
    case kAddProcessSetKind:
      return "add_process_set";
    case kRemoveProcessSetKind:
      return "remove_process_set";
  }
  return "unknown";
}

int64_t Descriptor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Descriptor::rowElements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

void WireWriter::raw(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  bytes_.insert(bytes_.end(), b, b + n);
}

void WireWriter::str(const std::string& s) {
  i32(static_cast<int32_t>(s.size()));
  raw(s.data(), s.size());
}

void WireWriter::i64s(const std::vector<int64_t>& v) {
  i32(static_cast<int32_t>(v.size()));
  raw(v.data(), v.size() * sizeof(int64_t));
}

void WireWriter::descriptor(const Descriptor& d) {
  str(d.name);
  i32(d.process_set);
  u8(d.kind);
  u8(static_cast<uint8_t>(d.dtype));
  u8(static_cast<uint8_t>(d.op));
  u8(static_cast<uint8_t>(d.device.kind));
  i32(d.device.index);
  f64(d.prescale);
  f64(d.postscale);
  i32(d.root);
  i64s(d.shape);
  i64s(d.splits);
  str(d.group);
  i32(d.group_size);
}

void WireReader::raw(void* out, size_t n) {
  RONDE_CHECK(static_cast<size_t>(end_ - p_) >= n, "negotiation message truncated");
  std::memcpy(out, p_, n);
  p_ += n;
}

uint8_t WireReader::u8() {
  uint8_t v;
  raw(&v, 1);
  return v;
}
int32_t WireReader::i32() {
  int32_t v;
  raw(&v, sizeof v);
  return v;
}
int64_t WireReader::i64() {
  int64_t v;
  raw(&v, sizeof v);
  return v;
}
double WireReader::f64() {
  double v;
  raw(&v, sizeof v);
  return v;
}

std::string WireReader::str() {
  auto n = static_cast<size_t>(i32());
  std::string s(n, '\0');
  raw(s.data(), n);
  return s;
}

std::vector<int64_t> WireReader::i64s() {
  auto n = static_cast<size_t>(i32());
  std::vector<int64_t> v(n);
  raw(v.data(), n * sizeof(int64_t));
  return v;
}

Descriptor WireReader::descriptor() {
  Descriptor d;
  d.name = str();
  d.process_set = i32();
  d.kind = u8();
  d.dtype = static_cast<DataType>(u8());
  d.op = static_cast<ReduceOp>(u8());
  d.device.kind = static_cast<Device::Kind>(u8());
  d.device.index = i32();
  d.prescale = f64();
  d.postscale = f64();
  d.root = i32();
  d.shape = i64s();
  d.splits = i64s();
  d.group = str();
  d.group_size = i32();
  return d;
}

std::string formatShape(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

namespace {

bool reduces(uint8_t kind) {
  return kind == static_cast<uint8_t>(RequestKind::kAllreduce) ||
         kind == static_cast<uint8_t>(RequestKind::kReducescatter);
}

bool hasTensor(uint8_t kind) { return kind <= static_cast<uint8_t>(RequestKind::kReducescatter); }

// Ranks' first dimension may differ for allgather and alltoall.
bool firstDimVaries(uint8_t kind) {
  return kind == static_cast<uint8_t>(RequestKind::kAllgather) ||
         kind == static_cast<uint8_t>(RequestKind::kAlltoall);
}

std::string deviceName(const Device& d) {
  return d.kind == Device::Kind::kCpu ? "cpu" : "cuda:" + std::to_string(d.index);
}

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

struct Field {
  const char* name;
  std::function<bool(uint8_t kind)> applies;
  std::function<std::string(const Descriptor&)> value;
};

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = {
      {"kind", [](uint8_t) { return true; },
       [](const Descriptor& d) { return std::string(kindName(d.kind)); }},
      {"dtype", hasTensor, [](const Descriptor& d) { return std::string(dataTypeName(d.dtype)); }},
      {"shape", [](uint8_t k) { return hasTensor(k) && !firstDimVaries(k); },
       [](const Descriptor& d) { return formatShape(d.shape); }},
      {"shape (beyond the first dimension)", firstDimVaries,
       [](const Descriptor& d) {
         if (d.shape.empty()) return std::string("a scalar");
         return formatShape(std::vector<int64_t>(d.shape.begin() + 1, d.shape.end()));
       }},
      {"op", reduces, [](const Descriptor& d) { return std::string(reduceOpName(d.op)); }},
      {"prescale factor", reduces, [](const Descriptor& d) { return number(d.prescale); }},
      {"postscale factor", reduces, [](const Descriptor& d) { return number(d.postscale); }},
      {"root rank", [](uint8_t k) { return k == static_cast<uint8_t>(RequestKind::kBroadcast); },
       [](const Descriptor& d) { return std::to_string(d.root); }},
      {"device", hasTensor, [](const Descriptor& d) { return deviceName(d.device); }},
      {"process set ranks", [](uint8_t k) { return k == kAddProcessSetKind; },
       [](const Descriptor& d) { return formatShape(d.splits); }},
      {"group", [](uint8_t) { return true; },
       [](const Descriptor& d) {
         return d.group.empty() ? std::string("none")
                                : "'" + d.group + "' of " + std::to_string(d.group_size);
       }},
  };
  return kFields;
}

}  // namespace

std::string findMismatch(const std::vector<std::optional<Descriptor>>& per_rank) {
  const Descriptor* first = nullptr;
  for (const auto& d : per_rank) {
    if (d) {
      first = &*d;
      break;
    }
  }
  if (first == nullptr) return "";
  for (const Field& field : fields()) {
    if (!field.applies(first->kind)) continue;
    // value -> ranks holding it, in order of first appearance.
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      if (!per_rank[r]) continue;
      std::string v = field.value(*per_rank[r]);
      auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == v; });
      if (it == groups.end()) {
        groups.push_back({v, {static_cast<int>(r)}});
      } else {
        it->second.push_back(static_cast<int>(r));
      }
    }
    if (groups.size() <= 1) continue;
    std::ostringstream out;
    out << "tensor '" << first->name << "'";
    if (first->process_set != 0) out << " (process set " << first->process_set << ")";
    out << ": " << field.name << " mismatch between ranks: ";
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& ranks = groups[g].second;
      out << (g ? "; " : "") << (ranks.size() == 1 ? "rank " : "ranks ");
      for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
      out << (ranks.size() == 1 ? " has " : " have ") << groups[g].first;
    }
    return out.str();
  }
  return "";
}

}  // namespace ronde::runtime
