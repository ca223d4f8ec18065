"""`python -m helpers.preference train | evaluate` (see --help of each)."""

from helpers.preference.cli import main

if __name__ == "__main__":
    main()
