"""Every code reference the docs and docstrings make resolves, and docs/testing.md's module → test
table stays complete (issue 30, items 4 and 5).

Where references are read: ``README.md`` and ``docs/*.md`` (outside fenced code blocks, which
hold commands and code), and every docstring (``ast``) and comment (``tokenize``) of the
packages ``selfplay``, ``games``, ``curricula``, ``corpora``, ``sandbox``, ``roles``. A reference
is a backtick span, markdown `x` or rst ``x``, with no whitespace in it (a span with spaces is a
command or prose), a trailing ``()`` dropped. The relative link targets of the docs
(``[text](scale.md#anchor)``) must be files beside the document.

What a span is, and what it must resolve to:

- ``PATH.py::NAME`` (also ``PATH.py::Class.method``, ``test_x.py::test_y[param]``): the path
  resolves as below (a bare ``x.py``: some tracked file of that name), and ``NAME`` is a
  top-level function, class or assignment of that file (``Class.method``: a definition in that
  class's body).
- A file path: path characters only, containing ``/`` or ending in a file extension. Skipped as
  not the repository's: absolute and home paths (``/tmp``, ``~/.cache``), paths with a
  placeholder (``<run>``, ``{a,b}``, ``*``, ``...``, ``[x]``, an all-capitals component such as
  ``RUN``, ``NAME``, ``FILE.py``), and a path whose first component is not *anchored*: anchors
  are the repository's top-level entries (``selfplay``, ``docs``, ``tests``, ``experiments``,
  ...) and the folders directly inside a package (``training``, ``running``, ``prompts``, ...).
  That leaves run-folder paths (``checkpoints/step-N/``), metric keys (``train/loss``) and other
  people's files (``my_games/nim.py``) alone. An anchored path must exist relative to the
  repository root or to one of the packages (``training/sync.py`` is
  ``selfplay/training/sync.py``); one ending in ``/`` must be a folder. A bare file name is
  checked only when it ends in ``.py`` or ``.md`` (other bare names, ``config.json``,
  ``metrics.jsonl``, are a run's outputs): some tracked file must have that name.
  ``engines/vllm_sync.WeightReceiver`` (an anchored path with a dotted tail) is the dotted name
  ``engines.vllm_sync.WeightReceiver``.
- A dotted name ``a.b.c`` (not ending in a file extension), by its first part ``a``:
  - ``self``/``cls``: an attribute of the instance; skipped. An entry-point group
    (``selfplay.games``) is not code either.
  - a config section (a field of ``ExperimentConfig``, a loop's own section such as
    ``spiral``, or a nested section such as ``parallel``) when the rest names a field of that
    section's pydantic model (``train.parallel.ranks``; ``roles.<role>.x`` takes any role): a
    config key, which resolves.
  - a package of the project (``selfplay.training.make.learner_settings``, ``games.make``):
    imported (the longest importable prefix), then looked up attribute by attribute.
  - otherwise it must resolve through one of: a project module of that last name
    (``losses.tis_weights``, ``spiral.SpiralLoop``, ``runner.step``), a top-level project class
    of that name (``Scorer.accumulate``, ``Loop.request``), or the class a variable of that name
    holds (``VARIABLES``: ``engine.load_weights`` is ``Engine.load_weights``,
    ``settings.x`` any ``...Settings`` class). A module has an attribute it defines or imports
    (or a submodule), not one every module has (``__init__``); a class has what ``getattr``
    finds, a dataclass or pydantic field, an annotation in its MRO, or a ``self.x = ...`` of one
    of its methods. A module imported from a library this environment lacks (vLLM) is read with
    ``ast`` instead.
  - When none of those resolves: skipped for the variables of other libraries' objects
    (``UNTYPED_VARIABLES``: ``model.generate``, ``env.reset``) and for other libraries
    (``torch.cat``: importable, or in ``EXTERNAL``); a failure for everything else, such as a
    renamed module (``metrics.game_groups``) or a config-section name that is neither a key nor
    code (``spiral.gamez``).
- A bare ``test_name`` (``test_a_plain_head_passes_the_probe``): some test file defines it.
- A historical name: a span followed by `` (now `NEW`)`` names code as it was (the mutation
  tables of docs/testing.md); only ``NEW`` is checked.

Config keys, metric keys (``train/kl``), CLI words and Python expressions are therefore not
checked as code, while anything written like the project's code is.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import io
import re
import subprocess
import tokenize
import types
import typing
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("selfplay", "games", "curricula", "corpora", "sandbox", "roles")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TESTING = ROOT / "docs" / "testing.md"

SPAN = re.compile(r"``([^`\n]+?)``|`([^`\n]+?)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.S | re.M)
HISTORICAL = re.compile(r"\s*\(now\s+`")
IDENT = r"[A-Za-z_]\w*"
DOTTED = re.compile(rf"{IDENT}(\.{IDENT})+")
PATHLIKE = re.compile(r"[\w.\-/]+")
TEST_NAME = re.compile(r"test_\w+(\[[^\]]*\])?")
PARAMS = re.compile(r"\[[^\]]*\]$")
# a name ending in one of these is a file, not a dotted Python name
EXTENSIONS = {
    "py", "md", "yaml", "yml", "json", "jsonl", "txt", "js", "css", "toml", "html", "csv",
    "png", "pt", "npy", "faiss", "safetensors", "cfg", "log", "bin", "lock", "sh", "ini",
}
PLACEHOLDER = re.compile(r"[<>{}*\[\]…]|\.\.\.|(^|/)[A-Z][A-Z0-9_]*(/|$|\.)")

# Names the docs use for an instance, standing for the project classes it may be (``settings``:
# any ``...Settings`` class); tried after the modules and classes of that name.
VARIABLES = {
    "config": ("ExperimentConfig",),
    "engine": ("Engine",),
    "loop": ("Loop",),
    "policy": ("BatchingPolicy",),
    "pool": ("SandboxPool", "RayEnginePool"),
    "spec": ("LoopSpec",),
    "episode": ("Episode",),
    "turn": ("Turn",),
    "completion": ("Completion",),
    "request": ("Request",),
}
# Variables holding other libraries' objects (or a dict): what follows them is not checked.
UNTYPED_VARIABLES = {
    "model",  # a transformers or vLLM model
    "lm_head",  # a transformers model's head
    "env", "state",  # TextArena's
    "trainer",  # TRL's GRPOTrainer
    "info",  # Episode.info, a dict
    "counts",  # what a corpus build reports
}
# other libraries' names that are not importable here (the rest are found by importing)
EXTERNAL = {"vllm", "GRPOTrainer", "str"}


@dataclass(frozen=True)
class Ref:
    text: str
    where: str  # file:line


# ---------------------------------------------------------------- where references are read
def spans(text: str, where: str, first_line: int = 1) -> list[Ref]:
    """The backtick spans of ``text`` (a historical name dropped, its ``now`` name kept)."""
    refs = []
    for match in SPAN.finditer(text):
        if HISTORICAL.match(text, match.end()):
            continue
        line = first_line + text.count("\n", 0, match.start())
        refs.append(Ref((match.group(1) or match.group(2)).strip(), f"{where}:{line}"))
    return refs


def markdown_refs(text: str, where: str) -> list[Ref]:
    """Spans outside fenced code blocks, and relative link targets (as ``link:target``)."""
    blanked = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    refs = spans(blanked, where)
    for match in LINK.finditer(blanked):
        target = match.group(1).split("#")[0]
        if target and not re.match(r"[a-z]+:", target):
            line = 1 + blanked.count("\n", 0, match.start())
            refs.append(Ref(f"link:{target}", f"{where}:{line}"))
    return refs


def python_refs(source: str, where: str) -> list[Ref]:
    """Spans in the docstrings and comments of a Python source."""
    refs = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                refs += spans(first.value.value, where, first.lineno)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            refs += spans(token.string, where, token.start[0])
    return refs


def all_refs() -> list[Ref]:
    refs = []
    for doc in DOCS:
        refs += markdown_refs(doc.read_text(), str(doc.relative_to(ROOT)))
    for path in package_files():
        refs += python_refs(path.read_text(), str(path.relative_to(ROOT)))
    return refs


# ---------------------------------------------------------------- what the project holds
@cache
def tracked() -> tuple[str, ...]:
    """The repository's files (git's, or the working tree's outside a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        out = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()]
    return tuple(p for p in out if (ROOT / p).exists())


