#include "runtime/descriptor.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string_view>

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
  u8(static_cast<uint8_t>(d.kind | (d.refused ? 0x80 : 0)));
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

namespace {

// The messages come from peers running the same build, so a malformed one is a bug or a
// corrupted stream: an internal error that says what was wrong, never a wild allocation.
template <typename... Parts>
[[noreturn]] void malformed(const Parts&... parts) {
  throw makeError(ErrorCode::kInternal, "malformed negotiation message: ", parts...);
}

}  // namespace

size_t WireReader::remaining() const { return static_cast<size_t>(end_ - p_); }

void WireReader::raw(void* out, size_t n) {
  if (remaining() < n) malformed("truncated: ", n, " bytes wanted, ", remaining(), " left");
  if (n == 0) return;  // memcpy with a null pointer is undefined even for 0 bytes
  std::memcpy(out, p_, n);
  p_ += n;
}

size_t WireReader::length(const char* what, size_t element_size) {
  int32_t n = i32();
  if (n < 0) malformed(what, " length ", n, " is negative");
  if (static_cast<size_t>(n) > remaining() / element_size) {
    malformed(what, " length ", n, " exceeds the ", remaining(), " bytes left");
  }
  return static_cast<size_t>(n);
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
  size_t n = length("string", 1);
  std::string s(n, '\0');
  raw(s.data(), n);
  return s;
}

std::vector<int64_t> WireReader::i64s() {
  size_t n = length("integer list", sizeof(int64_t));
  std::vector<int64_t> v(n);
  raw(v.data(), n * sizeof(int64_t));
  return v;
}

Descriptor WireReader::descriptor() {
  Descriptor d;
  d.name = str();
  d.process_set = i32();
  d.kind = u8();
  d.refused = (d.kind & 0x80) != 0;
  d.kind &= 0x7f;
  if (std::string_view(kindName(d.kind)) == "unknown") malformed("unknown request kind ", +d.kind);
  uint8_t dtype = u8();
  if (dtype >= kNumDataTypes) malformed("unknown dtype ", +dtype);
  d.dtype = static_cast<DataType>(dtype);
  uint8_t op = u8();
  if (op > static_cast<uint8_t>(ReduceOp::kAdasum)) malformed("unknown reduce op ", +op);
  d.op = static_cast<ReduceOp>(op);
  uint8_t device = u8();
  if (device > static_cast<uint8_t>(Device::Kind::kCuda))
    malformed("unknown device kind ", +device);
  d.device.kind = static_cast<Device::Kind>(device);
  d.device.index = i32();
  d.prescale = f64();
  d.postscale = f64();
  d.root = i32();
  d.shape = i64s();
  d.splits = i64s();
  // Shapes, alltoall splits and process-set ranks are never negative when a rank sends them.
  for (int64_t v : d.shape) {
    if (v < 0) malformed("tensor '", d.name, "': negative dimension ", v);
  }
  for (int64_t v : d.splits) {
    if (v < 0) malformed("tensor '", d.name, "': negative split ", v);
  }
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

std::string tensorName(const std::string& name, uint8_t kind) {
  // Views, not strings: every enqueue asks, and only the answer may need an allocation.
  const std::string_view kind_name = kindName(kind);
  const std::string_view whole = name;
  if (whole.size() <= kind_name.size() + 1 || !whole.starts_with(kind_name) ||
      whole[kind_name.size()] != '.')
    return name;
  const std::string_view rest = whole.substr(kind_name.size() + 1);
  if (rest.starts_with("noname.")) return name;
  return std::string(rest);
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
      // The kind alone: each rank has a GPU of its own, so indices differ (as in Horovod).
      {"device", hasTensor,
       [](const Descriptor& d) {
         return std::string(d.device.kind == Device::Kind::kCpu ? "cpu" : "cuda");
       }},
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
