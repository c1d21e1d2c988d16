"""The paper-scale LLM presets' probe (tools.llm_scale) on the ~13k-parameter micro
architecture: its token counts, the LoRA adapters' size counted by hand, what a dtype
does to AdamW's steps at the paper's learning rate, the size guard's parameter count of
the full Qwen3-1.7B architecture (never built), the CSV the command writes, and the CPU
model's size the LLM page quotes."""
import csv
import re

import pytest

pytest.importorskip("transformers")
pytest.importorskip("reasoning_gym")

from tpo_bench.tools import llm_scale  # noqa: E402
from tpo_bench.bench.build import ConfigError  # noqa: E402
from tpo_bench.bench.config import compose  # noqa: E402
from test_llm_data import make_gsm8k  # noqa: E402

N, K, T = 3, 2, 3
MICRO = ["task/arch=micro_qwen3", f"task.prompts_per_step={N}", "algo=tpo", f"algo.k={K}",
         f"task.micro_batch={K}", f"task.max_new_tokens={T}", "threads=1"]


def gsm8k(tmp_path, *extra):
    data = make_gsm8k(tmp_path / "gsm8k")
    return ["task=llm_gsm8k", *MICRO, f"task.data_dir={data}", "task.train_size=8",
            "task.test_size=3", *extra]


def lora_size(arch: dict, r: int) -> int:
    """Rank-r LoRA on a Qwen3 layer's seven linear maps (q, k, v, o, gate, up, down), r
    (in + out) weights each; the tied output layer has none."""
    d, f = arch["hidden_size"], arch["intermediate_size"]
    q, kv = arch["num_attention_heads"] * arch["head_dim"], arch["num_key_value_heads"] * arch["head_dim"]
    maps = [(d, q), (d, kv), (d, kv), (q, d), (d, f), (d, f), (f, d)]
    return arch["num_hidden_layers"] * r * sum(i + o for i, o in maps)


def qwen3_size(arch: dict) -> int:
    """All weights of a Qwen3 model with tied embeddings: embeddings, per layer the seven
    linear maps, q/k norms and two layer norms, and the final norm."""
    d, f, hd = arch["hidden_size"], arch["intermediate_size"], arch["head_dim"]
    q, kv = arch["num_attention_heads"] * hd, arch["num_key_value_heads"] * hd
    layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * hd + 2 * d
    return arch["vocab_size"] * d + arch["num_hidden_layers"] * layer + d


def test_the_cpu_models_size_is_the_one_the_llm_page_quotes():
    """docs/llm.md's ~0.8M-parameter default model: the CPU tasks' architecture
    (conf/task/arch/tiny_qwen3.yaml), counted."""
    from conftest import REPO, one_line

    sizes = {f"{qwen3_size(compose(f'task={task}')['task']['arch']) / 1e6:.1f}"
             for task in ("llm_chain_sum", "llm_spell_backward")}
    quoted = re.findall(r"([\d.]+)M-parameter", one_line((REPO / "docs" / "llm.md").read_text()))
    assert quoted and set(quoted) == sizes, (quoted, sizes)


def test_the_probe_counts_tokens_and_adapters(tmp_path):
    """GSM8K's preset (LoRA rank 32, bfloat16, checkpointing, KL 1e-3) one RL step: the
    sampled completions are N x K, each of 1..T real tokens, the trained tokens those
    times TPO's 4 epochs, and the trainable weights exactly the adapters."""
    p = llm_scale.run(gsm8k(tmp_path))
    assert (p.mode, p.dtype, p.lora_rank, p.checkpointing) == ("rl_steps", "bfloat16", 32, True)
    assert p.completions == N * K
    # a random micro model rarely samples its EOS in 3 steps: most completions run to T
    assert N * K < p.generated_tokens <= N * K * T
    assert p.trained_tokens == p.generated_tokens * 4
    arch = compose("task=llm_gsm8k", *MICRO)["task"]["arch"]
    assert p.trainable == lora_size(arch, 32) == 16_384
    assert p.parameters == qwen3_size(arch) + lora_size(arch, 32)
    assert p.generation_s > 0 and p.training_s > 0 and p.peak_gib >= p.baseline_gib > 0


@pytest.mark.slow  # takes seconds in process
def test_adamw_at_lr_1e5_barely_moves_bfloat16_weights(tmp_path):
    """Why graph colouring's full fine-tune is mixed_bfloat16: AdamW's steps (~lr = 1e-5
    per weight) are below bfloat16's resolution for most weights, so pure bfloat16 weights
    stay where they were, float32 ones under bfloat16 compute all move."""
    common = ["task=llm_graph_color", *MICRO, "task.train_size=20", "task.test_size=4"]
    assert compose(*common)["task"]["dtype"] == "mixed_bfloat16"
    mixed = llm_scale.run(common)
    pure = llm_scale.run([*common, "task.dtype=bfloat16"])
    assert mixed.lora_rank == 0 and mixed.updated > 0.9
    assert pure.updated < 0.3


def test_the_size_guard_counts_qwen3_1p7b_without_building_it():
    """The preset's full architecture on the meta device: Qwen3-1.7B's model card says
    1.7B parameters, 1.4B of them outside the embeddings (151,936 x 2,048)."""
    arch = compose("task=llm_graph_color")["task"]["arch"]
    assert qwen3_size(arch) == 1_720_574_976
    with pytest.raises(ConfigError) as e:
        llm_scale.run(["task=llm_graph_color"], forward=True, max_gib=1)
    msg = str(e.value)
    assert "1,720,574,976 parameters" in msg and "reference copy" in msg and "nothing was built" in msg


def test_the_command_writes_its_row(tmp_path, capsys):
    out = tmp_path / "probe.csv"
    assert llm_scale.main(["task=llm_gsm8k", *MICRO, "--forward-only", "--csv", str(out)]) == 0
    assert "forward_only" in capsys.readouterr().out
    row = next(csv.DictReader(out.open()))
    arch = compose("task=llm_gsm8k", *MICRO)["task"]["arch"]
    assert int(row["parameters"]) == qwen3_size(arch) + lora_size(arch, 32)
    assert int(row["trainable"]) == lora_size(arch, 32)
    assert llm_scale.main(["task=demo", "--csv", str(out)]) == 2  # not an LLM task
