# SPDX-License-Identifier: Apache-2.0
"""`kvviz serve`: the UI in a browser, tested in headless Chromium and against forged requests."""
