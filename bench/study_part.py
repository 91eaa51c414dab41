"""The part runner at the path PLAN_CHANGES.md (changes 62-64, 77) and the runs' READMEs cite: it is
runner/parts.py, and `python pipeline.py --config C --run R --until HH:MM` (or --hours H) runs it too.

    python bench/study_part.py --config configs/smollm2_v3.yaml --run results/smollm2_v3 --until 17:05
"""

import sys

from common import ROOT  # noqa: F401  (puts the repo on sys.path)

from runner.parts import main

if __name__ == "__main__":
    sys.exit(main())
