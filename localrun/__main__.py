"""`python -m localrun` is the same as the `localrun` console script."""

from localrun.cli import main

main()
