"""`python -m electra ...` is the `electra` command (`accelerate launch -m electra ...` runs it under a launcher)."""

import sys

from electra.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
