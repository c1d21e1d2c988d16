"""`python -m tools.data {mnist,gsm8k} --dir DIR`: stage (download and verify) a data set.

The loaders live with the tasks that read them: MNIST's IDX files in `tasks/_data.py`,
GSM8K's JSON lines in `tasks/_problems.py`; each takes the rest of the command line."""
import argparse
import importlib
import sys

STAGERS = {"mnist": "tpo_bench.tasks._data", "gsm8k": "tpo_bench.tasks._problems"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in STAGERS:
        # imported on demand: a stager loads only its own loader
        return importlib.import_module(STAGERS[argv[0]]).main(argv)
    p = argparse.ArgumentParser(prog="python -m tools.data",
                                description="Download (if missing) and check a data set.")
    p.add_argument("dataset", choices=list(STAGERS))
    p.add_argument("options", nargs=argparse.REMAINDER,
                   help="the data set's own options (python -m tools.data DATASET --help)")
    p.parse_args(argv)  # no known data set named: exits with the usage
    return 2


if __name__ == "__main__":
    sys.exit(main())
