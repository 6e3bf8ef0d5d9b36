"""User-written YAML read strictly (``selfplay.core.yamlfile``): a key given twice, at any depth,
is refused naming its dotted path and both lines; what YAML allows on purpose still reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from selfplay.core.errors import UserError
from selfplay.core.yamlfile import DuplicateKeyError, loads, read

TWICE = [
    ("train:\n  steps: 1\n  lr: 0.1\n  steps: 3\n",
     "key 'train.steps' is given twice (lines 2 and 4)"),
    ("a: 1\nb: 2\na: 3\n", "key 'a' is given twice (lines 1 and 3)"),
    ("x:\n  - {id: 1}\n  - y:\n      z: 1\n      z: 2\n",
     "key 'x[1].y.z' is given twice (lines 4 and 5)"),
    ("{a: 1, a: 2}\n", "key 'a' is given twice (both on line 1)"),
    ("1: a\n01: b\n", "key '1' is given twice (lines 1 and 2)"),  # the same int, as PyYAML reads it
]


@pytest.mark.parametrize(("text", "message"), TWICE)
def test_a_key_given_twice_is_refused_naming_it_and_both_lines(text: str, message: str) -> None:
    with pytest.raises(DuplicateKeyError) as refused:
        loads(text, "my.yaml")
    assert str(refused.value) == f"my.yaml: {message}"


OK = [
    "a: 1\nb: {a: 2}\nc: [{a: 3}, {a: 4}]\n",  # equal keys in different mappings
    "base: &b {lr: 0.1, steps: 1}\nrun:\n  <<: *b\n  steps: 3\n",  # a merge key, then overridden
    "r: &r {s: *r}\n",  # a mapping that holds itself
    "",  # an empty document
    "- a\n- a\n",  # equal items in a list
]


@pytest.mark.parametrize("text", OK)
def test_what_yaml_allows_on_purpose_reads_as_pyyaml_reads_it(text: str) -> None:
    assert repr(loads(text, "ok.yaml")) == repr(yaml.safe_load(text))


def test_malformed_yaml_is_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("a: 1\nb: [1, 2\n")
    with pytest.raises(UserError, match=r"bad.yaml: line 3 malformed YAML: ") as refused:
        read(path)
    assert "\n" not in str(refused.value)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="nowhere.yaml: file not found"):
        read(tmp_path / "nowhere.yaml")
