// The CUDA backend's reduce (kernels.h) with the CPU's semantics (backends/cpu/ops/reduce.cpp):
// float SUM/PROD/AVG accumulate in double, MAX/MIN in float (any NaN wins), int32/int64 wrap;
// few outputs over many elements split into chunks combined in a fixed order (deterministic).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/node_kernel.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/reduce_util.cuh"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using namespace reduction;  // reduce_util.cuh

using R = ReduceOperation;

using backends::common::reduce_name;

// ---- reducers ----------------------------------------------------------------------------
// A: accumulator, add(a, stored value), combine(a, b), finish(a, count) -> stored value.

template <class Tag>
struct FSum {
  using T = typename Tag::T;
  using A = double;
  __device__ static A init() { return 0.0; }
  __device__ static A add(A a, T v) { return __dadd_rn(a, static_cast<double>(Tag::load(v))); }
  __device__ static A combine(A a, A b) { return __dadd_rn(a, b); }
  __device__ static T finish(A a, i64) { return store_d<Tag>(a); }
};
template <class Tag>
struct FAvg : FSum<Tag> {
  using T = typename Tag::T;
  // AVG over nothing: 0 / 0 = NaN, as the CPU.
  __device__ static T finish(double a, i64 count) { return store_d<Tag>(__ddiv_rn(a, static_cast<double>(count))); }
};
template <class Tag>
struct FProd {
  using T = typename Tag::T;
  using A = double;
  __device__ static A init() { return 1.0; }
  __device__ static A add(A a, T v) { return __dmul_rn(a, static_cast<double>(Tag::load(v))); }
  __device__ static A combine(A a, A b) { return __dmul_rn(a, b); }
  __device__ static T finish(A a, i64) { return store_d<Tag>(a); }
};
// MAX or MIN of floats, exact in float; a NaN is never replaced (any NaN gives NaN).
template <class Tag, bool kMax>
struct FExt {
  using T = typename Tag::T;
  using A = float;
  __device__ static A init() { return kMax ? -INFINITY : INFINITY; }
  __device__ static A combine(A a, A b) { return ((kMax ? b > a : b < a) || b != b) && a == a ? b : a; }
  __device__ static A add(A a, T v) { return combine(a, Tag::load(v)); }
  __device__ static T finish(A a, i64) { return Tag::store(a); }
};
// int32/int64 SUM and PROD in unsigned arithmetic: they wrap.
template <class I, bool kProd>
struct IArith {
  using T = I;
  using A = std::make_unsigned_t<I>;
  __device__ static A init() { return kProd ? A{1} : A{0}; }
  __device__ static A combine(A a, A b) { return kProd ? static_cast<A>(a * b) : static_cast<A>(a + b); }
  __device__ static A add(A a, T v) { return combine(a, static_cast<A>(v)); }
  __device__ static T finish(A a, i64) { return static_cast<I>(a); }
};
template <class I, bool kMax>
struct IExt {
  using T = I;
  using A = I;
  static constexpr I kInit = kMax ? std::numeric_limits<I>::lowest() : std::numeric_limits<I>::max();
  __device__ static A init() { return kInit; }
  __device__ static A combine(A a, A b) { return kMax ? (b > a ? b : a) : (b < a ? b : a); }
  __device__ static A add(A a, T v) { return combine(a, v); }
  __device__ static T finish(A a, i64) { return a; }
};

template <class Rd>
struct Combine {
  __device__ typename Rd::A operator()(typename Rd::A a, typename Rd::A b) const { return Rd::combine(a, b); }
};

// ---- reduce ------------------------------------------------------------------------------

template <class Team, class Rd>
__global__ void __launch_bounds__(kMaxBlock) reduce_kernel(Plan p, const typename Rd::T* __restrict__ x,
                                                           typename Rd::T* __restrict__ out) {
  using A = typename Rd::A;
  __shared__ alignas(8) unsigned char scratch_raw[kScratch * 8];
  A* scratch = reinterpret_cast<A*>(scratch_raw);
  const i64 units = units_of<Team>(p);
  for (i64 u = Team::first(); u < units; u += Team::step()) {
    i64 o;
    const bool active = output_of<Team>(p, u, o);
    A a = Rd::init();
    if (active) for_each_reduced<Team>(p, o, [&](i64 off) { a = Rd::add(a, x[off]); });
    a = Team::reduce(a, Combine<Rd>{}, scratch);
    if (active && Team::leader()) out[o] = Rd::finish(a, p.count);
  }
}

// Reducing over an empty dim: every output is the identity (AVG: 0 / 0).
template <class Rd>
__global__ void reduce_empty_kernel(typename Rd::T* out, i64 n) {
  const typename Rd::T v = Rd::finish(Rd::init(), 0);
  for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    out[i] = v;
}

