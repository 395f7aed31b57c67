"""GPU numerics of the CUDA backend against float64 references on fresh random inputs (`pytest -m gpu`).

Outputs are passed in poisoned with NaN, so an element the kernel never writes fails the comparison."""

import math

import pytest

import tilec
import tilec.language as T

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _rel(out, ref):
    out = out.double().cpu()
    ref = ref.double().cpu()
    assert not torch.isnan(out).any(), "unwritten (NaN) elements in the output"
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


def _poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


@tilec.jit(target="cuda")
def gemm(M, N, K, trans_a, trans_b, bm=128, bn=128, bk=32, stages=3, threads=128, dtype="float16", relu=False,
         allow_tf32=False):
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bk, bm) if trans_a else (bm, bk), dtype)
            B_s = T.alloc_shared((bn, bk) if trans_b else (bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=trans_a, transpose_B=trans_b, allow_tf32=allow_tf32)
            if relu:
                for i, j in T.Parallel(bm, bn):
                    C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("mnk", [(256, 256, 256), (1000, 1000, 1000), (4096, 4096, 1000), (1, 4096, 4096)])
def test_gemm(dtype, ta, tb, mnk):
    M, N, K = mnk
    if (ta or tb) and (M % 8 or K % 8):
        pytest.skip("transposed operands with rows not 16-byte aligned")
    tdt = getattr(torch, dtype)
    a = torch.randn((K, M) if ta else (M, K), device="cuda").to(tdt)
    b = torch.randn((N, K) if tb else (K, N), device="cuda").to(tdt)
    c = _poisoned((M, N), tdt)
    gemm(M, N, K, ta, tb, dtype=dtype)(a, b, c)
    ref = (a.double().T if ta else a.double()) @ (b.double().T if tb else b.double())
    assert _rel(c, ref) < (3e-3 if dtype == "float16" else 1.5e-2)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_tf32(examples, ta, tb):
    """float32 with allow_tf32=True: within TF32's error of the float64 product, not exact float32's (the operands
    were rounded), and within float32 summation error of the product of the operands as the path reads them. On
    sm_90a the K-major orientation (B stored N x K) runs on wgmma, which reads TF32 by ignoring the low 13 bits (its
    error is biased, hence the wider bound); the others on mma.sync m16n8k8, whose operands cvt.rna.tf32.f32 rounds
    to nearest. 1024 x 1000 x 520: ragged N and K tiles."""
    from tilec.dtypes import round_tf32, truncate_tf32

    M, N, K = 1024, 1000, 520
    a = torch.randn((K, M) if ta else (M, K), device="cuda")
    b = torch.randn((N, K) if tb else (K, N), device="cuda")
    if not (ta or tb):
        kernel = examples["01_gemm"].matmul(M, N, K, dtype="float32", allow_tf32=True)
        c = kernel(a, b)
    else:
        kernel = gemm(M, N, K, ta, tb, dtype="float32", allow_tf32=True)
        c = _poisoned((M, N), torch.float32)
        kernel(a, b, c)
    on_wgmma = "wgmma (m64n128k8" in kernel.report()
    assert on_wgmma == (tb and not ta and kernel.target.arch == "sm_90a"), kernel.report()
    assert on_wgmma or "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in kernel.report()
    op = lambda x, t: x.T if t else x  # noqa: E731
    err = _rel(c, op(a.double(), ta) @ op(b.double(), tb))
    assert 1e-6 < err < (3e-3 if on_wgmma else 1e-3), err
    as_read = truncate_tf32 if on_wgmma else round_tf32
    ra, rb = (torch.from_numpy(as_read(x.cpu().numpy())).double() for x in (a, b))
    assert _rel(c, op(ra, ta) @ op(rb, tb)) < 1e-5


def test_gemm_relu():
    a = torch.randn(512, 384, device="cuda").half()
    b = torch.randn(384, 640, device="cuda").half()
    c = _poisoned((512, 640), torch.float16)
    gemm(512, 640, 384, False, False, relu=True)(a, b, c)
    assert _rel(c, torch.relu(a.double() @ b.double())) < 3e-3


@pytest.mark.parametrize("shape", [(37, 300), (1024, 4096)])
def test_softmax(examples, shape):
    M, N = shape
    x = torch.randn(M, N, device="cuda").half() * 3
    y = examples["02_softmax"].softmax(M, N)(x)
    assert _rel(y, torch.softmax(x.double(), dim=-1)) < 3e-3


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("shape", "tiles"), [((1, 2, 1000, 64), {}), ((2, 4, 512, 128), {}),
                                              ((1, 2, 1000, 64), {"block_M": 128, "block_N": 64, "threads": 128}),
                                              ((1, 2, 1000, 64), {"block_M": 64, "block_N": 64, "threads": 256})])
