"""Math-Verify worker process (see ``curricula.answers.MathVerifier``): one JSON line in
(``[gold, predicted]``), one JSON line out (``true``/``false``).

Run as a script, so it imports nothing of the parent's program. Math-Verify's own timeouts are
off (they rely on ``signal.alarm``); the parent enforces the deadline and kills a stuck worker.
"""

import json
import sys

from math_verify import parse, verify


def main() -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        gold, predicted = json.loads(line)
        try:
            equal = bool(
                verify(
                    parse(f"${gold}$", parsing_timeout=None),
                    parse(f"${predicted}$", parsing_timeout=None),
                    timeout_seconds=None,
                )
            )
        except Exception:  # math-verify raises on unparsable input: not equal
            equal = False
        print("true" if equal else "false", flush=True)


if __name__ == "__main__":
    main()
