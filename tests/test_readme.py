"""README facts that come from data are checked against the data, so
they cannot go stale unnoticed: the committed snapshot's size, the presets' run counts,
the metric columns, the launchers it names and what `--help` lists."""
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq

from contract.schema import METRIC_COLUMNS
from conftest import REPO, run_bench

README = (REPO / "README.md").read_text()
LAUNCHERS = sorted(p.stem for p in (REPO / "conf" / "hydra" / "launcher").glob("*.yaml"))


def _section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n#", start + len(title))
    return README[start:end if end > 0 else None]


def test_snapshot_rows_and_size_are_the_files():
    snapshot = REPO / "reproduction" / "results.parquet"
    m = re.search(r"`reproduction/results\.parquet` \(([\d,]+) rows, ([\d.]+) MB", README)
    assert m, "the README no longer states the snapshot's size"
    assert int(m.group(1).replace(",", "")) == pq.ParquetFile(snapshot).metadata.num_rows
    assert float(m.group(2)) == round(snapshot.stat().st_size / 1e6, 1)


def _dry_run_count(preset: str) -> int:
    proc = subprocess.run([sys.executable, "-m", "bench", "-m", f"+experiment={preset}",
                           "dry_run=true"], cwd=REPO, text=True, capture_output=True, timeout=600)
    m = re.search(r"\[dry run\] \d+ valid jobs \((\d+) runs\)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    return int(m.group(1))


def test_preset_run_counts_are_what_a_dry_run_launches():
    table = _section("| preset (`conf/experiment/`)")
    rows = re.findall(r"^\| ((?:`\w+`(?:, )?)+) \|.*\| (\d+) \|$", table, re.M)
    stated = {name: int(runs) for names, runs in rows for name in re.findall(r"`(\w+)`", names)}
    assert len(stated) >= 10, table
    with ThreadPoolExecutor(max_workers=2) as pool:
        counted = dict(zip(stated, pool.map(_dry_run_count, stated)))
    assert counted == stated
    # the same counts wherever else the README quotes one
    for name, runs in re.findall(r"\+experiment=(\w+)\b[^\n]*?\((\d+) runs", README):
        assert int(runs) == counted[name], name


def test_every_metric_column_is_documented():
    section = _section("### Metrics columns")
    documented = set(re.findall(r"`(\w+)`", section))
    assert set(METRIC_COLUMNS) <= documented, sorted(set(METRIC_COLUMNS) - documented)


def test_launchers_the_readme_names_exist_and_local_is_the_one_name_for_joblib():
    named = set(re.findall(r"hydra/launcher=(\w+)", README))
    assert named <= {*LAUNCHERS, "submitit_slurm"}, sorted(named - {*LAUNCHERS, "submitit_slurm"})
    assert "joblib" not in named


def test_help_lists_the_launchers_and_no_tune_group():
    text = run_bench("--help").stdout
    lines = text.splitlines()
    [launchers] = [line for line in lines if line.startswith("hydra/launcher")]
    assert set(LAUNCHERS) | {"submitit_slurm"} <= set(re.split(r"[:,]\s*", launchers)[1:])
    assert any(line.startswith("hydra/sweeper") and "optuna" in line for line in lines)
    assert not any(line.startswith("tune:") for line in lines)
    assert re.search(r"^algo: .*\btpo\b", text, re.M)


def test_the_test_section_says_which_tests_need_what():
    assert "TPO_BENCH_MNIST_DIR" in _section("## Quickstart")
    assert "TPO_BENCH_REQUIRE_SLURM" in _section("## Quickstart")
    skips = [p for p in (REPO / "tests").glob("test_*.py")
             if 'skipif(not os.environ.get("TPO_BENCH_MNIST_DIR")' in p.read_text()]
    assert skips, "no test skips without MNIST any more: say so in the README"


def test_the_readme_links_the_committed_report_beside_its_figures():
    report = REPO / "reproduction" / "REPRODUCTION.md"
    assert "[reproduction/REPRODUCTION.md](reproduction/REPRODUCTION.md)" in README[:1500]
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report.read_text())
    assert links and all((report.parent / link).is_file() for link in links), links
    assert not (REPO / "REPRODUCTION.md").exists()  # one place for the generated output


def test_every_script_and_module_the_docs_run_exists():
    docs = [REPO / "README.md", *(REPO / "reproduction").glob("*.md"), *(REPO / "reproduction").glob("*.sh")]
    named = set()
    for doc in docs:
        text = re.sub(r"(python|-m)\n", r"\1 ", doc.read_text().replace("\\\n", " "))
        where = str(doc.relative_to(REPO))
        named |= {(where, m) for m in re.findall(r"python3? ((?:analysis|reproduction|bench)/[\w/]+\.py)", text)}
        named |= {(where, m.replace(".", "/")) for m in re.findall(r"python3? -m (analysis(?:\.\w+)+)", text)}
    assert len(named) >= 8, named
    missing = [(d, m) for d, m in named if not ((REPO / m).is_file() or (REPO / f"{m}.py").is_file())]
    assert not missing, missing
