# SPDX-License-Identifier: Apache-2.0
"""Fuzzers: hypothesis-driven mutation tests that keep the reliability promises."""
