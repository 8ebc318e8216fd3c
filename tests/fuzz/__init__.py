"""Fuzzers: hypothesis-driven mutation tests that keep the reliability promises."""
