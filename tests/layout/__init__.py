"""Tests of tilec.layout."""
