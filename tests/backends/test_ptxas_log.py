"""What tilec reads from ptxas's log (no GPU, no nvcc): spill bytes and the performance warnings that
``kernel.report()`` shows once a CUDA kernel is compiled."""

from tilec.backends.cuda.runtime import _spills, ptxas_hint, ptxas_warnings

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'main_kernel' for 'sm_90a'
ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma \
instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage in the function \
'main_kernel'
ptxas info    : (C7519) warpgroup.arrive is injected in around line 1902 by compiler to allow use of registers in GMMA \
in function 'main_kernel'
ptxas info    : Function properties for main_kernel
    0 bytes stack frame, 24 bytes spill stores, 24 bytes spill loads
ptxas info    : Used 168 registers, used 2 barriers
"""


def test_performance_warnings_are_kept():
    warnings = ptxas_warnings(LOG)
    assert len(warnings) == 2
    assert warnings[0].startswith("(C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized")
    assert warnings[1].startswith("(C7519) warpgroup.arrive is injected")
    assert ptxas_warnings(LOG.replace("Potential", "P").replace("is injected", "x")) == ()


def test_spill_bytes():
    assert _spills(LOG) == 24


def test_insufficient_registers_gets_a_hint():
    log = ("ptxas fatal   : (C7602) Insufficient registers (128) to compile instruction at line 373 in function "
           "main_kernel. Try to compile with register target of 154 or higher.\n")
    hint = ptxas_hint(log)
    assert "needs 154 registers" in hint and "the 128 the block's launch size allows" in hint
    assert "block_N" in hint
    assert ptxas_hint(LOG) == ""
