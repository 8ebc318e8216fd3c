# SPDX-License-Identifier: Apache-2.0
"""Two caches side by side."""
