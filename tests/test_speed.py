"""The speed benchmark runs and reports what it claims (its numbers live in docs/performance.md)."""
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from tpo_bench.contract.rng import Streams
from tpo_bench.bench.optim import build_optimizer
from tpo_bench.bench.build import build
from tpo_bench.bench.engine import train_episode
from dev.speed import transformer_flops_per_token
from conftest import PRESET_JOBS, REPO, TINY, WORDS, bench_here, compose, one_line
from tpo_bench.tasks.stacked import Stacked


def test_flop_count_by_hand():
    # 2 layers x (4 d^2 + 8 d^2) multiply-adds + d V for the head, 2 FLOPs each, plus
    # attention 2 layers x 4 ctx d
    assert transformer_flops_per_token(V=2, d=64, ctx=10) == 2 * (2 * 12 * 64 * 64 + 128) + 2 * 4 * 10 * 64


@pytest.mark.slow
def test_speed_benchmark_table(tmp_path):
    out = tmp_path / "speed.csv"
    proc = subprocess.run([sys.executable, "-m", "dev.speed", "--episodes", "1", "--warmup", "0",
                           "--threads", "1", "--cases", "dg:reversal_v2", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(out)
    assert list(df["algo"]) == ["tpo (eager yardstick)", "dg"]
    for col in ("episodes_per_s", "ms_generation", "ms_old_logprobs", "ms_training",
                "ms_bookkeeping", "gflops_per_s", "frac_of_matmul", "cpu", "cores", "gpu"):
        assert col in df.columns
    assert (df["episodes_per_s"] > 0).all() and (df["frac_of_matmul"] > 0).all()
    eager = df.iloc[0]
    assert eager["ms_old_logprobs"] > 0  # the yardstick re-forwards for p_old ...
    # ... the harness's 0 there is written, not timed: test_harness_has_no_old_logprob_forward
    assert "machine:" in proc.stdout


def test_harness_has_no_old_logprob_forward(monkeypatch):
    """What the table's ms_old_logprobs = 0 claims for the harness: p_old is the log-probs
    sampled during generation. An episode of TPO runs the model H times to generate (the
    prompt, then one cached step per further token) and once per epoch to train; a
    separate forward for p_old would be one more."""
    calls = {"forward": 0, "forward_shared_prefix": 0}
    for name in calls:
        original = getattr(Stacked, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Stacked, name, counted)
    spec = build(compose(*TINY, "algo=tpo"))
    H, epochs = spec.task.sequence_length, spec.algo.epochs
    assert (H, epochs) == (3, 4)
    streams = Streams.from_seed(0)
    policy = spec.task.make_policy(streams.init)
    opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
    train_episode(spec.task, spec.algo, spec.request, policy, opt, streams)
    assert calls == {"forward": H, "forward_shared_prefix": epochs}


@pytest.mark.slow
def test_seed_batched_mode_and_study_estimate(tmp_path):
    """`--seeds` on the CPU at tiny sizes, the path a GPU run takes with --device cuda."""
    out = tmp_path / "seeds.csv"
    proc = subprocess.run([sys.executable, "-m", "dev.speed", "--seeds", "1", "2", "--episodes", "1",
                           "--warmup", "0", "--batch-size", "2", "--threads", "1", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(out)
    table = df[df["case"] != "estimate corner"]
    assert sorted(zip(table["case"], table["algo"], table["seeds"])) == sorted(
        (case, algo, S) for case in ("reverse_h10", "zero_variance_masking")
        for algo in ("tpo", "grpo") for S in (1, 2))
    assert (df["batch_size"] == 2).all() and (df["device"] == "cpu").all()
    centre = table[table["case"] == "zero_variance_masking"]
    assert set(centre["k"]) == {32} and set(centre["epochs"]) == {4}  # from the preset
    # seed-episodes/s counts every seed's episodes
    assert (df["seed_episodes_per_s"] - df["seeds"] * df["episodes"] / df["seconds"]).abs().max() < 1e-9
    corners = df[df["case"] == "estimate corner"]
    assert sorted(zip(corners["algo"], corners["k"], corners["epochs"])) == sorted(
        [(a, k, e) for a in ("tpo", "grpo") for k in (4, 64) for e in (1, 16)] + [("grpo_masked", 32, 4)])
    assert (corners["seeds"] == 2).all()

    jobs = pd.read_csv(tmp_path / "seeds_estimate.csv")
    runs = jobs.groupby("experiment")["runs"].sum()
    assert runs.to_dict() == {name: PRESET_JOBS[name] for name in runs.index}  # the sweeper's counts
    assert (jobs["runs"] == 2).all()  # +pack=gpu seeds_per_job=2: 2 seeds a job
    # Counted once: epoch_sweep's 4 epochs are k_sweep's K 32 (the default epochs), and
    # zero_variance_masking's tpo and grpo are that config too: 690 listed, 570 to train.
    assert jobs["new_runs"].sum() == 570
    assert (jobs.loc[jobs["new_runs"] == 0, "hours"] == 0).all()
    assert "CPU-hours" in proc.stdout and "B shrunk to 2" in proc.stdout


def test_bilinear_is_exact_on_its_cost_model():
    from dev.speed import bilinear

    cost = lambda k, e: 0.5 + 0.01 * k + 0.2 * e + 0.003 * k * e
    corners = {(k, e): cost(k, e) for k in (4, 64) for e in (1, 16)}
    for k, e in ((32, 4), (4, 16), (8, 2), (64, 1)):
        assert abs(bilinear(k, e, corners) - cost(k, e)) < 1e-12
    assert bilinear(32, 4, {(32, 4): 1.5}) == 1.5  # one shape: measured, not interpolated


@pytest.mark.slow  # three dry runs of a whole preset
def test_pack_gpu_packs_a_presets_seeds_into_jobs(tmp_path):
    """+pack=gpu: one job per config, all the preset's seeds batched; seeds_per_job=10
    makes three; the shrink override shrinks the jobs too. The sweeper's own dry runs,
    through `python -m bench`'s entry in process."""
    pack = ("+experiment=k_sweep", "+pack=gpu", "device=cpu")
    for extra, jobs, runs in (((), 10, 300), (("seeds_per_job=10",), 30, 300), (("seeds=3",), 10, 30)):
        proc = bench_here("-m", *pack, *extra, "dry_run=true", f"output_root={tmp_path}")
        assert proc.returncode == 0, proc.stderr
        assert f"[dry run] {jobs} valid jobs ({runs} runs)" in proc.stdout, proc.stdout
    cfg = compose("+experiment=k_sweep", "+pack=gpu")
    assert (cfg["batch_seeds"], cfg["seeds_per_job"], cfg["device"]) == (True, 30, "cuda")


def test_op_count_counts_kernels_not_views():
    """OpCount: an add and a sum are two ops, the view between them none; .item() one op
    and one read."""
    from dev.speed import OpCount
    x = torch.ones(3)
    with OpCount() as count:
        (x + 1).view(3, 1).sum().item()
    assert (count.ops, count.reads) == (3, 1)


@pytest.mark.parametrize("algo", ["tpo", "grpo"])
def test_a_seed_batch_costs_far_fewer_ops_than_its_seeds_alone(algo):
    """At S = 4 a batched episode dispatches under 2x the single run's ops (a loop over
    the seeds in the loss or the optimizer would add about one single run's worth per
    seed), and reads no value one by one into Python."""
    from dev.speed import count_ops
    small = ("task=demo", "task.batch_size=5", "task.sequence_length=3", "task.vocab_size=3", f"algo={algo}")
    one, four = count_ops(small, 1, 1, 1), count_ops(small, 4, 1, 1)
    assert four["ops_per_episode"] < 2 * one["ops_per_episode"], (one, four)
    assert one["item_reads_per_episode"] == four["item_reads_per_episode"] == 0


@pytest.mark.parametrize("algo", ["tpo", "grpo"])
def test_an_added_seed_costs_only_its_draws(algo):
    """Ops per added seed (S 4 -> 8): the seed's two draws (its prompts, its episode's
    sampling noise); everything else, the LayerNorm backward too (tasks/_layernorm.py),
    runs once for all seeds."""
    from dev.speed import count_ops
    small = ("task=demo", "task.batch_size=5", "task.sequence_length=3", "task.vocab_size=3", f"algo={algo}")
    four, eight = count_ops(small, 4, 1, 1), count_ops(small, 8, 1, 1)
    per_seed = (eight["ops_per_episode"] - four["ops_per_episode"]) / 4
    assert per_seed <= 2, (four, eight)


@pytest.mark.parametrize("csv", ["ops.csv", "vs_loop.csv", "profile.csv", "candidates.csv",
                                 "sweep_validation.csv", "vs_base.csv"])
def test_the_performance_page_shows_the_committed_measurements(csv):
    """docs/performance.md carries each table as `python -m dev.speed --table` (or
    `python -m dev.sweep_speed --table`) prints it from the committed CSV, with the line
    under it that says which code it measured."""
    from dev import record
    from dev.speed import table_of
    from dev.sweep_speed import table as sweep_table
    df = pd.read_csv(REPO / "reproduction" / "perf" / csv)
    table = (f"{sweep_table(df)}\n\n{record.code_line(df)}" if csv == "sweep_validation.csv"
             else table_of(df))
    assert table in (REPO / "docs" / "performance.md").read_text()


def test_each_speed_table_is_printed_by_its_own_kind(capsys):
    """`--table` picks the table by a column only its kind writes (vs_loop.csv and
    candidates.csv both have a speed-up column) and refuses a CSV of another kind."""
    from dev import speed
    for csv, header in (("vs_loop.csv", "| algo | S | B | rounds | loop s"), ("candidates.csv", "| candidate |"),
                        ("profile.csv", "| config | CPU-s"), ("ops.csv", "| case |"), ("vs_base.csv", "| config | rounds x")):
        assert speed.main(["--table", str(PERF / csv)]) == 0
        assert capsys.readouterr().out.startswith(header), csv
    with pytest.raises(SystemExit) as stop:
        speed.main(["--table", str(PERF / "sweep_validation.csv")])
    assert stop.value.code == 2 and "--table" in capsys.readouterr().err


def _repo(path: Path) -> Path:
    """A checkout with one code file (bench/x.py) committed."""
    def git(*a):
        subprocess.run(["git", "-C", str(path), *a], check=True, capture_output=True)
    (path / "bench").mkdir(parents=True)
    git("init", "-q")
    (path / "bench" / "x.py").write_text("x = 1\n")
    git("add", "bench/x.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return path


@pytest.mark.slow  # starts git
def test_a_speed_record_names_the_code_it_measured(tmp_path, monkeypatch):
    from dev import record, speed
    from tpo_bench.contract import io
    real = io.git_commit
    monkeypatch.setattr(io, "git_commit", lambda root=None: "abc123-dirty" if root in (None, io.REPO_ROOT)
                        else real(root))
    df = pd.DataFrame({"algo": ["tpo"], "seeds": [8], "batch_size": [100], "round": [0],
                       "loop_s": [2.0], "batched_s": [1.0], "speedup": [2.0]})
    assert speed.write_table(df, tmp_path / "vs_loop.csv") == 0
    back = pd.read_csv(tmp_path / "vs_loop.csv")
    assert list(back["code"]) == ["abc123-dirty"]
    assert speed.table_of(back).endswith("\n\nCode measured: abc123-dirty.")
    assert record.code_line(df) == "Code measured: not recorded."  # a CSV without the column
    base = _repo(tmp_path / "base")
    sha = subprocess.run(["git", "-C", str(base), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert record.commit_of(base) == sha
    (base / "notes.txt").write_text("not code\n")  # untracked, not a module: the commit's code still
    assert record.commit_of(base) == sha
    (base / "bench" / "x.py").write_text("x = 2\n")  # a code file edited: not the commit's code
    assert record.commit_of(base) == sha + "-dirty"
    paired = record.stamp(df.assign(cpu_ratio=[1.0]), base=base)
    assert record.code_line(paired) == f"Code measured: this abc123-dirty; base {sha}-dirty."
    assert record.commit_of(base / "bench") == "not a git checkout"  # inside a checkout, not its top
    assert record.commit_of(tmp_path) == "not a git checkout"


PERF = REPO / "reproduction" / "perf"


def test_the_single_seed_cost_the_page_quotes_is_the_committed_pairing():
    """Each paired median ratio the prose quotes after the vs_base table is the CSV's, in
    the CSV's order, as are the counts of rounds above 1; "none more than 2 % above 1" and "on both
    sides of 1" hold for them."""
    df = pd.read_csv(REPO / "reproduction" / "perf" / "vs_base.csv")
    by = df.groupby("config", sort=False)["cpu_ratio"]
    medians, above, rounds = by.median().round(3), by.agg(lambda r: int((r > 1).sum())), by.size()
    page = one_line((REPO / "docs" / "performance.md").read_text())
    said = re.search(r"are none more than 2 % above 1: (.*?)\. Every config's rounds fall on both sides of 1 "
                     r"\(rounds above 1, in the table's order: ([0-9, ]+) of ([0-9]+)\)", page)
    assert said, "the page quotes no paired medians after the vs_base table"
    assert [float(x) for x in re.findall(r"([0-9.]+)x \(", said.group(1))] == list(medians), dict(medians)
    assert [int(x) for x in said.group(2).split(",")] == list(above), dict(above)
    assert {int(said.group(3))} == set(rounds), dict(rounds)
    assert (medians < 1.02).all() and ((0 < above) & (above < rounds)).all()


H10 = "algo=tpo task=reverse_h10"  # profile.csv's two configs
K32 = "+experiment=zero_variance_masking task=reverse_h8 task.batch_size=256 algo=tpo algo.k=32"


def _prose() -> str:
    return one_line((REPO / "docs" / "performance.md").read_text())


def _quoted(page: str, *phrases: str) -> None:
    missing = [p for p in phrases if p not in page]
    assert not missing, f"docs/performance.md does not say (the committed data gives): {missing}"


def test_the_performance_pages_prose_quotes_the_profile_and_the_flop_counts():
    """The shares, seconds and FLOP ratios the prose reads off profile.csv, vs_artifact.csv
    and dev.speed.seq_episode_flops."""
    from dev.speed import seq_episode_flops, transformer_flops_per_token

    prof = pd.read_csv(PERF / "profile.csv")
    share = {(c, part, n): s for c, part, n, s in prof[["config", "part", "name", "share"]].itertuples(index=False)}
    cpu = prof.groupby("config")["cpu_s_per_episode"].first()
    art = pd.read_csv(PERF / "vs_artifact.csv")
    ours_s, art_s, ratio = art["ours_cpu_s"].median(), art["artifact_cpu_s"].median(), art["ratio_cpu"].median()
    h10, k32 = build(compose(*H10.split())), build(compose(*K32.split()))
    flops = seq_episode_flops(h10)
    # the artifact's episode: the whole 2H-token sequence re-run per generated token, each
    # prompt once per answer in training (forward and backward, about 3 forwards, per epoch)
    B, H, K, E = h10.task.batch_size, h10.task.sequence_length, h10.algo.k, h10.algo.epochs
    art_flops = B * K * (H * 2 * H + E * 3 * 2 * H) * transformer_flops_per_token(h10.task.vocab_size, ctx=H)
    mm = share[H10, "op", "matmul"]
    rest = sum(share[H10, "op", n] for n in ("elementwise", "copies", "layer norm"))
    goal = art_s / 3
    left = goal - mm * ours_s
    thirds = {1: "a third", 2: "two thirds"}
    _quoted(_prose(),
            f"costs {cpu[K32]:.1f} CPU-s per episode",
            f"about {cpu[K32] * k32.task.episodes / 3600:.1f} CPU-hours per seed",
            f"That is {cpu[K32] / cpu[H10]:.0f} times a reverse_h10 TPO episode for "
            f"{seq_episode_flops(k32) / flops:.1f} times its FLOPs",
            f"KV-cached and {100 * share[H10, 'phase', 'generation']:.0f}% of the episode",
            f"An episode is {flops / 1e9:.1f} GFLOP",
            f"about {art_flops / 1e9:.0f} GFLOP ({art_flops / flops:.1f}x)",
            f"At {ratio:.2f}x the time, XLA's fused program runs about {art_flops / flops / ratio:.1f}x more FLOPs",
            f"Matmuls are {100 * mm:.0f}% of the episode",
            f"about {round(flops / 1e9 / (mm * cpu[H10]), -1):.0f} GFLOP per CPU-second",  # to 10
            f"tanh GELU {100 * share[H10, 'op', 'gelu']:.0f}%",
            f"sequences {100 * share[H10, 'op', 'attention']:.0f}%",
            f"copies and LayerNorm {100 * rest:.0f}%",
            f"autograd and Python {100 * share[H10, 'op', 'other']:.0f}%",
            f"3x means {goal:.2f} CPU-s per episode against the artifact's {art_s:.2f}",
            f"({100 * mm:.0f}% of {ours_s:.2f} s) that leaves about {left:.2f} s",
            f"removing {thirds[round(3 * (1 - left / ((1 - mm) * ours_s)))]} of all non-matmul work")


def test_the_performance_pages_prose_quotes_the_artifact_rounds():
    art = pd.read_csv(PERF / "vs_artifact.csv")
    core = pd.concat([art["ours_cpu_s"] / art["ours_wall_s"], art["artifact_cpu_s"] / art["artifact_wall_s"]])
    compile_s = art["artifact_compile_cpu_s"]
    [episodes] = art["episodes"].unique()
    _quoted(_prose(),
            f"over {len(art)} rounds of {episodes} episodes",
            f"load average {art['load_avg_1m'].min():.0f} to {art['load_avg_1m'].max():.0f} over the rounds",
            f"each side got {100 * core.min():.0f} % to {100 * core.max():.0f} % of its core",
            f"varies by {compile_s.max() / compile_s.min():.2f}x in the table")


def test_the_performance_pages_prose_quotes_the_candidates():
    cand = pd.read_csv(PERF / "candidates.csv").groupby("candidate", sort=False)["speedup"].median()
    best = cand["inductor, sigmoid-form gelu, matmul attention"]
    train = pd.read_csv(PERF / "profile.csv").query("config == @H10 and name == 'training'")["share"].iloc[0]
    ratio = pd.read_csv(PERF / "vs_artifact.csv")["ratio_cpu"].median()
    quarters = {1: "a quarter", 2: "half", 3: "three quarters"}
    _quoted(_prose(),
            f"compiling the whole training step pays {cand['inductor']:.2f}x on the CPU, with rewritten "
            f"GELU and attention {best:.2f}x",
            f"makes the eager step slower ({cand['eager, sigmoid-form gelu']:.2f}x, the table below)",
            f"would reach about {ratio / (1 - train * (1 - 1 / best)):.1f}x the artifact "
            f"(training is {100 * train:.0f}% of it; {ratio:.2f}x eager)",
            f"saves {quarters[round(4 * (1 - 1 / best))]} of the training phase")


def test_the_performance_pages_prose_quotes_the_op_counts_and_the_loop():
    ops = pd.read_csv(PERF / "ops.csv")
    by = ops.set_index(["case", "algo", "seeds"])["ops_per_episode"]
    single = by.xs(1, level="seeds")
    x = {S: by.xs(S, level="seeds") / single for S in (8, 32)}
    per_seed = (by.xs(32, level="seeds") - by.xs(8, level="seeds")) / 24
    loop = pd.read_csv(PERF / "vs_loop.csv")
    best = loop.groupby("algo")["speedup"].max()
    _quoted(_prose(),
            f"met ({x[32].min():.2f}-{x[32].max():.2f}x; {x[8].min():.2f}-{x[8].max():.2f}x at S = 8)",
            f"{by['reverse_h10', 'tpo', 32]:,.0f} - {by['reverse_h10', 'tpo', 8]:,.0f} = "
            f"{by['reverse_h10', 'tpo', 32] - by['reverse_h10', 'tpo', 8]:.0f} over 24 seeds",
            f"a batched episode's {ops['ops_per_episode'].min():,.0f} to {ops['ops_per_episode'].max():,.0f} ops",
            f"{WORDS[(loop['speedup'] > 1).sum()]} of the {WORDS[len(loop)]} rounds came out ahead",
            f"TPO's best ({best['tpo']:.2f}x) and GRPO's best ({best['grpo']:.2f}x)")
    assert per_seed.nunique() == 1, per_seed  # "..., likewise in the other cases"
    _quoted(_prose(), f"Each added seed costs {per_seed.iloc[0]:.0f} ops per episode")


@pytest.mark.slow  # starts a process
def test_the_performance_page_quotes_the_recorded_artifact_comparison():
    """docs/performance.md carries the artifact comparison as `python -m dev.vs_artifact
    --table` prints it from the committed CSV, and its quoted median is the CSV's."""
    csv = REPO / "reproduction" / "perf" / "vs_artifact.csv"
    df = pd.read_csv(csv)
    ratio = df["artifact_cpu_s"] / df["ours_cpu_s"]
    assert (ratio - df["ratio_cpu"]).abs().max() < 1e-9
    printed = subprocess.run([sys.executable, "-m", "dev.vs_artifact", "--table", str(csv)], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.strip()
    assert printed.splitlines()[-1].startswith("Code measured: ")
    page = (REPO / "docs" / "performance.md").read_text()
    for line in printed.splitlines():
        assert line in page, line
    quoted = re.search(r"per CPU-second at one thread: ([0-9.]+)x median \(([0-9.]+)-([0-9.]+)\)", page)
    assert quoted, "the page quotes no median ratio"
    assert [float(v) for v in quoted.groups()] == [
        round(ratio.median(), 2), round(ratio.min(), 2), round(ratio.max(), 2)]


@pytest.mark.parametrize("args, key", [(["--artifact-src", "/nonexistent"], "--artifact-src"),
                                       (["--episodes", "1"], "--episodes")])
@pytest.mark.slow  # starts a process
def test_vs_artifact_refuses_bad_input_in_one_line(args, key):
    from conftest import run_script
    proc = run_script("dev/vs_artifact.py", *args, check=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vs_artifact: {key}"), proc.stderr


@pytest.mark.slow  # torch.profiler's trace processing: 10-20 s
def test_the_profile_splits_an_episode_by_phase_and_kind_of_op():
    """`--profile`'s rows: the phases' shares and the kinds of op's shares each sum to 1,
    matmul and gelu are found in a transformer's episode, and the table prints them."""
    from dev.speed import op_kind, profile_config, profile_table

    assert [op_kind(n) for n in ("aten::mm", "aten::gelu_backward", "aten::cat", "aten::view")] == \
        ["matmul", "gelu", "copies", "other"]
    df = pd.DataFrame(profile_config((*TINY, "algo=tpo"), episodes=1, warmup=1))
    for part in ("phase", "op"):
        assert df.loc[df["part"] == part, "share"].sum() == pytest.approx(1.0)
    assert set(df.loc[df["part"] == "phase", "name"]) == {"generation", "training", "bookkeeping"}
    ops = df[df["part"] == "op"].set_index("name")["share"]
    assert ops["matmul"] > 0 and ops["gelu"] > 0 and ops["attention"] > 0
    assert (df["cpu_s_per_episode"] > 0).all()
    assert f"| phase | training | {100 * df['share'][1]:.1f}% |" in profile_table(df)


def test_the_candidates_compute_what_the_model_computes():
    """`--candidates`' pieces: the sigmoid-form GELU and the matmul attention agree with
    F.gelu (tanh) and SDPA to float32 rounding, and a candidate policy with neither
    replaced gives the policy's log-probs bit for bit, and leaves the forward as it was."""
    import torch.nn.functional as F

    from dev.speed import candidate_forward, matmul_attention, seed_policies, sigmoid_gelu

    x = torch.linspace(-6, 6, 1001)
    assert torch.allclose(sigmoid_gelu(x), F.gelu(x, approximate="tanh"), atol=1e-6, rtol=0)
    q, k, v = torch.randn(3, 4, 2, 5, 8).unbind()
    mask = torch.rand(5, 5) > 0.3
    mask[:, 0] = True
    for kw in ({"is_causal": True}, {"attn_mask": mask}):
        assert torch.allclose(matmul_attention(q, k, v, **kw), F.scaled_dot_product_attention(q, k, v, **kw),
                              atol=1e-6)
    spec = build(compose("task=reverse_h10", "algo=tpo", "task.batch_size=4"))
    (policy,), _, (streams,) = seed_policies(spec, 1)
    batch = spec.task.rollout(policy, spec.request, streams).batch
    own = spec.task.logprobs(policy, batch)
    with candidate_forward():
        assert torch.equal(spec.task.logprobs(policy, batch), own)
    with candidate_forward(sigmoid_gelu, matmul_attention):
        other = spec.task.logprobs(policy, batch)
    assert torch.allclose(other, own, atol=1e-5) and not torch.equal(other, own)
    assert torch.equal(spec.task.logprobs(policy, batch), own)


def test_the_performance_pages_prose_quotes_the_sweep_validation():
    """The machine, its load and the CPU cost per added job the page quotes, from
    reproduction/perf/sweep_validation.csv."""
    df = pd.read_csv(PERF / "sweep_validation.csv")
    first = df.iloc[0]
    per_job = [1000 * (r.cpu_s - first.cpu_s) / (r.jobs - first.jobs) for r in df.iloc[1:].itertuples()]
    assert len(per_job) >= 2
    _quoted(_prose(), f"a shared {df['cores'][0]}-core {df['cpu'][0]} at a load average of {df['load_average'][0]}",
            f"beyond the first {first.jobs:,} cost {per_job[0]:.2f} ms of CPU at {df['jobs'][1]:,} jobs and "
            f"{per_job[-1]:.2f} ms at {df['jobs'].iloc[-1]:,}")
