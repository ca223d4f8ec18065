"""`python -m helpers.efficiency compare | budget` (see --help of each)."""

from helpers.efficiency.cli import main

if __name__ == "__main__":
    main()
