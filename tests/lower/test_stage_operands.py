"""A register (fragment) operand of a gemm on the scalar FMA path is staged through a shared buffer of the
compiler's (pass ``stage_operands``): flash attention in float32, or in float16 where its P·V gemm has no
tensor-core partition, compiles for every target and runs in the thread interpreter against float64 numpy, which
reports any race between the staging copy and the gemm's reads, across loop iterations too."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, example_line, load_example, poisoned, randn

import tilec
import tilec.language as T
from tilec.errors import TilecValueError

SMALL = {"block_M": 32, "block_N": 32, "threads": 64}
FLASH = [  # (target, batch, heads, seq, dim, tile kwargs, dtype, why the P·V gemm is on the scalar path)
    ("simt:sm_80", 1, 1, 40, 64, {}, "float32", "operand dtype float32"),  # the example's defaults
    ("simt:sm_90a", 1, 1, 40, 64, {}, "float32", "operand dtype float32"),
    ("simt:gfx90a", 1, 1, 40, 64, SMALL, "float32", "operand dtype float32"),
    ("simt:sm_80", 1, 2, 100, 32, {**SMALL, "num_stages": 2}, "float32", "operand dtype float32"),  # 4 key blocks
    ("simt:sm_90a", 1, 1, 100, 32, {**SMALL, "num_stages": 1}, "float32", "operand dtype float32"),
    ("simt:gfx90a", 1, 2, 100, 32, {**SMALL, "num_stages": 2}, "float32", "operand dtype float32"),
    ("simt:gfx90a", 1, 1, 70, 64, {"block_M": 32, "block_N": 32, "threads": 32}, "float16", "32 threads"),
    ("simt:gfx90a", 1, 1, 40, 40, {}, "float16", "no FullRow partition of 2 waves tiles 64x40"),
    ("simt:sm_80", 1, 1, 100, 32, {"block_N": 40}, "float16", "K=40 is not a multiple of 16"),
    ("simt:sm_90a", 1, 1, 100, 32, {"block_N": 40}, "float16", "K=40 is not a multiple of 16"),  # QK^T on wgmma
]


def _flash(target, b, h, n, d, causal, tiles, dtype):
    fa = load_example("03_flash_attention")
    return fa, tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, dtype=dtype, **tiles), target)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("target", "b", "h", "n", "d", "tiles", "dtype", "why"), FLASH,
                         ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_flash_attention_stages_p_for_the_scalar_path(rng, causal, target, b, h, n, d, tiles, dtype, why):
    fa, kernel = _flash(target, b, h, n, d, causal, tiles, dtype)
    line = example_line("03_flash_attention", "T.gemm(P, V_s, O_f")
    note = next(x for x in kernel.report().splitlines() if "'P' is staged" in x)
    assert f"T.gemm at line {line}:" in note and why in note and "scalar FMA path" in note, note
    q, k, v = (randn(rng, (b, h, n, d), dtype) for _ in range(3))
    o = poisoned((b, h, n, d), dtype)
    kernel(q, k, v, o)
    assert_close(o, fa.reference(q, k, v, causal), dtype, scale=float(np.abs(v.astype(np.float64)).max()))


def _serial_gemm(M, N, K, operand, block_K=16, threads=64):
    """C = A @ B (B given N x K where ``operand`` is "B": transpose_B) in one block, K in a serial loop, the
    ``operand`` tile read into a float32 fragment each trip and the gemm reading it from there."""
    b_shape = (N, K) if operand == "B" else (K, N)

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor(b_shape, "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads) as _:
            A_x = T.alloc_fragment((M, block_K), "float32") if operand == "A" else T.alloc_shared((M, block_K),
                                                                                                   "float32")
            B_x = T.alloc_fragment((N, block_K), "float32") if operand == "B" else T.alloc_shared((block_K, N),
                                                                                                   "float32")
            C_f = T.alloc_fragment((M, N), "float32")
            T.clear(C_f)
            for k in T.serial(K // block_K):
                T.copy(A[0, k * block_K], A_x)
                if operand == "B":
                    T.copy(B[0, k * block_K], B_x)
                    T.gemm(A_x, B_x, C_f, transpose_B=True)
                else:
                    T.copy(B[k * block_K, 0], B_x)
                    T.gemm(A_x, B_x, C_f)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a", "simt:gfx90a"])
@pytest.mark.parametrize("operand", ["A", "B"])
def test_fragment_operand_of_a_gemm_in_a_serial_loop(rng, target, operand):
    """Each trip writes the staged tile again after the previous trip's gemm read it: the interpreter checks that a
    barrier keeps the two apart (and the copy's writes apart from the same trip's reads)."""
    M, N, K = 32, 48, 64
    kernel = tilec.JITKernel(_serial_gemm(M, N, K, operand), target)
    name = f"{operand}_x"
    assert f"its {operand} operand {name!r} is staged" in kernel.report()
    a = randn(rng, (M, K), "float32")
    b = randn(rng, (N, K) if operand == "B" else (K, N), "float32")
    c = poisoned((M, N), "float32")
    kernel(a, b, c)
    ref = a.astype(np.float64) @ (b.T if operand == "B" else b).astype(np.float64)
    assert_close(c, ref, "float32")


def test_tensor_core_gemms_keep_their_register_operands():
    """Flash attention in float16 on its default tiles: P feeds mma.sync from registers, nothing is staged."""
    _, kernel = _flash("simt:sm_80", 1, 1, 100, 64, False, {}, "float16")
    assert "is staged" not in kernel.report()
    assert not any(b.name.startswith("P_staged") for b in kernel.state.func.launch.allocs)


def test_a_staging_buffer_that_does_not_fit_is_named_in_the_shared_memory_error():
    """gfx90a gives a block 64 KB: float32 flash attention on 64x96 tiles needs 64 KB for Q, K and V, and P's 24 KB
    do not fit beside them; the error names the staging buffer and the gemm it serves."""
    _, kernel = _flash("simt:gfx90a", 1, 1, 100, 64, False, {"block_N": 96}, "float32")
    with pytest.raises(TilecValueError, match="bytes of shared memory") as e:
        kernel.state  # noqa: B018
    line = example_line("03_flash_attention", "T.gemm(P, V_s, O_f")
    assert f"P_staged 24576 (tilec's staging of T.gemm's A operand 'P' at line {line})" \
        in str(e.value), str(e.value)


def _register_operand_gemm(part: bool):
    """fp16 operands, a float32 accumulator, 64x64x32 tiles, A in registers either transposed or as half of a wider
    fragment: the tensor cores cannot read it from there (this was an error saying so)."""

    @T.prim_func
    def main(A: T.Tensor((64, 64) if part else (32, 64), "float16"), B: T.Tensor((32, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((64, 64) if part else (32, 64), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_f)
            T.copy(B, B_s)
            if part:
                T.gemm(A_f[:, 32:64], B_s, C_f, clear_accum=True)
            else:
                T.gemm(A_f, B_s, C_f, transpose_A=True, clear_accum=True)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a", "simt:gfx90a"])
@pytest.mark.parametrize(("part", "why"), [(False, "a transposed register operand"),
                                           (True, "register operand A_f[:64, 32:64] is part of a fragment")])
def test_a_register_operand_the_tensor_cores_cannot_read_is_staged_for_them(rng, target, part, why):
    kernel = tilec.JITKernel(_register_operand_gemm(part), target, pass_configs={"wgmma": True} if "90a" in target
                             else None)
    instr = "mfma" if "gfx" in target else "wgmma" if part and "90a" in target else "mma"
    note = next(x for x in kernel.report().splitlines() if "'A_f' is staged" in x)
    assert why in note and note.endswith(f"from there the gemm runs on {instr}"), note
    a, b = randn(rng, (64, 64) if part else (32, 64), "float16"), randn(rng, (32, 64), "float16")
    c = poisoned((64, 64), "float32")
    kernel(a, b, c)
    a64 = a.astype(np.float64)
    assert_close(c, (a64[:, 32:] if part else a64.T) @ b.astype(np.float64), "float16")
