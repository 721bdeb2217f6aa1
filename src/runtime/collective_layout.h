// Where each rank's elements go in a response's collective: the counts that allgather, alltoall
// and reducescatter (one tensor or fused) pass to the communicator and the shapes of their outputs, worked out from
// the ranks' announcements. Every rank computes the same layout from the same response, and
// the host path (executor.cc) and the device paths (device_executor.cc,
// device_comm_executor.cc) share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/response.h"

namespace ronde::runtime {

// The first dimension (1 for a scalar), and `d`'s shape with it replaced by `rows`.
int64_t firstDim(const Descriptor& d);
std::vector<int64_t> withFirstDim(const Descriptor& d, int64_t rows);

// Allgather of one tensor: counts[i] elements from the set's i-th member (0 for a joined
// rank), `rows` first-dimension rows in the output.
struct GatherLayout {
  std::vector<size_t> counts;
  int64_t rows = 0;
};
GatherLayout gatherLayout(const Response& r);

// Allgather of several tensors fused: each member's block holds its contributions to every
// tensor in plan order. elements[k][i]: member i's contribution to tensor k; counts[i]: its
// block; rows[k]: tensor k's output rows.
struct FusedGatherLayout {
  std::vector<std::vector<size_t>> elements;
  std::vector<size_t> counts;
  std::vector<int64_t> rows;
  size_t total = 0;  // elements of the gathered buffer
};
FusedGatherLayout fusedGatherLayout(const std::vector<const Response*>& responses);

// Alltoall as member `me` sees it: elements sent to and received from each member, rows
// received from each (the handle's result) and in all (the output's first dimension).
struct AlltoallLayout {
  std::vector<size_t> send;
  std::vector<size_t> recv;
  std::vector<int64_t> received_rows;
  int64_t rows = 0;
};
AlltoallLayout alltoallLayout(const Response& r, int me);

// Reducescatter: member i keeps counts[i] elements (its share of the first dimension, the
// remainder's rows going to the first members); `my_rows` are member `me`'s.
struct ScatterLayout {
  std::vector<size_t> counts;
  int64_t my_rows = 0;
};
ScatterLayout scatterLayout(const Response& r, int me);

// Reducescatter of several tensors fused: member i's block of the fusion buffer holds its
// share of every tensor in plan order, so one reducescatter of blocks counts[i] leaves member
// `me` with its share of each tensor, one after another. elements[k][i]: member i's share of
// tensor k (scatterLayout's counts); offsets[k][i]: where that share starts in tensor k's
// input; my_rows[k]: member me's rows of tensor k; total: the whole buffer (every input).
struct FusedScatterLayout {
  std::vector<std::vector<size_t>> elements;
  std::vector<std::vector<size_t>> offsets;
  std::vector<size_t> counts;
  std::vector<int64_t> my_rows;
  size_t total = 0;
};
FusedScatterLayout fusedScatterLayout(const std::vector<const Response*>& responses, int me);

// Walks the fusion buffer in order (member 0's share of each tensor, then member 1's, ...):
// fn(k, from, at, n) for tensor k's n elements at `from` in its input and `at` in the buffer.
template <typename Fn>
void forEachPackedShare(const FusedScatterLayout& layout, Fn&& fn) {
  size_t at = 0;
  for (size_t i = 0; i < layout.counts.size(); ++i) {
    for (size_t k = 0; k < layout.elements.size(); ++k) {
      fn(k, layout.offsets[k][i], at, layout.elements[k][i]);
      at += layout.elements[k][i];
    }
  }
}

}  // namespace ronde::runtime
