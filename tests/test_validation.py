"""Bad values are refused before any work: exit 2, the
offending key and its rule in the message, and nothing created, in a single run and in a
sweep's up-front validation alike."""
import subprocess
import sys

import pandas as pd
import pytest
import torch

from tpo_bench.analysis import plot
from tpo_bench.bench.build import ConfigError, build
from conftest import REPO, TINY, bench_here, compose, run_bench

# (overrides, key the message must name, fragment of the rule it must state)
REFUSED = [
    (["algo.eta=0"], "algo.eta", "positive"),
    (["algo.eta=-1"], "algo.eta", "positive"),
    (["algo.eta=nan"], "algo.eta", "finite"),
    (["algo=dg", "algo.eta=0"], "algo.eta", "positive"),
    (["algo=group_pg", "algo.eta=-0.5"], "algo.eta", "positive"),
    (["algo=tpo_token", "algo.eta=inf"], "algo.eta", "finite"),
    (["algo=grpo", "algo.clip_eps=0"], "algo.clip_eps", "positive"),
    (["algo=ppo", "algo.clip_eps=-0.2"], "algo.clip_eps", "positive"),
    (["algo=grpo", "algo.kl_coef=-1"], "algo.kl_coef", ">= 0"),
    (["algo=grpo", "algo.kl_coef=nan"], "algo.kl_coef", "finite"),
    (["algo=grpo_no_kl", "algo.kl_coef=inf"], "algo.kl_coef", "finite"),
    (["optim.lr=nan"], "optim.lr", "finite"),
    (["optim.lr=inf"], "optim.lr", "finite"),
    (["optim.lr=100"], "optim.lr", "at most 10"),
    (["optim.lr=0"], "optim.lr", "positive"),
    (["device=tpu"], "device='tpu'", "valid choices: cpu"),
    (["device=cuda:x"], "device='cuda:x'", "valid choices: cpu"),
    pytest.param(["device=cuda"], "device='cuda'", "valid choices: cpu",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")),
    pytest.param(["device=mps"], "device='mps'", "valid choices: cpu",
                 marks=pytest.mark.skipif(torch.backends.mps.is_available(), reason="MPS is present")),
    (["threads=-1"], "threads", "non-negative integer"),
]


@pytest.mark.parametrize("args,key", [(["threads=1.5"], "threads"), (["threads=abc"], "threads"),
                                      (["seed=abc"], "seed")])
def test_a_wrong_type_is_refused_where_hydra_composes(args, key):
    """RunConfig's types are the node Hydra composes: a value of another type never
    reaches build (the command line's check says the rule first: CLI below)."""
    with pytest.raises(Exception) as e:
        compose(*TINY, *args)
    assert f"full_key: {key}" in str(e.value.__cause__)
    assert "could not be converted to Integer" in str(e.value.__cause__)


# One of each rule through the command line, single run and sweep: the in-process test
# above covers every value, these the exit status and that nothing is created. They run
# `python -m bench`'s entry in this process (bench_here); test_a_refusal_from_a_process
# runs one rule through a real process in each mode.
CLI = [(["algo=dg", "algo.eta=0"], "algo.eta", "positive"),
       (["algo=ppo", "algo.clip_eps=-0.2"], "algo.clip_eps", "positive"),
       (["algo=grpo", "algo.kl_coef=-1"], "algo.kl_coef", ">= 0"),
       (["optim.lr=nan"], "optim.lr", "finite"),
       (["optim.lr=100"], "optim.lr", "at most 10"),
       (["device=tpu"], "device='tpu'", "valid choices: cpu"),
       (["threads=1.5"], "threads", "non-negative integer")]
SWEEP = ["-m", "seed=0,1"]


@pytest.mark.parametrize("args,key,rule", REFUSED)
def test_build_refuses(args, key, rule):
    cfg = compose(*TINY, *args)
    with pytest.raises(ConfigError) as e:
        build(cfg)
    assert key in str(e.value) and rule in str(e.value)


def _refused(proc, key, rule, tmp_path):
    text = proc.stderr + proc.stdout
    assert proc.returncode == 2, text
    assert key in proc.stderr and rule in proc.stderr, text
    assert "Traceback" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no output root, no sweep dir


@pytest.mark.parametrize("args,key,rule", CLI)
def test_single_run_refuses(args, key, rule, tmp_path):
    proc = bench_here(*TINY, *args, f"output_root={tmp_path / 'out'}")
    _refused(proc, key, rule, tmp_path)


@pytest.mark.parametrize("args,key,rule", CLI)
def test_sweep_refuses_before_launching(args, key, rule, tmp_path):
    proc = bench_here(*SWEEP, *TINY, *args, f"output_root={tmp_path / 'out'}")
    _refused(proc, key, rule, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", [False, True])
def test_a_refusal_from_a_process(sweep, tmp_path):
    """The refusal as a shell sees it: the exit status of a real `python -m bench`."""
    args, key, rule = CLI[0]
    proc = run_bench(*(SWEEP if sweep else []), *TINY, *args, f"output_root={tmp_path / 'out'}",
                     check=False)
    _refused(proc, key, rule, tmp_path)


@pytest.mark.parametrize("sweep", [False, True])
def test_bad_seed_is_refused(sweep, tmp_path):
    seed = ["-m", "seed=0,abc"] if sweep else ["seed=abc"]
    proc = bench_here(*seed, *TINY, f"output_root={tmp_path / 'out'}")
    _refused(proc, "seed", "non-negative integer", tmp_path)


@pytest.mark.slow
def test_edge_values_still_run(tmp_path):
    """The bounds are the rules, not a step beside them: kl_coef = 0 (grpo_no_kl), lr at the
    bound and threads = 0 (the default) are valid; so is a name with dots and dashes."""
    run_bench(*TINY, "algo=grpo", "algo.kl_coef=0", "optim.lr=10", "threads=0", "task.episodes=1",
              "task.name=demo-v1.2_x", f"output_root={tmp_path}")
    assert (tmp_path / "demo-v1.2_x" / "grpo").is_dir()


# ------------------------------------------------------------ item 5: path components

NOT_PLAIN = [
    (["task.name=../../escaped"], "task.name"),
    (["task.name=a/b"], "task.name"),
    (["task.name=ABS"], "task.name"),  # ABS: an absolute path under the test's tmp_path
    (["task.name=''"], "task.name"),
    (["task.name=."], "task.name"),
    (["task.name=.."], "task.name"),
    (["task.name=.hydra"], "task.name"),
    (["task.name='seed=0'"], "task.name"),
    (["algo=tpo_token", "algo.name=../../escaped"], "algo.name"),  # impl: tpo keeps it valid
    (["algo.impl=tpo", "algo.name=ABS"], "algo.name"),
    (["algo.impl=tpo", "algo.name=."], "algo.name"),
]


@pytest.mark.parametrize("args,key", NOT_PLAIN)
def test_build_refuses_path_components(args, key, tmp_path):
    args = [a.replace("ABS", str(tmp_path / "escaped")) for a in args]
    with pytest.raises(ConfigError, match=f"{key}=.* must be a plain name"):
        build(compose(*TINY, *args))


@pytest.mark.parametrize("args,key", [NOT_PLAIN[0], NOT_PLAIN[2], NOT_PLAIN[8]])
@pytest.mark.parametrize("sweep", [False, True])
def test_path_components_must_be_plain_names(args, key, sweep, tmp_path):
    root = tmp_path / "deep" / "er"
    root.mkdir(parents=True)
    args = [a.replace("ABS", str(tmp_path / "escaped")) for a in args]
    proc = bench_here(*(SWEEP if sweep else []), *TINY, *args, f"output_root={root / 'out'}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert key in proc.stderr and "plain name" in proc.stderr, proc.stderr
    written = [p for p in tmp_path.rglob("*") if p != root and p not in root.parents]
    assert written == [], written  # not even ../../escaped or the absolute path, both in tmp_path


def test_plain_names_with_dots_and_dashes_still_run(tmp_path):
    """Accepted where the plain-name rule is checked (test_edge_values_still_run trains one)."""
    spec = build(compose(*TINY, "task.name=demo-v1.2_x", f"output_root={tmp_path}"))
    assert spec.run_dir.parent.parent == tmp_path / "demo-v1.2_x" / "tpo"


# ------------------------------------------------------------ item 10: sweep validation

def test_seeds_per_job_overlap_is_found_in_any_order(tmp_path):
    """Overlapping packed seeds are refused wherever they sit in the sweep, naming the pair;
    seeds stepped by seeds_per_job are not."""
    proc = bench_here("-m", *TINY, "seed=9,0,20,3,11", "seeds_per_job=3", "dry_run=true",
                      f"output_root={tmp_path / 'out'}")
    assert proc.returncode == 2 and "would train the same seed twice" in proc.stderr, proc.stderr
    assert "seeds 9 and 11" in proc.stderr
    proc = bench_here("-m", *TINY, "seed=9,0,20,3,12", "seeds_per_job=3", "dry_run=true",
                      f"output_root={tmp_path / 'out'}")
    assert proc.returncode == 0, proc.stderr
    assert "[dry run] 5 valid jobs (15 runs)" in proc.stdout
    assert not (tmp_path / "out").exists()


def _validation_work(jobs: int, out) -> tuple[int, int]:
    """(lines of the harness's own code executed, Hydra config compositions) while a dry
    run validates a sweep of `jobs` jobs of one config, two seeds a job: work counted, not
    timed (timing: `python -m dev.sweep_speed`)."""
    ours = tuple({str(REPO), str(REPO.resolve())})
    lines = composed = 0

    def line(frame, event, arg):
        nonlocal lines
        lines += event == "line"
        return line

    def call(frame, event, arg):
        nonlocal composed
        composed += frame.f_code.co_name == "load_sweep_config"
        name = frame.f_code.co_filename
        return line if name.startswith(ours) and "/tests/" not in name else None

    before = sys.gettrace()
    sys.settrace(call)
    try:
        proc = bench_here("-m", *TINY, f"seed=range(0,{2 * jobs},2)", "seeds_per_job=2",
                          "dry_run=true", f"output_root={out}")
    finally:
        sys.settrace(before)
    assert proc.returncode == 0, proc.stderr
    assert f"[dry run] {jobs} valid jobs ({2 * jobs} runs)" in proc.stdout
    return lines, composed


@pytest.mark.slow  # traces a dry run, three times
def test_sweep_validation_is_linear_in_jobs(tmp_path):
    """Every job costs the same work, however many came before it (a scan of the earlier
    jobs per job made 40,000 seeds take minutes), and one config is composed once, however
    many seeds it sweeps."""
    _validation_work(5, tmp_path / "warm")  # imports and first-use caches, outside the counts
    (a, ca), (b, cb), (c, cc) = (_validation_work(n, tmp_path / str(n)) for n in (50, 100, 200))
    assert (ca, cb, cc) == (1, 1, 1)
    first, second = b - a, c - b  # 50 jobs' work, then 100 jobs' work
    assert first > 0 and abs(second - 2 * first) <= 0.01 * second, (a, b, c)


# ------------------------------------------------------------ item 10: n = 1 in plot.py

def test_single_seed_shows_n1_and_no_plus_minus():
    one = pd.DataFrame({"step": [0, 1, 2], "error": [0.5, 0.25, 0.125], "config_hash": "A",
                        "seed": 3, "task.name": "t", "algo.name": "tpo"})
    two = pd.concat([one.assign(config_hash="B"), one.assign(config_hash="B", seed=4, error=[0.5, 0.3, 0.1])])
    text = plot.format_summary(plot.summarise(pd.concat([one, two], ignore_index=True)))
    [line_one] = [ln for ln in text.splitlines() if ln.startswith("tpo") and "n=1" in ln]
    assert "12.50 %" in line_one and "±" not in line_one
    [line_two] = [ln for ln in text.splitlines() if ln.startswith("tpo") and "n=2" in ln]
    assert "11.25 ± 0.88 %" in line_two
