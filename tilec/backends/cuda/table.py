"""What CUDA source looks like: the :class:`~tilec.backends.cemit.CTable` of the CUDA backend."""

from tilec.backends.cemit import CTable
from tilec.backends.cexpr import MATH32, MATH64
from tilec.backends.cuda.header import HEADER

# a float32 rounded to TF32 (to nearest, ties away from zero; the low 13 bits zero), as mma.sync's .tf32 operands
# take it
CVT_TF32 = """__device__ __forceinline__ float cvt_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}
"""

CUDA_TYPES = {
    "float64": "double", "float32": "float", "float16": "half", "bfloat16": "__nv_bfloat16",
    "float8_e4m3": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2", "int64": "long long", "int32": "int",
    "int16": "short", "int8": "signed char", "int4": "signed char", "uint8": "unsigned char",
    "uint16": "unsigned short", "uint32": "unsigned", "uint64": "unsigned long long", "bool": "bool",
}  # fmt: skip

CUDA = CTable(
    name="cuda",
    types=CUDA_TYPES,
    vector_types={2: "unsigned short", 4: "unsigned", 8: "uint2", 16: "uint4"},
    thread_idx="threadIdx.x",
    block_idx=("blockIdx.x", "blockIdx.y", "blockIdx.z"),
    sync="__syncthreads();",
    named_sync='asm volatile("bar.sync {id}, {n};" ::: "memory");',
    copy_sync='asm volatile("bar.sync %0, {n};" :: "r"({id}) : "memory");',
    cluster_dims="__cluster_dims__({x}, {y}, {z})",
    intrinsics={
        "shfl_xor": "__shfl_xor_sync(0xffffffffu, {v}, {a}, {w})",
        "shfl_idx": "__shfl_sync(0xffffffffu, {v}, {a}, {w})",
        "shfl_down": "__shfl_down_sync(0xffffffffu, {v}, {a}, {w})",
        "cvt_tf32": "tl::cvt_tf32({v})",
    },
    intrinsic_helpers={"cvt_tf32": ("cvt_tf32", CVT_TF32)},
    header=HEADER,
    assume="__builtin_assume({cond});",
    grid_dependency=('asm volatile("griddepcontrol.wait;" ::: "memory");',
                     'asm volatile("griddepcontrol.launch_dependents;");'),
    kernel_prefix="__global__",
    atomic_add="tl::atomic_add",  # atomicAdd has no 8/16-bit int overloads (the common header's)
    math32=MATH32 | {"exp2": "tl::exp2", "log2": "tl::log2"},
    math64=MATH64,
)
