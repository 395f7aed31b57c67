"""What HIP source looks like: the :class:`~tilec.backends.cemit.CTable` of the HIP backend.

Types need no ROCm header: ``_Float16`` is clang's native half type (what HIP's ``__half`` wraps) and bfloat16 is
the device header's ``tl::bf16`` (16-bit storage, round-to-nearest-even from float), so the same source compiles
with ``hipcc`` and with hiprtc, whose set of includable headers differs between ROCm releases. Shuffles are
HIP's (``__shfl_xor(v, lane_mask, width)``, 64-lane wavefronts). Vector moves use vectors of the element type
(``tl::vec<_Float16, 4>``): LLVM keeps a register array in registers when all its accesses agree on the element
type, and puts it in scratch memory when 16-bit stores meet a 32-bit vector load.
"""

from tilec.backends.cemit import CTable
from tilec.backends.cexpr import MATH32, MATH64
from tilec.backends.hip.header import HEADER

HIP_TYPES = {
    "float64": "double", "float32": "float", "float16": "_Float16", "bfloat16": "tl::bf16", "int64": "long long",
    "int32": "int", "int16": "short", "int8": "signed char", "int4": "signed char", "uint8": "unsigned char",
    "uint16": "unsigned short", "uint32": "unsigned", "uint64": "unsigned long long", "bool": "bool",
}  # fmt: skip  (no float8: CDNA2 has none, and HIP 5.x no fp8 type)

HIP = CTable(
    name="hip",
    types=HIP_TYPES,
    vector_types={2: "unsigned short", 4: "unsigned", 8: "unsigned long long", 16: "tl::vec<unsigned, 4>"},
    thread_idx="threadIdx.x",
    block_idx=("blockIdx.x", "blockIdx.y", "blockIdx.z"),
    sync="__syncthreads();",
    sync_warp="__builtin_amdgcn_wave_barrier();",
    intrinsics={
        "shfl_xor": "__shfl_xor({v}, {a}, {w})",
        "shfl_idx": "__shfl({v}, {a}, {w})",
        "shfl_down": "__shfl_down({v}, {a}, {w})",
    },
    header=HEADER,
    kernel_prefix="__global__",
    math32=MATH32,
    math64=MATH64,
    launch_bounds="__launch_bounds__({threads})",
    smem_decl="extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];",
    align="__attribute__((aligned({n})))",
    warp_size=64,
    vector_of="tl::vec<{t}, {n}>",  # element-typed, so that register staging arrays stay in registers
    atomic_add="tl::atomic_add",  # HIP's atomicAdd has no 16-bit float overloads
    float_to_int="tl::f2i<{t}>({v})",  # saturated, NaN to 0, as interpreted (hipcc's casts saturated elsewhere)
)
