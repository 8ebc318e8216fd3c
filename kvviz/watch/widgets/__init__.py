# SPDX-License-Identifier: Apache-2.0
"""The watch app's widgets."""
