# SPDX-License-Identifier: Apache-2.0
"""The kernel every feature stands on."""
