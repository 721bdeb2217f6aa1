#include "collectives/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "common/half.h"
#include "ronde/errors.h"

namespace ronde {
namespace {

bool isPowerOfTwo(size_t n) { return n > 0 && (n & (n - 1)) == 0; }

// One round of point-to-point transfers, as an alltoallv of bytes over the whole communicator
// (every rank takes part in every round; a rank with nothing to move passes empty counts).
class Exchange {
 public:
  explicit Exchange(Communicator& comm)
      : comm_(comm),
        send_(static_cast<size_t>(comm.size())),
        recv_(static_cast<size_t>(comm.size())) {}

  // Sends `bytes` from `in` to `peer` while receiving as many bytes from it into `out`.
  void swap(int peer, const void* in, size_t send_bytes, void* out, size_t recv_bytes) {
    clear();
    send_[static_cast<size_t>(peer)] = send_bytes;
    recv_[static_cast<size_t>(peer)] = recv_bytes;
    comm_.alltoallv(in, send_, out, recv_, DataType::kUInt8);
  }

  // Sends the same `bytes` from `in` to every peer in `peers`, receiving theirs into `out`
  // one after another in the order of `peers`.
  void share(const std::vector<int>& peers, const void* in, size_t bytes, void* out) {
    clear();
    staged_.resize(bytes * peers.size());
    std::vector<std::pair<int, size_t>> order;  // alltoallv lays blocks out by rank
    for (size_t i = 0; i < peers.size(); ++i) order.emplace_back(peers[i], i);
    std::sort(order.begin(), order.end());
    for (size_t i = 0; i < order.size(); ++i) {
      std::memcpy(staged_.data() + i * bytes, in, bytes);
      send_[static_cast<size_t>(order[i].first)] = bytes;
      recv_[static_cast<size_t>(order[i].first)] = bytes;
    }
    received_.resize(bytes * peers.size());
    comm_.alltoallv(staged_.data(), send_, received_.data(), recv_, DataType::kUInt8);
    for (size_t i = 0; i < order.size(); ++i) {
      std::memcpy(static_cast<char*>(out) + order[i].second * bytes, received_.data() + i * bytes,
                  bytes);
    }
  }

 private:
  void clear() {
    std::fill(send_.begin(), send_.end(), 0);
    std::fill(recv_.begin(), recv_.end(), 0);
  }

