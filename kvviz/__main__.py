"""`python -m kvviz`."""

from .cli import main

main()