// Few outputs over many elements: each output's walk (walk_of) is cut into `splits` chunks,
// one block each, which write their partial results to the workspace; a second kernel
// combines each output's partials in chunk order and finishes it. Deterministic, like the
// one-team path (a sum is only grouped differently: it may differ in the last bit of the
// double before the one rounding to the output type).
constexpr i64 kSplitBlocks = 512;         // blocks to aim for (units x chunks)
constexpr i64 kSplitMinElements = 16384;  // elements per block at least
constexpr i64 kSplitMaxUnits = kSplitBlocks / 4;
constexpr int kSplitColumnRows = 16;

struct Split {
  bool columns = false;
  i64 units = 0, walk = 0, splits = 1, chunk = 0;
};

// Whether (and how) a plan splits; splits == 1: it does not.
Split split_of(const Plan& p) {
  Split s;
  s.columns = p.kin >= 32;
  s.units = s.columns ? (p.nout / p.kin) * ((p.kin + 31) / 32) : p.nout;
  s.walk = walk_of(p, s.columns, kMaxBlock);
  if (s.units > kSplitMaxUnits || s.walk < 2) return s;
  // elements a unit reduces: a column chunk holds up to 32 outputs
  const i64 per_unit = s.columns ? p.rcount * std::min<i64>(p.kin, 32) : p.count;
  const i64 by_work = per_unit / kSplitMinElements, by_blocks = (kSplitBlocks + s.units - 1) / s.units;
  const i64 want = std::min({by_work, by_blocks, s.walk});
  if (want < 2) return s;
  s.chunk = (s.walk + want - 1) / want;
  s.splits = (s.walk + s.chunk - 1) / s.chunk;
  return s;
}

template <class Team, class Rd>
__global__ void __launch_bounds__(kMaxBlock) reduce_split_kernel(Plan p, const typename Rd::T* __restrict__ x,
                                                                 typename Rd::A* __restrict__ partial, i64 splits,
                                                                 i64 chunk, i64 walk) {
  using A = typename Rd::A;
  __shared__ alignas(8) unsigned char scratch_raw[kScratch * 8];
  A* scratch = reinterpret_cast<A*>(scratch_raw);
  const i64 work = units_of<Team>(p) * splits;
  for (i64 w = blockIdx.x; w < work; w += gridDim.x) {  // uniform over the block
    const i64 u = w / splits, j = w % splits;
    i64 o;
    const bool active = output_of<Team>(p, u, o);
    const i64 lo = j * chunk, hi = lo + chunk < walk ? lo + chunk : walk;
    A a = Rd::init();
    if (active) for_each_reduced_range<Team>(p, o, lo, hi, [&](i64 off) { a = Rd::add(a, x[off]); });
    a = Team::reduce(a, Combine<Rd>{}, scratch);
    if (active && Team::leader()) partial[o * splits + j] = a;
  }
}

template <class Rd>
__global__ void reduce_combine_kernel(const typename Rd::A* __restrict__ partial, typename Rd::T* __restrict__ out,
                                      i64 nout, i64 splits, i64 count) {
  for (i64 o = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; o < nout;
       o += static_cast<i64>(gridDim.x) * blockDim.x) {
    typename Rd::A a = partial[o * splits];
    for (i64 j = 1; j < splits; ++j) a = Rd::combine(a, partial[o * splits + j]);
    out[o] = Rd::finish(a, count);
  }
}

template <class Rd>
void run_reduce(const Plan* plan, const TensorRef& x, const TensorRef& out, i64 no, void* workspace,
                cudaStream_t stream) {
  using T = typename Rd::T;
  if (no == 0) return;
  auto* o = static_cast<T*>(out.data);
  if (plan == nullptr) {
    reduce_empty_kernel<Rd><<<dev::blocks_for(no), dev::kThreads, 0, stream>>>(o, no);
    dev::check_launch("reduce");
    return;
  }
  const auto* xp = static_cast<const T*>(x.data);
  if (workspace != nullptr) {
    const Split sp = split_of(*plan);
    if (sp.splits > 1) {
      static_assert(sizeof(typename Rd::A) <= 8, "partials of at most 8 bytes (reduce_split_workspace_bytes)");
      auto* partial = static_cast<typename Rd::A*>(workspace);
      const dim3 grid(static_cast<unsigned>(std::min<i64>(sp.units * sp.splits, 65535 * 8)));
      if (sp.columns)
        reduce_split_kernel<ColumnTeam, Rd><<<grid, dim3(32, kSplitColumnRows), 0, stream>>>(*plan, xp, partial, sp.splits,
                                                                                             sp.chunk, sp.walk);
      else
        reduce_split_kernel<RowTeam, Rd><<<grid, dim3(kMaxBlock, 1), 0, stream>>>(*plan, xp, partial, sp.splits, sp.chunk,
                                                                                 sp.walk);
      dev::check_launch("reduce (split)");
      reduce_combine_kernel<Rd><<<dev::blocks_for(no), dev::kThreads, 0, stream>>>(partial, o, no, sp.splits, plan->count);
      dev::check_launch("reduce (combine)");
      return;
    }
  }
  launch_teams(*plan, [&](auto team, dim3 grid, dim3 block) {
    reduce_kernel<decltype(team), Rd><<<grid, block, 0, stream>>>(*plan, xp, o);
  });
  dev::check_launch("reduce");
}

}  // namespace

