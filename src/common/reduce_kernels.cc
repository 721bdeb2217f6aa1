// How the kernels are built: one generic loop (runPass) walks the buffers in blocks of one
// or two vector registers, widening each element to its compute type, combining, scaling and
// narrowing. It is written without intrinsics so GCC vectorises it for whatever instruction
// set the caller was compiled for; each Isa struct below wraps it in a function carrying a
// target attribute and `flatten`, which inlines the whole loop there and vectorises it for
// that target. The 16-bit floats use intrinsics: GCC 12 does not vectorise float16
// conversions and vectorises bfloat16's with needless shuffles, so their codecs convert a
// whole block with F16C or AVX-512 and are inlined the same way.
// Pointers need the alignment of their element type, nothing more.
#include "common/reduce_kernels.h"

#include <immintrin.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/half.h"
#include "ronde/errors.h"

// GCC 12 reports the deliberately undefined upper lanes inside the AVX-512 conversion
// intrinsics as maybe-uninitialized once they are inlined; the warning is spurious.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ronde {
namespace {

constexpr int kDynamic = 0;       // number of sources known only at run time (more than 4)
constexpr size_t kBlockBytes = 128;  // compute-type bytes per block: two AVX-512 registers

// Integers add and multiply in unsigned arithmetic, wide enough that no promotion to int
// can overflow, so wrapping is defined behaviour.
template <class T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// Multiplies in double and truncates toward zero, saturating at the type's range (NaN -> 0).
template <class T>
T scaleInteger(T value, double scale) {
  double scaled = static_cast<double>(value) * scale;
  scaled = scaled == scaled ? scaled : 0.0;
  if constexpr (sizeof(T) <= 4) {
    // Both limits are exact doubles: clamping first keeps the conversion branch-free.
    constexpr double kLow = std::numeric_limits<T>::min();
    constexpr double kHigh = std::numeric_limits<T>::max();
    scaled = scaled < kLow ? kLow : scaled;
    scaled = scaled > kHigh ? kHigh : scaled;
    // int32 converts in one instruction on every x86; only uint32 needs the wider type.
    using Wide = std::conditional_t<std::is_same_v<T, uint32_t>, int64_t, int32_t>;
    return static_cast<T>(static_cast<Wide>(scaled));
  } else {
    constexpr double kLimit = 0x1p63;  // INT64_MAX is not a double
    if (scaled >= kLimit) return std::numeric_limits<T>::max();
    if (scaled <= -kLimit) return std::numeric_limits<T>::min();
    return static_cast<T>(scaled);
  }
}

// ---- Codecs: the storage type T of a DataType, its compute type C, and the conversions.

template <class Storage>
struct IntCodec {
  using T = Storage;
  using C = Storage;
  using Scale = double;
  static C widen(T x) { return x; }
  static T narrow(C x) { return x; }
  static C applyScale(C x, Scale s) { return scaleInteger(x, s); }
};

// bool is one byte; any nonzero byte is true and results are normalised to 0 or 1.
struct BoolCodec {
  using T = uint8_t;
  using C = uint8_t;
  using Scale = double;
  static C widen(T x) { return x != 0; }
  static T narrow(C x) { return x; }
  // trunc(x * s) != 0 for x in {0, 1}.
  static C applyScale(C x, Scale s) { return x & static_cast<C>(s >= 1.0 || s <= -1.0); }
};

template <class Storage>
struct FloatCodec {
  using T = Storage;
  using C = Storage;
  using Scale = Storage;  // float32 scales in float, float64 in double
  static C widen(T x) { return x; }
  static T narrow(C x) { return x; }
  static C applyScale(C x, Scale s) { return x * s; }
};

struct BFloat16Codec {
  using T = uint16_t;
  using C = float;
  using Scale = float;
  static C widen(T x) { return bfloat16ToFloat(x); }
  static T narrow(C x) { return floatToBfloat16(x); }
  static C applyScale(C x, Scale s) { return x * s; }
};

// Baseline float16: the portable conversions of half.h, element by element.
struct Float16Codec {
  using T = uint16_t;
  using C = float;
  using Scale = float;
  static C widen(T x) { return halfToFloat(x); }
  static T narrow(C x) { return floatToHalf(x); }
  static C applyScale(C x, Scale s) { return x * s; }
};

constexpr int kHalfRounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// float16 with F16C: 32 halves per block, four 8-lane conversions.
struct Float16F16cCodec : Float16Codec {
  __attribute__((target("f16c"))) static C widen(T x) { return _cvtsh_ss(x); }
  __attribute__((target("f16c"))) static T narrow(C x) { return _cvtss_sh(x, kHalfRounding); }
  __attribute__((target("avx2,f16c"))) static void loadBlock(const uint16_t* p, float* out) {
    for (int j = 0; j < 32; j += 8) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j));
      _mm256_storeu_ps(out + j, _mm256_cvtph_ps(raw));
    }
  }
  __attribute__((target("avx2,f16c"))) static void storeBlock(uint16_t* p, const float* in) {
    for (int j = 0; j < 32; j += 8) {
      const __m128i raw = _mm256_cvtps_ph(_mm256_loadu_ps(in + j), kHalfRounding);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + j), raw);
    }
  }
};

