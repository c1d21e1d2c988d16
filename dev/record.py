"""Which code a benchmark record measured: its `code` column (and, where it pairs this
checkout with another, `base_code`), the commit as a run's record names it ("-dirty"
with uncommitted code changes); under each table printed from a record, a line says it."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from tpo_bench.contract import io


def commit_of(checkout: Path) -> str:
    """The commit of the project checkout at `checkout`, as a run's record names it."""
    return io.git_commit(checkout) or "not a git checkout"


def stamp(df: pd.DataFrame, base: Path | None = None) -> pd.DataFrame:
    """The rows with the code they measured: `code`, this checkout's; `base_code`, base's."""
    df = df.assign(code=commit_of(io.REPO_ROOT))
    return df.assign(base_code=commit_of(base)) if base is not None else df


def code_line(df: pd.DataFrame) -> str:
    """What a table printed from df says under it of the code measured."""
    if "code" not in df.columns:
        return "Code measured: not recorded."
    said = ", ".join(sorted(set(df["code"].astype(str))))
    if "base_code" in df.columns:
        said = f"this {said}; base {', '.join(sorted(set(df['base_code'].astype(str))))}"
    return f"Code measured: {said}."