def package_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the packages by dotted name."""
    return {module_name(p): p for p in package_files()}


@cache
def by_last_name() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in modules():
        out.setdefault(name.rsplit(".", 1)[-1], []).append(name)
    return out


@cache
def classes() -> dict[str, list[tuple[str, str]]]:
    """Top-level class name → [(module, class)] over the packages."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append((name, node.name))
    return out


@cache
def anchors() -> frozenset[str]:
    top = {p.split("/")[0] for p in tracked()}
    inner = {p.name for package in PACKAGES for p in (ROOT / package).iterdir() if p.is_dir()}
    return frozenset((top | inner) - {"__pycache__"})


@cache
def defined_tests() -> frozenset[str]:
    names = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                    and node.name.startswith("test_"):
                names.add(node.name)
    return frozenset(names)


@cache
def entry_point_groups() -> tuple[str, ...]:
    from selfplay.core import plugins

    return plugins.GROUPS


# ---------------------------------------------------------------- config keys
@cache
def config_sections() -> dict[str, typing.Any]:
    """Section name → annotation: the shared sections, each loop's own, and the nested ones."""
    from selfplay.config import ExperimentConfig
    from selfplay.loops import LOOPS, loop_section

    sections: dict[str, typing.Any] = {
        name: field.annotation for name, field in ExperimentConfig.model_fields.items()}
    for loop in LOOPS:
        key, model = loop_section(loop)
        if key:
            sections[key] = model
    pending, seen = [m for m in map(_model, sections.values()) if m], set()
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            inner = _model(field.annotation)
            if inner is not None:
                sections.setdefault(name, field.annotation)
                pending.append(inner)
    return sections


