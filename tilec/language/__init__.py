"""The kernel language: ``import tilec.language as T``.

Source-compatible with TileLang's ``T.*`` surface for the common subset.
"""

from tilec.dtypes import DType as dtype  # noqa: F401
from tilec.dtypes import (  # noqa: F401
    bfloat16,
    float8_e4m3,
    float8_e5m2,
    float16,
    float32,
    float64,
    int4,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from tilec.dtypes import boolean as bool
from tilec.ir.expr import ceildiv, infinity  # noqa: F401
from tilec.language.alloc import alloc_fragment, alloc_local, alloc_shared, alloc_var, empty  # noqa: F401
from tilec.language.annot import annotate_layout, macro, prim_func, use_swizzle  # noqa: F401
from tilec.language.loops import Kernel, Parallel, Pipelined, grid, serial, unroll, vectorized  # noqa: F401
from tilec.language.math import (  # noqa: F401
    Cast,
    abs,
    all_of,
    any_of,
    cast,
    ceil,
    cos,
    exp,
    exp2,
    floor,
    floordiv,
    floormod,
    fma,
    if_then_else,
    isinf,
    isnan,
    log,
    log2,
    logical_not,
    max,
    max_value,
    min,
    min_value,
    nan,
    pow,
    round,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    tanh,
    truncdiv,
)
from tilec.language.ops import (  # noqa: F401
    atomic_add,
    clear,
    copy,
    cumsum,
    fill,
    gemm,
    print,
    reduce_absmax,
    reduce_abssum,
    reduce_max,
    reduce_min,
    reduce_sum,
)
from tilec.language.types import (  # noqa: F401
    Buffer,
    GemmWarpPolicy,
    StridedTensor,
    Tensor,
    const,
    dynamic,
    symbolic,
)
from tilec.tune.knobs import auto  # noqa: F401

float8_e4m3fn = float8_e4m3
half = float16

# what ``T.<name>`` offers (``from tilec.language import *`` takes exactly these): the submodules (alloc, annot, loops,
# math, ops, types) are not part of it, nor the names that would shadow Python's builtins in a star import (abs, bool,
# max, min, pow, print, round: T.max and the others stay as they are)
__all__ = [
    # dtypes
    "bfloat16", "dtype", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float16", "float32", "float64", "half",
    "int4", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    # parameter annotations and symbolic sizes
    "Buffer", "GemmWarpPolicy", "StridedTensor", "Tensor", "const", "dynamic", "symbolic",
    # kernels, buffers, loops
    "Kernel", "Parallel", "Pipelined", "alloc_fragment", "alloc_local", "alloc_shared", "alloc_var", "annotate_layout",
    "auto", "empty", "grid", "macro", "prim_func", "serial", "unroll", "use_swizzle", "vectorized",
    # tile ops
    "atomic_add", "clear", "copy", "cumsum", "fill", "gemm", "reduce_absmax", "reduce_abssum", "reduce_max",
    "reduce_min", "reduce_sum",
    # scalar math
    "Cast", "all_of", "any_of", "cast", "ceil", "ceildiv", "cos", "exp", "exp2", "floor", "floordiv",
    "floormod", "fma", "if_then_else", "infinity", "isinf", "isnan", "log", "log2", "logical_not",
    "max_value", "min_value", "nan", "rsqrt", "sigmoid", "sin", "sqrt", "tanh", "truncdiv",
]
