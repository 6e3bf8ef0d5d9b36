"""Experiment files into a validated config and back: finding an experiment by name, reading
its YAML, dotted overrides, validation errors as one line, the paths a config holds (resolved
against the file they were written in) and dumping a config into a run folder. The schema is
``selfplay.config``.

Every error a user can make (unknown key, wrong type, missing file, malformed YAML, a key given
twice) becomes a ``UserError`` whose message is one line naming the file and the key; the CLI
exits with code 2.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from selfplay.config import ExperimentConfig, PathField, SectionOf
from selfplay.core import plugins, yamlfile
from selfplay.core.errors import UserError


# ---------------------------------------------------------------------- loading
def experiments_dir() -> Path:
    """The experiments/ folder of the checkout this package runs from (editable install)."""
    return Path(__file__).resolve().parent.parent / "experiments"


def list_experiments() -> list[str]:
    return sorted(p.stem for p in experiments_dir().glob("*.yaml"))


def find_experiment(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise UserError(f"experiment file {path} does not exist")
        return path
    candidate = experiments_dir() / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = ", ".join(list_experiments()) or "none"
        raise UserError(f"unknown experiment {name_or_path!r} (known: {known})")
    return candidate


def read_yaml(path: Path) -> dict:
    data = yamlfile.read(path)  # malformed YAML, a key given twice: one line
    if not isinstance(data, dict):
        raise UserError(f"{path}: an experiment must be a YAML mapping, got {type(data).__name__}")
    return data


def apply_override(data: dict, override: str) -> None:
    """``a.b.c=value`` sets data[a][b][c] = YAML-parsed value (so 1e-5, true, [1, 2] work)."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise UserError(f"override {override!r} must look like key.path=value")
    value = override_value(key, raw)
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"override {key}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def override_value(key: str, raw: str) -> Any:
    """The YAML value of an override; text that is not YAML stays text (``name=a: b``), but a
    mapping that gives a key twice (``train={steps: 1, steps: 3}``) is refused."""
    if not raw:
        return ""
    try:
        return yamlfile.loads(raw, f"override {key}", root=key)
    except yamlfile.DuplicateKeyError as exc:  # one line typed: its line numbers say nothing
        raise UserError(f"override {key}={raw}: key {exc.key!r} is given twice") from exc
    except UserError:
        return raw


def one_line(exc: ValidationError, source: str, prefix: str = "") -> str:
    """A pydantic error as one line naming the source and the key (``prefix``: the section the
    model validated, the loop's name)."""
    error = exc.errors()[0]
    parts = [prefix] if prefix else []
    parts += [str(p) for p in error["loc"] if not str(p).startswith("function-after")]
    key = ".".join(parts)
    if error["type"] == "extra_forbidden":
        return f"{source}: unknown key {key!r}"
    if error["type"] == "renamed_key":  # LoopSettings.renamed: a key the vocabulary renamed
        old = ".".join([*parts, error["ctx"]["old"]])
        return f"{source}: key {old!r} is now {error['ctx']['new']!r} (renamed; set that one)"
    if error["type"] == "renamed_value":
        ctx = error["ctx"]
        return (f"{source}: key {'.'.join([*parts, ctx['key']])!r}: {ctx['old']!r} is now "
                f"{ctx['new']!r} (renamed; set that one)")
    if error["type"] == "missing":
        return f"{source}: missing key {key!r}"
    got = error.get("input")
    got_text = f" (got {got!r})" if not isinstance(got, dict | list) else ""
    where = f"key {key!r}: " if key else ""
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{source}: {where}{error['msg']}{got_text}{more}"


