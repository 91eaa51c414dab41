"""The run around the method: config, provenance, run-folder names, the stages and their jobs, cost and memory. No torch."""
