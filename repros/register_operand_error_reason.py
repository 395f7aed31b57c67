"""T.gemm with A in registers and transpose_A=True (fp16, float32 accumulator, 64x64x32): the error said the gemm
needs 'fp16/bf16 operands, a float32 accumulator and tile sizes in multiples of 16x8x16', all of which hold, and not
the real reason (a transposed register operand)."""
import tilec
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((32, 64), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
    with T.Kernel(1, threads=128) as bx:
        A_f = T.alloc_fragment((32, 64), "float16")
        B_s = T.alloc_shared((32, 64), "float16")
        C_f = T.alloc_fragment((64, 64), "float32")
        T.copy(A, A_f)
        T.copy(B, B_s)
        T.gemm(A_f, B_s, C_f, transpose_A=True, clear_accum=True)
        T.copy(C_f, C)


try:
    tilec.JITKernel(main, "simt:sm_80", [-1]).report()
    print("no failure (compiled)")
except tilec.errors.TilecError as e:
    print("no failure" if "a transposed register operand" in str(e) else "BUG REPRODUCED", "\n", e)