// float16 with AVX-512: 32 halves per block, two 16-lane conversions.
struct Float16Avx512Codec : Float16F16cCodec {
  __attribute__((target("avx512f"))) static void loadBlock(const uint16_t* p, float* out) {
    for (int j = 0; j < 32; j += 16) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j));
      _mm512_storeu_ps(out + j, _mm512_cvtph_ps(raw));
    }
  }
  __attribute__((target("avx512f"))) static void storeBlock(uint16_t* p, const float* in) {
    for (int j = 0; j < 32; j += 16) {
      const __m256i raw = _mm512_cvtps_ph(_mm512_loadu_ps(in + j), kHalfRounding);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), raw);
    }
  }
};

// bfloat16 widens by a shift; narrowing rounds to nearest even in integer arithmetic and
// quiets NaN, exactly as floatToBfloat16. GCC vectorises the scalar form, but poorly.
struct BFloat16Avx2Codec : BFloat16Codec {
  __attribute__((target("avx2"))) static void loadBlock(const uint16_t* p, float* out) {
    for (int j = 0; j < 32; j += 8) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j));
      const __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16);
      _mm256_storeu_ps(out + j, _mm256_castsi256_ps(wide));
    }
  }
  __attribute__((target("avx2"))) static __m256i narrow8(__m256 x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(nan));
  }
  __attribute__((target("avx2"))) static void storeBlock(uint16_t* p, const float* in) {
    for (int j = 0; j < 32; j += 16) {
      const __m256i lo = narrow8(_mm256_loadu_ps(in + j));
      const __m256i hi = narrow8(_mm256_loadu_ps(in + j + 8));
      // packus interleaves 128-bit lanes; the permute restores element order.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), packed);
    }
  }
};

struct BFloat16Avx512Codec : BFloat16Codec {
  __attribute__((target("avx512f"))) static void loadBlock(const uint16_t* p, float* out) {
    for (int j = 0; j < 32; j += 16) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j));
      const __m512i wide = _mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16);
      _mm512_storeu_ps(out + j, _mm512_castsi512_ps(wide));
    }
  }
  __attribute__((target("avx512f"))) static void storeBlock(uint16_t* p, const float* in) {
    for (int j = 0; j < 32; j += 16) {
      const __m512 x = _mm512_loadu_ps(in + j);
      const __m512i bits = _mm512_castps_si512(x);
      const __m512i high = _mm512_srli_epi32(bits, 16);
      const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
      const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd);
      const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
      const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
      const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      const __m512i result = _mm512_mask_mov_epi32(rounded, nan, quiet);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), _mm512_cvtepi32_epi16(result));
    }
  }
};

template <class Codec>
constexpr size_t kWidth = kBlockBytes / sizeof(typename Codec::C);

// Codecs that convert a whole block with intrinsics rather than element by element.
template <class Codec>
constexpr bool kBlockCodec = requires(const uint16_t* in, float* out) {
  Codec::loadBlock(in, out);
};

template <class Codec>
inline void loadBlock(const typename Codec::T* p, typename Codec::C* out) {
  if constexpr (kBlockCodec<Codec>) {
    static_assert(kWidth<Codec> == 32);
    Codec::loadBlock(p, out);
  } else {
    for (size_t j = 0; j < kWidth<Codec>; ++j) out[j] = Codec::widen(p[j]);
  }
}

template <class Codec>
inline void storeBlock(typename Codec::T* p, const typename Codec::C* in) {
  if constexpr (kBlockCodec<Codec>) {
    Codec::storeBlock(p, in);
  } else {
    for (size_t j = 0; j < kWidth<Codec>; ++j) p[j] = Codec::narrow(in[j]);
  }
}

