"""A run's inputs, frozen into its folder so that the run depends on nothing outside it but the
installed packages (docs/run-folder.md#inputs):

    RUN/inputs/prompts/<file>.yaml    every role prompt's text (the config refers to these)
    RUN/inputs/files/<file>           input files the config names (``PathField("file")``)
    RUN/inputs/plugins/<module>       the source of plug-in modules the config names by import
                                      path, unless they belong to an installed package
    RUN/inputs/<name>                 what the loop adds (``Loop.inputs``: SPICE's corpus manifest)
    RUN/inputs/environment.json       Python, platform, package versions, the git commit

``config.yaml`` names the copies by paths relative to the run folder; ``load_run_config``
resolves them against the folder and puts ``inputs/plugins`` first on ``sys.path``, so that
``resume``, ``eval``, ``crossplay``, ``evaluate``, ``export`` and ``analyze`` work from any
folder, and after the run folder moved to another machine with the same packages.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from datetime import datetime
from pathlib import Path
from typing import Any

from roles import PROMPTS_DIR
from selfplay.config import ExperimentConfig
from selfplay.config_files import dump, path_fields, set_path
from selfplay.core import plugins

INPUTS = "inputs"
PLUGINS = f"{INPUTS}/plugins"
ENVIRONMENT = f"{INPUTS}/environment.json"
# the platform's own top-level packages: the git commit and the selfplay version pin them
PLATFORM = ("selfplay", "games", "roles", "curricula", "corpora", "sandbox")
REPO = Path(__file__).resolve().parents[2]
# beside selfplay's own requirements: the optional engines and trackers, when installed
OPTIONAL = ("vllm", "ray", "flash-attn", "wandb", "textarena", "reasoning-gym")


def freeze(config: ExperimentConfig, run_dir: Path, loop=None) -> None:
    """Copy what the run reads into ``RUN/inputs``, point ``config`` at the copies and write
    ``config.yaml`` with paths relative to the run folder. Safe to call again: what is already
    inside the folder stays (``resume`` calls it to pick up a prompt given by an override, or
    to freeze a run made before this existed); ``environment.json`` then records the resume."""
    run_dir = Path(run_dir).resolve()
    inputs = run_dir / INPUTS
    inputs.mkdir(exist_ok=True)
    copied: dict[Path, Path] = {}
    for location, kind, value in list(path_fields(config)):
        if kind == "dir":
            continue
        # a prompt by name too: files in roles/prompts change between commits
        source = prompt_file(value) if kind == "prompt" else Path(value)
        source = source.resolve()
        if _inside(source, run_dir) or not source.is_file():
            continue  # already frozen; a missing file fails where it is read, in one line
        if source not in copied:
            folder = inputs / ("prompts" if kind == "prompt" else "files")
            copied[source] = _copy_file(source, folder)
        set_path(config, location, str(copied[source]))
    copy_plugins(config, run_dir / PLUGINS)
    for name, source in (loop.inputs() if loop is not None else {}).items():
        target = inputs / name
        if Path(source).is_file() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    write_environment(run_dir / ENVIRONMENT)
    (run_dir / "config.yaml").write_text(dump(config, relative_to=run_dir))


def pin_plugins(run_dir: Path) -> None:
    """Import the run's own plug-in copies before anything else of the same name."""
    folder = Path(run_dir).resolve() / PLUGINS
    if folder.is_dir():
        plugins.pin(folder)


def prompt_file(spec: str) -> Path:
    """The YAML file a role's ``prompt:`` names (a name in roles/prompts, or a path)."""
    path = Path(spec)
    return path if path.suffix in (".yaml", ".yml") else PROMPTS_DIR / f"{spec}.yaml"


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _copy_file(source: Path, folder: Path) -> Path:
    """``source`` copied into ``folder`` under its own name (``name-2.yaml`` if taken)."""
    folder.mkdir(parents=True, exist_ok=True)
    target, number = folder / source.name, 1
    while target.exists():
        number += 1
        target = folder / f"{source.stem}-{number}{source.suffix}"
    shutil.copy2(source, target)
    return target


# ---------------------------------------------------------------------- plug-in modules
def _installed_roots() -> list[Path]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sysconfig.get_paths()["stdlib"]}
    paths |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return [Path(p).resolve() for p in paths if p]


def _module_file(name: str) -> Path | None:
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _top_root(top: str) -> Path | None:
    """The ``sys.path`` folder the top-level module ``top`` was imported from."""
    module = sys.modules.get(top)
    if module is None:
        return None
    locations = list(getattr(module, "__path__", []) or [])  # a package (namespace ones too)
    if locations:
        return Path(locations[0]).resolve().parent
    file = _module_file(top)
    return file.parent if file else None


def plugin_roots(config: ExperimentConfig) -> dict[str, Path]:
    """{top-level module: the folder it came from} for the modules the config names by import
    path (``loop: my_loops.drill:DrillLoop``, game ids, rewards), leaving out installed
    packages and the platform's own."""
    names: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and plugins.is_import_path(value):
            names.add(value.partition(":")[0].split(".")[0])

    walk(config.model_dump(mode="json"))
    installed = _installed_roots()
    roots = {}
    for top in sorted(names - set(PLATFORM)):
        root = _top_root(top)
        if root is None or any(_inside(root, folder) for folder in installed):
            continue
        roots[top] = root
    return roots


def copy_plugins(config: ExperimentConfig, target: Path) -> list[str]:
    """Copy the source of the plug-in modules the config names, and of the other modules this
    process imported from the same folders (a helper module beside a game), into ``target``;
    the Python files only. Returns the top-level names copied."""
    roots = plugin_roots(config)
    folders = set(roots.values())
    tops = set(roots)
    for top in {name.split(".")[0] for name in list(sys.modules)} - tops - set(PLATFORM):
        if _top_root(top) in folders:  # a sibling: another module from the same folder
            tops.add(top)
    copied = []
    for top in sorted(tops):
        root = _top_root(top)
        if root is None or (target / top).exists() or (target / f"{top}.py").exists():
            continue
        files = {_module_file(n) for n in list(sys.modules) if n.split(".")[0] == top}
        for file in sorted(f for f in files if f is not None and f.suffix == ".py"):
            if not _inside(file, root):
                continue
            relative = file.relative_to(root)
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target / relative)
        copied.append(top)
    return copied


# ---------------------------------------------------------------------- environment
def package_versions() -> dict[str, str]:
    """Versions of selfplay, what it requires, and the optional engines that are installed."""
    names = ["selfplay"]
    try:
        requires = importlib.metadata.requires("selfplay") or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    for requirement in requires:
        if "extra ==" in requirement:
            continue
        names.append(re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0])
    versions = {}
    for name in [*names, *OPTIONAL]:
        try:
            versions[name.lower()] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return dict(sorted(versions.items()))


def git_state(folder: Path = REPO) -> dict | None:
    """The commit of the selfplay checkout and whether it has uncommitted changes (None when
    selfplay is not run from a git checkout)."""
    if not (folder / ".git").exists():
        return None

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(changed), "checkout": str(folder)}


def environment() -> dict:
    return {
        "time": datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
        "packages": package_versions(),
        "git": git_state(),
    }


def write_environment(path: Path) -> None:
    """The environment a run started in; a later call (a resume) adds its own under
    ``resumes``, so a run continued elsewhere says where."""
    if path.exists():
        record = json.loads(path.read_text())
        record.setdefault("resumes", []).append(environment())
    else:
        record = environment()
    path.write_text(json.dumps(record, indent=2) + "\n")
