// Hopper's asynchronous copies and warpgroup products, for code built for sm_90a (quant-wgmma.cu; the
// lab's lab/skinny-gemm prototype): mbarriers counting bytes, the tensor copy engine's 2-D boxes,
// and wgmma.m64n64k16 with its A operand in registers and B in shared memory.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace chorus {

__device__ inline unsigned SharedAddress(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// An mbarrier of `count` arrivals a phase.
__device__ inline void BarrierInit(uint64_t* barrier, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(barrier)), "r"(count));
}
// This thread's arrival, and `bytes` more that the phase waits for (copies counted on it).
__device__ inline void BarrierExpectBytes(uint64_t* barrier, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SharedAddress(barrier)), "r"(bytes) : "memory");
}
__device__ inline void BarrierArrive(uint64_t* barrier) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SharedAddress(barrier)) : "memory"); }
// Until the phase of parity `phase` has completed.
__device__ inline void BarrierWait(uint64_t* barrier, int phase) {
  asm volatile(
      "{\n .reg .pred done;\n wait:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n @!done bra wait;\n}\n" ::"r"(SharedAddress(barrier)), "r"(phase)
      : "memory");
}

// Box {x0, y0} of the 2-D tensor map `map` into `shared`, counted on `barrier`.
__device__ inline void TensorCopy(void* shared, const CUtensorMap* map, int x0, int y0, uint64_t* barrier) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(SharedAddress(shared)),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(x0), "r"(y0), "r"(SharedAddress(barrier))
               : "memory");
}

// A shared-memory matrix descriptor of a K-major tile in 128-byte swizzle (rows of 128 bytes, 8-row
// groups 1024 bytes apart, as the tensor copy's 128-byte swizzle leaves them) at shared address
// `address`; 32 bytes further for each next 16 values of K.
__device__ inline uint64_t SwizzledDescriptor(unsigned address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) | (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

// d (64 x 64, this thread's 32 float32 sums) += a (64 x 16 float16: each warp's 16 rows as
// mma.m16n8k16's A fragment, 4 pairs) . b (16 x 64, a descriptor). d[4 j + e]: the warp's rows g (e 0,
// 1) and g + 8 (e 2, 3), columns 8 j + 2 t and + 1 (e odd).
__device__ inline void Wgmma(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, accumulate, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
        "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
// Before a warpgroup product whose registers other instructions wrote; after a batch of them; until
// every batch is done.
__device__ inline void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ inline void WgmmaWaitAll() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

}  // namespace chorus
