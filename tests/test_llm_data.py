"""The LLM task's problems (tasks/_problems.py): reasoning-gym splits and scoring, GSM8K's
answer extraction, loader and staging (`python -m tpo_bench.tools.data gsm8k`)."""
import functools
import hashlib
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
from decimal import Decimal
from fractions import Fraction

import pytest

pytest.importorskip("reasoning_gym")

from conftest import REPO  # noqa: E402
from tpo_bench.tasks import _problems as P  # noqa: E402
from tpo_bench.tasks._data import DataError  # noqa: E402
from tpo_bench.tasks._problems import (Problem, extract_answer, extract_number, problems,  # noqa: E402
                             score, solution)

TINY_SUMS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # 200 prompts


def prompts(ps):
    return [p.prompt for p in ps]


def test_deterministic_and_prefix_stable():
    a = problems("chain_sum", "train", 40, 3)
    assert a == problems("chain_sum", "train", 40, 3)
    assert len(set(prompts(a))) == 40  # the default config's space is large
    assert prompts(problems("chain_sum", "train", 15, 3)) == prompts(a[:15])
    assert set(prompts(a)).isdisjoint(prompts(problems("chain_sum", "train", 40, 4)))
    wide = problems("chain_sum", "train", 40, 3, {"min_digits": 3, "max_digits": 3})
    assert {p.entry["metadata"]["num_digits"] for p in wide} == {3}


def test_neighbouring_seeds_are_not_shifted_copies():
    # reasoning-gym seeds item i with seed + i: seed 6's items must not be seed 5's moved by one
    a, b = problems("chain_sum", "train", 30, 5), problems("chain_sum", "train", 30, 6)
    assert len(set(prompts(a)) & set(prompts(b))) < 3


def test_train_test_disjoint_with_few_distinct_problems():
    train = problems("chain_sum", "train", 2000, 0, TINY_SUMS)
    test = problems("chain_sum", "test", 200, 0, TINY_SUMS)
    assert len(train) == 2000 and len(test) == 200
    seen_train, seen_test = set(prompts(train)), set(prompts(test))
    assert seen_train.isdisjoint(seen_test)
    # the space is nearly exhausted by train, so a collision would have been likely
    assert len(seen_train) > 120 and len(seen_test) > 15
    assert all(P.split_of(q) == "test" for q in seen_test)
    # the other seed's test split stays clear of this seed's train split too
    assert seen_train.isdisjoint(prompts(problems("chain_sum", "test", 100, 9, TINY_SUMS)))


def test_split_that_cannot_be_filled_is_refused(monkeypatch):
    monkeypatch.setattr(P, "TEST_SHARE", 0.0)  # no prompt goes to test
    monkeypatch.setattr(P, "DRAWS_PER_ITEM", 2)
    with pytest.raises(ValueError, match=r"test split holds 0 of 5 problems after 1,010 draws"):
        problems("chain_sum", "test", 5, 0, TINY_SUMS)
    assert len(problems("chain_sum", "train", 5, 0, TINY_SUMS)) == 5


def wrong_answer(dataset, p):
    if dataset in ("chain_sum", "gsm_symbolic"):
        return str(Decimal(p.answer) + 1)
    if dataset == "knights_knaves":  # every role swapped (the island renames them)
        terms = p.entry["metadata"]["knight_knave_terms"]
        swap = {terms["a_knight"]: terms["a_knave"], terms["a_knave"]: terms["a_knight"]}
        return re.sub("|".join(map(re.escape, swap)), lambda m: swap[m.group()], p.answer)
    if dataset == "countdown":
        return "+".join(map(str, p.entry["metadata"]["numbers"]))
    vertices = p.entry["metadata"]["puzzle"]["vertices"]  # graph_color: all one colour
    return json.dumps({str(v): 1 for v in vertices})


@pytest.mark.parametrize("dataset", ["chain_sum", "gsm_symbolic", "knights_knaves",
                                     "countdown", "graph_color"])
def test_gold_scores_one_and_wrong_less(dataset):
    ps = problems(dataset, "train", 4, 2)
    if dataset == "graph_color":
        ps = [p for p in ps if p.entry["metadata"]["puzzle"]["edges"]]
        assert ps and all(p.answer == "" for p in ps)  # no gold text in reasoning-gym
    for p in ps:
        gold = solution(dataset, p)
        assert gold and "<answer>" not in gold
        assert score(dataset, gold, p) == 1.0
        assert score(dataset, f"Let me think. 7 + 7.\n<answer>{gold}</answer>", p) == 1.0
        assert score(dataset, f"<answer>{wrong_answer(dataset, p)}</answer>", p) < 1.0
        # the entry survives a JSON round trip (a checkpoint) for these data sets
        again = Problem(p.prompt, p.answer, json.loads(json.dumps(p.entry)))
        assert score(dataset, gold, again) == 1.0


