# SPDX-License-Identifier: Apache-2.0
"""The watch app's widgets: the forest of blocks, the media bars, the header, the
narration and the timeline bar."""
