"""The CUDA backend: the C table, tilec's device header, NVRTC compilation and launch through CuPy."""