def test_flash_attention(examples, causal, shape, tiles):
    """The last cases on sm_90a: 128 rows on one warpgroup, both gemms on wgmma in two 64-row steps (P from
    registers); 64 rows on two warpgroups, both on mma.sync (wgmma's register A cannot split N between them)."""
    b, h, n, d = shape
    fa = examples["03_flash_attention"]
    q, k, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
    out = fa.flash_attention(b, h, n, d, causal, num_stages=2, **tiles)(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    assert _rel(out, ref) < 3e-3


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tiles", [{}, {"block_M": 32, "block_N": 32, "threads": 64}])
def test_flash_attention_float32(examples, causal, tiles):
    """Float32: both gemms on the scalar FMA path, P staged through shared memory for P.V (pass stage_operands)."""
    fa = examples["03_flash_attention"]
    q, k, v = (torch.randn(1, 2, 200, 64, device="cuda") for _ in range(3))
    out = fa.flash_attention(1, 2, 200, 64, causal, num_stages=2, dtype="float32", **tiles)(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_tf32(examples, causal):
    """Float32 with allow_tf32=True: both gemms on mma.sync m16n8k8 TF32 (on sm_90a too: P.V reads P from registers
    and V stored K x N, which TF32 wgmma cannot, and Q.K^T's accumulator rows must lie as P.V's), P staged through
    shared memory; within TF32's error of float64 and not exact float32's."""
    fa = examples["03_flash_attention"]
    q, k, v = (torch.randn(1, 2, 200, 64, device="cuda") for _ in range(3))
    kernel = fa.flash_attention(1, 2, 200, 64, causal, num_stages=2, dtype="float32", allow_tf32=True)
    out = kernel(q, k, v)
    assert kernel.report().count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == 2, kernel.report()
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    assert 1e-6 < _rel(out, ref) < 2e-3


@tilec.jit(target="cuda", out_idx=[1])
def reductions(M, N, red, bm=16, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), dtype)
            y = T.alloc_fragment((bm,), dtype)
            T.copy(X[bx * bm, 0], x)
            getattr(T, f"reduce_{red}")(x, y, dim=1)
            T.copy(y, Y[bx * bm])

    return main


@pytest.mark.parametrize("red", ["sum", "max", "min", "abssum", "absmax"])
def test_reductions(red):
    x = torch.randn(100, 256, device="cuda")
    y = reductions(100, 256, red)(x)
    xd = x.double()
    ref = {"sum": xd.sum(1), "max": xd.max(1).values, "min": xd.min(1).values, "abssum": xd.abs().sum(1),
           "absmax": xd.abs().max(1).values}[red]
    assert _rel(y, ref) < 1e-5


@tilec.jit(target="cuda", out_idx=[1])
def cumsum(M, N, reverse, bm=8):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=64) as bx:
            s = T.alloc_shared((bm, N), "float32")
            T.copy(X[bx * bm, 0], s)
            T.cumsum(s, dim=1, reverse=reverse)
            T.copy(s, Y[bx * bm, 0])

    return main


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(reverse):
    x = torch.randn(37, 128, device="cuda")
    y = cumsum(37, 128, reverse)(x)
    xd = x.double()
    ref = xd.flip(1).cumsum(1).flip(1) if reverse else xd.cumsum(1)
    assert _rel(y, ref) < 1e-5


@tilec.jit(target="cuda", out_idx=[2])
def axpy(N, block=1024):
    @T.prim_func
    def main(X: T.Tensor((N,), "float16"), Y: T.Tensor((N,), "float16"), Z: T.Tensor((N,), "float16")):
        with T.Kernel(T.ceildiv(N, block), threads=256) as bx:
            for i in T.Parallel(block):
                Z[bx * block + i] = X[bx * block + i] * 2.0 + T.exp(Y[bx * block + i])

    return main


def test_elementwise_ragged():
    n = 100_003
    x, y = (torch.randn(n, device="cuda").half() for _ in range(2))
    z = axpy(n)(x, y)
    assert _rel(z, x.double() * 2 + torch.exp(y.double())) < 2e-3


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_float_atomic_adds_round_each_add(dtype):
    """The GPU rounds each atomic add into a 16-bit float, as the interpreters now do (the same kernel and inputs as
    the CPU tier's test)."""
    import numpy as np
    from test_interp import atomic16_inputs, atomic16_kernel

    n = 64
    x, acc, ref = atomic16_inputs(np.random.default_rng(), n, dtype)
    tdt = getattr(torch, dtype)
    xt = torch.from_numpy(x.astype(np.float32)).to("cuda", tdt)
    acct = torch.from_numpy(acc.astype(np.float32)).to("cuda", tdt)
    tilec.compile(atomic16_kernel(n, dtype), target="cuda")(xt, acct)
    assert acct.double().cpu().tolist() == ref.astype(np.float64).tolist()


