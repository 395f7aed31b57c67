"""The HIP backend (AMD CDNA: gfx90a, gfx942): the C table, tilec's device header with the MFMA wrappers, and
hiprtc compilation and launch through hip-python (imported only when a HIP kernel is compiled or run)."""
