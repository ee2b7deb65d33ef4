// The fused fp8 GEMM of fp8_gemm.h. Built for sm90a only (wgmma, TMA, setmaxnreg): the CMake
// target compiles this file with -gencode arch=compute_90a,code=sm_90a and defines
// TENSORACLE_FP8_SM90A; elsewhere the kernel body is empty and fused_fp8_gemm_runs_on() is false.
#include <cuda.h>  // CUtensorMap

#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/fp8_gemm.h"

namespace tensoracle::cuda {
namespace {

using dev::check;
using dev::check_launch;

constexpr int kBM = 128, kBN = 128, kBK = 128;  // tile: rows of a, rows of b, depth per stage
constexpr int kStageA = kBM * kBK, kStageB = kBN * kBK;  // bytes

struct Args {
  int M, N, K;
  const float* scale_a;
  const float* scale_b;
  const __half* bias;
  const unsigned char* table;
  int b_constant;  // b is unchanged by earlier kernels (an engine's weight): its first stages load early
};

// Stages of the operand ring: as many as fit beside the table (5 x 32 KB + 64 KB; 3 x 32 KB +
// 128 KB) within the 227 KB a CTA may have.
template <bool kQuantize>
struct Config {
  static constexpr int kStages = kQuantize ? 5 : 3;
  static constexpr int kTable = kQuantize ? 65536 : 131072;
  static constexpr int kBias = 2 * kBN;  // the tile's bias row, float16
  static constexpr std::size_t kSmem = 1024 + kStages * (kStageA + kStageB) + kTable + kBias + (2 * kStages + 2) * 8;
};

#if defined(TENSORACLE_FP8_SM90A) && defined(__CUDA_ARCH__)
// ---- sm90a device helpers: mbarriers, TMA, wgmma --------------------------------------------

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// One arrival from the thread where `pred` holds (a predicate, not a branch: no divergent path
// while wgmma is in flight).
__device__ __forceinline__ void mbar_arrive_if(unsigned bar, bool pred) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}" ::"r"(bar),
               "r"(static_cast<int>(pred))
               : "memory");
}
__device__ __forceinline__ void tma_load(unsigned dst, const CUtensorMap* map, unsigned bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_store(const CUtensorMap* map, unsigned src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src), "r"(c0),
               "r"(c1)
               : "memory");
}
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar)
               : "memory");
}
// Programmatic dependent launch: wait until the kernels before this one in the stream have
// completed and their writes are visible (returns at once when launched without the attribute).
__device__ __forceinline__ void wait_for_previous_kernels() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// A K-major operand in shared memory with 128-byte swizzle: rows of 128 bytes, groups of 8 rows
// 1024 bytes apart (wgmma's matrix descriptor: start >> 4, leading offset 1 (unused), stride
// 1024 >> 4, swizzle mode 1).
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr) {
  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// Byte offset of (row, byte) in a tile of 128-byte rows stored with the 128-byte swizzle (as
// the output's TMA store reads it).
__device__ __forceinline__ unsigned swizzled(unsigned row, unsigned byte) {
  return row * 128 + ((((byte >> 4) ^ (row & 7)) << 4) | (byte & 15));
}

// d[64] (+)= a (64 x 32 e4m3 at da) x b (128 x 32 e4m3 at db)^T, float32; scale_d = 0 overwrites.
__device__ __forceinline__ void wgmma_e4m3_m64n128k32(float* d, unsigned long long da, unsigned long long db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}
// The registers wgmma wrote are read only after this point (the compiler sees them change here).
__device__ __forceinline__ void fence_accumulators(float* d) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif

// Threads 0-127: the producer warpgroup (thread 0 issues every load); 128-383: two consumer
// warpgroups, rows 0-63 and 64-127 of the tile. Accumulator layout of wgmma m64n128 (per consumer
// thread t of its warpgroup, warp w = t / 32, lane l): d[4i + 2h + j] is row 16w + l/4 + 8h,
// column 8i + 2(l % 4) + j.
template <bool kQuantize>
__global__ void __launch_bounds__(384, 1)
    fused_fp8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          const __grid_constant__ CUtensorMap map_out, Args args) {
#if defined(TENSORACLE_FP8_SM90A) && defined(__CUDA_ARCH__)
  using C = Config<kQuantize>;
  constexpr int S = C::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t(1023));
  unsigned char* sA = smem;
  unsigned char* sB = sA + S * kStageA;
  unsigned char* sT = sB + S * kStageB;
  unsigned char* sBias = sT + C::kTable;
  auto* bars = reinterpret_cast<unsigned long long*>(sBias + C::kBias);
  const unsigned full0 = smem_u32(bars), empty0 = smem_u32(bars + S), table_bar = smem_u32(bars + 2 * S),
                 bias_bar = smem_u32(bars + 2 * S + 1);

  const int mblocks = (args.M + kBM - 1) / kBM;
  const int m0 = static_cast<int>(blockIdx.x % mblocks) * kBM, n0 = static_cast<int>(blockIdx.x / mblocks) * kBN;
  const int KT = (args.K + kBK - 1) / kBK;
  const int wg = static_cast<int>(threadIdx.x) / 128 - 1;  // consumer warpgroup; -1: the producer

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, 2);
    }
    mbar_init(table_bar, 1);
    mbar_init(bias_bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg < 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      dev::allow_dependent_launch();  // it only starts where this grid's CTAs leave room, and waits as below
      // Before waiting for the previous kernel (programmatic dependent launch): the tile's bias
      // row (an engine constant; N - n0 is a multiple of 16) and the first stages of a constant
      // b; a (an earlier node's result) after. The table, needed only by the epilogue, once the
      // first stages are on their way (issued first, its 64-128 KB per CTA delayed them: 0.7 us
      // on the MLP).
      auto load_table = [&] {
        mbar_expect_tx(table_bar, C::kTable);
        for (int off = 0; off < C::kTable; off += 65536) bulk_load(smem_u32(sT + off), args.table + off, 65536, table_bar);
      };
      {
        const unsigned bytes = 2u * static_cast<unsigned>(args.N - n0 < kBN ? args.N - n0 : kBN);
        mbar_expect_tx(bias_bar, bytes);
        bulk_load(smem_u32(sBias), args.bias + n0, bytes, bias_bar);
      }
      const int early = args.b_constant ? (S < KT ? S : KT) : 0;
      for (int kt = 0; kt < early; ++kt) {
        mbar_expect_tx(full0 + 8 * kt, kStageA + kStageB);
        tma_load(smem_u32(sB + kt * kStageB), &map_b, full0 + 8 * kt, kt * kBK, n0);
      }
      if (KT <= S) load_table();
      wait_for_previous_kernels();
      for (int kt = 0; kt < KT; ++kt) {
        if (kt == S) load_table();
        const int s = kt % S;
        const unsigned full = full0 + 8 * s;
        if (kt >= early) {
          mbar_wait(empty0 + 8 * s, ((kt / S) & 1) ^ 1);
          mbar_expect_tx(full, kStageA + kStageB);
          tma_load(smem_u32(sB + s * kStageB), &map_b, full, kt * kBK, n0);
        }
        tma_load(smem_u32(sA + s * kStageA), &map_a, full, kt * kBK, m0);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");

  // Main loop: each 128-deep slice's products on the tensor cores into a set of slice sums, then
  // added into acc in float32 (the tensor cores' own fp8 accumulation is narrower), as cuBLASLt
  // promotes. Two sets, t and u: slice kt + 1 runs on the tensor cores while slice kt's sums are
  // added, so the tensor cores do not wait for the promotion. (The loop's odd and even tails are
  // written out: with a conditional set inside it, ptxas serializes the wgmmas.)
  float acc[64], t[64], u[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  // The scales may be an earlier kernel's results; waiting here costs nothing (a's first stage
  // is loaded only after the producer's own wait), and their loads are done long before the
  // epilogue (read there, after the main loop, they cost the MLP 2.7 us with the bias's).
  wait_for_previous_kernels();
  const float scale = *args.scale_a * *args.scale_b;
  const bool arriver = threadIdx.x % 128 == 0;
  // Slice kt (stage kt % S) on the tensor cores into d, overwriting it.
  auto slice = [&](float* d, int kt) {
    const int s = kt % S;
    mbar_wait(full0 + 8 * s, (kt / S) & 1);
    const unsigned a = smem_u32(sA + s * kStageA + wg * 64 * kBK), b = smem_u32(sB + s * kStageB);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < kBK / 32; ++k) wgmma_e4m3_m64n128k32(d, smem_desc(a + 32 * k), smem_desc(b + 32 * k), k > 0);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  };
  // Waits for slice kt's sums in d (the later slice, if any, may still run), releases its stage
  // and adds them into acc.
  auto promote = [&](float* d, int kt, bool last) {
    if (last) asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    else asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    fence_accumulators(d);
    mbar_arrive_if(empty0 + 8 * (kt % S), arriver);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] += d[i];
  };
  slice(t, 0);
  int kt = 0;
  for (; kt + 2 < KT; kt += 2) {  // slice kt in t on the tensor cores; kt + 1 and kt + 2 exist
    slice(u, kt + 1);
    promote(t, kt, false);
    slice(t, kt + 2);
    promote(u, kt + 1, false);
  }
  if (kt + 1 < KT) {
    slice(u, kt + 1);
    promote(t, kt, false);
    promote(u, kt + 1, true);
  } else {
    promote(t, kt, true);
  }

  // Epilogue: scale and bias in float32, one rounding to float16 (the product's type), then the
  // table: GELU (and the quantize) exactly as the separate passes compute them.
  mbar_wait(bias_bar, 0);
  const auto* bias = reinterpret_cast<const __half*>(sBias);
  const int tid = static_cast<int>(threadIdx.x) % 128, w = tid / 32, l = tid % 32;
  unsigned bits[32];  // pairs of float16 results
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int c = 8 * i + 2 * (l % 4);
    float b0 = 0.f, b1 = 0.f;
    if (n0 + c < args.N) {  // N is even: both columns or neither
      const __half2 bb = *reinterpret_cast<const __half2*>(bias + c);
      b0 = __low2float(bb);
      b1 = __high2float(bb);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      __half2 v = __floats2half2_rn(fmaf(acc[4 * i + 2 * h], scale, b0), fmaf(acc[4 * i + 2 * h + 1], scale, b1));
      bits[2 * i + h] = *reinterpret_cast<unsigned*>(&v);
    }
  }
  mbar_wait(table_bar, 0);
  named_sync(1, 256);  // both consumer warpgroups are past the main loop: the stages hold the output
  unsigned char* out = sA + wg * (kQuantize ? 64 * 128 : 64 * 256);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int c = 8 * i + 2 * (l % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned r = static_cast<unsigned>(w * 16 + l / 4 + 8 * h), v = bits[2 * i + h];
      if constexpr (kQuantize) {
        const unsigned q0 = sT[v & 0xFFFF], q1 = sT[v >> 16];
        *reinterpret_cast<unsigned short*>(out + swizzled(r, c)) = static_cast<unsigned short>(q0 | (q1 << 8));
      } else {
        const auto* table = reinterpret_cast<const unsigned short*>(sT);
        const unsigned g0 = table[v & 0xFFFF], g1 = table[v >> 16];
        *reinterpret_cast<unsigned*>(out + (c / 64) * 8192 + swizzled(r, (c % 64) * 2)) = g0 | (g1 << 16);
      }
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  named_sync(2 + wg, 128);
  if (tid == 0) {
    tma_store(&map_out, smem_u32(out), n0, m0 + wg * 64);
    if constexpr (!kQuantize) tma_store(&map_out, smem_u32(out + 8192), n0 + 64, m0 + wg * 64);
    asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;" ::: "memory");
  }
#else
  __trap();  // not built for this device (fused_fp8_gemm_runs_on is false)
#endif
}