def test_partial_credit_is_kept():
    p = problems("countdown", "train", 1, 0)[0]
    assert score("countdown", "no idea", p) == 0.01  # reasoning-gym's reward for junk
    assert score("countdown", "<answer></answer>", p) == 0.01


def test_scoring_uses_the_problems_config():
    # decimal_arithmetic accepts an error of one unit in the config's last decimal place
    cfg = {"min_num_decimal_places": 1, "max_num_decimal_places": 1}
    p = problems("decimal_arithmetic", "train", 1, 0, cfg)[0]
    near = str(Decimal(p.answer) + Decimal("0.05"))
    assert score("decimal_arithmetic", near, p) == 1.0
    default = problems("decimal_arithmetic", "train", 1, 0)[0]
    assert score("decimal_arithmetic", str(Decimal(default.answer) + Decimal("0.05")), default) == 0


def test_scorer_that_raises_scores_zero(monkeypatch):
    p = problems("chain_sum", "train", 1, 0)[0]

    class Broken:
        def score_answer(self, answer, entry):
            raise RuntimeError("parser bug")

    monkeypatch.setattr(P, "scorer_for", lambda *a: Broken())
    assert score("chain_sum", p.answer, p) == 0.0


def test_no_solution_without_gold():
    p = problems("propositional_logic", "train", 1, 0)[0]
    with pytest.raises(ValueError, match="task.dataset=propositional_logic.*no gold answer"):
        solution("propositional_logic", p)


def test_extract_answer():
    assert extract_answer("  42 \n") == "42"
    assert extract_answer("<answer>1</answer> then <answer>\n 2 + 3 \n</answer> end") == "2 + 3"
    assert extract_answer("<answer>7 never closed") == "<answer>7 never closed"


@pytest.mark.parametrize("text, number", [
    ("She has 3 apples and 4 pears.\n#### 1,234", "1234"),
    ("#### 18\n\nQuestion: Tom has 5 cats", "18"),       # the first number after the marker
    ("#### 5 and later \\boxed{6}", "5"),                # #### beats \boxed
    ("so 3 + 4 = \\boxed{\\$1,000} and 7 more", "1000"),  # \boxed beats the last number
    ("<answer>x = 12</answer> and 9", "12"),              # tags beat the last number
    ("\\boxed{2} <answer>3</answer>", "2"),               # \boxed beats tags
    ("First 3, then 7, so 40.", "40"),                   # a trailing full stop
    ("It costs $2,500.50 in total", "2500.50"),
    ("The change is -5", "-5"),
    ("12.00", "12"),
])
def test_extract_number(text, number):
    assert extract_number(text) == Decimal(number)


def test_extract_number_without_one():
    assert extract_number("no digits here") is None
    assert extract_number("I computed 12 but #### unsure") is None  # the marker decides


def gsm8k_line(question, final, extra=""):
    return json.dumps({"question": question,
                       "answer": f"Step one: 2 + 3 = <<2+3=5>>5.\n{extra}#### {final}"})


TRAIN_Q = [f"Train question {i}: how many?" for i in range(8)]
TEST_Q = ["Test question A?", "Test question B?", "Test question C?"]


def make_gsm8k(folder, train_lines=None, test_lines=None):
    folder.mkdir(parents=True, exist_ok=True)
    train = train_lines or [gsm8k_line(q, f"{i},000" if i == 1 else i)
                            for i, q in enumerate(TRAIN_Q)]
    test = test_lines or [gsm8k_line(q, 10 + i) for i, q in enumerate(TEST_Q)]
    (folder / "train.jsonl").write_text("\n".join(train) + "\n")
    (folder / "test.jsonl").write_text("\n".join(test) + "\n")
    return folder


