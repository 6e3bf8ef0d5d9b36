"""Role prompts: one YAML file per role in ``roles/prompts/`` and a tiny loader/renderer.

A role file holds ``system`` text (optional), a ``user`` template (Jinja2: ``{{ question }}``;
braces such as ``\\boxed{}`` stay literal), and ``answer_format`` (documentation for readers and
analysis scripts), and an optional ``prefill``: the start of the assistant's reply (a template
too), which the model continues (``Loop.request`` appends it after the chat template's
generation prompt; parse the reply as prefill + completion). Add a role by adding a file; name
it in an experiment's ``roles:`` section.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2
import jinja2.meta

from selfplay.core import yamlfile
from selfplay.core.errors import UserError

PROMPTS_DIR = Path(__file__).parent / "prompts"
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False)


class RolePromptError(ValueError):
    """A role prompt file is missing, malformed, or rendered without a field it needs."""


@dataclass(frozen=True)
class RolePrompt:
    name: str
    user: str
    system: str | None = None
    answer_format: str = "boxed"
    description: str = ""
    prefill: str = ""  # the start of the assistant's reply, continued by the model

    def fields(self) -> set[str]:
        """The names the templates (system, user, prefill) read: the fields a loop must fill."""
        names: set[str] = set()
        for template in (self.system, self.user, self.prefill):
            if template:
                names |= jinja2.meta.find_undeclared_variables(_ENV.parse(template))
        return names - set(_ENV.globals)

    def render_prefill(self, **fields: object) -> str:
        """The reply's opening text with ``fields`` filled in ("" when the role has none)."""
        if not self.prefill:
            return ""
        try:
            return _ENV.from_string(self.prefill).render(**fields)
        except jinja2.UndefinedError as exc:
            raise RolePromptError(f"role prompt {self.name!r}: {exc.message}") from exc

    def render(self, **fields: object) -> list[dict[str, str]]:
        """Chat messages for this role with ``fields`` filled into the templates."""
        try:
            messages = []
            if self.system:
                messages.append(
                    {"role": "system", "content": _ENV.from_string(self.system).render(**fields)}
                )
            messages.append(
                {"role": "user", "content": _ENV.from_string(self.user).render(**fields)}
            )
        except jinja2.UndefinedError as exc:
            raise RolePromptError(f"role prompt {self.name!r}: {exc.message}") from exc
        return messages


def list_roles() -> list[str]:
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.yaml"))


@lru_cache(maxsize=64)
def load_role(name_or_path: str) -> RolePrompt:
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = PROMPTS_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        raise RolePromptError(
            f"unknown role prompt {name_or_path!r} (known: {', '.join(list_roles())})"
        )
    try:
        data = yamlfile.read(path)  # malformed YAML, a key given twice: one line
    except UserError as exc:
        raise RolePromptError(str(exc)) from exc
    if not isinstance(data, dict) or "user" not in data:
        raise RolePromptError(f"{path}: a role prompt needs a `user` template")
    unknown = set(data) - {"name", "user", "system", "answer_format", "description", "prefill"}
    if unknown:
        raise RolePromptError(f"{path}: unknown key {sorted(unknown)[0]!r}")
    try:
        _ENV.parse(data["user"])
        for key in ("system", "prefill"):
            if data.get(key):
                _ENV.parse(data[key])
    except jinja2.TemplateSyntaxError as exc:
        raise RolePromptError(f"{path}: template error line {exc.lineno}: {exc.message}") from exc
    return RolePrompt(
        name=data.get("name", path.stem),
        user=data["user"],
        system=data.get("system"),
        answer_format=data.get("answer_format", "boxed"),
        description=data.get("description", ""),
        prefill=data.get("prefill") or "",
    )
