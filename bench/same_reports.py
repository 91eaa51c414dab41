"""Every committed report printed again by two checkouts, compared: a printer refactor's proof.

    git worktree add /tmp/before HEAD~1
    python bench/same_reports.py /tmp/before .        # exit 0 when every report and headline is the same

For each results/*/verdicts.json of the second checkout, each checkout's printer (analysis/report.py's render
and headline, after analysis/compat.py's upgrade, as `analyze_b.py --report-only` reads a document) prints it
in its own process; the texts are compared byte for byte and the runs that differ are named. Nothing is
written.
"""

import argparse
import subprocess
import sys
from pathlib import Path

PRINT = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from analysis import compat, report
doc = compat.upgrade(json.loads(Path(sys.argv[2]).read_text()))
try:
    sys.stdout.write(report.render(doc) + "\\n" + report.headline(doc))
except Exception as e:
    sys.stdout.write(f"ERROR {type(e).__name__}: {e}")
"""


def printed(checkout: Path, verdicts: Path) -> str:
    return subprocess.run(
        [sys.executable, "-c", PRINT, str(checkout), str(verdicts)], capture_output=True, text=True, check=True
    ).stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path, help="a checkout (a worktree of the earlier revision)")
    p.add_argument("after", type=Path, help="a checkout (this one: .)")
    a = p.parse_args()
    runs = sorted((a.after / "results").glob("*/verdicts.json"))
    differ = [v.parent.name for v in runs if printed(a.before.resolve(), v) != printed(a.after.resolve(), v)]
    print(
        f"{len(runs) - len(differ)} of {len(runs)} reports printed the same" + (f"; differ: {differ}" if differ else "")
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
