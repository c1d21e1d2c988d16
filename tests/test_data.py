"""The MNIST loader (tasks/_data.py, staged by `python -m tpo_bench.tools.data`): IDX parsing and checks, downloads from a loopback server, the CLI, and
(when TPO_BENCH_MNIST_DIR is set) the real files."""
import functools
import gzip
import hashlib
import http.server
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from tpo_bench.tasks import _data as data
from tpo_bench.tasks._data import DataError, FILES, load_mnist, read_idx
from conftest import REPO

N_TRAIN, N_TEST = 20, 7


def idx_bytes(arr: np.ndarray, magic: int) -> bytes:
    return magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape) + \
        arr.astype(np.uint8).tobytes()


def write_gz(path: Path, raw: bytes) -> None:
    path.write_bytes(gzip.compress(raw, mtime=0))


def fixture_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    train_x = rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8)
    train_x[0, 0, 0], train_x[0, 0, 1] = 0, 255  # both ends of the scale
    return {
        data.TRAIN_IMAGES: train_x,
        data.TRAIN_LABELS: (np.arange(N_TRAIN) * 3 % 10).astype(np.uint8),
        data.TEST_IMAGES: rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
        data.TEST_LABELS: (9 - np.arange(N_TEST) % 10).astype(np.uint8),
    }


def make_mnist(folder: Path) -> dict[str, np.ndarray]:
    """Four valid gzip IDX files, 20 train and 7 test images; returns the arrays."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = fixture_arrays()
    for name, arr in arrays.items():
        write_gz(folder / name, idx_bytes(arr, data.IMAGES if arr.ndim == 3 else data.LABELS))
    return arrays


def md5s(folder: Path) -> dict[str, str]:
    return {n: hashlib.md5((folder / n).read_bytes()).hexdigest() for n in FILES}


@pytest.fixture
def served(tmp_path):
    """(folder served, base URL) of a loopback HTTP server holding the fixture files."""
    root = tmp_path / "served"
    make_mnist(root)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def dead_url():
    """A loopback URL nobody listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tpo_bench.tools.data", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=120)


def test_fixture_loads_with_header_counts(tmp_path):
    arrays = make_mnist(tmp_path)
    d = load_mnist(tmp_path, download=False)
    assert d.train_x.shape == (N_TRAIN, 784) and d.test_x.shape == (N_TEST, 784)
    assert d.train_x.dtype == torch.float32 and d.train_y.dtype == torch.int64
    assert d.train_x[0, 0] == 0 and d.train_x[0, 1] == 1
    expect = torch.from_numpy(arrays[data.TRAIN_IMAGES].reshape(N_TRAIN, 784)).float() / 255
    assert torch.equal(d.train_x, expect)
    assert d.train_y.tolist() == arrays[data.TRAIN_LABELS].tolist()
    assert d.test_y.tolist() == [9, 8, 7, 6, 5, 4, 3]
    assert d.source == tmp_path.resolve()
    assert load_mnist(tmp_path, download=False) is d  # cached per folder


def test_default_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TPO_BENCH_MNIST_DIR", str(tmp_path / "here"))
    assert data.default_data_dir() == tmp_path / "here"
    monkeypatch.delenv("TPO_BENCH_MNIST_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert data.default_data_dir() == tmp_path / "cache" / "tpo-bench" / "mnist"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert data.default_data_dir() == Path.home() / ".cache" / "tpo-bench" / "mnist"


def test_truncated_payload(tmp_path):
    make_mnist(tmp_path)
    raw = idx_bytes(fixture_arrays()[data.TEST_IMAGES], data.IMAGES)
    write_gz(tmp_path / data.TEST_IMAGES, raw[:-100])
    with pytest.raises(DataError, match=rf"{data.TEST_IMAGES}.*header says 7 items.*truncated"):
        load_mnist(tmp_path, download=False)
    write_gz(tmp_path / data.TEST_IMAGES, raw + b"\x00")  # extra bytes too
    with pytest.raises(DataError, match="payload holds 5489 bytes"):
        read_idx(tmp_path / data.TEST_IMAGES)


def test_truncated_gzip_stream(tmp_path):
    make_mnist(tmp_path)
    path = tmp_path / data.TRAIN_IMAGES
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(DataError, match=rf"{data.TRAIN_IMAGES}: cannot decompress"):
        load_mnist(tmp_path, download=False)
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="cannot decompress"):
        read_idx(path)


def test_wrong_magic(tmp_path):
    make_mnist(tmp_path)
    # a labels file where images belong: a valid IDX file, the wrong kind
    write_gz(tmp_path / data.TRAIN_IMAGES, idx_bytes(np.zeros(N_TRAIN, np.uint8), data.LABELS))
    with pytest.raises(DataError, match=rf"{data.TRAIN_IMAGES}: magic number 2049, expected 2051"):
        load_mnist(tmp_path, download=False)
    write_gz(tmp_path / "junk.gz", b"\x12\x34\x56\x78" + bytes(8))
    with pytest.raises(DataError, match="magic number 305419896"):
        read_idx(tmp_path / "junk.gz")


def test_labels_out_of_range(tmp_path):
    make_mnist(tmp_path)
    labels = fixture_arrays()[data.TEST_LABELS]
    labels[3] = 10
    write_gz(tmp_path / data.TEST_LABELS, idx_bytes(labels, data.LABELS))
    with pytest.raises(DataError, match=rf"{data.TEST_LABELS}: label 10 outside 0-9"):
        load_mnist(tmp_path, download=False)


