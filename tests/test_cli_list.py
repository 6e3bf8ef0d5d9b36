"""``selfplay list``: a filter on names and machine-readable output."""

import json

from selfplay.cli.main import main


def test_list_games_filtered_as_json(capsys):
    assert main(["list", "games", "--filter", "KUHN", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert set(listing) == {"games"}
    ids = [row["id"] for row in listing["games"]]
    assert "kuhn_poker" in ids and "textarena:KuhnPoker-v0" in ids
    assert "openspiel:kuhn_poker" in ids
    assert all("kuhn" in i.lower() for i in ids)
    keys = {"id", "legal_moves", "invalid_rate", "information", "random_moves"}
    assert all(set(row) == keys for row in listing["games"])
    openspiel = next(row for row in listing["games"] if row["id"] == "openspiel:kuhn_poker")
    assert openspiel["information"] == "imperfect" and 2 <= openspiel["random_moves"] <= 3


def test_list_all_as_json_has_every_section_and_the_filter_applies_to_each(capsys):
    assert main(["list", "--json", "--filter", "spiral"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert set(listing) == {"experiments", "roles", "games"}
    names = [row["name"] for row in listing["experiments"]]
    assert "spiral-kuhn-cpu" in names and all("spiral" in n for n in names)
    assert listing["roles"] == []  # no role prompt is called spiral


def test_plain_list_still_prints_tables(capsys):
    assert main(["list", "experiments"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("experiments:") and "rlvr-sanity" in out


def test_every_experiment_publishes_its_budget() -> None:
    """A user sees the cost before starting (`selfplay list`): CPU-sized experiments state the
    wall time measured on the reference machine, GPU-sized ones the GPUs and `selfplay plan`'s
    memory per GPU."""
    import re

    from selfplay.config_files import find_experiment, list_experiments, read_yaml

    for name in list_experiments():
        data = read_yaml(find_experiment(name))
        description = " ".join(str(data.get("description", "")).split())
        (budget,) = re.findall(r"Budget: ([^.]*(?:\.\d[^.]*)*)", description) or [""]
        assert budget, f"{name}: its description states no 'Budget: ...'"
        if data["model"]["path"] == "embedded":
            assert re.search(r"\d+(\.\d+)? min", budget) and "measured" in budget, (name, budget)
        else:
            assert re.search(r"\d+ x 80 GiB GPU", budget) and "selfplay plan" in budget, (
                name,
                budget,
            )


def test_plain_games_list_shows_information_and_random_length(capsys):
    assert main(["list", "games", "--filter", "leduc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "information" in lines[0] and "random game (moves)" in lines[0]
    row = next(line.split() for line in lines if "openspiel:leduc_poker" in line)
    assert row[1:4] == ["exact", "-", "imperfect"] and float(row[4]) > 1
