"""One exit-code convention, whether Hydra or the harness catches the
problem: 2 bad input (nothing created), 1 a run failed, 0 done."""
import pytest

from conftest import TINY, bench_here, run_bench

# (override, what the refusal names): the name check's, Hydra's, then the harness's.
BAD = [
    ("algo=nope", "algo=nope: no such algorithm"),
    ("+experiment=nope", "experiment=nope: no such experiment"),
    ("hydra/launcher=nope", "hydra/launcher/nope"),
    ("task.foo=1", "task.foo"),
    ("algo=[a", "no viable alternative"),
    ("algo.k=x", "algo.k"),
    ("algo.eta=-1", "algo.eta"),
    ("seed=abc", "seed"),
]


CASES = [(mode, *bad) for bad in BAD for mode in ("single", "multirun")
         if mode == "single" or bad in BAD[:5]]  # the harness's sweep refusals: test_validation


def _exits_2_naming(proc, named, out) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr
    assert not out.exists()


# `python -m bench`'s entry in this process (bench_here): every case, every catcher.
@pytest.mark.parametrize("mode,override,named", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_bad_input_exits_2_naming_it(out, mode, override, named):
    sweep = ["-m", "seed=0,1"] if mode == "multirun" else []
    _exits_2_naming(bench_here(*sweep, *TINY, override, f"output_root={out}"), named, out)


# The status a shell sees from a real process, where the name check refuses (before Hydra)
# and where Hydra's own handler does (its exit 1 turned into 2); the harness's refusal from
# a process: test_validation.py::test_a_refusal_from_a_process.
@pytest.mark.slow
@pytest.mark.parametrize("override,named", [BAD[0], BAD[2]], ids=[BAD[0][0], BAD[2][0]])
def test_bad_input_exits_2_from_a_process(out, override, named):
    _exits_2_naming(run_bench(*TINY, override, f"output_root={out}", check=False), named, out)


def test_bad_input_exits_2_with_hydra_full_error_too(out):
    proc = bench_here(*TINY, "optim=nope", f"output_root={out}", env={"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode == 2 and "Traceback" in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.slow  # trains
def test_a_failed_run_exits_1(out):
    proc = run_bench(*TINY, "debug.nan_at=1", f"output_root={out}", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "non-finite loss" in proc.stderr
