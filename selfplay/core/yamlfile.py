"""YAML a user writes (experiment files, role prompts, values in ``key=value`` overrides): read
strictly, so a mistake is one clear error naming the file, and never a silent guess.

PyYAML keeps the last of two equal keys in a mapping: ``steps: 1`` and then ``steps: 3`` under
``train:`` runs three steps without a word. Here a key given twice, at any depth, is refused
naming the key's dotted path and both lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from selfplay.core.errors import UserError

MERGE_TAG = "tag:yaml.org,2002:merge"  # ``<<: *defaults``: keys it brings may be overridden


class DuplicateKeyError(UserError):
    """A mapping in a user's YAML gives the same key twice: ``key`` (its dotted path) on
    ``lines`` (first, second)."""

    def __init__(self, source: str, key: str, lines: tuple[int, int]) -> None:
        first, second = lines
        where = f"both on line {first}" if first == second else f"lines {first} and {second}"
        super().__init__(f"{source}: key {key!r} is given twice ({where})")
        self.key = key
        self.lines = lines


def loads(text: str, source: str, root: str = "") -> Any:
    """The YAML document ``text`` (from ``source``: a file name, or an override) as Python data.

    Raises a one-line ``UserError`` for malformed YAML and for a key given twice; ``root``
    prefixes the dotted key path (an override's key)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:  # an empty document
            return None
        refuse_duplicate_keys(loader, node, source, root)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise UserError(malformed(exc, source)) from exc
    finally:
        loader.dispose()


def read(path: Path) -> Any:
    """The YAML file ``path`` as Python data (``loads``'s errors, and one for a missing file)."""
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise UserError(f"{path}: file not found") from exc
    return loads(text, str(path))


def malformed(exc: yaml.YAMLError, source: str) -> str:
    """PyYAML's multi-line report as one line: the source, the line, the problem."""
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{source}:{where} malformed YAML: {problem}"


def refuse_duplicate_keys(loader: yaml.SafeLoader, node: Node, source: str, path: str) -> None:
    """Walk the composed document (nodes still carry their lines, constructed data does not)
    and raise ``DuplicateKeyError`` at the first mapping that holds a key twice."""
    seen: set[int] = set()  # an alias points at a node already walked (or at its own parent)
    pending: list[tuple[Node, str]] = [(node, path)]
    while pending:
        current, where = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, SequenceNode):
            pending += [(item, f"{where}[{k}]") for k, item in enumerate(current.value)]
        elif isinstance(current, MappingNode):
            pending += _mapping_children(loader, current, source, where)


def _mapping_children(
    loader: yaml.SafeLoader, mapping: MappingNode, source: str, where: str
) -> list[tuple[Node, str]]:
    lines: dict[Any, int] = {}
    children: list[tuple[Node, str]] = []
    for key_node, value_node in mapping.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == MERGE_TAG:
            children.append((value_node, where))
            continue
        # compare keys as PyYAML will build them (``1`` and ``01`` are the same int key)
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        dotted = f"{where}.{key}" if where else str(key)
        if key in lines:
            raise DuplicateKeyError(source, dotted, (lines[key], line))
        lines[key] = line
        children.append((value_node, dotted))
    return children