def _model(annotation) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (through ``X | None``, lists and dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (model := _model(arg)) is not None:
            return model
    return None


def is_config_key(parts: list[str]) -> bool:
    if parts[0] not in config_sections():
        return False
    annotation = config_sections()[parts[0]]
    for part in parts[1:]:
        if typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]  # roles.<role>: any key
            continue
        model = _model(annotation)
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
    return True


# ---------------------------------------------------------------- code
@dataclass
class Unimportable:
    """A project module that imports a library missing here, read with ``ast``."""

    body: list[ast.stmt]


def load(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] in PACKAGES or name not in modules():
            raise
        return Unimportable(ast.parse(modules()[name].read_text()).body)


def defined_in(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The statement of ``body`` that defines or imports ``name`` at its level."""
    found = None
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        else:
            names = []
        if name in names:
            found = node
    return found


def _self_assigned(cls: type) -> set[str]:
    names = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] not in PACKAGES:
            continue
        try:
            tree = ast.parse(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def _class_has(cls: type, name: str) -> bool:
    if hasattr(cls, name):
        return True
    fields = set(getattr(cls, "__dataclass_fields__", {})) | set(getattr(cls, "model_fields", {}))
    for klass in cls.__mro__:
        fields |= set(vars(klass).get("__annotations__", {}))
    return name in fields or name in _self_assigned(cls)


def walk(obj, attrs: list[str]) -> bool:
    """Whether ``obj.a.b...`` exists."""
    for attr in attrs:
        if isinstance(obj, Unimportable):
            node = defined_in(obj.body, attr)
            if node is None:
                return False
            if not isinstance(node, ast.ClassDef):
                return True  # what an unimportable module's function returns is not checked
            obj = Unimportable(node.body)
        elif isinstance(obj, types.ModuleType):
            if attr in vars(obj):
                obj = vars(obj)[attr]
            elif attr.startswith("__") or f"{obj.__name__}.{attr}" not in modules():
                return False
            else:
                obj = load(f"{obj.__name__}.{attr}")
        elif isinstance(obj, type):
            if not _class_has(obj, attr):
                return False
            obj = getattr(obj, attr, None)
        else:
            return hasattr(obj, attr)
        if obj is None:
            return True  # a field with no class-level value: nothing to walk into
    return True


def variable_classes(name: str) -> list[tuple[str, str]]:
    if name == "settings":
        return [pair for cls, pairs in classes().items() if cls.endswith("Settings")
                for pair in pairs]
    return [pair for cls in VARIABLES.get(name, ()) for pair in classes().get(cls, [])]


def check_dotted(name: str) -> tuple[str, str | None]:
    """(kind, problem): kind is what ``name`` was taken for; problem ``None`` when it resolves."""
    parts = name.split(".")
    head = parts[0]
    if head in ("self", "cls") or name in entry_point_groups():
        return "skipped", None
    if is_config_key(parts):
        return "config key", None
    if head in PACKAGES:
        for cut in range(len(parts), 0, -1):
            try:
                module = load(".".join(parts[:cut]))
            except ImportError:
                continue
            return "code", None if walk(module, parts[cut:]) else f"{name}: no such attribute"
        return "code", f"{name}: no such module"
    holders = [load(m) for m in by_last_name().get(head, [])]
    holders += [_class(m, c) for m, c in classes().get(head, []) + variable_classes(head)]
    if any(walk(obj, parts[1:]) for obj in holders):
        return "code", None
    if head in UNTYPED_VARIABLES:
        return "skipped", None
    if holders:
        return "code", f"{name}: no module, class or variable {head!r} of the project has it"
    if head in config_sections():
        return "code", f"{name}: not a key of the {head!r} config section, nor code"
    if head in EXTERNAL or importlib.util.find_spec(head) is not None:
        return "skipped", None
    return "code", f"{name}: {head!r} is no module, class, config section or known variable"


def _class(module: str, name: str):
    loaded = load(module)
    if isinstance(loaded, Unimportable):
        return Unimportable(defined_in(loaded.body, name).body)
    return getattr(loaded, name)


# ---------------------------------------------------------------- paths
def _bases() -> list[Path]:
    return [ROOT, *(ROOT / p for p in PACKAGES)]


def check_path(path: str) -> tuple[str, str | None]:
    path = path.split("#")[0]
    if not path or path.startswith(("/", "~", ".")) or PLACEHOLDER.search(path):
        return "skipped", None
    if "/" not in path:
        if path.rsplit(".", 1)[-1] not in ("py", "md"):
            return "skipped", None
        found = any(p.rsplit("/", 1)[-1] == path for p in tracked())
        return "path", None if found else f"{path}: no file of the repository has this name"
    if path.split("/")[0] not in anchors():
        return "skipped", None
    last = path.rstrip("/").rsplit("/", 1)[-1]
    if not path.endswith("/") and "." in last and last.rsplit(".", 1)[-1] not in EXTENSIONS:
        return check_dotted(path.replace("/", "."))  # engines/vllm_sync.WeightReceiver
    for base in _bases():
        if (base / path).is_dir() if path.endswith("/") else (base / path).exists():
            return "path", None
    return "path", f"{path}: no such file in the repository or a package"


def check_in_file(path: str, name: str) -> tuple[str, str | None]:
    """``path.py::name``: the file exists and defines ``name`` at its top level."""
    if PLACEHOLDER.search(path):
        return "skipped", None
    kind, problem = check_path(path)
    if problem or kind == "skipped":
        return kind, problem
    if "/" in path:
        files = [base / path for base in _bases() if (base / path).is_file()][:1]
    else:
        files = [ROOT / p for p in tracked() if p.rsplit("/", 1)[-1] == path]
    for file in files:
        body: list[ast.stmt] = ast.parse(file.read_text()).body
        for part in PARAMS.sub("", name).split("."):
            node = defined_in(body, part)
            if node is None:
                break
            body = getattr(node, "body", [])
        else:
            return "name in file", None
    return "name in file", f"{path}::{name}: not defined there"


def check(text: str) -> tuple[str, str | None]:
    """(kind, problem) of the span ``text``: kind ``skipped`` when it is no reference to check,
    problem ``None`` when it resolves."""
    text = text.removesuffix("()")
    if re.search(r"\s", text):
        return "skipped", None
    if "::" in text:
        path, _, name = text.partition("::")
        return check_in_file(path, name) if path.endswith(".py") else ("skipped", None)
    if TEST_NAME.fullmatch(text):
        known = PARAMS.sub("", text) in defined_tests()
        return "test", None if known else f"{text}: no test defines it"
    last = text.rstrip("/").rsplit("/", 1)[-1]
    if PATHLIKE.fullmatch(text) and ("/" in text or last.rsplit(".", 1)[-1] in EXTENSIONS):
        return check_path(text)
    if DOTTED.fullmatch(text):
        return check_dotted(text)
    return "skipped", None


def check_ref(ref: Ref) -> tuple[str, str | None]:
    if not ref.text.startswith("link:"):
        return check(ref.text)
    target = ref.text.removeprefix("link:")
    document = ROOT / ref.where.rsplit(":", 1)[0]
    return "link", None if (document.parent / target).exists() else f"{target}: no such file"


# ---------------------------------------------------------------- the references
def test_every_code_reference_in_docs_and_docstrings_resolves() -> None:
    kinds: Counter[str] = Counter()
    broken = []
    for ref in all_refs():
        kind, problem = check_ref(ref)
        kinds[kind] += 1
        if problem:
            broken.append(f"{ref.where}: {problem}")
    assert not broken, "\n".join(broken)
    # the scan itself still finds what it checks
    assert kinds["path"] > 600 and kinds["code"] > 200 and kinds["config key"] > 130, kinds
    assert kinds["test"] > 80 and kinds["name in file"] > 80 and kinds["link"] > 30, kinds


GOOD_AND_BAD = [
    # file paths: full, package-relative, bare name, folder
    ("selfplay/training/sync.py", "selfplay/training/synk.py"),
    ("training/sync.py", "training/sink.py"),
    ("tests/test_golden.py", "tests/test_golden_nope.py"),
    ("roles/prompts/player.yaml", "roles/prompts/playa.yaml"),
    ("docs/scale.md", "docs/scales.md"),
    ("learner.py", "learnr.py"),
    ("selfplay/loops/spice/", "selfplay/loops/spicy/"),
    # path::name
    ("selfplay/training/make.py::learner_settings", "selfplay/training/make.py::learner_setting"),
    ("tests/test_losses.py::test_tis_weights_are_truncated_ratio",
     "tests/test_losses.py::test_tis_weights_are_truncated"),
    ("test_properties.py::test_legal_play_ends_zero_sum_or_draw[kuhn_poker]",
     "test_properties.py::test_legal_play_ends[kuhn_poker]"),
    ("selfplay/loops/rlvr.py::RlvrLoop.grade", "selfplay/loops/rlvr.py::RlvrLoop.grades"),
    ("selfplay/running/runner.py::step", "runner.py::learner_settings"),
    # dotted: fully qualified, module short form, class short form, a variable's class
    ("selfplay.training.make.learner_settings", "selfplay.training.make.learner_setting"),
    ("losses.tis_weights", "losses.tis_weight"),
    ("Scorer.accumulate", "Scorer._accumulate"),
    ("SpiralLoop.eval_game", "spiral._eval_game"),
    ("engine.load_weights", "engine.load_weight"),
    ("engines/vllm_sync.WeightReceiver", "engines/vllm_sync.WeightReceivers"),
    ("records.game_groups", "metrics.game_groups"),
    # a config key, and a config section's name with something that is neither key nor code
    ("train.parallel.ranks", "train.parallel.rank"),
    ("spiral.games", "spiral.gamez"),
    # bare test names
    ("test_tis_weights_are_truncated_ratio", "test_tis_weights_are_truncated"),
]


@pytest.mark.parametrize(("good", "bad"), GOOD_AND_BAD)
def test_the_resolver_passes_a_good_reference_and_fails_a_bad_one(good: str, bad: str) -> None:
    good_kind, problem = check(good)
    assert good_kind != "skipped" and problem is None
    assert check(bad)[1] is not None


@pytest.mark.parametrize("text", [
    "torch.cat", "env.reset", "model.generate", "self.rng", "selfplay.games", "train/loss",
    "checkpoints/step-N/", "/tmp/x", "~/.cache/selfplay", "config.json", "my_games/nim.py",
    "RUN/inputs/", "FILE.py::NAME", "selfplay run x.yaml", "get_text_config(decoder=None)",
])
def test_what_is_not_a_reference_of_the_project_is_skipped(text: str) -> None:
    assert check(text) == ("skipped", None)


def test_references_are_found_in_markdown_docstrings_and_comments() -> None:
    markdown = (
        "A `losses.tis_weight` and ``Scorer.nope`` beside `train.eps_low`, `torch.cat`,\n"
        "`checkpoints/step-N/`, `train/loss`, `/tmp/x`, `selfplay run x.yaml`.\n"
        "| `learner._collate` (now `batches.collate`) |\n| `learner.step` (now `Scorer.nope`) |\n"
        "```\n`inside/a/fence.py`\n```\n[a link](scale.md) and [another](nope.md#x)\n"
    )
    refs = markdown_refs(markdown, "docs/x.md")
    texts = [r.text for r in refs]
    assert "learner._collate" not in texts and "learner.step" not in texts
    assert "inside/a/fence.py" not in texts
    broken = [r.text for r in refs if check_ref(r)[1]]
    assert broken == ["losses.tis_weight", "Scorer.nope", "Scorer.nope", "link:nope.md"]
    assert [r.where for r in refs if r.text == "link:scale.md"] == ["docs/x.md:8"]
    source = '"""Uses ``make.learner_setting``."""\n\nX = 1  # see `training/sink.py`\n'
    found = python_refs(source, "selfplay/x.py")
    assert [(r.text, r.where) for r in found] == [
        ("make.learner_setting", "selfplay/x.py:1"),
        ("training/sink.py", "selfplay/x.py:3"),
    ]
    assert all(check(r.text)[1] for r in found)


# ---------------------------------------------------------------- the module → test table
TABLE_HEADING = "## Which tests test a module"


def reexport_only(path: Path) -> bool:
    """An ``__init__.py`` of nothing but a docstring, imports and ``__all__``."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
                "__all__"]:
            continue
        return False
    return True


