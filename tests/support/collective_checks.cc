// The collective checks of collectives_test.cc, shared with the MPI backend's test (run by
// mpirun): each runs on every rank of a communicator and throws std::runtime_error when a
// result differs from the independent reference in reference.h.
#include "support/collective_checks.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "support/reference.h"

namespace ronde::testing {
namespace {

double wrapToType(DataType type, double v) {
  switch (type) {
    case DataType::kUInt8: return static_cast<uint8_t>(static_cast<int64_t>(v));
    case DataType::kInt8: return static_cast<int8_t>(static_cast<int64_t>(v));
    case DataType::kInt16: return static_cast<int16_t>(static_cast<int64_t>(v));
    case DataType::kUInt16: return static_cast<uint16_t>(static_cast<int64_t>(v));
    default: return v;
  }
}

}  // namespace

bool near(DataType type, ReduceOp op, double got, double want) {
  if (op == ReduceOp::kAverage && !isFloat(type)) return std::fabs(got - want) < 1.0;
  if (!isFloat(type)) return got == wrapToType(type, want);
  double tolerance = type == DataType::kBFloat16 ? 0.01 : type == DataType::kFloat16 ? 0.002 : 1e-6;
  return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
}

namespace {

std::vector<char> makeInput(DataType type, int rank, size_t count, int salt = 0) {
  std::vector<char> buffer(std::max<size_t>(1, count * sizeOf(type)));
  for (size_t i = 0; i < count; ++i) storeValue(type, buffer.data(), i, inputValue(type, rank, i, salt));
  return buffer;
}

std::string label(DataType type, ReduceOp op, size_t count) {
  std::ostringstream out;
  out << dataTypeName(type) << "/" << reduceOpName(op) << "/" << count;
  return out.str();
}

bool validOp(DataType type, ReduceOp op) { return !(type == DataType::kBool && op == ReduceOp::kAverage); }

std::vector<size_t> testCounts(int size) {
  // 0, 1, 7, a count that does not divide by the world size, and one past the pipeline chunk.
  return {0, 1, 7, static_cast<size_t>(1000 * size + 1), 70001};
}

}  // namespace

void checkAllreduceEveryDtypeOpAndSize(Communicator& comm) {
  int failures = 0;
  std::vector<std::string> failures_text;
  for (DataType type : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      if (!validOp(type, op)) continue;
      for (size_t count : testCounts(comm.size())) {
        for (bool in_place : {false, true}) {
          std::vector<char> in = makeInput(type, comm.rank(), count);
          std::vector<char> out(in.size());
          comm.allreduce(in.data(), in_place ? in.data() : out.data(), count, type, op);
          const char* result = in_place ? in.data() : out.data();
          for (size_t i = 0; i < count && failures < 5; ++i) {
            double want = expectedReduction(type, op, comm.size(), i);
            double got = loadValue(type, result, i);
            if (!near(type, op, got, want)) {
              ++failures;
              failures_text.push_back(label(type, op, count) + (in_place ? " in place" : "") + " element " +
                            std::to_string(i) + ": got " + std::to_string(got) + ", want " +
                            std::to_string(want));
            }
          }
        }
      }
    }
  }
  if (failures) {
    std::string text = "allreduce results differ from the reference:";
    for (const std::string& line : failures_text) text += "\n  " + line;
    throw std::runtime_error(text);
  }
}

void checkAllreduceLargeBuffersAndScaling(Communicator& comm) {
  const size_t count = 3 * 1024 * 1024 + 5;  // 12 MiB of float32, odd length
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt64}) {
    std::vector<char> in = makeInput(type, comm.rank(), count, 1);
    std::vector<char> out(in.size());
    Scaling scaling{2.0, 0.5};
    comm.allreduce(in.data(), out.data(), count, type, ReduceOp::kSum, scaling);
    for (size_t i = 0; i < count; i += 997) {
      double want = expectedReduction(type, ReduceOp::kSum, comm.size(), i, 1);
      double got = loadValue(type, out.data(), i);
      if (!near(type, ReduceOp::kSum, got, want)) {
        throw std::runtime_error(std::string(dataTypeName(type)) + " large allreduce element " +
                                 std::to_string(i) + ": got " + std::to_string(got) + ", want " +
                                 std::to_string(want));
      }
    }
  }
}

// Without a prescale, shared memory reduces each rank's own share straight from its input
// (never copied into its slot): in place and not, every element against the reference.
void checkAllreduceLargeUnscaled(Communicator& comm) {
  const size_t count = 1024 * 1024 + 3;  // 16 chunks of 64 KiB and an odd tail
  for (bool in_place : {false, true}) {
    std::vector<char> in = makeInput(DataType::kFloat32, comm.rank(), count, 2);
    std::vector<char> out(in.size());
    char* result = in_place ? in.data() : out.data();
    comm.allreduce(in.data(), result, count, DataType::kFloat32, ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) {
      double want = expectedReduction(DataType::kFloat32, ReduceOp::kSum, comm.size(), i, 2);
      double got = loadValue(DataType::kFloat32, result, i);
      if (!near(DataType::kFloat32, ReduceOp::kSum, got, want)) {
        throw std::runtime_error(std::string(in_place ? "in place" : "out of place") +
                                 " element " + std::to_string(i) + ": got " +
                                 std::to_string(got) + ", want " + std::to_string(want));
      }
    }
  }
}

