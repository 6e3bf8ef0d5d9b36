"""``make test-under-load``: the tests that hold a time limit, a timeout or a wall-clock figure
(marker ``timing``), run with two CPU-bound processes beside them, as on a shared machine or a
busy CI runner (docs/testing.md#load-proof-tests). Extra arguments go to pytest
(``python -m tests.under_load -k sandbox --count ...``)."""

from __future__ import annotations

import subprocess
import sys

BURN = "while True:\n    pass\n"


def main(argv: list[str]) -> int:
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]
    try:
        return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "-m", "timing", *argv])
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
