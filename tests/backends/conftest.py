"""Collects what ptxas reports for each kernel compiled by the nvcc tests and prints it after the run."""

from __future__ import annotations

PTXAS: list[str] = []


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if PTXAS:
        terminalreporter.section("ptxas: registers and spills (nvcc, sm_80 unless marked)")
        for line in PTXAS:
            terminalreporter.write_line(line)
