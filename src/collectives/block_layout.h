// Arithmetic shared by the v-collectives: where each rank's block starts, how much of a block
// falls into one round of a chunked algorithm, and copies of a range of a contribution made of
// several blocks that are not next to each other in the output.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

namespace ronde {

// offsets[i] = counts[0] + ... + counts[i-1].
inline std::vector<size_t> blockOffsets(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

// Elements of a block of `total` elements that round `round` moves, `piece` per round.
inline size_t pieceInRound(size_t total, size_t round, size_t piece) {
  size_t start = round * piece;
  return total > start ? std::min(piece, total - start) : 0;
}

// A block of a buffer, in elements.
struct Segment {
  size_t offset = 0;
  size_t count = 0;
};

// Blocks of counts[0], counts[1], ... elements, one after the other from offset 0.
inline std::vector<Segment> blocksInOrder(const std::vector<size_t>& counts) {
  std::vector<Segment> blocks(counts.size());
  size_t offset = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    blocks[i] = Segment{offset, counts[i]};
    offset += counts[i];
  }
  return blocks;
}

inline size_t totalCount(std::span<const Segment> segments) {
  size_t total = 0;
  for (const Segment& s : segments) total += s.count;
  return total;
}

// Calls fn(offset, n) for each stretch of the output, in order, that elements
// [first, first + count) of the concatenation of `segments` occupy.
template <typename Fn>
void forEachStretch(std::span<const Segment> segments, size_t first, size_t count, Fn&& fn) {
  for (const Segment& s : segments) {
    if (count == 0) return;
    if (first >= s.count) {
      first -= s.count;
      continue;
    }
    const size_t n = std::min(count, s.count - first);
    fn(s.offset + first, n);
    first = 0;
    count -= n;
  }
}

// Copies elements [first, first + count) of the concatenation of `segments` (places in
// `base`) into the flat `to`.
inline void gatherSegments(const void* base, std::span<const Segment> segments, size_t first,
                           size_t count, size_t elem, char* to) {
  forEachStretch(segments, first, count, [&](size_t at, size_t n) {
    std::memcpy(to, static_cast<const char*>(base) + at * elem, n * elem);
    to += n * elem;
  });
}

// The reverse: the flat `from` into those places of `base`.
inline void scatterSegments(const char* from, std::span<const Segment> segments, size_t first,
                            size_t count, size_t elem, void* base) {
  forEachStretch(segments, first, count, [&](size_t at, size_t n) {
    std::memcpy(static_cast<char*>(base) + at * elem, from, n * elem);
    from += n * elem;
  });
}

}  // namespace ronde
