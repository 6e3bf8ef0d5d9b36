"""Running experiments: the runner's outer loop, async rollouts, checkpoints, run logging."""
