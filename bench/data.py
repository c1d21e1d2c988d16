"""`python -m bench.data mnist --dir DIR`: stage (download and verify) MNIST's IDX files.

The loader itself lives with the task that reads it (`tasks/_data.py`)."""
import sys

from tasks._data import main

if __name__ == "__main__":
    sys.exit(main())
