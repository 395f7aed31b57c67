"""tilec.autotune on the CPU: an injected timer, the output check, the disk cache, explicit arguments, tilec.jit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import assert_close, load_example, randn

import tilec
import tilec.language as T
from tilec.errors import TilecRuntimeError, TilecTypeError, TilecValueError


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEC_DISABLE_CACHE", raising=False)
    return tmp_path / "cache"


def _axpy():
    """A fresh @tilec.jit function each time (so no memoized kernels or results carry over)."""

    @tilec.jit(out_idx=[-1], target="cpu")
    def axpy(N, block_N=64, bias=0.0):
        if block_N == 48:
            raise ValueError("block_N must be a power of two")

        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block_N), threads=32) as bx:
                for i in T.Parallel(block_N):
                    B[bx * block_N + i] = A[bx * block_N + i] * 2.0 + bias

        return main

    return axpy


class FakeTimer:
    """Milliseconds by block_N; records what it timed."""

    def __init__(self, ms: dict[int, float]) -> None:
        self.ms, self.calls = ms, []

    def __call__(self, run, config):
        run()
        self.calls.append(dict(config))
        return self.ms[config["block_N"]]


CONFIGS = [{"block_N": 32}, {"block_N": 64}, {"block_N": 16, "bias": 1.0}, {"block_N": 48}, {"block_N": 128}]


def _tuned(timer, **kw):
    return tilec.autotune(configs=CONFIGS, timer=timer, progress=False, **kw)(_axpy())


def test_autotune_picks_the_fastest_matching_candidate():
    timer = FakeTimer({32: 3.0, 64: 2.0, 16: 1.0, 128: 2.5})
    tuned = _tuned(timer)
    kernel = tuned(256)
    result = tuned.last
    assert result.best == {"block_N": 64}  # block_N=16 is fastest but adds a bias: its output differs
    status = {json.dumps(t.config, sort_keys=True): (t.status, t.note) for t in result.trials}
    assert status['{"bias": 1.0, "block_N": 16}'][0] == "mismatch"
    assert "relative error" in status['{"bias": 1.0, "block_N": 16}'][1]
    assert status['{"block_N": 48}'] == ("build error", "ValueError: block_N must be a power of two")
    assert [c["block_N"] for c in timer.calls] == [32, 64, 128]  # excluded candidates are not timed
    a = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(kernel(a), a * 2)
    assert "best {'block_N': 64}" in str(result) and "mismatch" in str(result)


def test_the_kernel_is_the_jit_functions_kernel_and_a_second_call_does_not_retune():
    timer = FakeTimer({32: 3.0, 64: 2.0, 16: 1.0, 128: 2.5})
    tuned = _tuned(timer)
    kernel = tuned(256)
    n = len(timer.calls)
    assert tuned(256) is kernel and len(timer.calls) == n
    assert tuned.jit_fn(256, block_N=64) is kernel  # the same memoized JITKernel
    assert tuned.get_kernel(256) is kernel
    tuned(512)  # another key: tuned again
    assert len(timer.calls) == 2 * n and len(tuned.results) == 2


def test_explicit_config_arguments_skip_tuning():
    def never(run, config):
        raise AssertionError("tuned although the call gave a config argument")

    tuned = _tuned(never)
    assert "T.Kernel(8, threads=32)" in str(tuned(256, block_N=32).prim_func)
    assert "T.Kernel(16, threads=32)" in str(tuned(256, 16).prim_func)  # by position
    assert tuned.results == {}


def test_the_best_config_is_cached_on_disk(_cache_dir):
    timer = FakeTimer({32: 1.0, 64: 2.0, 16: 3.0, 128: 2.5})
    _tuned(timer)(256)
    files = list((_cache_dir / "autotune").glob("*.json"))
    assert len(files) == 1
    saved = json.loads(files[0].read_text())
    assert saved["best"] == {"block_N": 32} and len(saved["trials"]) == len(CONFIGS)

    def never(run, config):
        raise AssertionError("tuned although the disk cache has the answer")

    again = _tuned(never)  # as a new process would: nothing in memory
    assert "T.Kernel(8, threads=32)" in str(again(256).prim_func)
    assert again.last.from_cache and "from the cache" in str(again.last)
    _tuned(FakeTimer({32: 1.0, 64: 2.0, 16: 3.0, 128: 2.5}), cache=False)(256)
    assert len(list((_cache_dir / "autotune").glob("*.json"))) == 1


def test_the_disk_cache_is_off_when_disabled(_cache_dir, monkeypatch):
    monkeypatch.setenv("TILEC_DISABLE_CACHE", "1")
    _tuned(FakeTimer({32: 1.0, 64: 2.0, 16: 3.0, 128: 2.5}))(256)
    assert not (_cache_dir / "autotune").exists()


def test_without_a_gpu_the_default_timer_says_tuning_needs_one():
    tuned = tilec.autotune(configs=CONFIGS, progress=False)(_axpy())
    with pytest.raises(TilecRuntimeError, match="tuning needs a GPU"):
        tuned(256)


def test_configs_from_a_function_and_from_a_recommendation():
    timer = FakeTimer({16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0, 256: 5.0})
    tuned = tilec.autotune(configs=lambda N: [{"block_N": N // 8}, {"block_N": N // 4}], timer=timer,
                           progress=False)(_axpy())
    tuned(256)
    assert tuned.last.best == {"block_N": 32}
    rec = tilec.recommend(_axpy(), 256, space={"block_N": [16, 32, 64]}, top_k=2)
    tuned = tilec.autotune(configs=rec, timer=timer, progress=False)(_axpy())
    tuned(256)
    assert [t.config for t in tuned.last.trials] == list(rec) and len(rec) == 2


def test_autotune_a_gemm_on_the_thread_interpreter(rng):
    matmul = tilec.jit(out_idx=[-1], target="simt:sm_80")(load_example("01_gemm").matmul.fn)
    configs = [dict(block_M=16, block_N=n, block_K=32, num_stages=2, threads=128) for n in (64, 32)]
    timer = FakeTimer({64: 2.0, 32: 1.0})
    kernel = tilec.autotune(configs=configs, timer=timer, progress=False)(matmul)(32, 48, 64)
    assert [c["block_N"] for c in timer.calls] == [64, 32] and kernel.prim_func.launch.threads == (128,)
    assert "T.Kernel(2, 2, threads=128)" in str(kernel.prim_func)  # block_N=32 over N=48
    a = rng.standard_normal((32, 64)).astype(np.float16)
    b = rng.standard_normal((64, 48)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(kernel(a, b) - ref).max() / np.abs(ref).max() < 2e-3


def test_autotune_an_eager_kernel(rng):
    @tilec.jit(target="cpu")
    def add(A, B, block_M: int = 16):
        M, N = T.const("M N")
        A: T.Tensor[[M, N], T.float32]
        B: T.Tensor[[M, N], T.float32]
        C = T.empty((M, N), "float32")
        with T.Kernel(T.ceildiv(M, block_M), threads=32) as bx:
            for i, j in T.Parallel(block_M, N):
                C[bx * block_M + i, j] = A[bx * block_M + i, j] + B[bx * block_M + i, j]
        return C

    timer = lambda run, config: {8: 2.0, 16: 1.0}[config["block_M"]]  # noqa: E731
    tuned = tilec.autotune(configs=[{"block_M": 8}, {"block_M": 16}], timer=timer, progress=False)(add)
    a, b = (rng.standard_normal((40, 8)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(tuned(a, b), a + b)
    assert tuned.last.best == {"block_M": 16}
    assert tuned.key((a[:20], b[:20]), {})[0] != tuned.key((a, b), {})[0]  # the shapes are part of the key


@pytest.mark.parametrize("content", [b"\xff\xfe\x00not utf-8", b"null", b"[1]", b"{trunc", b'{"best": 5}',
                                     *(b'{"function": "axpy", "key": "k", "best": %s}' % best for best in
                                       (b"5", b'{"blockN": 32}', b'{"block_N": 0}', b'{"block_N": [32]}', b"{}"))])
def test_a_damaged_tuning_result_on_disk_is_tuned_again(_cache_dir, content):
    """A file in $TILEC_CACHE_DIR/autotune that is not a tuning result is a miss (non-UTF-8 bytes raised
    UnicodeDecodeError; JSON that is not an object, AttributeError), and so is one whose best config is none of the
    candidates (a best that is no dict raised TypeError inside tilec; one naming no parameter, TypeError from the
    factory; block_N=0, the kernel's ZeroDivisionError; {} ran the defaults)."""
    _tuned(FakeTimer({32: 1.0, 64: 2.0, 16: 3.0, 128: 2.5}))(256)
    (path,) = (_cache_dir / "autotune").glob("*.json")
    path.write_bytes(content)
    again = _tuned(FakeTimer({32: 2.0, 64: 1.0, 16: 3.0, 128: 2.5}))
    again(256)
    assert again.last.best == {"block_N": 64} and not again.last.from_cache


def test_key_names_must_be_parameters():
    """key=[...] names parameters; a name that is none (a typo) read as None for every call, so that different
    problem sizes shared one tuning result."""
    with pytest.raises(TilecValueError, match=r"key names 'n', not parameters of axpy \(N, block_N, bias\)"):
        tilec.autotune(configs=CONFIGS, key=["n"])(_axpy())
    with pytest.raises(TilecValueError, match="a list of parameter names, got 'N'"):
        tilec.autotune(configs=CONFIGS, key="N")(_axpy())
    timer = FakeTimer({32: 1.0, 64: 2.0, 16: 3.0, 128: 2.5})
    tuned = _tuned(timer, key=["N"])
    tuned(256)
    tuned(512)
    assert len(tuned.results) == 2 and len(timer.calls) == 2 * 3  # block_N=48 fails, bias=1.0 mismatches


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_a_timing_that_is_not_a_finite_time_excludes_the_candidate(bad):
    """NaN won (min() compares nothing with it) and was cached as the best; a negative time won too."""
    ms = {32: bad, 64: 2.0, 16: 3.0, 128: 1.5}
    tuned = _tuned(lambda run, config: np.float32(ms[config["block_N"]]))
    tuned(256)
    assert tuned.last.best == {"block_N": 128}
    trial = next(t for t in tuned.last.trials if t.config == {"block_N": 32})
    assert trial.status == "run error" and "not a finite time >= 0" in trial.note and trial.ms is None


def test_the_output_check_sees_differences_beside_infinities():
    """inf - inf is NaN, and the NaN maximum passed every candidate whose output had an infinity where the
    reference's has one (even -inf for +inf)."""
    from tilec.tune.bench import mismatch

    ref = np.array([np.inf, 1.0, 2.0], np.float16)
    assert mismatch(ref, np.array([np.inf, 100.0, -7.0], np.float16), "float16") == "relative error 49.5 > 0.01"
    assert "infinities differ" in mismatch(ref, np.array([-np.inf, 1.0, 2.0], np.float16), "float16")
    assert "infinities differ" in mismatch(ref, np.array([1.0, 1.0, 2.0], np.float16), "float16")
    assert "infinities differ" in mismatch(np.array([1.0, 2.0]), np.array([np.inf, 2.0]), "float32")
    assert mismatch(ref, ref.copy(), "float16") is None


def test_configs_naming_no_parameter_are_refused():
    """A config naming a parameter the function does not have (a typo) failed to build, and tuning went on over
    the others with only a stderr line about it."""
    tuned = tilec.autotune(configs=[{"block_N": 32}, {"blockN": 128}], timer=lambda run, config: 1.0,
                           progress=False)(_axpy())
    with pytest.raises(TilecValueError, match=r"config \{'blockN': 128\} names 'blockN', not parameters of axpy "
                                              r"\(N, block_N, bias\)"):
        tuned(256)
    assert tuned.results == {}


@pytest.mark.parametrize("configs", [CONFIGS, None])
def test_a_call_naming_no_parameter_is_refused_before_tuning(configs):
    """tuned(256, foo=3) tuned anyway: every candidate's build failed with the factory's TypeError, and the call
    ended in 'no candidate built, ran and matched'. The call is now refused up front, naming the keyword and the
    parameters, with nothing timed (explicit config arguments and get_kernel alike)."""
    timer = FakeTimer({32: 3.0, 64: 1.0, 16: 2.0, 128: 5.0})
    kw = {"configs": configs} if configs is not None else {"key": ["N"]}
    tuned = tilec.autotune(timer=timer, progress=False, **kw)(_axpy())
    params = r"axpy takes \(N, block_N, bias\)"
    with pytest.raises(TilecTypeError, match=rf"autotune axpy: no parameter 'foo'; {params}"):
        tuned(256, foo=3)
    with pytest.raises(TilecTypeError, match=rf"autotune axpy: no parameter 'foo', 'bar'; {params}"):
        tuned.get_kernel(256, foo=3, bar=1)
    with pytest.raises(TilecTypeError, match=rf"autotune axpy: no parameter 'foo'; {params}"):
        tuned(256, block_N=64, foo=3)  # explicit config: no tuning, but the same error
    with pytest.raises(TilecTypeError, match=rf"autotune axpy: .*too many positional arguments.*; {params}"):
        tuned(256, 64, 0.0, 7)
    with pytest.raises(TilecTypeError, match=rf"autotune axpy: .*multiple values for argument 'N'.*; {params}"):
        tuned(256, N=256)
    assert timer.calls == [] and tuned.results == {}
    if configs is not None:
        rng = np.random.default_rng()
        a = randn(rng, 256, "float32")
        np.testing.assert_allclose(tuned(256)(a), a.astype(np.float64) * 2.0, rtol=1e-6)  # a good call still tunes
        assert tuned.last.best == {"block_N": 64}


@tilec.jit(out_idx=[-1], target="cpu")
def _gemm(M, N, K, tile=(32, 32), policy=T.GemmWarpPolicy.Square):
    block_M, block_N = tile

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, K), "float16")
            B_s = T.alloc_shared((K, block_N), "float16")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            T.copy(A[by * block_M, 0], A_s)
            T.copy(B[0, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_f, policy=policy)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@pytest.mark.parametrize("as_function", [False, True])
def test_a_best_config_from_the_disk_cache_has_the_values_tuned(rng, as_function):
    """The disk cache held the best config as JSON written with default=str: in the next process a
    T.GemmWarpPolicy came back as the string 'GemmWarpPolicy.FullRow' (T.gemm refused it) and a tuple as a list.
    The cached config is now matched to the candidate it names, which the call gets."""
    configs = [{"tile": (32, 64), "policy": T.GemmWarpPolicy.FullCol},
               {"tile": (64, 32), "policy": T.GemmWarpPolicy.FullRow}]
    space = (lambda M, N, K: configs) if as_function else configs
    timer = lambda run, config: 1.0 if config["policy"] is T.GemmWarpPolicy.FullRow else 2.0  # noqa: E731
    tilec.autotune(configs=space, timer=timer, progress=False)(_gemm)(64, 96, 32)

    def never(run, config):
        raise AssertionError("tuned although the disk cache has the answer")

    again = tilec.autotune(configs=space, timer=never, progress=False)(_gemm)
    kernel = again(64, 96, 32)  # as a new process would: nothing in memory
    assert again.last.from_cache
    assert again.last.best["policy"] is T.GemmWarpPolicy.FullRow and again.last.best["tile"] == (64, 32)
    assert kernel is _gemm(64, 96, 32, tile=(64, 32), policy=T.GemmWarpPolicy.FullRow)
    a, b = randn(rng, (64, 32), "float16"), randn(rng, (32, 96), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float32")


@pytest.mark.parametrize("kw, message", [
    ({"configs": [5]}, r"configs must be dicts of parameter values, got 5"),
    ({"configs": [{"block_N": 32}, None]}, r"configs must be dicts of parameter values, got None"),
    ({"configs": 5}, r"configs is a list of dicts, a Recommendation or a function of the call's arguments, got 5"),
    ({"rtol": "x"}, r"rtol is the relative tolerance of the output check, a number >= 0 \(or None\), got 'x'"),
    ({"rtol": -1e-3}, r"rtol is the relative tolerance .* got -0.001"),
    ({"workers": "4"}, r"workers is the number of compiling threads, an int >= 1 \(or None\), got '4'"),
    ({"workers": 0}, r"workers is the number of compiling threads, an int >= 1 \(or None\), got 0"),
    ({"top_k": 0}, r"top_k is the number of the cost model's configs to time, an int >= 1, got 0"),
    ({"timer": 5.0}, r"timer is a function \(run, config\) -> milliseconds, got 5.0"),
    ({"supply": [1]}, r"supply is a function \(prim_func\) -> list of input arrays, got \[1\]"),
    ({"warmup": "25"}, r"warmup is milliseconds, a number >= 0, got '25'"),
])
def test_bad_autotune_arguments_are_refused_naming_them(kw, message):
    """configs=[5] raised TypeError ('int' object is not iterable) from inside tilec at the first call, rtol='x' a
    TypeError from the output check, workers='4' one from the thread pool; each is now refused at the decorator,
    naming the argument and the value."""
    kw = {"configs": CONFIGS, "timer": FakeTimer({}), **kw}
    with pytest.raises(TilecValueError, match=message):
        tilec.autotune(progress=False, **kw)(_axpy())


@pytest.mark.parametrize("kw, message", [
    ({"progress": "no"}, r"autotune axpy: progress is True or False \(show a progress bar\), got 'no'"),
    ({"cache": "off"}, r"autotune axpy: cache is True or False \(read and write the disk cache\), got 'off'"),
    ({"cache": None}, r"autotune axpy: cache is True or False .*, got None"),
])
def test_autotune_flags_taken_by_their_truth_are_refused(kw, message):
    """progress="no" showed the progress bar and cache="off" read and wrote the disk cache (a string is true), and
    cache=None turned it off: each flag must now be True or False (or 0/1), refused at the decorator naming it."""
    with pytest.raises(TilecValueError, match=message):
        tilec.autotune(**{"configs": CONFIGS, "timer": FakeTimer({}), "progress": False, **kw})(_axpy())


def test_a_configs_function_returning_no_list_is_named():
    """A configs function returning None raised TypeError ('NoneType' object is not iterable) inside tilec."""
    tuned = tilec.autotune(configs=lambda N: None, timer=FakeTimer({}), progress=False)(_axpy())
    with pytest.raises(TilecValueError, match=r"autotune axpy: configs\(256\) returned None, not a list of dicts"):
        tuned(256)
