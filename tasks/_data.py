"""MNIST for the contextual-bandit task: the four gzip IDX files, checked, loaded once.

Files already in the data folder get structural checks only (magic number, item count
against payload, label range): copies re-compressed by someone else are fine. Files that
we download ourselves must also match the official MD5s.

    python -m tpo_bench.tools.data mnist --dir DIR   # pre-stage on a machine with internet
"""
from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import http.client
import os
import sys
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.tasks  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.tasks"
from ..contract import io

BASE_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
ENV_VAR = "TPO_BENCH_MNIST_DIR"
TIMEOUT_S = 30
IMAGES, LABELS = 2051, 2049  # IDX magic numbers: unsigned bytes, 3 and 1 dimensions

TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"
FILES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)
MD5 = {
    TRAIN_IMAGES: "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    TRAIN_LABELS: "d53e105ee54ea40749a09fcbcd1e9432",
    TEST_IMAGES: "9fb629c4189551a2d022fa330f9573f3",
    TEST_LABELS: "ec29112dd5afa0611ce80d1b7f02629c",
}


class DataError(ValueError):
    """The data is missing, unreachable or malformed; the message says which file."""


@dataclass(frozen=True, eq=False)
class MnistData:
    """Shared by every caller in the process (see `load_mnist`): do not modify in place."""
    train_x: torch.Tensor  # float32 [n, 784], pixels / 255
    train_y: torch.Tensor  # int64 [n]
    test_x: torch.Tensor
    test_y: torch.Tensor
    source: Path


def default_data_dir() -> Path:
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tpo-bench" / "mnist"


def read_idx(path: str | Path, magic: int | None = None) -> np.ndarray:
    """One gzip IDX file of unsigned bytes as a uint8 array shaped as its header says."""
    path = Path(path)
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:  # truncated or not gzip at all
        raise DataError(f"{path}: cannot decompress ({e})") from e
    if len(data) < 4:
        raise DataError(f"{path}: too short for an IDX header ({len(data)} bytes)")
    found = int.from_bytes(data[:4], "big")
    ndim = data[3]
    if data[:3] != b"\x00\x00\x08" or (magic is not None and found != magic):
        want = magic if magic is not None else f"{LABELS} or {IMAGES}"
        raise DataError(f"{path}: magic number {found}, expected {want}")
    start = 4 + 4 * ndim
    if len(data) < start:
        raise DataError(f"{path}: header cut short ({len(data)} of {start} bytes)")
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    want_bytes, got_bytes = int(np.prod(dims)), len(data) - start
    if got_bytes != want_bytes:
        raise DataError(f"{path}: header says {dims[0]} items ({want_bytes} bytes) but the "
                        f"payload holds {got_bytes} bytes (truncated or extra bytes)")
    arr = np.frombuffer(data, dtype=np.uint8, offset=start).reshape(dims)
    if found == LABELS and arr.size and arr.max() > 9:
        raise DataError(f"{path}: label {int(arr.max())} outside 0-9")
    return arr


def _read_pair(folder: Path, images: str, labels: str) -> tuple[torch.Tensor, torch.Tensor]:
    x = read_idx(folder / images, IMAGES)
    y = read_idx(folder / labels, LABELS)
    if x.shape[1:] != (28, 28):
        raise DataError(f"{folder / images}: images are {x.shape[1:]}, expected 28x28")
    if len(x) != len(y):
        raise DataError(f"{folder}: {images} holds {len(x)} images but {labels} holds "
                        f"{len(y)} labels")
    # astype copies into a fresh writable array, so the scaling can run in place
    xf = x.reshape(len(x), -1).astype(np.float32)
    xf /= 255
    return torch.from_numpy(xf), torch.from_numpy(y.astype(np.int64))


@functools.lru_cache(maxsize=4)
def _read_dir(folder: Path) -> MnistData:
    # One read per process and folder: a multirun of many jobs in one process pays once.
    train_x, train_y = _read_pair(folder, TRAIN_IMAGES, TRAIN_LABELS)
    test_x, test_y = _read_pair(folder, TEST_IMAGES, TEST_LABELS)
    return MnistData(train_x, train_y, test_x, test_y, folder)


