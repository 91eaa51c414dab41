"""The analysis: pass@k statistics, the calibrated verdict, the secondary measures, report.md and the figures. No torch."""
