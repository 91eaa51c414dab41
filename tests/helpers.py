"""Helpers the model-level test files share: the smoke settings pointed at a model folder, prompts,
a LoRA model with a non-zero update, and a short training run. No fixtures here (conftest.py)."""

import torch

import countdown
from method import sampler, training
from method.model import apply_lora, load_model, pad_id, render_prompts
from orchestration import config

CPU = torch.device("cpu")


def cfg_for(smoke_cfg, **sets):
    # the smoke settings, minus the build (the fixtures hand us a model folder)
    d = config.to_dict(smoke_cfg)
    d["model"]["build"] = None
    d["model"]["path"] = "unused"
    cfg = config._build(config.Config, d)
    for k, v in sets.items():
        node = cfg
        *parts, last = k.split(".")
        for p in parts:
            node = getattr(node, p)
        setattr(node, last, v)
    return cfg


def prompts_for(tok, n=3, task="arith-1x1"):
    _, test = countdown.make_splits(task, 10, n, 0)
    return test, render_prompts(tok, test, "bare")


TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def model_with_lora(fitted_dir, smoke_cfg, dtype="float32", scale=0.05):
    d = config.to_dict(smoke_cfg)
    d["model"]["build"], d["model"]["path"], d["model"]["dtype"] = None, str(fitted_dir), dtype
    d["model"]["slow_bf16"] = True  # bf16 on a CPU that may lack native bf16: meant, small models
    cfg = config._build(config.Config, d)
    model, tok = load_model(cfg, str(fitted_dir), CPU)
    apply_lora(model, 4, 8, TARGETS, 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
    _, test = countdown.make_splits("arith-1x1", 10, 4, 0)
    ids, mask = sampler.left_pad(render_prompts(tok, test, "bare"), pad_id(tok))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return cfg, model, tok, dict(input_ids=ids, attention_mask=mask, position_ids=pos)


def train_smoke(cfg, fitted_dir, out, steps, condition=("many", config.ConditionCfg()), pool=None, **kw):
    """`steps` steps of `condition` (name, settings) at rate 0.01, training seed 0, an adapter at step 2; `pool`
    defaults to the whole train split."""
    if pool is None:
        pool, _ = countdown.make_splits(cfg.task.name, cfg.task.n_train, cfg.task.n_test, cfg.task.seed)
    name, cond = condition
    run = training.TrainingRun(name, cond, 0, pool, 0.01, steps, [2], dev_every=cfg.train.dev_every, **kw)
    return training.train(cfg, run, out, str(fitted_dir), progress=False)
