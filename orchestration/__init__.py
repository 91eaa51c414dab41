"""The study's definition: config, records, provenance, run-folder names and seeds, memory, validation. No torch.
method/, analysis/, bases/ and runner/ import it; it imports none of them."""