def test_gsm8k_loads_and_scores(tmp_path):
    folder = make_gsm8k(tmp_path / "g")
    train = problems("gsm8k", "train", 8, 0, data_dir=str(folder))
    assert sorted(prompts(train)) == sorted(TRAIN_Q)
    assert prompts(train) != TRAIN_Q  # permuted by the seed
    assert prompts(problems("gsm8k", "train", 3, 0, data_dir=str(folder))) == prompts(train[:3])
    assert prompts(problems("gsm8k", "train", 8, 1, data_dir=str(folder))) != prompts(train)
    big = next(p for p in train if p.prompt == TRAIN_Q[1])
    assert big.answer == "1000" and solution("gsm8k", big) == "1000"
    assert "#### 1,000" in big.entry["rationale"]
    assert score("gsm8k", "so #### $1,000.", big) == 1.0
    assert score("gsm8k", "1000.00", big) == 1.0
    assert score("gsm8k", "#### 100", big) == 0.0
    assert score("gsm8k", "I think 1000 but #### 999", big) == 0.0
    test = problems("gsm8k", "test", 3, 0, data_dir=str(folder))
    assert sorted(prompts(test)) == TEST_Q
    with pytest.raises(ValueError, match=r"asked for 9 train problems but .*train.jsonl holds 8"):
        problems("gsm8k", "train", 9, 0, data_dir=str(folder))


def test_gsm8k_train_drops_test_questions(tmp_path):
    lines = [gsm8k_line(q, i) for i, q in enumerate(TRAIN_Q[:4] + [TEST_Q[1]])]
    folder = make_gsm8k(tmp_path / "g", train_lines=lines)
    train = problems("gsm8k", "train", 4, 0, data_dir=str(folder))
    assert sorted(prompts(train)) == sorted(TRAIN_Q[:4])
    with pytest.raises(ValueError, match="holds 4 .after dropping questions that test.jsonl"):
        problems("gsm8k", "train", 5, 0, data_dir=str(folder))


def test_gsm8k_default_dir(tmp_path, monkeypatch):
    make_gsm8k(tmp_path / "env")
    monkeypatch.setenv("TPO_BENCH_GSM8K_DIR", str(tmp_path / "env"))
    assert P.default_gsm8k_dir() == tmp_path / "env"
    assert len(problems("gsm8k", "test", 2, 0)) == 2
    monkeypatch.delenv("TPO_BENCH_GSM8K_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert P.default_gsm8k_dir() == tmp_path / "cache" / "tpo-bench" / "gsm8k"


@pytest.mark.parametrize("bad, why", [
    (json.dumps({"question": "Q?", "answer": "It is 5."}),
     r'the answer has no final "#### <number>"'),
    ('{"question": "Q?", "answer": ', "not JSON"),
    (json.dumps({"question": "Q?"}), r'expected an object with "question" and "answer"'),
    (json.dumps({"question": "Q?", "answer": "#### five"}), "'five' after #### is not a number"),
    (json.dumps({"question": " ", "answer": "#### 5"}), "empty question"),
])
def test_gsm8k_bad_line_named(tmp_path, bad, why):
    lines = [gsm8k_line(q, i) for i, q in enumerate(TRAIN_Q[:4])]
    lines[2] = bad
    folder = make_gsm8k(tmp_path / "g", train_lines=lines)
    with pytest.raises(DataError, match=rf"train.jsonl, line 3: {why}"):
        problems("gsm8k", "train", 1, 0, data_dir=str(folder))


def test_gsm8k_missing_files(tmp_path):
    folder = tmp_path / "empty"
    with pytest.raises(DataError) as e:
        problems("gsm8k", "test", 1, 0, data_dir=str(folder))
    msg = str(e.value)
    assert str(folder) in msg and "train.jsonl, test.jsonl" in msg and "task.data_dir" in msg
    assert "TPO_BENCH_GSM8K_DIR" in msg and "python -m tpo_bench.tools.data gsm8k --dir DIR" in msg
    assert not folder.exists()


def test_unknown_dataset_named_with_choices():
    with pytest.raises(ValueError) as e:
        P.check_dataset("chain_sums")
    msg = str(e.value)
    assert "task.dataset='chain_sums'" in msg and "did you mean chain_sum" in msg
    assert "gsm8k" in msg and "knights_knaves" in msg
    with pytest.raises(ValueError, match="task.dataset='nope' is not a data set; choices"):
        problems("nope", "train", 0, 0)
    P.check_dataset("gsm8k")
    P.check_dataset("graph_color")


def test_bad_config_named():
    with pytest.raises(ValueError, match=r"task.dataset_config.min_term: not a setting of "
                                         r"reasoning-gym's chain_sum \(did you mean min_terms"):
        problems("chain_sum", "train", 0, 0, {"min_term": 2})
    with pytest.raises(ValueError, match=r"task.dataset_config.seed: set by the benchmark"):
        problems("chain_sum", "train", 3, 0, {"seed": 2})
    with pytest.raises(ValueError, match=r"refused by reasoning-gym's chain_sum: AssertionError: "
                                         r"min_terms must be positive"):
        problems("chain_sum", "train", 3, 0, {"min_terms": 0})
    with pytest.raises(ValueError, match=r"task.dataset_config.difficulty: gsm8k takes no config"):
        problems("gsm8k", "train", 3, 0, {"difficulty": 1})
    with pytest.raises(ValueError, match="split 'valid'"):
        problems("chain_sum", "valid", 3, 0)


def test_missing_reasoning_gym_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import now raises ImportError
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[llm]'")):
        P.check_dataset("chain_sum")
    P.check_dataset("gsm8k")  # GSM8K needs no reasoning-gym


@pytest.mark.slow
def test_import_does_not_load_reasoning_gym():
    code = "import sys, tasks._problems; print('reasoning_gym' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# ---- staging: python -m tpo_bench.tools.data gsm8k

@pytest.fixture
def served(tmp_path):
    root = make_gsm8k(tmp_path / "served")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def sha256s(folder):
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest()
            for n in ("train.jsonl", "test.jsonl")}