def test_int_and_double_to_bfloat16_round_once():
    """int32 / int64 / float64 to bfloat16 round once (through float they rounded twice: 2^24 + 2^16 + 1 gave
    2^24), against references looked up, not converted (the GPU machine's ml_dtypes rounds ints twice)."""
    import numpy as np
    from test_interp import int_to_bf16_inputs, int_to_bf16_kernel

    n = 64
    ins, refs = int_to_bf16_inputs(np.random.default_rng(), n)
    outs = [_poisoned((n,), torch.bfloat16) for _ in refs]
    tilec.compile(int_to_bf16_kernel(n), target="cuda")(*(torch.from_numpy(v).cuda() for v in ins), *outs)
    for out, ref in zip(outs, refs):
        assert out.cpu().view(torch.int16).numpy().view(np.uint16).tolist() == ref.view(np.uint16).tolist()


def test_atomic_adds_of_8_and_16_bit_ints_wrap():
    """8/16-bit int atomic adds (the header's compare-and-swap of the 32-bit word) wrap as numpy's sums do, and
    leave the word's other elements alone."""
    import numpy as np
    from test_interp import narrow_int_atomic_inputs, narrow_int_atomic_kernel

    x, accs, refs = narrow_int_atomic_inputs(np.random.default_rng())
    dev = [torch.from_numpy(a).cuda() if a.dtype != np.uint16 else torch.from_numpy(a.view(np.int16)).cuda()
           .view(torch.uint16) for a in accs]
    tilec.compile(narrow_int_atomic_kernel(), target="cuda")(torch.from_numpy(x).cuda(), *dev)
    for d, r in zip(dev, refs):
        got = d.cpu().view(torch.int16).numpy().view(np.uint16) if r.dtype == np.uint16 else d.cpu().numpy()
        assert got.tolist() == r.tolist()


def test_launch_checks():
    k = axpy(1000)
    x = torch.randn(1000, device="cuda").half()
    with pytest.raises(TypeError, match="dtype"):
        k(x.float(), x)
    with pytest.raises(ValueError, match="dimension 0"):
        k(x[:999], x)
    with pytest.raises(ValueError, match="CUDA device|host"):
        k(x.cpu(), x)


def test_kernel_report_and_registers():
    k = gemm(256, 256, 256, False, False, bm=64, bn=64, bk=32)
    k.compile()
    assert k.n_regs > 0 and k.n_spills == 0
    assert "mma" in k.report()
    assert math.isfinite(k.n_regs)


def test_misaligned_tensor_is_refused():
    k = gemm(256, 256, 256, False, False, bm=64, bn=64, bk=32)
    base = torch.randn(256 * 256 + 1, device="cuda").half()
    a = base[1:].view(256, 256)  # contiguous, but its data starts 2 bytes past a 16-byte boundary
    b = torch.randn(256, 256, device="cuda").half()
    c = _poisoned((256, 256), torch.float16)
    with pytest.raises(ValueError, match="16-byte vectors"):
        k(a, b, c)
    k(a.clone(), b, c)
    assert _rel(c, a.double() @ b.double()) < 3e-3


def test_fast_launch_path_matches_checked_path(monkeypatch):
    monkeypatch.delenv("TILEC_POISON")  # the generated launcher serves only unpoisoned outputs
    n = 4096
    k = axpy(n)
    x, y = (torch.randn(n, device="cuda").half() for _ in range(2))
    z1 = k(x, y)
    z2 = k(x, y)  # builds the fast path (from the second call)
    assert k._fast, "the generated launcher should serve torch tensors"
    assert torch.equal(z1, z2) and torch.equal(k(x, y), z1)  # the third call launches through it
    with pytest.raises(ValueError, match="dimension 0"):
        k(x[:100], y[:100])
    with pytest.raises(TypeError, match="float16"):
        k(x.float(), y)
    with pytest.raises(ValueError):
        k(x.view(64, 64), y)  # wrong rank
    with pytest.raises(ValueError):
        k(torch.randn(2 * n, device="cuda").half()[::2], y)  # not contiguous
    assert torch.equal(k(x, y), z1)  # the fast path still serves after the refusals


