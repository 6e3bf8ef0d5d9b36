"""Imports point one way (docs/architecture.md): a core of the standard library and PyYAML, then
config and types, RL maths and statistics, engines, training, loops, analysis, running,
evaluation, benchmarks, the CLI. The user-facing packages (games, curricula, corpora, sandbox,
roles) import nothing of ``selfplay`` but its core. No import circle, between modules or between
packages.

Read from the source with ``ast`` (nothing is imported): every ``import`` counts, at module level,
inside a function (a late import is still a dependency) and under ``if TYPE_CHECKING:`` (a type
that points upward is a dependency that points upward). ``from a import b`` counts ``a`` (which
runs ``a/__init__.py``) and ``a.b``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEAF_PACKAGES = ("games", "curricula", "corpora", "sandbox", "roles")
CORE = "selfplay.core"
# Lower layers first; a module may import from its own layer and the layers below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("selfplay.core",),
    ("selfplay.types", "selfplay.config", "selfplay.config_files"),
    ("selfplay.rl", "selfplay.stats"),
    ("selfplay.engines",),
    ("selfplay.training",),
    ("selfplay.loops",),
    ("selfplay.verifiers_envs",),  # our envs for verifiers: they read the loops' pieces
    ("selfplay.analysis",),
    ("selfplay.running",),
    ("selfplay.evaluation",),
    ("selfplay.bench",),
    ("selfplay.cli", "selfplay.__main__"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str | None = None) -> set[str]:
    """Modules ``path`` (the module ``name``) imports, absolute (``from x import y`` counts x and
    x.y; relative imports are resolved against the module's package)."""
    package = (name or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def all_modules(packages: tuple[str, ...]) -> dict[str, Path]:
    return {module_name(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}


def graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    modules = all_modules(packages)
    return {name: {i for i in imports_of(path) if i in modules} for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := dfs(node)):
            return cycle
    return None


def layer_of(module: str) -> int | None:
    for index, layer in enumerate(LAYERS):
        if any(module == part or module.startswith(part + ".") for part in layer):
            return index
    return None


def package_of(module: str) -> str:
    """``selfplay.loops.spiral.loop`` → ``selfplay.loops`` (the subpackage of selfplay)."""
    return ".".join(module.split(".")[:2])


def test_every_selfplay_module_has_a_layer() -> None:
    unplaced = [m for m in all_modules(("selfplay",)) if m != "selfplay" and layer_of(m) is None]
    assert not unplaced, f"put these in a layer of tests/test_imports.py: {unplaced}"


def test_no_import_cycles_between_modules() -> None:
    cycle = find_cycle(graph(("selfplay", *LEAF_PACKAGES)))
    assert cycle is None, " -> ".join(cycle or [])


def test_no_import_cycles_between_selfplay_packages() -> None:
    edges: dict[str, set[str]] = {}
    for module, targets in graph(("selfplay",)).items():
        edges.setdefault(package_of(module), set()).update(
            package_of(t) for t in targets if package_of(t) != package_of(module)
        )
    cycle = find_cycle(edges)
    assert cycle is None, " -> ".join(cycle or [])


def test_imports_never_point_upward() -> None:
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in graph(("selfplay",)).items()
        for target in targets
        if (low := layer_of(module)) is not None
        and (high := layer_of(target)) is not None
        and high > low
    )
    assert not offenders, "\n".join(offenders)


# the modules every loop shares (docs/architecture.md#shared-pieces-one-copy-each); any other
# module of selfplay.loops belongs to one loop: selfplay.loops.<loop>[.<module>]
SHARED_LOOP_MODULES = ("selfplay.loops", "selfplay.loops.base", "selfplay.loops.propose",
                       "selfplay.loops.reasoning")


def loop_of(module: str) -> str | None:
    """``selfplay.loops.spiral.rules`` → ``spiral``; None for a shared module or another
    package."""
    if module in SHARED_LOOP_MODULES or not module.startswith("selfplay.loops."):
        return None
    return module.split(".")[2]


def test_no_loop_imports_another_loop() -> None:
    """A loop uses the shared pieces (base, the propose-and-solve core, reasoning tasks) and
    the packages below, never another loop: what two loops share moves down to where it
    belongs (the sandbox, corpora, curricula, the core)."""
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in graph(("selfplay",)).items()
        for target in targets
        if (mine := loop_of(module)) and (theirs := loop_of(target)) and mine != theirs
    )
    assert not offenders, "\n".join(offenders)


def test_the_loop_check_sees_a_loop_importing_another() -> None:
    assert loop_of("selfplay.loops.sqlm.loop") == "sqlm"
    assert loop_of("selfplay.loops.rlvr") == "rlvr"
    assert loop_of("selfplay.loops.propose") is None and loop_of("selfplay.engines.tools") is None


def test_the_selfplay_package_itself_imports_nothing() -> None:
    """``selfplay/__init__.py`` runs on every import of the core: it must stay empty."""
    assert not imports_of(ROOT / "selfplay" / "__init__.py")


@pytest.mark.parametrize("package", LEAF_PACKAGES)
def test_leaf_packages_import_only_the_core_of_selfplay(package: str) -> None:
    offenders = sorted(
        f"{module_name(path)} imports {target}"
        for path in (ROOT / package).rglob("*.py")
        for target in imports_of(path)
        if target.split(".")[0] == "selfplay" and target != "selfplay"
        and not (target == CORE or target.startswith(CORE + "."))
    )
    assert not offenders, "\n".join(offenders)


# PyYAML, and nothing else: user-written YAML (experiments, role prompts) is read in one strict
# way (selfplay.core.yamlfile) by the config and by roles/, which may import only the core
CORE_THIRD_PARTY = ("yaml",)


def test_the_core_imports_only_the_standard_library_and_pyyaml() -> None:
    import sys

    offenders = sorted(
        f"{module_name(path)} imports {target}"
        for path in (ROOT / "selfplay" / "core").rglob("*.py")
        for target in imports_of(path)
        if target.split(".")[0] not in sys.stdlib_module_names
        and target.split(".")[0] not in CORE_THIRD_PARTY
        and not target.startswith(CORE)
        and target != "__future__.annotations"
    )
    assert not offenders, "\n".join(offenders)


def test_the_checker_sees_late_type_checking_and_relative_imports(tmp_path: Path) -> None:
    """The checks above would catch an upward import hidden in a function or under
    TYPE_CHECKING, and a cycle through a package's ``__init__``."""
    module = tmp_path / "probe.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from selfplay.cli import main\n"
        "def f():\n    from selfplay.running.runner import build\n"
        "from . import base\n"
    )
    found = imports_of(module, "selfplay.loops.probe")
    assert {"selfplay.cli", "selfplay.running.runner", "selfplay.loops.base"} <= found
    assert layer_of("selfplay.cli.main") > layer_of("selfplay.loops.base")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