def test_download_verified(tmp_path, served):
    root, url = served
    folder = tmp_path / "cache"
    assert P.fetch_gsm8k(folder, url, sha256s(root)) == {"train.jsonl": "downloaded",
                                                         "test.jsonl": "downloaded"}
    assert sha256s(folder) == sha256s(root)
    assert sorted(p.name for p in folder.iterdir()) == ["test.jsonl", "train.jsonl"]
    assert P.fetch_gsm8k(folder, url)["train.jsonl"] == "present"


def test_download_with_official_checksums_fails(tmp_path, served):
    _, url = served  # the fixture is not the official GSM8K
    with pytest.raises(DataError, match=rf"train.jsonl: downloaded from {url}train.jsonl with "
                                        rf"SHA-256 [0-9a-f]{{64}}, expected "
                                        rf"{P.GSM8K_SHA256['train.jsonl']}"):
        P.fetch_gsm8k(tmp_path / "cache", url)
    assert list((tmp_path / "cache").iterdir()) == []


def test_offline_download_says_how_to_copy(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/"
    assert P.main(["gsm8k", "--dir", str(tmp_path / "d"), "--base-url", dead]) == 1
    with pytest.raises(DataError) as e:
        P.fetch_gsm8k(tmp_path / "d", dead)
    msg = str(e.value)
    assert f"download from {dead} failed" in msg and "copy DIR here" in msg
    assert "task.data_dir" in msg and P.GSM8K_URL in msg


@pytest.mark.slow
def test_cli_dispatches_gsm8k(tmp_path, served):
    root, url = served
    sums = [f"--sha256={n}={h}" for n, h in sha256s(root).items()]
    proc = subprocess.run([sys.executable, "-m", "tpo_bench.tools.data", "gsm8k", "--dir",
                           str(tmp_path / "staged"), "--base-url", url, *sums], cwd=REPO,
                          text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "train.jsonl: downloaded, SHA-256 verified, checked, 8 problems" in proc.stdout
    assert "test.jsonl: downloaded, SHA-256 verified, checked, 3 problems" in proc.stdout


def test_bench_data_refuses_unknown(capsys):
    from tpo_bench.tools import data
    with pytest.raises(SystemExit) as e:
        data.main(["cifar10"])
    assert e.value.code == 2
    assert "invalid choice: 'cifar10' (choose from 'mnist', 'gsm8k')" in capsys.readouterr().err


def test_entries_are_json():
    # seed 2's second gsm_symbolic item holds a Fraction, which json.dumps refuses as generated
    ps = problems("gsm_symbolic", "train", 4, 2)
    assert ps[1].entry["metadata"]["variables"]["serving_fraction"] == "2"
    for p in ps:
        again = Problem(p.prompt, p.answer, json.loads(json.dumps(p.entry)))
        assert score("gsm_symbolic", p.answer, again) == 1.0
    np = pytest.importorskip("numpy")
    assert P.jsonable({"a": (Fraction(3, 4), np.int64(5)), 2: [np.str_("x")]}) == \
        {"a": ("3/4", 5), 2: ["x"]}
    assert type(P.jsonable((1, 2))) is tuple  # arc_agi's scorer compares tuples


@pytest.mark.skipif(not os.environ.get("TPO_BENCH_GSM8K_DIR"),
                    reason="TPO_BENCH_GSM8K_DIR not set: no real GSM8K files to check")
def test_real_gsm8k():
    folder = P.default_gsm8k_dir()
    assert sha256s(folder) == P.GSM8K_SHA256
    assert len(problems("gsm8k", "train", 7473, 0)) == 7473
    test = problems("gsm8k", "test", 1319, 0)
    assert sum(score("gsm8k", solution("gsm8k", p), p) for p in test) == 1319