// ---- Operations on compute values. Min and max pick the first operand on ties and NaN
// comparisons, which is deterministic and matches the vector min/max instructions.

struct SumOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<WrapType<C>>(a) + static_cast<WrapType<C>>(b));
    } else {
      return a + b;
    }
  }
};

struct ProductOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<WrapType<C>>(a) * static_cast<WrapType<C>>(b));
    } else {
      return a * b;
    }
  }
};

struct MinOp {
  template <class C>
  static C apply(C a, C b) { return b < a ? b : a; }
};

struct MaxOp {
  template <class C>
  static C apply(C a, C b) { return a < b ? b : a; }
};

// ---- The generic pass: dst = scale * (op over the sources).

// A fixed number of sources, element by element: the shape GCC vectorises best.
template <class Codec, class Op, int N, bool kScaled>
inline void elementLoop(typename Codec::T* dst, const typename Codec::T* const* srcs,
                        size_t count, typename Codec::Scale scale) {
  using T = typename Codec::T;
  using C = typename Codec::C;
  // dst may equal s0, so neither is restrict; the other sources never overlap dst.
  const T* s0 = srcs[0];
  const T* __restrict s1 = N >= 2 ? srcs[1] : nullptr;
  const T* __restrict s2 = N >= 3 ? srcs[2] : nullptr;
  const T* __restrict s3 = N >= 4 ? srcs[3] : nullptr;
  for (size_t i = 0; i < count; ++i) {
    C acc = Codec::widen(s0[i]);
    if constexpr (N >= 2) acc = Op::apply(acc, Codec::widen(s1[i]));
    if constexpr (N >= 3) acc = Op::apply(acc, Codec::widen(s2[i]));
    if constexpr (N >= 4) acc = Op::apply(acc, Codec::widen(s3[i]));
    if constexpr (kScaled) acc = Codec::applyScale(acc, scale);
    dst[i] = Codec::narrow(acc);
  }
}

// Any number of sources, a block at a time: the block's accumulator stays in registers (or
// at worst in L1) while each source streams through it once. The tail goes element-wise.
template <class Codec, class Op, int N, bool kScaled>
inline void blockLoop(typename Codec::T* dst, const typename Codec::T* const* srcs,
                      int num_srcs, size_t count, typename Codec::Scale scale) {
  using C = typename Codec::C;
  constexpr size_t kW = kWidth<Codec>;
  const int n = N == kDynamic ? num_srcs : N;
  const size_t full = count - count % kW;
  for (size_t i = 0; i < full; i += kW) {
    C acc[kW];
    C block[kW];
    loadBlock<Codec>(srcs[0] + i, acc);
    for (int k = 1; k < n; ++k) {
      loadBlock<Codec>(srcs[k] + i, block);
      for (size_t j = 0; j < kW; ++j) acc[j] = Op::apply(acc[j], block[j]);
    }
    if constexpr (kScaled) {
      for (size_t j = 0; j < kW; ++j) acc[j] = Codec::applyScale(acc[j], scale);
    }
    storeBlock<Codec>(dst + i, acc);
  }
  for (size_t i = full; i < count; ++i) {
    C acc = Codec::widen(srcs[0][i]);
    for (int k = 1; k < n; ++k) acc = Op::apply(acc, Codec::widen(srcs[k][i]));
    if constexpr (kScaled) acc = Codec::applyScale(acc, scale);
    dst[i] = Codec::narrow(acc);
  }
}

template <class Codec, class Op, int N, bool kScaled>
inline void passLoop(void* dst, const void* const* srcs, int num_srcs, size_t count,
                     typename Codec::Scale scale) {
  using T = typename Codec::T;
  auto* out = static_cast<T*>(dst);
  auto* in = reinterpret_cast<const T* const*>(srcs);
  if constexpr (N == kDynamic || kBlockCodec<Codec>) {
    blockLoop<Codec, Op, N, kScaled>(out, in, num_srcs, count, scale);
  } else {
    elementLoop<Codec, Op, N, kScaled>(out, in, count, scale);
  }
}

template <class Codec, class Op, int N>
inline void runPass(void* dst, const void* const* srcs, int num_srcs, size_t count,
                    double scale) {
  if (scale == 1.0) {
    passLoop<Codec, Op, N, false>(dst, srcs, num_srcs, count, 1);
  } else {
    passLoop<Codec, Op, N, true>(dst, srcs, num_srcs, count,
                                 static_cast<typename Codec::Scale>(scale));
  }
}

