"""RL maths: advantage estimators and policy-gradient losses (pure torch, no models)."""
