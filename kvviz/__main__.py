# SPDX-License-Identifier: Apache-2.0
"""`python -m kvviz`."""

from kvviz.cli import main

main()
