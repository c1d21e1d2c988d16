"""`python -m bench` where tpo-bench is installed: tpo_bench.bench's __main__."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tpo_bench.bench", run_name="__main__", alter_sys=True)
