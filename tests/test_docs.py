"""The documentation's code runs as printed: the README's quickstart sweep (at a small
size), the extending page's algorithm and task (as plug-ins), the TRL page's CPU example
(where TRL is installed), every script, module and
launcher the docs name exists, and the site builds with `mkdocs build --strict`. The
numbers the docs quote from committed data are that data's (the fault campaign, the
paper's own inconsistencies, where the committed runs ran, the figure page's verdicts);
tests/test_pages.py, test_speed.py and test_layernorm.py check the others."""
import json
import math
import re
import shlex
import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml

from conftest import REPO, md_rows, one_line
from tpo_bench.contract import schema

README = REPO / "README.md"
DOCS = REPO / "docs"
SMALL = ["task.episodes=3", "task.batch_size=4", "threads=1"]


def code_blocks(path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), re.S)


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 300


def test_version_is_one_number_everywhere():
    from tpo_bench import bench
    from importlib.metadata import version

    declared = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert bench.__version__ == version("tpo-bench") == declared == cff["version"]


def test_the_readme_and_getting_started_name_every_extra():
    """pyproject.toml's extras are the one list: the README's extras sentence and the
    install block of the getting-started page name each of them, and the extras the README
    says `.[test]` holds are in it."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = one_line(README.read_text())
    sentence = re.search(r"Extras: (.*?)\. See", readme)[1]
    assert set(re.findall(r"`\.\[(\w+)\]`", sentence)) == set(extras), sentence
    [block] = [b for b in code_blocks(DOCS / "getting-started.md", "bash") if "pip install -e ." in b]
    assert set(re.findall(r"pip install -e '\.\[(\w+)\]'", block)) == set(extras), block
    held = re.search(r"`\.\[test\]` \(the ([\w, ]+) extras, and pytest\)", sentence)[1]
    named = re.split(r", | and ", held)
    assert len(named) >= 3 and [x for x in named if not set(extras[x]) <= set(extras["test"])] == []


def test_every_script_module_and_launcher_the_docs_name_exists():
    docs = [README, *DOCS.glob("*.md"), *(REPO / "reproduction").glob("*.md"),
            *(REPO / "reproduction").glob("*.sh")]
    launchers = {p.stem for p in (REPO / "conf" / "hydra" / "launcher").glob("*.yaml")}
    named, missing = set(), []
    for doc in docs:
        text = re.sub(r"(python|-m)\n", r"\1 ", doc.read_text().replace("\\\n", " "))
        for m in re.findall(r"python3? ((?:analysis|reproduction|bench|tools|dev)/[\w/]+\.py)", text):
            named.add(m)
            missing += [] if (REPO / m).is_file() else [(doc.name, m)]
        for m in re.findall(r"python3? -m (?:tpo_bench\.)?((?:analysis|bench|tools|dev)(?:\.\w+)+)", text):
            named.add(m)
            path = REPO / m.replace(".", "/")
            missing += [] if path.with_suffix(".py").is_file() or path.is_dir() else [(doc.name, m)]
        missing += [(doc.name, f"hydra/launcher={x}") for x in re.findall(r"hydra/launcher=(\w+)", text)
                    if x not in launchers]
    assert len(named) >= 8, named
    assert not missing, missing


# The user's own files the docs' examples create (docs/extending.md, docs/reliability.md).
EXAMPLE_FILES = {"algorithms/myalgo.py", "conf/algo/myalgo.yaml", "tasks/arms.py", "conf/task/arms.yaml",
                 "conf/task/arms_big.yaml", "algorithms/zz_local.py"}


def test_every_project_file_the_docs_configs_and_code_name_exists():
    """A path into the project (`bench/engine.py`, `analysis/paper/paper_numbers.csv`) named in
    the docs, a config's comments, a data file's header or a module exists; the docs' own
    example files for a user to create aside."""
    rooms = "bench|analysis|tools|dev|algorithms|tasks|contract|conf|hydra_plugins|reproduction|integrations|docs"
    path = re.compile(rf"(?<![\w./-])((?:{rooms})/[\w./-]*\w\.(?:py|csv|yaml|md|sh|parquet|json))")
    sources = [README, *DOCS.rglob("*.md"), *(REPO / "reproduction").glob("*.md"), *(REPO / "conf").rglob("*.yaml"),
               *(REPO / "analysis").rglob("*.csv"),
               *(p for room in rooms.split("|") for p in (REPO / room).rglob("*.py"))]
    named = {(m, src.relative_to(REPO).as_posix()) for src in sources for m in path.findall(src.read_text())}
    missing = sorted((m, src) for m, src in named if m not in EXAMPLE_FILES and not (REPO / m).exists())
    assert len(named) >= 50 and not missing, missing


def test_the_algorithm_tables_defaults_are_the_composed_configs():
    """Every row of docs/algorithms.md's tables names algorithms that compose, and each
    setting it states is what `algo=<name>` composes to: the defaults column ("k 8, epochs 4,
    clip 0.2", "ε_high 0.28", "no KL", "at most 4 batches"), the implementation a loss cell
    starts with (`clipped`, `tpo` with ...) and every `key: value` it quotes."""
    import yaml

    from conftest import md_rows
    from tpo_bench.bench.config import compose

    def stated(loss: str, defaults: str):
        """(config keys, value) pairs the two cells state."""
        for label, value in re.findall(r"\b(k|epochs|eta|clip) ([\d.]+)", defaults):
            yield {"k": ("k",), "epochs": ("epochs",), "eta": ("eta",), "clip": ("clip_eps", "eps_low", "eps_high")}[
                label], float(value)
        for cell in (loss, defaults):
            for side, value in re.findall(r"ε_(low|high) ([\d.]+)", cell):
                yield (f"eps_{side}",), float(value)
            for value in re.findall(r"KL β ([\d.]+)", cell):
                yield ("kl_coef",), float(value)
            if "no KL" in cell:
                yield ("kl_coef",), 0.0
        for low, high in re.findall(r"clip \[1−([\d.e-]+), 1\+([\d.e-]+)\]", loss):
            yield ("eps_low",), float(low)
            yield ("eps_high",), float(high)
        for value in re.findall(r"at most (\d+) batches", defaults):
            yield ("dynamic_sampling",), float(value)

    text = (DOCS / "algorithms.md").read_text()
    rows = [r for r in md_rows(text) if set(r) == {"name", "loss", "defaults"}]
    assert len(rows) == sum(line.startswith("| `") for line in text.splitlines()) >= 20, len(rows)
    checked = 0
    for row in rows:
        names = re.findall(r"`(\w+)`", row["name"])
        assert names, row
        for name in names:
            algo = compose(f"algo={name}")["algo"]
            for keys, value in stated(row["loss"], row["defaults"]):
                present = [key for key in keys if key in algo]
                without = keys == ("kl_coef",) and value == 0  # a loss with no KL term has no coefficient
                assert (present or without) and all(float(algo[key]) == value for key in present), \
                    (name, keys, value, algo)
                checked += 1
            for key, value in re.findall(r"`(\w+): ([^`]+)`", row["loss"]):
                assert algo[key] == yaml.safe_load(value), (name, key, value, algo)
                checked += 1
            first = re.match(r"`([\w-]+)`", row["loss"])
            if first and first[1] in {"clipped", "tpo", "grpo", "pg"}:  # the implementation it is a variant of
                assert algo["impl"] == first[1], (name, first[1], algo["impl"])
                checked += 1
    assert checked >= 40, checked


def test_the_quickstart_says_how_many_jobs_the_local_launcher_runs():
    """The quickstart sweep runs on `hydra/launcher=local`; the README and getting-started
    say how many jobs at once that launcher starts."""
    import yaml

    n_jobs = yaml.safe_load((REPO / "conf" / "hydra" / "launcher" / "local.yaml").read_text())["n_jobs"]
    said = "one job per CPU core" if n_jobs == -1 else f"{n_jobs} jobs at a time"
    for doc in (README, DOCS / "getting-started.md"):
        text = " ".join(doc.read_text().split())
        assert "hydra/launcher=local" in text and said in text, (doc.name, said)
        assert not re.search(r"\b(two|\d+) jobs at a time", text.replace(said, "")), doc.name


def test_the_docs_spell_a_tool_one_way():
    """A tool is `python -m tools.<name>` in the README and the docs, never its installed
    command (`tpo-bench study`) nor `python -m tpo_bench.tools.<name>`; a maintenance script
    is `python -m dev.<name>`, no `tpo-bench` command (the docs name none that is not one)."""
    from tpo_bench.cli import COMMANDS

    tools = {name for name, (module, _) in COMMANDS.items() if ".tools." in module}
    docs = [README, *DOCS.glob("*.md"), *(REPO / "reproduction").glob("*.md")]
    found = [(doc.name, m) for doc in docs
             for m in re.findall(r"(?:^|`)tpo-bench [a-z][\w-]*|tpo_bench\.(?:tools|dev)\.\w+",
                                 doc.read_text(), re.M)
             if m.startswith("tpo_bench") or m.split()[1] in tools or m.split()[1] not in COMMANDS]
    assert len(tools) >= 4 and not found, found


def test_the_committed_report_links_figures_that_exist():
    report = REPO / "reproduction" / "REPRODUCTION.md"
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report.read_text())
    assert links and all((report.parent / link).is_file() for link in links), links
    readme_images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README.read_text())
    assert readme_images and all((REPO / link).is_file() for link in readme_images)


def test_the_reliability_page_shows_the_recorded_fault_campaign():
    """docs/reliability.md's campaign table is the last lines of the committed output, and
    every trial it counts ran."""
    page = (DOCS / "reliability.md").read_text()
    for name, command in (("faults_campaign_seed2.txt", "--trials {} --seed 2"),
                          ("faults_campaign_seed2_duplicate_rows.txt", "--only duplicate_rows --trials {} --seed 2")):
        data = (DOCS / "data" / name).read_text().splitlines()
        table = [line for line in data if line.startswith("|")]
        assert len(table) == 3 and [line for line in table if line not in page] == [], name
        trials = int(table[2].split("|")[1])
        assert sum(line.startswith("[faults] trial ") for line in data) == trials
        assert command.format(trials) in page and f"data/{name}" in page
        if name == "faults_campaign_seed2.txt":
            assert f"(all {trials} trials ran)" in one_line(page)


def test_the_papers_inconsistencies_named_on_the_science_page_are_in_its_numbers():
    """docs/science.md: TPO_token at eta = 1 is quoted at different step counts in different
    tables, and TPO at K = 32 with 4 epochs differs between the K sweep and the epoch and
    masking sweeps (analysis/paper/paper_numbers.csv)."""
    from tpo_bench.analysis.paper import report

    paper = report.load_paper()
    values = lambda group: paper[paper["replicate_group"] == group].groupby("experiment")["value"].first()
    token = values("dense-V2-bag-revcopy-tpo_token")
    assert {"vocab_sweep", "task_variants", "eta_sweep"} <= set(token.index) and token.nunique() > 1, token
    k32 = values("mech-tpo-K32-e4")
    assert k32["k_sweep"] != k32["epoch_sweep"] == k32["zero_variance_masking"], k32
    text = one_line((DOCS / "science.md").read_text())
    assert "TPO_token at eta = 1 is quoted at different step counts in different tables" in text
    assert ("TPO at K = 32 with 4 epochs differs between the K sweep and the epoch and masking sweeps"
            in text)


def test_the_committed_runs_ran_where_the_reproduction_readme_says():
    """reproduction/README.md: torch's version, the CPU and one torch thread per run, as
    every committed run's summary.json records them."""
    said = re.search(r"with torch (\S+), fp32, one torch thread per run",
                     one_line((REPO / "reproduction" / "README.md").read_text()))
    assert said, "reproduction/README.md does not name the torch version"
    runs = [json.loads(p.read_text()) for p in (REPO / "reproduction" / "runs").glob("**/summary.json")]
    assert len(runs) > 100
    assert {(s["versions"]["torch"], s["device"], s["threads"]) for s in runs} == {(said[1], "cpu", 1)}


def test_the_figures_pages_verdicts_are_the_committed_reports():
    """docs/figures.md (`analysis/plot.py --page`) quotes each paper number as the committed
    report does: its paper value, our value, seeds and verdict."""
    page = DOCS / "figures.md"
    cols = ["algorithm", "setting", "metric", "paper", "ours", "seeds", "verdict"]
    report = {tuple(r[c] for c in cols) for r in md_rows((REPO / "reproduction" / "REPRODUCTION.md").read_text())
              if set(cols) <= set(r)}
    shown = [tuple(r[c] for c in cols) for r in md_rows(page.read_text()) if "verdict" in r]
    assert len(shown) > 50
    assert [s for s in shown if s not in report] == []


@pytest.mark.slow
def test_readme_quickstart_sweep_runs_at_a_small_size(tmp_path):
    [block] = [b for b in code_blocks(README, "bash") if "pip install -e . &&" in b]
    steps = [shlex.split(s) for s in block.strip().split("&&") if "pip install" not in s]
    assert [s[:3] for s in steps] == [["python", "-m", "bench"], ["python", "analysis/collect.py"],
                                      ["python", "analysis/plot.py"]]
    steps[0] += SMALL
    for step in steps:
        args = [sys.executable, *(str(REPO / a) if a.startswith("analysis/") else a for a in step[1:])]
        proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    table = pd.read_parquet(tmp_path / "outputs" / "results.parquet")
    assert set(table["algo.name"]) == {"tpo", "grpo", "dg", "pg", "ppo"} and set(table["seed"]) == {0, 1, 2}
    assert (tmp_path / "outputs" / "plots" / "demo.png").stat().st_size > 1000
    assert "tpo" in proc.stdout  # plot.py's summary table


@pytest.mark.slow
def test_extending_page_algorithm_and_task_run_as_printed(tmp_path):
    algo_src, task_src = code_blocks(DOCS / "extending.md", "python")[:2]
    assert '@register("myalgo")' in algo_src and '@register("arms")' in task_src
    (tmp_path / "doc_myalgo.py").write_text(algo_src)
    (tmp_path / "doc_arms.py").write_text(task_src)
    (tmp_path / "conf" / "algo").mkdir(parents=True)
    (tmp_path / "conf" / "task").mkdir()
    (tmp_path / "conf" / "algo" / "myalgo.yaml").write_text("name: myalgo\n")
    (tmp_path / "conf" / "task" / "arms.yaml").write_text("name: arms\n")
    out = tmp_path / "out"

    def bench(*args, check=True):
        proc = subprocess.run(
            [sys.executable, "-m", "bench", *args, "task=arms", "optim=adam", "optim.lr=0.05", "threads=1",
             "plugins=[doc_myalgo,doc_arms]", f"hydra.searchpath=[file://{tmp_path}/conf]",
             f"output_root={out}"],
            cwd=REPO, capture_output=True, text=True, timeout=600,
            env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"})
        assert not check or proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    bench("algo=myalgo")
    (run,) = schema.run_dirs(out)
    error = pd.read_parquet(run / schema.METRICS)["error"]
    assert len(error) == 30
    assert round(error.iloc[0], 2) == 0.70 and error.iloc[-1] == 0.0  # the page's "from 0.70 to 0"
    bench("-m", "algo=tpo,grpo,pg,ppo,dg,group_pg", "hydra/launcher=local", "hydra.launcher.n_jobs=1")
    assert len(list(schema.run_dirs(out))) == 7
    refused = bench("algo=ce", check=False)
    assert refused.returncode == 2 and "needs a label; task arms has none" in refused.stderr


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    items = nav.values() if isinstance(nav, dict) else nav
    return [p for item in items for p in _nav_pages(item)]


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    missing = [p for p in _nav_pages(config["nav"]) if not (DOCS / p).is_file()]
    if missing:  # pages other work adds; until they land the build cannot be strict
        pytest.skip(f"nav pages not in this tree: {', '.join(missing)}")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "science" / "index.html").is_file()


@pytest.mark.slow  # trains two TRL steps
def test_the_trl_pages_cpu_example_trains_as_printed(tmp_path, monkeypatch):
    """docs/trl_verl.md's CPU example, the block as printed, in a fresh folder: it builds its
    model in code and trains two optimizer steps of TPO through ZooGRPOTrainer (the
    harness's loss, whose diagnostics TRL logs), in float32; the GPU example stays beside it."""
    pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[trl]' runs this test")
    section = (DOCS / "trl_verl.md").read_text().split("\n## TRL\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    [cpu] = [b for b in blocks if "use_cpu=True" in b]
    assert any("ZooGRPOTrainer(" in b and "Qwen/" in b for b in blocks if b != cpu)  # the GPU one
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing to download
    names: dict = {"__name__": "__main__"}
    exec(compile(cpu, str(DOCS / "trl_verl.md"), "exec"), names)
    trainer = names["trainer"]
    assert trainer.state.global_step == 2 and not trainer.args.bf16
    steps = [h for h in trainer.state.log_history if "loss" in h]
    assert len(steps) == 2 and all(math.isfinite(h["loss"]) for h in steps), steps
    assert all("zoo/q_success" in h for h in steps), steps  # the harness's loss ran
    assert next(trainer.model.parameters()).dtype == torch.float32
