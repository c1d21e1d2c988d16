"""The README's "Adding an algorithm or a task" is true as printed: its two code blocks,
dropped in as one module and one yaml each (here as plug-ins from a temporary folder,
which is what `plugins=` and `hydra.searchpath` are for), run, learn, and every other
algorithm runs on the new task."""
import re
import subprocess
import sys

import pandas as pd

from conftest import REPO
from contract import schema


def _blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("### Adding an algorithm or a task", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_algorithm_and_task_run_as_printed(tmp_path):
    algo_src, task_src = _blocks()
    assert '@register("myalgo")' in algo_src and '@register("arms")' in task_src
    (tmp_path / "readme_myalgo.py").write_text(algo_src)
    (tmp_path / "readme_arms.py").write_text(task_src)
    (tmp_path / "conf" / "algo").mkdir(parents=True)
    (tmp_path / "conf" / "task").mkdir()
    (tmp_path / "conf" / "algo" / "myalgo.yaml").write_text("name: myalgo\n")
    (tmp_path / "conf" / "task" / "arms.yaml").write_text("name: arms\n")
    out = tmp_path / "out"

    def bench(*args, check=True):
        proc = subprocess.run(
            [sys.executable, "-m", "bench", *args, "task=arms", "optim=adam", "optim.lr=0.05", "threads=1",
             "plugins=[readme_myalgo,readme_arms]", f"hydra.searchpath=[file://{tmp_path}/conf]",
             f"output_root={out}"],
            cwd=REPO, capture_output=True, text=True, timeout=600,
            env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert not check or proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    bench("algo=myalgo")
    (run,) = schema.run_dirs(out)
    error = pd.read_parquet(run / schema.METRICS)["error"]
    assert len(error) == 30
    assert round(error.iloc[0], 2) == 0.70 and error.iloc[-1] == 0.0  # "from 0.70 to 0"
    bench("-m", "algo=tpo,grpo,pg,ppo,dg,group_pg", "hydra/launcher=local",
          "hydra.launcher.n_jobs=1")
    assert len(list(schema.run_dirs(out))) == 7
    refused = bench("algo=ce", check=False)
    assert refused.returncode == 2 and "needs a label; task arms has none" in refused.stderr
