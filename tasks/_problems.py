"""Verifiable problems for the LLM task: reasoning-gym's procedural data sets and GSM8K.
A `Problem` is a prompt, its gold answer as text ("" where none) and the entry `score` needs.

Reasoning-gym splits: a prompt is in test when the first 8 bytes of SHA-256(prompt) fall
in the lowest TEST_SHARE of their range, else in train; both read one stream of chunks
(CHUNK items each, seeded by a hash of (dataset, seed, k): reasoning-gym seeds item i with
Random(seed + i), so neighbouring plain seeds would shift the same items). So train and
test never share a prompt, a split of n is the first n of any larger one, and a split not
filled within DRAWS_PER_ITEM draws per item is refused. GSM8K: the official files from
`data_dir` (else $TPO_BENCH_GSM8K_DIR, else the user cache; `python -m tpo_bench.tools.data gsm8k`
stages them); train less any test question; the seed permutes a split, `size` a prefix.
Scores in [0, 1]: reasoning-gym's own score_answer on the last <answer>...</answer> (else
the whole completion); GSM8K the number after the last "####", else in the last \\boxed{},
else in <answer> tags, else the last number, compared as decimals. Rebuild problems from
(dataset, split, size, seed, config), not from stored entries (some lose tuples to JSON).
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import hashlib
import http.client
import itertools
import json
import math
import os
import random
import re
import sys
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..contract import io
from ._data import DataError

GSM8K = "gsm8k"
SPLITS = ("train", "test")
TEST_SHARE = 0.2
CHUNK = 1000
DRAWS_PER_ITEM = 50  # ten times the draws a test item takes on average at TEST_SHARE 0.2
CONFIG_KEY = "dataset_config"
RESERVED = ("seed", "size")  # reasoning-gym settings the splits own

GSM8K_URL = ("https://raw.githubusercontent.com/openai/grade-school-math/master/"
             "grade_school_math/data/")
GSM8K_ENV = "TPO_BENCH_GSM8K_DIR"
GSM8K_FILES = {"train": "train.jsonl", "test": "test.jsonl"}
# Of the files in openai/grade-school-math at 3101c7d (unchanged since the release commit
# b0bb162); computed from that repository's git blobs, whose hashes check the content.
GSM8K_SHA256 = {
    "train.jsonl": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
    "test.jsonl": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
}
TIMEOUT_S = 30

# A thousands-grouped or plain integer, an optional decimal part; a trailing "." is not one.
NUMBER = re.compile(r"-?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


@dataclasses.dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str
    entry: dict


def _reasoning_gym():
    try:
        import reasoning_gym  # slow (seconds) and optional: only when a data set needs it
    except ImportError as e:
        raise ImportError(f"reasoning-gym is not installed ({e}): pip install -e '.[llm]'") from e
    return reasoning_gym


def dataset_names() -> tuple[str, ...]:
    """The valid values of task.dataset: reasoning-gym's registered names and gsm8k."""
    return tuple(sorted(_reasoning_gym().factory.DATASETS)) + (GSM8K,)


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def check_dataset(name: str) -> None:
    if name == GSM8K:
        return
    names = dataset_names()
    if name not in names:
        raise ValueError(f"task.dataset={name!r} is not a data set{_did_you_mean(name, names)}; "
                         f"choices: {', '.join(names)}")


def _build(dataset: str, config: dict, seed: int, size: int):
    check_dataset(dataset)
    rg = _reasoning_gym()
    settings = {f.name for f in dataclasses.fields(rg.factory.DATASETS[dataset][1])}
    for key in config:
        if key in RESERVED:
            raise ValueError(f"task.dataset_config.{key}: set by the benchmark (from the seed "
                             f"and the split sizes), not by the data set's config")
        if key not in settings:
            valid = sorted(settings - set(RESERVED))
            raise ValueError(f"task.dataset_config.{key}: not a setting of reasoning-gym's "
                             f"{dataset}{_did_you_mean(key, valid)}; settings: "
                             f"{', '.join(valid) or 'none'}")
    try:
        return rg.create_dataset(dataset, **config, seed=seed, size=size)
    except (AssertionError, TypeError, ValueError) as e:  # validate() asserts
        raise ValueError(f"task.dataset_config {config} refused by reasoning-gym's {dataset}: "
                         f"{type(e).__name__}: {e}") from e


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def split_of(prompt: str) -> str:
    return "test" if _hash(prompt) < TEST_SHARE * 2**64 else "train"


def _stream(dataset: str, seed: int, config: dict):
    for k in itertools.count():
        ds = _build(dataset, config, _hash(f"{dataset}\0{seed}\0{k}") % 2**31, CHUNK)
        for i in range(CHUNK):
            yield ds[i]


