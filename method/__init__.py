"""The method: Dr. GRPO's objective and training loop, model loading and LoRA, the sampler and its static decode,
evaluation, checkpoints (torch)."""
