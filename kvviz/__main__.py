# SPDX-License-Identifier: Apache-2.0
"""`python -m kvviz`."""

from .cli import main

main()