def modules_needing_a_row() -> set[str]:
    return {
        str(p.relative_to(ROOT)) for p in package_files()
        if p.name != "__main__.py" and not (p.name == "__init__.py" and reexport_only(p))
    }


def table_rows(text: str) -> tuple[dict[str, str], str]:
    """docs/testing.md's table: module → its tests cell; and the whole section's text."""
    assert TABLE_HEADING in text, f"docs/testing.md has no {TABLE_HEADING!r} section"
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if match:
            assert match.group(1) not in rows, f"two rows for {match.group(1)}"
            rows[match.group(1)] = match.group(2)
    return rows, section


def named_test_files(text: str) -> set[str]:
    return {m.split("::")[0] for m in re.findall(r"`(tests/[^`\s]+\.py(?:::[^`]*)?)`", text)}


def table_problems(text: str) -> list[str]:
    """What keeps docs/testing.md's table (in ``text``) from being complete and true."""
    rows, section = table_rows(text)
    expected = modules_needing_a_row()
    problems = [f"{m}: no row" for m in sorted(expected - set(rows))]
    problems += [f"{m}: a row, but no such module needs one" for m in sorted(set(rows) - expected)]
    problems += [f"{m}: names no test file (nor says 'no test')" for m, cell in rows.items()
                 if not named_test_files(cell) and "no test" not in cell]
    named = named_test_files(section)
    problems += [f"{n}: no such test file" for n in sorted(named) if not (ROOT / n).is_file()]
    every = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")}
    problems += [f"{n}: in no row" for n in sorted(every - named)]
    return problems


def test_the_module_test_table_is_complete() -> None:
    problems = table_problems(TESTING.read_text())
    assert not problems, "docs/testing.md#which-tests-test-a-module:\n" + "\n".join(problems)


def test_the_table_check_fails_on_a_missing_row_a_stale_row_and_a_missing_test_file() -> None:
    text = TESTING.read_text()
    dropped = re.sub(r"^\| `selfplay/rl/losses.py` \|.*\n", "", text, flags=re.M)
    assert "selfplay/rl/losses.py: no row" in table_problems(dropped)
    stale = text.replace("| `selfplay/rl/losses.py` |", "| `selfplay/rl/lossez.py` |")
    assert "selfplay/rl/lossez.py: a row, but no such module needs one" in table_problems(stale)
    renamed = text.replace("`tests/test_losses.py`", "`tests/test_lossez.py`")
    assert {"tests/test_lossez.py: no such test file",
            "tests/test_losses.py: in no row"} <= set(table_problems(renamed))
    empty = re.sub(r"^(\| `selfplay/rl/losses.py` \|).*\n", r"\1 nothing |\n", text, flags=re.M)
    assert "selfplay/rl/losses.py: names no test file (nor says 'no test')" in table_problems(empty)
