"""Evaluation statistics: pass@k, judge bias correction, compute-curve fits, game rates."""