// Every float16 bit pattern, in order: the table builders' input.
__global__ void all_halves_kernel(unsigned short* out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 65536u) out[i] = static_cast<unsigned short>(i);
}

// ---- tensor maps ------------------------------------------------------------------------

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled (through the runtime: the backend links no libcuda).
EncodeTiled encode_tiled() {
  static EncodeTiled fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
#else
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
#endif
    cudaGetLastError();
  });
  return fn;
}

// A row-major [rows, cols] matrix of 1- or 2-byte elements, boxes of box_rows x box_cols, 128-byte
// swizzle (box_cols * elem == 128); zeros outside.
CUtensorMap tensor_map(const void* ptr, std::int64_t rows, std::int64_t cols, int elem, int box_cols, int box_rows,
                       const std::string& node, const char* what) {
  const EncodeTiled encode = encode_tiled();
  if (!encode) throw Error("[cuda] node '" + node + "': the driver has no cuTensorMapEncodeTiled");
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * static_cast<cuuint64_t>(elem)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(&map, elem == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
                            const_cast<void*>(ptr), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error("[cuda] node '" + node + "': cannot describe " + what + " for the fp8 GEMM (cuTensorMapEncodeTiled error " +
                std::to_string(static_cast<int>(r)) + ")");
  return map;
}

// TENSORACLE_FP8_PDL=0 (diagnostics): launch without programmatic dependent launch.
bool dependent_launch() {
  const char* env = std::getenv("TENSORACLE_FP8_PDL");
  return !(env && std::string_view(env) == "0");
}

template <bool kQuantize>
void launch(const Args& args, const void* a, const void* b, void* out, cudaStream_t stream, const std::string& node) {
  using C = Config<kQuantize>;
  static_assert(C::kSmem <= 232448, "more shared memory than an sm90 CTA may have");
  const auto kernel = fused_fp8_gemm_kernel<kQuantize>;
  // The kernel's shared-memory limit is an attribute per device: set once on each (the caller
  // made the node's device current).
  {
    static std::mutex mutex;
    static std::vector<bool> done;
    int device = 0;
    check(cudaGetDevice(&device), "node '" + node + "': the current device");
    std::lock_guard lock(mutex);
    if (static_cast<std::size_t>(device) >= done.size()) done.resize(static_cast<std::size_t>(device) + 1, false);
    if (!done[static_cast<std::size_t>(device)]) {
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(C::kSmem)),
            "node '" + node + "': shared memory for the fp8 GEMM");
      done[static_cast<std::size_t>(device)] = true;
    }
  }
  const CUtensorMap ma = tensor_map(a, args.M, args.K, 1, kBK, kBM, node, "input 0");
  const CUtensorMap mb = tensor_map(b, args.N, args.K, 1, kBK, kBN, node, "input 1");
  const CUtensorMap mo = kQuantize ? tensor_map(out, args.M, args.N, 1, 128, 64, node, "the output")
                                   : tensor_map(out, args.M, args.N, 2, 64, 64, node, "the output");
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>((args.M + kBM - 1) / kBM) * static_cast<unsigned>((args.N + kBN - 1) / kBN));
  config.blockDim = dim3(384);
  config.dynamicSmemBytes = C::kSmem;
  config.stream = stream;
  // Programmatic dependent launch: the kernel starts while the previous one in the stream (or
  // the graph being captured) finishes, and waits for it before reading its result.
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  if (dependent_launch()) {
    config.attrs = &pdl;
    config.numAttrs = 1;
  }
  check(cudaLaunchKernelEx(&config, kernel, ma, mb, mo, args), "node '" + node + "': fp8 GEMM launch");
  check_launch("fused_fp8_gemm");
}

}  // namespace

