"""The three contracts (docs/architecture.md#the-three-contracts): every member documented, the
built-in implementations complete, and nothing outside tests probing an engine, a learner or a
loop with ``hasattr``/``getattr`` or reaching past what the contract declares."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from selfplay.engines.base import Engine
from selfplay.loops import LOOPS, loop_class
from selfplay.loops.base import Loop, LoopSettings, LoopSpec
from selfplay.training.base import Learner

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
PACKAGES = ("selfplay", "games", "curricula", "corpora", "sandbox", "roles")
# a name that holds an engine, a learner or a loop (or the world or loop settings around them)
CONTRACT_NAME = re.compile(r"(^|_)(engine|learner|loop|world|policy|settings)$")


def members(cls: type) -> set[str]:
    """Public members a class itself declares: methods, properties and annotated attributes."""
    declared = {n for n, v in vars(cls).items() if not n.startswith("_") and (
        inspect.isfunction(v) or isinstance(v, property | staticmethod | classmethod))}
    return declared | {n for n in cls.__dict__.get("__annotations__", {}) if not n.startswith("_")}


@pytest.mark.parametrize("contract", [Engine, Learner, Loop])
def test_every_member_of_a_contract_is_documented(contract: type) -> None:
    documented = {m for m in members(contract) if f"`{m}" in ARCHITECTURE}
    documented |= {m for m in members(contract) if f"`self.{m}" in ARCHITECTURE}
    missing = sorted(members(contract) - documented)
    assert not missing, f"{contract.__name__}: not in docs/architecture.md: {missing}"


def test_loop_spec_and_settings_fields_are_documented() -> None:
    fields = set(LoopSpec.__dataclass_fields__) | set(LoopSettings.model_fields)
    fields |= {"trained_families", "tool_settings"}
    assert not sorted(f for f in fields if f"`{f}" not in ARCHITECTURE)


def _names_in(node: ast.AST) -> str:
    """The last name of an expression: ``world.engine`` → ``engine``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _source_files() -> list[Path]:
    return [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]


def test_no_engine_learner_or_loop_is_probed_with_hasattr_or_getattr() -> None:
    found = []
    for path in _source_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("hasattr", "getattr") and node.args
                    and CONTRACT_NAME.search(_names_in(node.args[0]))):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"probing instead of the declared contract: {found}"


def test_the_probe_check_finds_a_planted_probe() -> None:
    planted = "def f(world):\n    return getattr(world.engine, 'generator', None)\n"
    calls = [n for n in ast.walk(ast.parse(planted)) if isinstance(n, ast.Call)]
    assert any(CONTRACT_NAME.search(_names_in(c.args[0])) for c in calls)


def _accessed(path: Path, holder: str) -> set[str]:
    """Attributes the module reads of ``world.<holder>``, ``self.<holder>`` or a parameter
    named ``<holder>`` (``holder``: engine, learner or loop)."""
    accessed = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Attribute) and _names_in(node.value) == holder):
            continue
        owner = node.value.value if isinstance(node.value, ast.Attribute) else None
        if owner is None or _names_in(owner) in ("world", "self"):
            accessed.add(node.attr)
    return accessed


RUNNER_SIDE = ["running/runner.py", "running/rollouts.py", "running/snapshots.py",
               "training/sync.py", "engines/policy.py"]


@pytest.mark.parametrize("holder, contract", [("engine", Engine), ("learner", Learner),
                                              ("loop", Loop)])
def test_the_runner_side_uses_only_declared_members(holder: str, contract: type) -> None:
    declared = {n for n in dir(contract) if not n.startswith("__")}
    declared |= set(getattr(contract, "__annotations__", {}))
    used = set()
    for relative in RUNNER_SIDE:
        used |= _accessed(ROOT / "selfplay" / relative, holder)
        used |= _accessed(ROOT / "selfplay" / relative, f"_{holder}")
    assert used, holder  # the scan sees the runner's calls at all
    assert used <= declared, f"{holder}: undeclared members used: {sorted(used - declared)}"


def test_built_in_implementations_are_complete() -> None:
    from selfplay.engines.hf import HFEngine
    from selfplay.engines.ray_pool import RayEnginePool
    from selfplay.training.learner import LocalLearner
    from selfplay.training.sharded import ShardedLearner

    for cls, contract in [(HFEngine, Engine), (RayEnginePool, Engine),
                          (LocalLearner, Learner), (ShardedLearner, Learner)]:
        assert issubclass(cls, contract) and not inspect.isabstract(cls), cls
    # vLLM is not installed beside the tests (its own venv): read its class line
    source = (ROOT / "selfplay" / "engines" / "vllm_engine.py").read_text()
    assert "class VLLMEngine(Engine):" in source
    for name in LOOPS:
        cls = loop_class(name)
        assert issubclass(cls, Loop) and not inspect.isabstract(cls), name
        assert cls.Settings is not None and issubclass(cls.Settings, LoopSettings), name
        assert cls.spec.roles, f"{name} declares no roles"


LOOP_LINES, MODULE_LINES = 300, 500
# what every loop shares: sized as any module
SHARED_LOOP_FILES = {f"selfplay/loops/{name}.py" for name in ("__init__", "base", "propose",
                                                              "reasoning")}


def test_modules_keep_to_their_sizes() -> None:
    """A loop's files at most 300 lines, modules under 500 unless docs/architecture.md#sizes
    says why."""
    excused = set(re.findall(r"^\| `([^`]+\.py)` \| ~?\d+ \|", ARCHITECTURE, re.M))
    too_long = []
    for path in _source_files():
        relative, lines = str(path.relative_to(ROOT)), len(path.read_text().splitlines())
        loop_file = relative.startswith("selfplay/loops/") and relative not in SHARED_LOOP_FILES
        limit = LOOP_LINES if loop_file else MODULE_LINES
        if lines > limit and relative not in excused:
            too_long.append(f"{relative}: {lines} lines")
    assert excused, "the sizes table of docs/architecture.md was not found"
    assert not too_long, too_long
