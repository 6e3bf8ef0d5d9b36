"""Self-play and automatic curricula for language models."""

import os

# OpenMP threads that wait passively do not steal cores from the rest of the run (or the
# machine); libgomp reads this once, when torch is first imported (docs/speed.md#threads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
