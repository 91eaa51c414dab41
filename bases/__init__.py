"""The base builders: the CPU world's tiny base, the rehearsal's Qwen-shaped model, GGUF conversion."""