// ---- One entry point per instruction set. `flatten` inlines runPass and everything below
// it, so the loop is vectorised for the target named here.

using PassFn = void (*)(void* dst, const void* const* srcs, int num_srcs, size_t count,
                        double scale);

struct BaselineIsa {
  using Float16 = Float16Codec;
  using BFloat16 = BFloat16Codec;
  template <class Codec, class Op, int N>
  __attribute__((flatten)) static void pass(void* dst, const void* const* srcs, int num_srcs,
                                            size_t count, double scale) {
    runPass<Codec, Op, N>(dst, srcs, num_srcs, count, scale);
  }
};

struct Avx2Isa {
  using Float16 = Float16F16cCodec;
  using BFloat16 = BFloat16Avx2Codec;
  template <class Codec, class Op, int N>
  __attribute__((target("avx2,f16c"), flatten)) static void pass(void* dst,
                                                                const void* const* srcs,
                                                                int num_srcs, size_t count,
                                                                double scale) {
    runPass<Codec, Op, N>(dst, srcs, num_srcs, count, scale);
  }
};

struct Avx512Isa {
  using Float16 = Float16Avx512Codec;
  using BFloat16 = BFloat16Avx512Codec;
  template <class Codec, class Op, int N>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c"), flatten)) static void
  pass(void* dst, const void* const* srcs, int num_srcs, size_t count, double scale) {
    runPass<Codec, Op, N>(dst, srcs, num_srcs, count, scale);
  }
};

constexpr int kNumOps = 4;  // sum, min, max, product: average is a sum here

struct KernelTable {
  PassFn copy[kNumDataTypes];                     // one source, scaled
  PassFn reduce[kNumDataTypes][kNumOps][4];      // sources: 2, 3, 4, more
};

int opIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProduct: return 3;
    case ReduceOp::kAdasum: break;  // not an elementwise reduction: checkReducible refuses it
  }
  RONDE_CHECK(false, "unknown reduce op " << static_cast<int>(op));
  return 0;
}

template <class Isa, class Codec, class Op>
void fillOp(PassFn* row) {
  row[0] = &Isa::template pass<Codec, Op, 2>;
  row[1] = &Isa::template pass<Codec, Op, 3>;
  row[2] = &Isa::template pass<Codec, Op, 4>;
  row[3] = &Isa::template pass<Codec, Op, kDynamic>;
}

template <class Isa, class Codec>
void fillType(KernelTable& table, DataType type) {
  const int t = static_cast<int>(type);
  table.copy[t] = &Isa::template pass<Codec, SumOp, 1>;
  fillOp<Isa, Codec, SumOp>(table.reduce[t][0]);
  fillOp<Isa, Codec, MinOp>(table.reduce[t][1]);
  fillOp<Isa, Codec, MaxOp>(table.reduce[t][2]);
  fillOp<Isa, Codec, ProductOp>(table.reduce[t][3]);
}

template <class Isa>
KernelTable buildTable() {
  KernelTable table{};
  fillType<Isa, IntCodec<uint8_t>>(table, DataType::kUInt8);
  fillType<Isa, IntCodec<int8_t>>(table, DataType::kInt8);
  fillType<Isa, IntCodec<int16_t>>(table, DataType::kInt16);
  fillType<Isa, IntCodec<uint16_t>>(table, DataType::kUInt16);
  fillType<Isa, IntCodec<int32_t>>(table, DataType::kInt32);
  fillType<Isa, IntCodec<int64_t>>(table, DataType::kInt64);
  fillType<Isa, typename Isa::Float16>(table, DataType::kFloat16);
  fillType<Isa, typename Isa::BFloat16>(table, DataType::kBFloat16);
  fillType<Isa, FloatCodec<float>>(table, DataType::kFloat32);
  fillType<Isa, FloatCodec<double>>(table, DataType::kFloat64);
  // On 0/1 values min is logical and, max logical or: sum is or, product is and.
  const int b = static_cast<int>(DataType::kBool);
  table.copy[b] = &Isa::template pass<BoolCodec, MaxOp, 1>;
  fillOp<Isa, BoolCodec, MaxOp>(table.reduce[b][0]);
  fillOp<Isa, BoolCodec, MinOp>(table.reduce[b][1]);
  fillOp<Isa, BoolCodec, MaxOp>(table.reduce[b][2]);
  fillOp<Isa, BoolCodec, MinOp>(table.reduce[b][3]);
  return table;
}

