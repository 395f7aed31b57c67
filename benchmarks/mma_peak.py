"""The mma.sync ceiling of this GPU: m16n8k16 fp16 -> fp32 from registers only (no memory traffic), 8-32
independent accumulators per warp, 1-8 warps per scheduler. What tilec's mma.sync path is measured against in
docs/perf-notes.md (change K).

    python benchmarks/mma_peak.py
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SOURCE = r"""
template <int NACC> __device__ void body(float* out, int iters) {
  float acc[NACC][4];
  #pragma unroll
  for (int j = 0; j < NACC; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  unsigned a0 = threadIdx.x * 0x00010001u, a1 = a0 ^ 0x3c003c00u, a2 = a0 + 7u, a3 = a1 + 9u;
  unsigned b0 = a0 ^ 0x12341234u, b1 = a1 ^ 0x11111111u;
  for (int i = 0; i < iters; ++i) {
    #pragma unroll
    for (int j = 0; j < NACC; ++j)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                   "{%0,%1,%2,%3};\n" : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < NACC; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the mmas alive
}
extern "C" __global__ void peak32(float* out, int iters) { body<32>(out, iters); }
extern "C" __global__ void peak16(float* out, int iters) { body<16>(out, iters); }
extern "C" __global__ void peak8(float* out, int iters) { body<8>(out, iters); }
"""


def main(argv: list[str] | None = None) -> None:
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)  # --help, or an error for args
    import cupy
    import torch
    from cupy.cuda import driver
    from triton.testing import do_bench

    from tilec.backends.cuda.runtime import device_arch, nvrtc_compile

    cubin, _ = nvrtc_compile(SOURCE, device_arch(), "mma_peak")
    module = cupy.cuda.function.Module()
    module.load(cubin)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.empty(sms * 8 * 1024, device="cuda")
    iters = 2048
    for name, nacc in (("peak32", 32), ("peak16", 16), ("peak8", 8)):
        fn = module.get_function(name)
        for threads, per_sm in ((128, 1), (128, 2), (256, 1), (256, 2), (512, 1), (1024, 1)):
            if nacc * 4 * threads * per_sm > 0.85 * 65536:  # the accumulators must fit the register file
                continue
            grid = sms * per_sm * 4
            cells = [ctypes.c_uint64(out.data_ptr()), ctypes.c_int32(iters)]
            ptrs = (ctypes.c_void_p * 2)(*[ctypes.addressof(c) for c in cells])

            def run(fn=fn, grid=grid, threads=threads, ptrs=ptrs) -> None:
                driver.launchKernel(fn.ptr, grid, 1, 1, threads, 1, 1, 0, torch.cuda.current_stream().cuda_stream,
                                    ctypes.addressof(ptrs), 0)

            run()
            ms = do_bench(run, warmup=10, rep=50, return_mode="median")
            flops = grid * (threads // 32) * iters * nacc * 4096.0
            print(f"mma.sync m16n8k16 f16->f32, {nacc} accumulators/warp, {threads} threads x {per_sm} blocks/SM: "
                  f"{flops / ms / 1e9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
