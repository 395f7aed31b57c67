"""Tests of the thread interpreter."""
