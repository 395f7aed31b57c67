"""Tests of lowering, layout inference and barrier placement."""
