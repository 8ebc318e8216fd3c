# SPDX-License-Identifier: Apache-2.0
"""kvcore tests: unit, behaviour and property tests of the caches."""