void checkAllgathervUnevenCounts(Communicator& comm) {
  for (DataType type : allDataTypes()) {
    for (size_t base : {size_t{0}, size_t{1}, size_t{7}, size_t{50001}}) {
      std::vector<size_t> counts;
      for (int r = 0; r < comm.size(); ++r) counts.push_back(base == 0 ? 0 : base + static_cast<size_t>(r) * 3);
      size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      std::vector<char> in = makeInput(type, comm.rank(), counts[static_cast<size_t>(comm.rank())]);
      std::vector<char> out(std::max<size_t>(1, total * sizeOf(type)));
      comm.allgatherv(in.data(), out.data(), counts, type);
      size_t offset = 0;
      for (int r = 0; r < comm.size(); ++r) {
        for (size_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) {
          double got = loadValue(type, out.data(), offset + i);
          if (got != inputValue(type, r, i)) {
            throw std::runtime_error(std::string("allgatherv ") + dataTypeName(type) + " block " +
                                     std::to_string(r) + " element " + std::to_string(i) + " wrong");
          }
        }
        offset += counts[static_cast<size_t>(r)];
      }
    }
  }
}

void checkBroadcastFromEveryRoot(Communicator& comm) {
  for (DataType type : {DataType::kUInt8, DataType::kFloat16, DataType::kFloat32, DataType::kInt64}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{300001}}) {
      for (int root = 0; root < comm.size(); ++root) {
        std::vector<char> buffer = makeInput(type, comm.rank(), count, root);
        comm.broadcast(buffer.data(), count, type, root);
        for (size_t i = 0; i < count; ++i) {
          if (loadValue(type, buffer.data(), i) != inputValue(type, root, i, root)) {
            throw std::runtime_error("broadcast from root " + std::to_string(root) + " of " +
                                     std::to_string(count) + " x " + dataTypeName(type) +
                                     " wrong at " + std::to_string(i));
          }
        }
      }
    }
  }
}

void checkAlltoallvWithSplits(Communicator& comm) {
  const int n = comm.size();
  for (DataType type : {DataType::kInt8, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (size_t scale : {size_t{0}, size_t{1}, size_t{20011}}) {
      // Rank i sends (i + 2j) * scale elements to rank j; value encodes sender and position.
      auto split = [&](int from, int to) { return static_cast<size_t>(from + 2 * to) * scale; };
      std::vector<size_t> send_counts, recv_counts;
      for (int j = 0; j < n; ++j) {
        send_counts.push_back(split(comm.rank(), j));
        recv_counts.push_back(split(j, comm.rank()));
      }
      size_t send_total = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
      size_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
      std::vector<char> in(std::max<size_t>(1, send_total * sizeOf(type)));
      size_t offset = 0;
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < send_counts[static_cast<size_t>(j)]; ++i) {
          storeValue(type, in.data(), offset + i, inputValue(type, comm.rank(), i, j));
        }
        offset += send_counts[static_cast<size_t>(j)];
      }
      std::vector<char> out(std::max<size_t>(1, recv_total * sizeOf(type)));
      comm.alltoallv(in.data(), send_counts, out.data(), recv_counts, type);
      offset = 0;
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < recv_counts[static_cast<size_t>(j)]; ++i) {
          if (loadValue(type, out.data(), offset + i) != inputValue(type, j, i, comm.rank())) {
            throw std::runtime_error("alltoallv block from rank " + std::to_string(j) + " wrong at " +
                                     std::to_string(i));
          }
        }
        offset += recv_counts[static_cast<size_t>(j)];
      }
    }
  }
}

void checkReducescatterUneven(Communicator& comm) {
  const int n = comm.size();
  for (DataType type : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      if (!validOp(type, op)) continue;
      for (size_t total : {size_t{0}, size_t{1}, size_t{7}, size_t{100003}}) {
        // Uneven split: blocks differ by one when total does not divide by n.
        std::vector<size_t> counts;
        for (int r = 0; r < n; ++r) {
          counts.push_back(total / static_cast<size_t>(n) + (static_cast<size_t>(r) < total % static_cast<size_t>(n) ? 1 : 0));
        }
        std::vector<char> in = makeInput(type, comm.rank(), total);
        std::vector<char> out(std::max<size_t>(1, counts[static_cast<size_t>(comm.rank())] * sizeOf(type)));
        comm.reducescatter(in.data(), out.data(), counts, type, op);
        size_t offset = 0;
        for (int r = 0; r < comm.rank(); ++r) offset += counts[static_cast<size_t>(r)];
        for (size_t i = 0; i < counts[static_cast<size_t>(comm.rank())]; ++i) {
          double want = expectedReduction(type, op, n, offset + i);
          double got = loadValue(type, out.data(), i);
          if (!near(type, op, got, want)) {
            throw std::runtime_error("reducescatter " + label(type, op, total) + " element " +
                                     std::to_string(i) + ": got " + std::to_string(got) +
                                     ", want " + std::to_string(want));
          }
        }
      }
    }
  }
}

void checkBarrierAndAsyncInOrder(Communicator& comm) {
  for (int i = 0; i < 20; ++i) comm.barrier();
  std::vector<std::vector<float>> buffers(8, std::vector<float>(1000, static_cast<float>(comm.rank() + 1)));
  std::vector<std::shared_ptr<Work>> works;
  for (auto& b : buffers) {
    works.push_back(comm.allreduceAsync(b.data(), b.data(), b.size(), DataType::kFloat32, ReduceOp::kSum));
  }
  works.push_back(comm.barrierAsync());
  for (auto& w : works) w->wait(std::chrono::seconds(60));
  const float want = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
  for (auto& b : buffers) {
    if (b[0] != want || b[999] != want) throw std::runtime_error("async allreduce wrong");
  }
}

}  // namespace ronde::testing