def test_count_mismatch(tmp_path):
    make_mnist(tmp_path)
    write_gz(tmp_path / data.TRAIN_LABELS, idx_bytes(np.zeros(N_TRAIN - 1, np.uint8),
                                                     data.LABELS))
    with pytest.raises(DataError, match=rf"{data.TRAIN_IMAGES} holds 20 images but "
                                        rf"{data.TRAIN_LABELS} holds 19 labels"):
        load_mnist(tmp_path, download=False)


def test_missing_folder_download_disabled(tmp_path):
    folder = tmp_path / "nowhere"
    with pytest.raises(DataError) as e:
        load_mnist(folder, download=False)
    msg = str(e.value)
    assert "task.data_dir" in msg and str(folder) in msg and "TPO_BENCH_MNIST_DIR" in msg
    assert "python -m tpo_bench.tools.data mnist --dir DIR" in msg
    assert all(name in msg for name in FILES)
    assert not folder.exists()


def test_download_missing_files(tmp_path, served, capsys):
    root, url = served
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / data.TRAIN_LABELS).write_bytes((root / data.TRAIN_LABELS).read_bytes())
    status = data.fetch_mnist(folder, base_url=url, checksums=md5s(root))
    assert status == {name: "present" if name == data.TRAIN_LABELS else "downloaded"
                      for name in FILES}
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)  # no temp files left
    assert md5s(folder) == md5s(root)
    err = capsys.readouterr().err
    total = (root / data.TRAIN_IMAGES).stat().st_size
    assert f"{data.TRAIN_IMAGES}: {total:,}/{total:,} bytes 100%" in err
    assert data.TRAIN_LABELS not in err
    d = load_mnist(folder, download=False)
    assert d.train_x.shape == (N_TRAIN, 784) and d.test_y.shape == (N_TEST,)


def test_download_with_official_checksums_fails(tmp_path, served):
    _, url = served  # the fixture is not the official MNIST: every MD5 disagrees
    with pytest.raises(DataError, match=rf"{data.TRAIN_IMAGES}.*MD5 [0-9a-f]{{32}}, expected "
                                        rf"{data.MD5[data.TRAIN_IMAGES]}"):
        load_mnist(tmp_path / "cache", base_url=url)
    assert list((tmp_path / "cache").iterdir()) == []


def test_corrupt_download_leaves_nothing(tmp_path, served):
    root, url = served
    checksums = md5s(root)
    blob = bytearray((root / data.TEST_IMAGES).read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (root / data.TEST_IMAGES).write_bytes(bytes(blob))
    folder = tmp_path / "cache"
    with pytest.raises(DataError) as e:
        load_mnist(folder, base_url=url, checksums=checksums)
    msg = str(e.value)
    assert data.TEST_IMAGES in msg and checksums[data.TEST_IMAGES] in msg
    assert hashlib.md5(bytes(blob)).hexdigest() in msg
    assert not (folder / data.TEST_IMAGES).exists()
    assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*"))
    assert (folder / data.TRAIN_IMAGES).exists()  # earlier, verified files stay


def test_unreachable_url(tmp_path, dead_url):
    folder = tmp_path / "cache"
    with pytest.raises(DataError) as e:
        load_mnist(folder, base_url=dead_url)
    msg = str(e.value)
    assert "task.data_dir" in msg and str(folder) in msg and "TPO_BENCH_MNIST_DIR" in msg
    assert dead_url in msg and "failed" in msg
    assert [p for p in folder.iterdir()] == []


@pytest.mark.slow
def test_cli_downloads_and_checks(tmp_path, served):
    root, url = served
    folder = tmp_path / "staged"
    md5 = [f"--md5={name}={digest}" for name, digest in md5s(root).items()]
    proc = run_cli("mnist", "--dir", str(folder), "--base-url", url, *md5)
    assert proc.returncode == 0, proc.stderr
    assert f"{data.TRAIN_IMAGES}: downloaded, MD5 verified, checked, 20 items" in proc.stdout
    assert "train: 20 images, test: 7 images" in proc.stdout
    assert "100%" in proc.stderr
    assert md5s(folder) == md5s(root)


@pytest.mark.slow
def test_cli_unreachable_fails(tmp_path, dead_url):
    proc = run_cli("mnist", "--dir", str(tmp_path / "empty"), "--base-url", dead_url)
    assert proc.returncode != 0
    assert "error: MNIST files missing" in proc.stderr and "task.data_dir" in proc.stderr


def test_cli_present_files_in_process(tmp_path, capsys):
    make_mnist(tmp_path)
    assert data.main(["mnist", "--dir", str(tmp_path), "--base-url", "http://127.0.0.1:9/"]) == 0
    out = capsys.readouterr().out
    assert f"{data.TEST_LABELS}: present, checked, 7 items" in out
    assert "train: 20 images, test: 7 images" in out
    with pytest.raises(SystemExit) as e:
        data.main(["cifar10"])
    assert e.value.code == 2
    assert "invalid choice: 'cifar10'" in capsys.readouterr().err


@pytest.mark.skipif(not os.environ.get("TPO_BENCH_MNIST_DIR"),
                    reason="TPO_BENCH_MNIST_DIR not set: no real MNIST files to check")
def test_real_mnist():
    d = load_mnist(download=False)
    assert d.train_x.shape == (60_000, 784) and d.test_x.shape == (3_000, 784)
    counts = torch.bincount(d.train_y, minlength=10).tolist()
    assert counts == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert d.test_y.shape == (3_000,) and 0 <= d.test_y.min() and d.test_y.max() <= 9
    assert 0 <= d.train_x.min() and d.train_x.max() == 1
