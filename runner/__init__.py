"""The run machinery above the study's definition: the model stages' command line (commands.py), what each
stage makes and whether it is done (stages.py), a folder made under other settings (foreign.py), the jobs and
their runner (jobs.py), cost (cost_model.py), a pipeline run (session.py, manifest.py), --dry-run and
--print-jobs (preview.py). It imports orchestration/, method/, analysis/ and bases/; none of them imports it."""
