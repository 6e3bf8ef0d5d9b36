"""``selfplay list``: a filter on names and machine-readable output."""

import json

from selfplay.cli.main import main


def test_list_games_filtered_as_json(capsys):
    assert main(["list", "games", "--filter", "KUHN", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert set(listing) == {"games"}
    ids = [row["id"] for row in listing["games"]]
    assert "kuhn_poker" in ids and "textarena:KuhnPoker-v0" in ids
    assert all("kuhn" in i.lower() for i in ids)
    assert {"id", "legal_moves", "invalid_rate"} == set(listing["games"][0])


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
