"""Entry point for `python pretrain.py ...` and `accelerate launch pretrain.py ...` (same flags as `electra pretrain`)."""

import sys

from electra.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["pretrain", *sys.argv[1:]]))
