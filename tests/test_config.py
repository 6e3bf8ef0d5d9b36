"""Config errors are one line naming the key or file, with exit code 2."""

import subprocess
import sys

import pytest
import yaml

from selfplay.cli.main import main
from selfplay.config_files import apply_override
from selfplay.core.errors import UserError
from selfplay.loops import load_experiment, validate
from tests.conftest import tiny_config


def _write(tmp_path, data, name="exp.yaml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_shipped_experiments_validate():
    from selfplay.config_files import list_experiments

    names = list_experiments()
    assert "rlvr-sanity" in names
    for name in names:
        load_experiment(name)


def test_overrides_are_typed_and_dotted(tmp_path):
    path = _write(tmp_path, tiny_config(tmp_path))
    config = load_experiment(
        str(path), ["train.lr=3e-4", "sampling.temperature=0.5", "rlvr.lenient=false"]
    )
    assert config.train.lr == 3e-4 and config.sampling.temperature == 0.5
    assert config.rlvr.lenient is False


@pytest.mark.parametrize(
    "override, needle",
    [
        ("train.lrr=1", "unknown key 'train.lrr'"),
        ("train.lr=abc", "key 'train.lr'"),
        ("sampling.max_new_tokens=0", "key 'sampling.max_new_tokens'"),
        ("roles.solver.adapter=mine", "key 'roles.solver.adapter'"),
        ("train.adam_betas=[1.0,0.999]", "train.adam_betas must each be in [0, 1)"),
        ("train.lr_schedule=step", "key 'train.lr_schedule'"),
    ],
)
def test_bad_values_name_the_key(tmp_path, override, needle):
    path = _write(tmp_path, tiny_config(tmp_path))
    with pytest.raises(UserError) as info:
        load_experiment(str(path), [override])
    message = str(info.value)
    assert needle in message and "\n" not in message and str(path) in message


def test_missing_loop_section(tmp_path):
    data = tiny_config(tmp_path)
    del data["rlvr"]
    with pytest.raises(UserError, match="needs a `rlvr:` section"):
        validate(data, "x.yaml")


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = _write(tmp_path, "loop: rlvr\nroles: [unclosed\n")
    with pytest.raises(UserError, match=r"exp.yaml: line \d+ malformed YAML"):
        load_experiment(str(path))


def test_missing_file_and_unknown_experiment():
    with pytest.raises(UserError, match="does not exist"):
        load_experiment("no/such/file.yaml")
    with pytest.raises(UserError, match="unknown experiment 'nope'"):
        load_experiment("nope")


def test_override_syntax():
    with pytest.raises(UserError, match="must look like"):
        apply_override({}, "train.lr")


def test_cli_exit_code_two_and_one_line(tmp_path, capsys):
    path = _write(tmp_path, tiny_config(tmp_path))
    assert main(["run", str(path), "train.bogus=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown key 'train.bogus'" in err


def test_unknown_role_prompt_is_one_line(tmp_path, capsys):
    path = _write(tmp_path, tiny_config(tmp_path, roles={"solver": {"prompt": "nobody"}}))
    assert main(["run", str(path)]) == 2
    assert "unknown role prompt 'nobody'" in capsys.readouterr().err


def test_hub_id_without_network_is_one_line(tmp_path):
    code = (
        "import sys; from selfplay.cli.main import main;"
        f"sys.exit(main(['run', {str(_write(tmp_path, tiny_config(tmp_path)))!r},"
        "'model.path=nobody/no-such-model-xyz']))"
    )
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "WANDB_MODE": "disabled"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 2
    assert "could not be fetched from the Hugging Face hub" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_loop_without_its_role_is_a_one_line_error(tmp_path):
    from selfplay.loops import make_loop

    data = tiny_config(tmp_path)
    data["roles"] = {"critic": {"prompt": "solver"}}
    with pytest.raises(UserError, match="the rlvr loop needs a `solver` role in `roles:`"):
        make_loop(validate(data, "test"))
