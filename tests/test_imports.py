"""Imports point one way: config → engines → loops → runner → CLI, with no cycles.

Read from the source with ``ast`` (nothing is imported): every ``import`` counts, at module level
or inside a function (a late import is still a dependency), except those under
``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEAF_PACKAGES = ("games", "curricula", "corpora", "sandbox", "roles")
TOP = ("selfplay.running.runner", "selfplay.cli.main")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> set[str]:
    """Modules `path` imports (absolute names; `from x import y` counts x and x.y)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    modules = {module_name(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}
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


def test_no_import_cycles_among_selfplay_modules() -> None:
    cycle = find_cycle(graph(("selfplay",)))
    assert cycle is None, " -> ".join(cycle or [])


@pytest.mark.parametrize("layer", ["selfplay.engines", "selfplay.loops"])
def test_engines_and_loops_never_import_the_runner_or_cli(layer: str) -> None:
    edges = graph(("selfplay",))
    offenders = {
        f"{module} imports {target}"
        for module, targets in edges.items()
        if module.startswith(layer)
        for target in targets
        if target.startswith(TOP)
    }
    assert not offenders


def test_engines_never_import_loops() -> None:
    edges = graph(("selfplay",))
    assert not {
        (m, t)
        for m, ts in edges.items()
        if m.startswith("selfplay.engines")
        for t in ts
        if t.startswith("selfplay.loops")
    }


def test_leaf_packages_never_import_the_runner_or_cli() -> None:
    offenders = {
        f"{module_name(path)} imports {target}"
        for pkg in LEAF_PACKAGES
        for path in (ROOT / pkg).rglob("*.py")
        for target in imports_of(path)
        if target.startswith(TOP)
    }
    assert not offenders


def test_the_checker_sees_late_imports_and_cycles(tmp_path: Path) -> None:
    """The checks above would catch the old runner ↔ ray_pool cycle (a late import)."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from selfplay.cli.main import main\n"
        "def f():\n    from selfplay.running.runner import lora_spec\n"
    )
    assert imports_of(module) == {
        "typing",
        "typing.TYPE_CHECKING",
        "selfplay.running.runner",
        "selfplay.running.runner.lora_spec",
    }
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
