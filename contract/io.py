"""Atomic writes and the provenance recorded in summary.json."""
from __future__ import annotations

import errno
import json
import os
import platform
import secrets
import subprocess
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import pandas as pd

from .. import ROOMS

REPO_ROOT = Path(__file__).resolve().parent.parent


TEMP_SUFFIX = ".tmp"


def temp_name(path: Path) -> Path:
    """`.name.<pid>.<random>.tmp` beside `path`: the pid says whose it is, so a process
    removes only its own temp files (another may be writing beside it)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def own_temps(folder: Path) -> list[Path]:
    return list(Path(folder).glob(f".*.{os.getpid()}.*{TEMP_SUFFIX}"))


class LinkRefused(OSError):
    """A symbolic link where the harness writes or reads its own files: refused, not
    followed (whoever can write into a shared output tree could aim it at any file the
    runner's user owns). The message names the link and where it points."""


def refuse_link(path: str | Path) -> None:
    """LinkRefused if `path` is a symbolic link (to anything, or dangling)."""
    path = Path(path)
    if path.is_symlink():
        raise LinkRefused(errno.ELOOP, f"{path} is a symbolic link (to {os.readlink(path)}), "
                          f"which the harness did not create and does not follow; remove it")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """The one atomic writer: yields a temp path beside `path` to write; on success it is
    renamed over `path` (a reader never sees a half-written file, whatever kills the
    process), on any error it is removed (a full disk keeps no torn temp file). Created
    with mode 0o666 minus the umask, like any file (mkstemp's 0600 would hide results from
    a teammate's collect). A symbolic link at `path` is refused (LinkRefused)."""
    path = Path(path)
    refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o666))
    try:
        yield tmp
        refuse_link(tmp)  # swapped for a link while written: never renamed into place
        os.replace(tmp, path)
    finally:
        if tmp.exists() or tmp.is_symlink():
            tmp.unlink()


@contextmanager
def atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """atomic_path's writer through the descriptor that created the temp file (binary),
    so the bytes never go through its name (which a link could replace meanwhile)."""
    with atomic_path(path) as tmp:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW), "wb") as f:
            yield f


def write_under(root: str | Path, path: str | Path, text: str) -> None:
    """`text` into `path` (a file below `root`) without following a symbolic link at any
    level below `root`: each folder is created or opened relative to its parent's
    descriptor with O_NOFOLLOW, the file written to a temp file there and renamed over the
    name (a link standing at the name is replaced, never written through). A link on the
    way is LinkRefused, named. `root` itself, the user's choice, may be a link; a `path`
    outside `root` is written the same way below its own parent."""
    root, path = Path(root).absolute(), Path(path).absolute()
    try:
        parts = path.parent.relative_to(root).parts
    except ValueError:
        root, parts = path.parent, ()
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        where = root
        for part in parts:
            where = where / part
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and where.is_symlink():
                    refuse_link(where)
                raise
            os.close(fd)
            fd = sub
        tmp = temp_name(path).name
        out = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o666, dir_fd=fd)
        try:
            with os.fdopen(out, "wb") as f:
                f.write(text.encode())
            os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_text(path: Path, text: str) -> None:
    with atomic_file(path) as f:
        f.write(text.encode())


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    with atomic_file(path) as f:
        df.to_parquet(f, index=False)


def save_figure(fig, path: str | Path, **savefig_kwargs) -> None:
    """A matplotlib figure through the atomic writer (the format from the real suffix:
    the temp name's .tmp says nothing)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip("."), **savefig_kwargs)


def read_json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


class DamagedFile(ValueError):
    """A file the project wrote that cannot be read back; the message names it."""


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or DamagedFile saying what is wrong with it (empty,
    not JSON, not an object); OSError (missing, unreadable) passes through."""
    text = Path(path).read_text()
    if not text.strip():
        raise DamagedFile(f"{path} is empty")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise DamagedFile(f"{path} is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(obj, dict):
        raise DamagedFile(f"{path} holds a JSON {type(obj).__name__}, not an object")
    return obj


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("tpo-bench", "torch", "numpy", "pandas", "pyarrow", "hydra-core", "omegaconf"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# What "-dirty" looks at: the harness's code and packaging. A resumed run's own committed
# records (checkpoint, metrics) change as it trains; that is data, not other code.
CODE_PATHS = (*ROOMS, "pyproject.toml")
# The rooms a run imports its code from: an untracked module there counts as well (one
# dropped into algorithms/ or tasks/ is imported by every run).
RUN_ROOMS = ("algorithms", "tasks", "contract", "bench")


def dirty_lines(porcelain: str) -> list[str]:
    """The lines of `git status --porcelain --untracked-files=all -- CODE_PATHS` that make
    a checkout's code differ from its commit: an edit to a tracked file, or an untracked
    Python file under RUN_ROOMS."""
    out = []
    for line in porcelain.splitlines():
        path = line[3:].strip('"')
        if not line.startswith("??") or (path.endswith(".py") and path.split("/", 1)[0] in RUN_ROOMS):
            out.append(line)
    return out


def git_commit(root: Path | None = None) -> str | None:
    """The commit of the checkout at root, this code's by default ("-dirty" with
    uncommitted changes to tracked code files, CODE_PATHS, or an untracked module under
    RUN_ROOMS), or None where root is not the top of a checkout of its own."""
    root = Path(REPO_ROOT if root is None else root).resolve()
    try:
        # A non-editable install sits in site-packages, which may lie inside some other
        # repository (a venv in a project folder): that repository's commit is not ours.
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=5)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
            return None
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=all", "--", *CODE_PATHS],
                                capture_output=True, text=True, timeout=5)
        return sha.stdout.strip() + ("-dirty" if dirty_lines(status.stdout) else "")
    except (OSError, subprocess.SubprocessError):
        return None