bool fused_fp8_gemm_runs_on(int major, int minor) {
#if defined(TENSORACLE_FP8_SM90A)
  return major == 9 && minor == 0 && encode_tiled() != nullptr;
#else
  (void)major;
  (void)minor;
  return false;
#endif
}

bool fused_fp8_gemm_fits(std::int64_t M, std::int64_t N, std::int64_t K) {
  // Tile coordinates and the grid in int32; TMA strides multiples of 16 bytes.
  constexpr std::int64_t kMax = std::int64_t{1} << 30;
  return M >= 1 && N >= 16 && K >= 16 && M < kMax && N < kMax && K < kMax && N % 16 == 0 && K % 16 == 0 &&
         ((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN) < (std::int64_t{1} << 31);
}

bool fused_fp8_gemm_aligned(const void* a, const void* b, const void* bias, const void* out) {
  auto ok = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return ok(a) && ok(b) && ok(bias) && ok(out);
}

std::size_t fp8_epilogue_table_bytes(Fp8Epilogue e) { return e == Fp8Epilogue::kBIAS_GELU_QUANTIZE ? 65536 : 131072; }

void build_fp8_epilogue_table(Fp8Epilogue e, const ActivationParams& act, const TensorRef& quantize_scale, void* table,
                              void* scratch_65536_halves, cudaStream_t stream) {
  all_halves_kernel<<<256, 256, 0, stream>>>(static_cast<unsigned short*>(scratch_65536_halves));
  check_launch("all_halves");
  const TensorRef halves{scratch_65536_halves, DataType::kHALF, Dims{65536}};
  if (e == Fp8Epilogue::kBIAS_GELU_QUANTIZE)
    activation_quantize(act, halves, quantize_scale, {table, DataType::kFP8, Dims{65536}}, stream);
  else
    activation(act, halves, {table, DataType::kHALF, Dims{65536}}, stream);
}

void fused_fp8_gemm(Fp8Epilogue e, const void* a, const void* b, std::int64_t M, std::int64_t N, std::int64_t K,
                    const void* scale_a, const void* scale_b, const void* bias, const void* table, bool b_constant,
                    void* out, cudaStream_t stream, const std::string& node) {
  if (!fused_fp8_gemm_fits(M, N, K) || !fused_fp8_gemm_aligned(a, b, bias, out))
    throw InvalidArgument("[cuda] node '" + node + "': the fp8 GEMM does not take [" + std::to_string(M) + ", " +
                          std::to_string(K) + "] x [" + std::to_string(N) + ", " + std::to_string(K) + "]^T at these addresses");
  const Args args{static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), static_cast<const float*>(scale_a),
                  static_cast<const float*>(scale_b), static_cast<const __half*>(bias),
                  static_cast<const unsigned char*>(table), b_constant ? 1 : 0};
  if (e == Fp8Epilogue::kBIAS_GELU_QUANTIZE) launch<true>(args, a, b, out, stream, node);
  else launch<false>(args, a, b, out, stream, node);
}

}  // namespace tensoracle::cuda