  Communicator& comm_;
  std::vector<size_t> send_;
  std::vector<size_t> recv_;
  std::vector<char> staged_;
  std::vector<char> received_;
};

struct Range {
  size_t begin;
  size_t end;
};

// Per tensor, over [range): a.b, |a|^2, |b|^2 (accumulated in double, as Horovod does).
template <typename T>
void partialDots(const T* a, const T* b, Range range, const std::vector<size_t>& counts,
                 std::vector<double>* dots) {
  size_t start = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    size_t lo = std::max(start, range.begin);
    size_t hi = std::min(start + counts[t], range.end);
    double dot = 0, an = 0, bn = 0;
    for (size_t i = lo; i < hi; ++i) {
      double x = a[i - range.begin];
      double y = b[i - range.begin];
      dot += x * y;
      an += x * x;
      bn += y * y;
    }
    (*dots)[3 * t] = dot;
    (*dots)[3 * t + 1] = an;
    (*dots)[3 * t + 2] = bn;
    start += counts[t];
  }
}

// Adasum over `members` (ranks of the communicator; this rank is members[me]) by vector
// halving, distance doubling: after the halving rounds each rank holds the combined vector
// of its share, and the doubling rounds hand the shares back.
template <typename T>
void halvingDoubling(Exchange& exchange, const std::vector<int>& members, int me, T* data,
                     size_t total, const std::vector<size_t>& counts) {
  const int n = static_cast<int>(members.size());
  std::vector<T> incoming(total / 2 + 1);
  std::vector<Range> parents;
  std::vector<double> dots(3 * counts.size());
  std::vector<double> everyone;
  Range mine{0, total};
  for (int level = 1; level < n; level *= 2) {
    const int partner = me ^ level;
    const bool left = (me & level) == 0;  // left holds `a`: the lower half of the tree
    const size_t mid = mine.begin + (mine.end - mine.begin) / 2;
    Range keep = left ? Range{mine.begin, mid} : Range{mid, mine.end};
    Range give = left ? Range{mid, mine.end} : Range{mine.begin, mid};
    exchange.swap(members[static_cast<size_t>(partner)], data + give.begin,
                  (give.end - give.begin) * sizeof(T), incoming.data(),
                  (keep.end - keep.begin) * sizeof(T));
    parents.push_back(mine);
    mine = keep;
    T* own = data + keep.begin;
    const T* a = left ? own : incoming.data();
    const T* b = left ? incoming.data() : own;
    partialDots(a, b, keep, counts, &dots);

    // The full dot products: sum over the 2*level ranks that hold pieces of these two
    // vectors, in member order, so that every one of them computes the same coefficients.
    const int base = me & ~(2 * level - 1);
    std::vector<int> peers;
    for (int j = base; j < base + 2 * level; ++j) {
      if (j != me) peers.push_back(members[static_cast<size_t>(j)]);
    }
    everyone.assign(dots.size() * peers.size(), 0.0);
    exchange.share(peers, dots.data(), dots.size() * sizeof(double), everyone.data());
    std::vector<double> sums(dots.size(), 0.0);
    for (int j = base, p = 0; j < base + 2 * level; ++j) {
      const double* from = j == me ? dots.data() : everyone.data() + (p++) * dots.size();
      for (size_t k = 0; k < dots.size(); ++k) sums[k] += from[k];
    }

    size_t start = 0;
    for (size_t t = 0; t < counts.size(); ++t) {
      const double dot = sums[3 * t], anorm = sums[3 * t + 1], bnorm = sums[3 * t + 2];
      const double threshold = std::sqrt(DBL_MIN);
      const double acoeff = anorm >= threshold ? 1.0 - dot / anorm * 0.5 : 1.0;
      const double bcoeff = bnorm >= threshold ? 1.0 - dot / bnorm * 0.5 : 1.0;
      size_t lo = std::max(start, keep.begin);
      size_t hi = std::min(start + counts[t], keep.end);
      for (size_t i = lo; i < hi; ++i) {
        size_t k = i - keep.begin;
        own[k] = static_cast<T>(acoeff * a[k] + bcoeff * b[k]);
      }
      start += counts[t];
    }
  }
  for (int level = n / 2; level >= 1; level /= 2) {
    Range parent = parents.back();
    parents.pop_back();
    Range theirs = mine.begin == parent.begin ? Range{mine.end, parent.end}
                                              : Range{parent.begin, mine.begin};
    exchange.swap(members[static_cast<size_t>(me ^ level)], data + mine.begin,
                  (mine.end - mine.begin) * sizeof(T), data + theirs.begin,
                  (theirs.end - theirs.begin) * sizeof(T));
    mine = parent;
  }
}

// Every member of `members` gets the sum of their buffers, added in member order.
template <typename T>
void groupSum(Exchange& exchange, const std::vector<int>& members, int me, T* data, size_t total) {
  std::vector<int> peers;
  for (size_t j = 0; j < members.size(); ++j) {
    if (static_cast<int>(j) != me) peers.push_back(members[j]);
  }
  std::vector<T> theirs(total * peers.size());
  exchange.share(peers, data, total * sizeof(T), theirs.data());
  std::vector<double> sum(total, 0.0);
  for (size_t j = 0, p = 0; j < members.size(); ++j) {
    const T* from = static_cast<int>(j) == me ? data : theirs.data() + (p++) * total;
    for (size_t i = 0; i < total; ++i) sum[i] += from[i];
  }
  for (size_t i = 0; i < total; ++i) data[i] = static_cast<T>(sum[i]);
}

template <typename T>
void adasumTyped(Communicator& comm, T* data, size_t total, const std::vector<size_t>& counts) {
  const int size = comm.size();
  Exchange exchange(comm);
  // Hosts in order of their lowest rank; ranks of a host in rank order.
  std::vector<std::vector<int>> hosts;
  std::map<std::string, size_t> index;
  for (int r = 0; r < size; ++r) {
    auto [it, added] = index.emplace(comm.host(r), hosts.size());
    if (added) hosts.emplace_back();
    hosts[it->second].push_back(r);
  }
  bool hierarchical = hosts.size() > 1 && hosts[0].size() > 1 && isPowerOfTwo(hosts.size());
  for (const auto& ranks : hosts) hierarchical = hierarchical && ranks.size() == hosts[0].size();
  if (!hierarchical) {
    std::vector<int> everyone(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) everyone[static_cast<size_t>(r)] = r;
    halvingDoubling(exchange, everyone, comm.rank(), data, total, counts);
    return;
  }
  const std::vector<int>& local = hosts[index.at(comm.host(comm.rank()))];
  int local_index = 0;
  while (local[static_cast<size_t>(local_index)] != comm.rank()) ++local_index;
  groupSum(exchange, local, local_index, data, total);
  // Every local index runs the same Adasum across the hosts on the same sums.
  std::vector<int> across;
  int me = 0;
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (&hosts[h] == &local) me = static_cast<int>(h);
    across.push_back(hosts[h][static_cast<size_t>(local_index)]);
  }
  halvingDoubling(exchange, across, me, data, total, counts);
}