def test_fast_launch_path_with_dynamic_sizes(monkeypatch):
    monkeypatch.delenv("TILEC_POISON")  # the generated launcher serves only unpoisoned outputs
    from test_interp import rows_scaled  # the CPU interpreter's dynamic-size kernel, here compiled for CUDA

    k = tilec.jit(target="cuda", out_idx=[1])(rows_scaled.fn)()
    for m in (1000, 1000, 5, 4096, 0):  # the second call of each size goes through the generated launcher
        x = torch.randn(m, 64, device="cuda")
        y = k(x)
        assert y.shape == (m, 64)
        if m:
            assert _rel(y, x.double() * 3 + torch.arange(64, device="cuda").double()) < 1e-6
    assert k._fast
    with pytest.raises(ValueError):
        k(torch.randn(8, 65, device="cuda"))


@tilec.jit(target="cuda")
def _affine(n, scale, shift):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 1024), threads=256) as bx:
            for i in T.Parallel(1024):
                Y[bx * 1024 + i] = X[bx * 1024 + i] * scale + shift

    return main


def test_a_written_tensor_sharing_memory_with_another_argument_is_refused_on_both_launch_paths(monkeypatch):
    """Y over X's memory: Y[i] = 2 X[i] + 1 then read X where another block had already written it (or not), a
    silently wrong result that depended on the blocks' order; now an error naming both, from the generated launcher
    (which hands the call to the checked path) and from the checked path."""
    monkeypatch.delenv("TILEC_POISON")  # the generated launcher serves only unpoisoned outputs
    k = _affine(4096, 2.0, 1.0)
    x = torch.randn(8192, device="cuda")
    y = torch.full((4096,), float("nan"), device="cuda")
    for _ in range(2):  # the second call builds the generated launcher
        k(x[:4096], y)
    assert k._fast, "the generated launcher should serve torch tensors"
    for yy in (x[:4096], x[1:4097], x[4095:8191]):
        with pytest.raises(ValueError, match="arguments 'Y' and 'X' share memory, and the kernel writes 'Y'"):
            k(x[:4096], yy)
    k(x[:4096], x[4096:])  # adjacent, not overlapping
    assert _rel(x[4096:], x[:4096].double() * 2 + 1) < 1e-6


@pytest.mark.parametrize("fast", [True, False])
def test_programmatic_dependent_launches_see_the_previous_kernels_writes(monkeypatch, fast):
    """On sm_90 tilec kernels launch as programmatic dependents (PDL): each starts launching while the previous
    one runs and must wait for it before reading. A chain of kernels, each reading what the one before it wrote
    into a buffer just poisoned with NaN, comes out exact, launched from the fast path (torch tensors, no poison
    fill) or the checked one, directly and replayed from a CUDA graph."""
    if fast:
        monkeypatch.delenv("TILEC_POISON")
    n = 1 << 24
    k1, k2 = _affine(n, 2.0, 1.0), _affine(n, 0.5, -3.0)
    sm90 = torch.cuda.get_device_capability() >= (9, 0)
    assert ("programmatic dependent (PDL)" in k1.report()) == sm90
    x = torch.randn(n, device="cuda")
    ys = [torch.empty(n, device="cuda") for _ in range(4)]

    def chain():
        for y in ys:
            y.fill_(float("nan"))
        k1(x, ys[0])
        for a, b in zip(ys, ys[1:]):  # each reads the buffer the previous kernel wrote
            (k2 if b is ys[1] else k1)(a, b)

    def expected():  # float32 step by step: each kernel's multiply is exact, its add rounds once
        y = x * 2 + 1
        y = y * 0.5 - 3
        return (y * 2 + 1) * 2 + 1

    for _ in range(3):
        chain()
        assert torch.equal(ys[-1], expected())
    g = torch.cuda.CUDAGraph()
    chain()  # warm up outside the capture
    with torch.cuda.graph(g):
        chain()
    for y in ys:
        y.zero_()
    x.copy_(torch.randn(n, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(ys[-1], expected())


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64"])
def test_shifts_by_counts_out_of_range(dtype):
    """Counts outside [0, bits) shift every bit out, as in the interpreters (numpy): C leaves them undefined, and
    NVIDIA's shift instructions clamp the count where AMD's mask it."""
    import numpy as np
    from conftest import shift_inputs, shift_kernel

    a, s = shift_inputs(np.random.default_rng(), dtype)
    o, p = (torch.full((256,), 7, dtype=getattr(torch, dtype), device="cuda") for _ in range(2))
    tilec.JITKernel(shift_kernel(dtype), "cuda")(torch.from_numpy(a).cuda(), torch.from_numpy(s).cuda(), o, p)
    np.testing.assert_array_equal(o.cpu().numpy(), np.left_shift(a, s))
    np.testing.assert_array_equal(p.cpu().numpy(), np.right_shift(a, s))