def jsonable(x):
    """x with each leaf json.dumps refuses made one it takes (numpy scalars by value, the
    rest, like gsm_symbolic's Fractions, as text); containers keep their types (tuples
    too: arc_agi's scorer wants them)."""
    if isinstance(x, dict):
        return {k if isinstance(k, (str, int, float, bool)) or k is None else str(k):
                jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(jsonable(v) for v in x)
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if callable(getattr(x, "item", None)):  # a numpy scalar
        return jsonable(x.item())
    return str(x)


def problems(dataset: str, split: str, size: int, seed: int, config: dict | None = None,
             data_dir: str = "") -> list[Problem]:
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: expected one of {', '.join(SPLITS)}")
    if size < 0:
        raise ValueError(f"a split of {size} problems: expected 0 or more")
    if dataset == GSM8K:
        if config:
            raise ValueError(f"task.dataset_config.{next(iter(config))}: gsm8k takes no config")
        return _gsm8k_problems(split, size, seed, data_dir)
    config = dict(config or {})
    scorer_for(dataset, _config_key(config))  # refuses a bad name or config before any draw
    out: list[Problem] = []
    stream, drawn, limit = _stream(dataset, seed, config), 0, DRAWS_PER_ITEM * size + CHUNK
    while len(out) < size:
        if drawn == limit:
            raise ValueError(f"task.dataset={dataset} with task.dataset_config {config}: the "
                             f"{split} split holds {len(out)} of {size} problems after {limit:,} "
                             f"draws; this config has too few distinct problems in the {split} "
                             f"share ({TEST_SHARE:.0%} of prompts go to test): widen it")
        e = next(stream)
        drawn += 1
        if split_of(e["question"]) == split:
            gold = "" if e["answer"] is None else str(e["answer"])
            out.append(Problem(e["question"], gold, jsonable({**e, CONFIG_KEY: config})))
    return out


# ---- scoring

def extract_answer(completion: str) -> str:
    """The content of the last <answer>...</answer>, else the completion; stripped."""
    tags = ANSWER_TAG.findall(completion)
    return (tags[-1] if tags else completion).strip()


def _decimal(number: str) -> Decimal:
    return Decimal(number.replace(",", "").replace("$", ""))


def extract_number(completion: str) -> Decimal | None:
    """GSM8K's final answer of a completion (see the module's rules), None if it has none."""
    if "####" in completion:
        # the first number after the marker: a model may run on into a new question
        found = NUMBER.findall(completion.rsplit("####", 1)[1])[:1]
    elif boxed := BOXED.findall(completion):
        found = NUMBER.findall(boxed[-1])[-1:]
    elif tags := ANSWER_TAG.findall(completion):
        found = NUMBER.findall(tags[-1])[-1:]
    else:
        found = NUMBER.findall(completion)[-1:]
    return _decimal(found[0]) if found else None


def _config_key(config: dict) -> str:
    try:
        return json.dumps(config, sort_keys=True)
    except TypeError as e:
        raise ValueError(f"task.dataset_config {config}: values must be JSON ({e})") from e


@functools.lru_cache(maxsize=64)
def scorer_for(dataset: str, config_json: str):
    return _build(dataset, json.loads(config_json), seed=0, size=1)


def score(dataset: str, completion: str, problem: Problem) -> float:
    if dataset == GSM8K:
        got = extract_number(completion)
        return float(got is not None and got == _decimal(problem.entry["answer"]))
    config = _config_key(problem.entry.get(CONFIG_KEY) or {})
    try:
        value = float(scorer_for(dataset, config).score_answer(extract_answer(completion),
                                                            problem.entry))
    except Exception:  # noqa: BLE001 -- model text must not crash a run in a scorer's parser
        return 0.0
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0


def _colouring(entry: dict) -> str:
    puzzle = entry["metadata"]["puzzle"]
    neighbours: dict[Any, set] = {v: set() for v in puzzle["vertices"]}
    for u, v in puzzle["edges"]:
        neighbours[u].add(v)
        neighbours[v].add(u)
    colour: dict[Any, int] = {}
    for v in puzzle["vertices"]:
        taken = {colour.get(n) for n in neighbours[v]}
        free = [c for c in puzzle["color_options"] if c not in taken]
        if not free:
            raise ValueError(f"graph_color: greedy colouring ran out of colours at vertex {v}")
        colour[v] = free[0]
    return json.dumps({str(v): c for v, c in colour.items()})


def solution(dataset: str, problem: Problem) -> str:
    """The completion a supervised warm start trains on: the bare gold answer."""
    if dataset == "graph_color":
        # reasoning-gym gives no gold answer, but it keeps only puzzles that a greedy
        # colouring in vertex order solves
        return _colouring(problem.entry)
    if dataset == GSM8K or problem.entry.get("answer") is not None:
        return problem.answer
    raise ValueError(f"task.dataset={dataset}: reasoning-gym gives no gold answer for its "
                     f"problems, so there is no solution to warm-start on")


# ---- GSM8K files

def default_gsm8k_dir() -> Path:
    if os.environ.get(GSM8K_ENV):
        return Path(os.environ[GSM8K_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tpo-bench" / "gsm8k"


def _folder(data_dir: str | Path | None) -> Path:
    return Path(data_dir or default_gsm8k_dir()).expanduser()


def read_gsm8k(path: str | Path) -> list[tuple[str, str, str]]:
    """(question, final number without commas, worked answer) of each line of one file."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e})") from e
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}, line {n}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str)
                                                for k in ("question", "answer")):
            raise DataError(f'{path}, line {n}: expected an object with "question" and '
                            f'"answer" strings')
        if not obj["question"].strip():
            raise DataError(f"{path}, line {n}: empty question")
        if "####" not in obj["answer"]:
            raise DataError(f'{path}, line {n}: the answer has no final "#### <number>"')
        final = obj["answer"].rsplit("####", 1)[1].strip()
        if not NUMBER.fullmatch(final):
            raise DataError(f"{path}, line {n}: {final!r} after #### is not a number")
        rows.append((obj["question"], final.replace(",", "").replace("$", ""), obj["answer"]))
    if not rows:
        raise DataError(f"{path}: holds no problems")
    return rows


def _missing_message(folder: Path, missing: list[str], why: str) -> str:
    return (f"GSM8K files missing from {folder}: {', '.join(missing)} ({why}). Put "
            f"{' and '.join(GSM8K_FILES.values())} (from {GSM8K_URL}) in that folder, or "
            f"point task.data_dir (or the {GSM8K_ENV} environment variable) at a folder "
            f"that holds them. To stage them, run `python -m tpo_bench.tools.data gsm8k --dir DIR` on "
            f"a machine with internet and copy DIR here.")


@functools.lru_cache(maxsize=8)
def _gsm8k_split(folder: Path, split: str) -> tuple[tuple[str, str, str], ...]:
    missing = [f for f in GSM8K_FILES.values() if not (folder / f).is_file()]
    if missing:
        raise DataError(_missing_message(folder, missing, "not staged"))
    test = read_gsm8k(folder / GSM8K_FILES["test"])
    if split == "test":
        return tuple(test)
    held_out = {q for q, _, _ in test}
    return tuple(r for r in read_gsm8k(folder / GSM8K_FILES["train"]) if r[0] not in held_out)


def _gsm8k_problems(split: str, size: int, seed: int, data_dir: str) -> list[Problem]:
    folder = _folder(data_dir).resolve()
    rows = _gsm8k_split(folder, split)
    if size > len(rows):
        raise ValueError(f"gsm8k: asked for {size:,} {split} problems but "
                         f"{folder / GSM8K_FILES[split]} holds {len(rows):,}"
                         + (" (after dropping questions that test.jsonl also holds)"
                            if split == "train" else ""))
    order = list(range(len(rows)))
    random.Random(_hash(f"gsm8k\0{seed}")).shuffle(order)
    return [Problem(q, a, {"answer": a, "rationale": worked})
            for q, a, worked in (rows[i] for i in order[:size])]


def _download(url: str, dest: Path, sha256: str) -> None:
    with io.atomic_path(dest) as tmp:  # a failed or corrupt download leaves nothing behind
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
            blob = r.read()
        digest = hashlib.sha256(blob).hexdigest()
        if digest != sha256:
            raise DataError(f"{dest}: downloaded from {url} with SHA-256 {digest}, expected "
                            f"{sha256}; nothing was kept")
        tmp.write_bytes(blob)


def fetch_gsm8k(data_dir: str | Path | None = None, base_url: str = GSM8K_URL,
                checksums: dict[str, str] | None = None) -> dict[str, str]:
    """Download the missing files into data_dir; {file name: "present" | "downloaded"}."""
    folder = _folder(data_dir)
    base, sha = base_url.rstrip("/") + "/", {**GSM8K_SHA256, **(checksums or {})}
    status = {}
    for name in GSM8K_FILES.values():
        status[name] = "present"
        if (folder / name).is_file():
            continue
        try:
            print(f"downloading {base}{name} -> {folder}", file=sys.stderr, flush=True)
            _download(base + name, folder / name, sha[name])
        except (OSError, http.client.HTTPException) as e:  # URLError and timeouts included
            gone = [n for n in GSM8K_FILES.values() if not (folder / n).is_file()]
            raise DataError(_missing_message(folder, gone, f"download from {base} failed: "
                                             f"{e}")) from e
        status[name] = "downloaded"
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tpo_bench.tools.data",
                                description="Download (if missing) and check GSM8K's files.")
    p.add_argument("dataset", choices=[GSM8K])
    p.add_argument("--dir", default=None, help=f"target folder (default: ${GSM8K_ENV} or "
                   f"the user cache, now {default_gsm8k_dir()})")
    p.add_argument("--base-url", default=GSM8K_URL, help="mirror serving the two files")
    p.add_argument("--sha256", action="append", default=[], metavar="FILE=HEX",
                   help="expected SHA-256 of a download, replacing the official one; repeatable")
    args = p.parse_args(argv)
    try:
        checksums = dict(kv.split("=", 1) for kv in args.sha256)
    except ValueError:
        p.error("--sha256 takes FILE=HEX")
    folder = _folder(args.dir)
    try:
        status = fetch_gsm8k(folder, args.base_url, checksums)
        counts = {name: len(read_gsm8k(folder / name)) for name in GSM8K_FILES.values()}
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"GSM8K in {folder}")
    for name, n in counts.items():
        how = "downloaded, SHA-256 verified" if status[name] == "downloaded" else "present"
        print(f"  {name}: {how}, checked, {n:,} problems")
    return 0
