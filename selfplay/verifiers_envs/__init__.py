"""Our environments for verifiers (``import verifiers.v1 as vf``): SPIRAL's games and SPICE's
grounded challenger/reasoner, loadable with verifiers' ``load_environment`` by the top-level
entry modules ``selfplay_games`` and ``selfplay_spice`` (docs/verifiers.md).

Importing this package imports nothing of verifiers; the submodules do.
"""
