# SPDX-License-Identifier: Apache-2.0
"""The stepping app."""