template <typename Bits, typename ToFloat, typename FromFloat>
void adasumSixteenBit(Communicator& comm, void* buffer, size_t total,
                      const std::vector<size_t>& counts, ToFloat to_float, FromFloat from_float) {
  auto* bits = static_cast<Bits*>(buffer);
  std::vector<float> wide(total);
  for (size_t i = 0; i < total; ++i) wide[i] = to_float(bits[i]);
  adasumTyped(comm, wide.data(), total, counts);
  for (size_t i = 0; i < total; ++i) bits[i] = from_float(wide[i]);
}

}  // namespace

std::string adasumUnsupported(int ranks, DataType type) {
  if (!isPowerOfTwo(static_cast<size_t>(ranks))) {
    return "Adasum needs a power-of-two number of ranks (as Horovod's), got " +
           std::to_string(ranks);
  }
  if (type != DataType::kFloat16 && type != DataType::kBFloat16 && type != DataType::kFloat32 &&
      type != DataType::kFloat64) {
    return std::string("Adasum is defined for float16, bfloat16, float32 and float64, not ") +
           dataTypeName(type);
  }
  return {};
}

void adasumAllreduce(Communicator& comm, void* buffer, const std::vector<size_t>& tensor_counts,
                     DataType type) {
  std::string why = adasumUnsupported(comm.size(), type);
  if (!why.empty()) throw makeError(ErrorCode::kInvalidArgument, why);
  if (comm.size() == 1) return;
  size_t total = 0;
  for (size_t c : tensor_counts) total += c;
  switch (type) {
    case DataType::kFloat32:
      return adasumTyped(comm, static_cast<float*>(buffer), total, tensor_counts);
    case DataType::kFloat64:
      return adasumTyped(comm, static_cast<double*>(buffer), total, tensor_counts);
    case DataType::kFloat16:
      return adasumSixteenBit<uint16_t>(comm, buffer, total, tensor_counts, halfToFloat,
                                        floatToHalf);
    case DataType::kBFloat16:
      return adasumSixteenBit<uint16_t>(comm, buffer, total, tensor_counts, bfloat16ToFloat,
                                        floatToBfloat16);
    default: break;
  }
}

}  // namespace ronde
