"""The method: model loading and LoRA, the sampler and its static decode, evaluation, checkpoints (torch)."""