def refuse_unknown_sections(data: dict, source: str, section_of: SectionOf) -> None:
    """One line for a top-level key that is neither a shared section nor the loop's own, with
    the nearest known name (``trian`` -> ``train``)."""
    known = set(ExperimentConfig.model_fields)
    try:
        loop_key = section_of(str(data.get("loop", "")))[0]
    except Exception:  # an unknown loop: its own one-line error says so, after validation
        return
    known |= {loop_key} if loop_key else set()
    for unknown in sorted(set(data) - known):
        near = difflib.get_close_matches(unknown, sorted(known), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise UserError(f"{source}: unknown key {unknown!r}{hint}")


def parse(data: dict, source: str, section_of: SectionOf) -> ExperimentConfig:
    """The shared sections validated here, the loop's own section by the model ``section_of``
    names for the config's loop; any other key is an error. Use ``selfplay.loops.validate``,
    which passes the loop registry."""
    # first: a misspelt section ("trian:") is the cause of the missing key it leaves behind
    refuse_unknown_sections(data, source, section_of)
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(one_line(exc, source)) from exc
    key, model = section_of(config.loop)
    extra = config.__pydantic_extra__ if config.__pydantic_extra__ is not None else {}
    if key is None or model is None:
        return config
    raw = extra.get(key)
    if raw is None and any(field.is_required() for field in model.model_fields.values()):
        raise UserError(f"{source}: loop {config.loop!r} needs a `{key}:` section")
    if raw is not None and not isinstance(raw, dict | BaseModel):
        raise UserError(f"{source}: `{key}:` must be a mapping, got {type(raw).__name__}")
    try:
        extra[key] = model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise UserError(one_line(exc, source, prefix=key)) from exc
    config._section = key
    return config


def load(name_or_path: str, overrides: list[str] | None, section_of: SectionOf) -> ExperimentConfig:
    """An experiment by name (``experiments/NAME.yaml``) or path, with dotted overrides.

    Paths in the file (role prompts, input files, local folders) resolve against the file's
    folder, and a plug-in module beside the file is found from any working directory; a path
    given in an override resolves against the working directory. The config holds them as
    absolute paths."""
    path = find_experiment(name_or_path)
    folder = path.resolve().parent
    plugins.add_search_path(folder)  # before parse: a plug-in loop is imported there
    data = read_yaml(path)
    data.setdefault("name", path.stem)
    for override in overrides or []:
        apply_override(data, override)
    config = parse(data, str(path), section_of)
    resolve_paths(config, folder, overridden(overrides))
    return config


# ---------------------------------------------------------------------- paths in a config
Location = tuple[str | int, ...]


def _path_kind(annotation: Any, metadata: list) -> tuple[str, bool] | None:
    """(kind, is a list) when a field holds a ``PathField`` path or a list of them."""
    for item in metadata:
        if isinstance(item, PathField):
            return item.kind, False
    if get_origin(annotation) is Annotated:
        return _path_kind(None, list(annotation.__metadata__))
    if get_origin(annotation) is list:
        found = _path_kind(get_args(annotation)[0], [])
        return (found[0], True) if found else None
    for arg in get_args(annotation):  # X | None
        if arg is not type(None) and (found := _path_kind(arg, [])):
            return found
    return None


def path_fields(config: ExperimentConfig) -> Iterator[tuple[Location, str, str]]:
    """(location, kind, value) of every path the config holds, the loop's section included;
    a list's paths one by one (the location then ends in the index)."""

    def walk(model: BaseModel, where: Location) -> Iterator[tuple[Location, str, str]]:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            found = _path_kind(field.annotation, field.metadata)
            if found and value is not None:
                kind, many = found
                items = enumerate(value) if many else [(None, value)]
                for index, item in items:
                    yield (*where, name) + (() if index is None else (index,)), kind, item
            elif isinstance(value, BaseModel):
                yield from walk(value, (*where, name))
            elif isinstance(value, dict | list):
                pairs = value.items() if isinstance(value, dict) else enumerate(value)
                for key, item in pairs:
                    if isinstance(item, BaseModel):
                        yield from walk(item, (*where, name, key))

    yield from walk(config, ())
    if config._section is not None and isinstance(config.settings, BaseModel):
        yield from walk(config.settings, (config._section,))


def set_path(config: ExperimentConfig, location: Location, value: str) -> None:
    """Put ``value`` at ``location`` (a location ``path_fields`` gave)."""
    *parents, last = location
    node: Any = config
    for key in parents:
        if isinstance(node, ExperimentConfig) and key == config._section:
            node = config.settings
        elif isinstance(node, BaseModel):
            node = getattr(node, str(key))
        else:
            node = node[key]
    if isinstance(last, int):
        node[last] = value
    else:
        setattr(node, last, value)


def is_file_path(kind: str, value: str) -> bool:
    """Whether a path field's value names a file or folder (a role prompt may be a name)."""
    return kind != "prompt" or Path(value).suffix in (".yaml", ".yml")


def overridden(overrides: list[str] | None) -> set[str]:
    """The dotted keys a list of ``key=value`` overrides sets."""
    return {o.partition("=")[0] for o in overrides or []}


def resolve_paths(config: ExperimentConfig, base: Path, keys: set[str] = frozenset()) -> None:
    """Make the config's relative paths absolute: against ``base``, or against the working
    directory for those an override set (``keys``, the overrides' dotted keys). A ``dir`` path
    is resolved only where it exists (``model.path`` may be a hub id)."""
    cwd = Path(os.getcwd())
    for location, kind, value in list(path_fields(config)):
        path = Path(value).expanduser()
        if path.is_absolute() or not is_file_path(kind, value):
            continue
        dotted = ".".join(str(part) for part in location)
        by_override = any(dotted == k or dotted.startswith(f"{k}.") for k in keys)
        resolved = (cwd if by_override else base) / path
        if kind == "dir" and not resolved.exists():
            continue
        set_path(config, location, str(resolved))


def dump(config: ExperimentConfig, relative_to: Path | None = None) -> str:
    """The config as YAML; paths inside ``relative_to`` (a run folder) written relative to it,
    so that the folder can move."""
    data = config.model_dump(mode="json")
    if relative_to is not None:
        root = relative_to.resolve()
        for location, kind, value in path_fields(config):
            path = Path(value)
            if not (path.is_absolute() and is_file_path(kind, value)):
                continue
            with contextlib.suppress(ValueError):  # outside the folder: kept absolute
                node: Any = data
                for key in location[:-1]:
                    node = node[key]
                node[location[-1]] = str(path.resolve().relative_to(root))
    return yaml.safe_dump(data, sort_keys=False)