std::size_t reduce_split_workspace_bytes() {
  // partials: nout * splits <= 32 * units * ceil(kSplitBlocks / units) <= 32 * (kSplitMaxUnits + kSplitBlocks)
  return static_cast<std::size_t>(32 * (kSplitMaxUnits + kSplitBlocks) * 8);
}

bool reduce_splits(const ReduceParams& p, const Dims& x) {
  const int rank = x.rank();
  if (rank > Dims::kMaxRank || !x.all_known() || x.volume() <= 0) return false;
  i64 dims[Dims::kMaxRank];
  bool red[Dims::kMaxRank];
  for (int i = 0; i < rank; ++i) {
    dims[i] = x[i];
    red[i] = rank < 32 && ((p.axes >> i) & 1u);
  }
  return split_of(make_plan(rank, dims, red)).splits > 1;
}

void reduce(const ReduceParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream, void* workspace) {
  // nx == 0 with outputs: an empty dim is reduced, every output is the identity.
  const backends::common::ReduceShape s = backends::common::check_reduce(dev::kFail, p, x, out);
  const i64 no = s.no;
  const Plan plan = s.nx == 0 ? Plan{} : plan_of(s.layout);
  const Plan* pp = s.nx == 0 ? nullptr : &plan;
  auto run_float = [&](auto tag) {
    using Tag = decltype(tag);
    switch (p.op) {
      case R::kSUM: run_reduce<FSum<Tag>>(pp, x, out, no, workspace, stream); break;
      case R::kPROD: run_reduce<FProd<Tag>>(pp, x, out, no, workspace, stream); break;
      case R::kMAX: run_reduce<FExt<Tag, true>>(pp, x, out, no, workspace, stream); break;
      case R::kMIN: run_reduce<FExt<Tag, false>>(pp, x, out, no, workspace, stream); break;
      case R::kAVG: run_reduce<FAvg<Tag>>(pp, x, out, no, workspace, stream); break;
      default: fail("reduce: unknown operation " + std::to_string(static_cast<int>(p.op)));
    }
  };
  auto run_int = [&](auto zero) {
    using I = decltype(zero);
    switch (p.op) {
      case R::kSUM: run_reduce<IArith<I, false>>(pp, x, out, no, workspace, stream); break;
      case R::kPROD: run_reduce<IArith<I, true>>(pp, x, out, no, workspace, stream); break;
      case R::kMAX: run_reduce<IExt<I, true>>(pp, x, out, no, workspace, stream); break;
      case R::kMIN: run_reduce<IExt<I, false>>(pp, x, out, no, workspace, stream); break;
      default: fail(std::string("reduce: ") + reduce_name(p.op) + " does not take " + tn(x.type));
    }
  };
  switch (x.type) {
    case DataType::kFLOAT: run_float(F32{}); break;
    case DataType::kHALF: run_float(F16{}); break;
    case DataType::kBF16: run_float(BF16{}); break;
    case DataType::kINT32: run_int(std::int32_t{}); break;
    case DataType::kINT64: run_int(std::int64_t{}); break;
    default: fail(std::string("reduce: ") + reduce_name(p.op) + " does not take " + tn(x.type));
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

// Tactic kReduceSplitTactic (node_kernel.h): reduce() gets its partials' scratch.
struct ReduceSplitState final : OpState {};

OpPrepared prepare_reduce(const OpSetup& setup) {
  const graph::Node& n = setup.node;
  OpPrepared r;
  if (n.tactic == graph::Tactic(kReduceSplitTactic)) r.state = std::make_unique<ReduceSplitState>();
  else if (!n.tactic.empty() && n.tactic != graph::Tactic("cuda.reduce"))
    throw CorruptEngineError("[cuda] node '" + n.name + "': tactic '" + graph::describe(n.tactic) +
                             "' is not a reduce's (malformed engine)");
  return r;
}

}  // namespace

extern const OpKernel kReduceKernel = {
    LayerType::kREDUCE, prepare_reduce,
    [](const OpCall& c) -> std::size_t { return c.state ? reduce_split_workspace_bytes() : 0; },
    [](const OpCall& c) {
      reduce(std::get<ReduceParams>(c.node.params), ref(c.in[0]), ref(c.out), c.stream, c.state ? c.workspace : nullptr);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