const KernelTable& tableFor(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512: {
      static const KernelTable table = buildTable<Avx512Isa>();
      return table;
    }
    case KernelIsa::kAvx2: {
      static const KernelTable table = buildTable<Avx2Isa>();
      return table;
    }
    case KernelIsa::kBaseline: break;
  }
  static const KernelTable table = buildTable<BaselineIsa>();
  return table;
}

KernelIsa bestIsa() {
  if (kernelIsaSupported(KernelIsa::kAvx512)) return KernelIsa::kAvx512;
  if (kernelIsaSupported(KernelIsa::kAvx2)) return KernelIsa::kAvx2;
  return KernelIsa::kBaseline;
}

// The table in use: a cache of what the CPU supports, chosen on first use (tests may lower
// it), not runtime state.
std::atomic<const KernelTable*> g_table{nullptr};
std::atomic<KernelIsa> g_isa{KernelIsa::kBaseline};

const KernelTable& activeTable() {
  const KernelTable* table = g_table.load(std::memory_order_acquire);
  if (table == nullptr) {
    static const KernelIsa best = bestIsa();
    g_isa.store(best, std::memory_order_relaxed);
    table = &tableFor(best);
    g_table.store(table, std::memory_order_release);
  }
  return *table;
}

void checkType(DataType type) {
  RONDE_CHECK(static_cast<int>(type) < kNumDataTypes, "unknown data type " << static_cast<int>(type));
}

}  // namespace

void reduceMany(void* dst, const void* const* srcs, int num_srcs, size_t count, DataType type,
                ReduceOp op, double scale) {
  RONDE_CHECK(num_srcs >= 1, "reduceMany needs a source, got " << num_srcs);
  checkType(type);
  if (count == 0) return;
  if (num_srcs == 1) {
    copyScaled(dst, srcs[0], count, type, scale);
    return;
  }
  const int sources = num_srcs <= 4 ? num_srcs - 2 : 3;
  const PassFn fn = activeTable().reduce[static_cast<int>(type)][opIndex(op)][sources];
  fn(dst, srcs, num_srcs, count, scale);
}

void reduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op) {
  const void* srcs[2] = {dst, src};
  reduceMany(dst, srcs, 2, count, type, op, 1.0);
}

void copyScaled(void* dst, const void* src, size_t count, DataType type, double scale) {
  checkType(type);
  if (count == 0) return;
  if (scale == 1.0) {
    if (dst != src) std::memcpy(dst, src, count * dataTypeSize(type));
    return;
  }
  const void* srcs[1] = {src};
  activeTable().copy[static_cast<int>(type)](dst, srcs, 1, count, scale);
}

void checkReducible(DataType type, ReduceOp op) {
  if (static_cast<int>(type) >= kNumDataTypes) {
    throw makeError(ErrorCode::kInvalidArgument, "unknown data type ", static_cast<int>(type));
  }
  if (op == ReduceOp::kAdasum) {
    throw makeError(ErrorCode::kInvalidArgument,
                    "Adasum is not an elementwise reduction: submit it through the Runtime");
  }
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::kProduct)) {
    throw makeError(ErrorCode::kInvalidArgument, "unknown reduce op ", static_cast<int>(op));
  }
  if (type == DataType::kBool && op == ReduceOp::kAverage) {
    throw makeError(ErrorCode::kInvalidArgument, "reduce op average is not defined for bool");
  }
}

const char* kernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kBaseline: return "baseline";
    case KernelIsa::kAvx2: return "avx2";
    case KernelIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool kernelIsaSupported(KernelIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case KernelIsa::kBaseline: return true;
    case KernelIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case KernelIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             kernelIsaSupported(KernelIsa::kAvx2);
  }
  return false;
}

KernelIsa activeKernelIsa() {
  activeTable();
  return g_isa.load(std::memory_order_relaxed);
}

void setKernelIsaForTesting(KernelIsa isa) {
  if (!kernelIsaSupported(isa)) {
    throw makeError(ErrorCode::kInvalidArgument, "this CPU cannot run the ", kernelIsaName(isa),
                    " kernels");
  }
  g_isa.store(isa, std::memory_order_relaxed);
  g_table.store(&tableFor(isa), std::memory_order_release);
}

}  // namespace ronde