def _missing_message(folder: Path, missing: list[str], why: str) -> str:
    return (f"MNIST files missing from {folder}: {', '.join(missing)} ({why}). Put the four "
            f"files {', '.join(FILES)} in that folder, or point task.data_dir (or the "
            f"{ENV_VAR} environment variable) at a folder that holds them. To pre-stage "
            f"them, run `python -m tpo_bench.tools.data mnist --dir DIR` on a machine with internet.")


def _download(url: str, dest: Path, md5: str) -> None:
    """Stream url to a temp file beside dest, check its MD5, then rename into place: an
    interrupted or corrupt download never leaves a file that looks complete."""
    with io.atomic_path(dest) as tmp:
        digest = hashlib.md5()
        with open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
            total = int(r.headers.get("Content-Length") or 0)
            done, shown = 0, -1
            while chunk := r.read(1 << 16):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                pct = 100 * done // total if total else done >> 20  # percent, else MiB
                if pct != shown:
                    shown = pct
                    of = f"/{total:,} bytes {pct:3d}%" if total else " bytes"
                    print(f"\r  {dest.name}: {done:,}{of}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr, flush=True)
        if digest.hexdigest() != md5:
            raise DataError(f"{dest}: downloaded from {url} with MD5 {digest.hexdigest()}, "
                            f"expected {md5}; nothing was kept")


def fetch_mnist(data_dir: str | Path | None = None, download: bool = True,
                base_url: str | None = None,
                checksums: dict[str, str] | None = None) -> dict[str, str]:
    """Make sure the four files are in data_dir, downloading the missing ones if allowed.
    Returns {file name: "present" | "downloaded"}; checks structure only when loading."""
    folder = Path(data_dir if data_dir is not None else default_data_dir()).expanduser()
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing and not download:
        raise DataError(_missing_message(folder, missing, "download disabled"))
    base, md5 = (base_url or BASE_URL).rstrip("/") + "/", {**MD5, **(checksums or {})}
    status = {name: "present" for name in FILES}
    for name in missing:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            print(f"downloading {base}{name} -> {folder}", file=sys.stderr, flush=True)
            _download(base + name, folder / name, md5[name])
        except (OSError, http.client.HTTPException) as e:  # URLError and timeouts included
            gone = [n for n in missing if not (folder / n).is_file()]
            raise DataError(_missing_message(folder, gone, f"download from {base} failed: "
                                             f"{e}")) from e
        status[name] = "downloaded"
    return status


def load_mnist(data_dir: str | Path | None = None, download: bool = True,
               base_url: str | None = None,
               checksums: dict[str, str] | None = None) -> MnistData:
    """MNIST from data_dir (default: `default_data_dir()`), downloaded there if missing and
    allowed. Item counts come from the IDX headers. Cached per resolved folder."""
    folder = Path(data_dir if data_dir is not None else default_data_dir()).expanduser()
    fetch_mnist(folder, download, base_url, checksums)
    return _read_dir(folder.resolve())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tpo_bench.tools.data",
                                description="Download (if missing) and check a data set.")
    p.add_argument("dataset", choices=["mnist"])
    p.add_argument("--dir", default=None, help=f"target folder (default: ${ENV_VAR} or "
                   f"the user cache, now {default_data_dir()})")
    p.add_argument("--base-url", default=BASE_URL, help="mirror serving the four files")
    p.add_argument("--md5", action="append", default=[], metavar="FILE=HEX",
                   help="expected MD5 of a download, replacing the official one (a mirror "
                        "serving re-compressed files); repeatable")
    args = p.parse_args(argv)
    try:
        checksums = dict(kv.split("=", 1) for kv in args.md5)
    except ValueError:
        p.error("--md5 takes FILE=HEX")
    try:
        status = fetch_mnist(args.dir, True, args.base_url, checksums)
        data = load_mnist(args.dir, download=False)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    counts = dict(zip(FILES, (len(data.train_x), len(data.train_y), len(data.test_x),
                              len(data.test_y))))
    print(f"MNIST in {data.source}")
    for name in FILES:
        how = "downloaded, MD5 verified" if status[name] == "downloaded" else "present"
        print(f"  {name}: {how}, checked, {counts[name]:,} items")
    print(f"train: {len(data.train_x):,} images, test: {len(data.test_x):,} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
