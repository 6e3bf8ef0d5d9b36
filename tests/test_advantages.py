import dataclasses
import math

import pytest

from selfplay.rl.advantages import (
    RAEBaseline,
    adpo_eps_high,
    adpo_scale,
    apply_adpo,
    drop_zero_advantage,
    group_advantages,
    group_relative_samples,
    rae_samples,
)
from selfplay.types import Episode, Sample, Turn


def test_drgrpo_is_centred_reward_without_std():
    assert group_advantages([1.0, 0.0, 0.0, 1.0], "drgrpo") == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages([1.0, 0.0, 0.0, 0.0], "drgrpo") == [0.75, -0.25, -0.25, -0.25]


def test_grpo_divides_by_population_std():
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], "grpo")
    std = math.sqrt(0.75 * 0.25)  # population std of {1,0,0,0}
    assert adv[0] == pytest.approx(0.75 / (std + 1e-6))
    assert adv[1] == pytest.approx(-0.25 / (std + 1e-6))
    # GRPO and Dr. GRPO differ exactly by the std factor
    dr = group_advantages([1.0, 0.0, 0.0, 0.0], "drgrpo")
    assert adv[0] / dr[0] == pytest.approx(1 / (std + 1e-6))


def test_rloo_is_leave_one_out():
    rewards = [1.0, 0.0, 0.5]
    adv = group_advantages(rewards, "rloo")
    for i, r in enumerate(rewards):
        others = [x for j, x in enumerate(rewards) if j != i]
        assert adv[i] == pytest.approx(r - sum(others) / len(others))


def test_uniform_group_gives_zero_and_is_dropped():
    assert group_advantages([1.0, 1.0, 1.0], "grpo") == [0.0, 0.0, 0.0]


def test_rae_paper_order_updates_then_subtracts():
    rae = RAEBaseline(alpha=0.9, order="paper")
    assert rae.advantage("Kuhn", "p0", 1.0) == pytest.approx(1.0 - 0.1)  # b = 0.1
    assert rae.advantage("Kuhn", "p0", -1.0) == pytest.approx(-1.0 - (0.09 - 0.1))  # b = -0.01
    assert rae.values[("Kuhn", "p0")] == pytest.approx(-0.01)
    assert rae.values[("Kuhn", "p1")] == 0.0  # other role untouched


def test_rae_code_order_reads_before_update():
    rae = RAEBaseline(alpha=0.9, order="code")
    assert rae.advantage("Kuhn", "p0", 1.0) == pytest.approx(1.0)  # b was 0
    assert rae.advantage("Kuhn", "p0", -1.0) == pytest.approx(-1.0 - 0.1)
    assert rae.values[("Kuhn", "p0")] == pytest.approx(-0.01)


def test_rae_keyed_by_game_and_role_and_round_trips():
    rae = RAEBaseline(alpha=0.5)
    rae.advantage("TicTacToe", "p0", 1.0)
    rae.advantage("Kuhn", "p0", -1.0)
    assert rae.values[("TicTacToe", "p0")] == 0.5 and rae.values[("Kuhn", "p0")] == -0.5
    clone = RAEBaseline()
    clone.load_state_dict(rae.state_dict())
    assert dict(clone.values) == dict(rae.values) and clone.alpha == 0.5


def _turn(role):
    return Turn(
        role=role, prompt_ids=[1], completion_ids=[2], engine_logprobs=[0.0], loss_mask=[1], text=""
    )


def test_each_seat_gets_its_own_advantage_on_every_turn():
    episode = Episode(
        loop="spiral",
        env="g",
        turns=[_turn("p0"), _turn("p1"), _turn("p0")],
        rewards={"p0": 1.0, "p1": -1.0},
    )
    samples = rae_samples([episode], RAEBaseline(alpha=0.0))  # b = R → A = 0 with alpha 0
    assert [s.advantage for s in samples] == [0.0, 0.0, 0.0]
    samples = rae_samples([episode], RAEBaseline(alpha=1.0))  # b stays 0 → A = R
    by_role = {(s.turn.role, s.advantage) for s in samples}
    assert by_role == {("p0", 1.0), ("p1", -1.0)}
    assert sum(s.turn.role == "p0" for s in samples) == 2


def test_group_advantages_are_per_role():
    episodes = [
        Episode(
            loop="x",
            env="e",
            turns=[_turn("a"), _turn("b")],
            rewards={"a": ra, "b": rb},
            group_id="g",
        )
        for ra, rb in [(1.0, 10.0), (0.0, 10.0)]
    ]
    samples = group_relative_samples(episodes, "drgrpo")
    a = sorted(s.advantage for s in samples if s.turn.role == "a")
    b = [s.advantage for s in samples if s.turn.role == "b"]
    assert a == [-0.5, 0.5] and b == [0.0, 0.0]  # b's rewards are not mixed with a's
    assert len(drop_zero_advantage(samples)) == 2


def test_adpo_formulas():
    assert adpo_scale(0.3) == pytest.approx(0.6) and adpo_scale(0.8) == pytest.approx(1.0)
    assert adpo_scale(0.55) == pytest.approx(0.6 + 0.4 * 0.5)
    assert adpo_eps_high(0.8) == pytest.approx(0.2) and adpo_eps_high(0.3) == pytest.approx(0.3)


# ---------------------------------------------------------------- ADPO needs a loop that sets p̂


def _spiral_data(tmp_path):
    from tests.conftest import tiny_config

    data = tiny_config(tmp_path, loop="spiral", spiral={"games": [{"id": "tictactoe"}]})
    del data["rlvr"]
    data["roles"] = {"player": {"prompt": "player"}}
    return data


@pytest.mark.parametrize("loop", ["rlvr", "spiral"])
def test_adpo_in_a_loop_without_pass_rates_is_a_one_line_error(tmp_path, capsys, loop):
    """Without p̂ every sample would get scale 1 and the global ε_high: ADPO would do nothing."""
    import yaml

    from selfplay.cli.main import main
    from tests.conftest import tiny_config

    data = tiny_config(tmp_path) if loop == "rlvr" else _spiral_data(tmp_path)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "advantage.adpo=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"advantage.adpo needs per-task pass rates, which the {loop} loop does not" in err
    assert not (tmp_path / "runs").exists()  # no run folder left behind


def test_a_loop_that_supplies_pass_rates_accepts_adpo(tmp_path):
    from selfplay.loops import validate
    from selfplay.loops.rlvr import RlvrLoop
    from tests.conftest import tiny_config

    class PassRateLoop(RlvrLoop):
        spec = dataclasses.replace(RlvrLoop.spec, pass_rates=True)

    config = validate(tiny_config(tmp_path, advantage={"adpo": True}), "test")
    loop = PassRateLoop(config)
    episodes = [
        Episode(
            loop="x",
            env="e",
            turns=[_turn("solver")],
            rewards={"solver": r},
            group_id="g",
            pass_rate=0.3,
        )
        for r in (1.0, 0.0)
    ]
    samples = loop.samples(episodes)
    assert [s.advantage_scale for s in samples] == [pytest.approx(0.6)] * 2
    assert [s.eps_high for s in samples] == [pytest.approx(0.3)] * 2


# ---------------------------------------------------------------- found by mutation testing


def test_rae_samples_key_baselines_by_game_and_role_and_keep_the_group():
    """Two games, two roles: four baselines, and every sample keeps its episode's group id."""
    episodes = [
        Episode(
            loop="spiral",
            env=env,
            turns=[_turn("p0"), _turn("p1")],
            rewards={"p0": r, "p1": -r},
            group_id=f"{env}-1",
        )
        for env, r in [("kuhn", 1.0), ("tictactoe", -1.0)]
    ]
    baseline = RAEBaseline(alpha=0.5)
    samples = rae_samples(episodes, baseline)
    assert dict(baseline.values) == {
        ("kuhn", "p0"): 0.5,
        ("kuhn", "p1"): -0.5,
        ("tictactoe", "p0"): -0.5,
        ("tictactoe", "p1"): 0.5,
    }
    assert [s.group_id for s in samples] == ["kuhn-1", "kuhn-1", "tictactoe-1", "tictactoe-1"]
    assert [s.info["env"] for s in samples] == ["kuhn", "kuhn", "tictactoe", "tictactoe"]


def test_rae_baseline_loaded_from_a_checkpoint_accepts_new_keys():
    rae = RAEBaseline(alpha=0.5)
    rae.advantage("kuhn", "p0", 1.0)
    clone = RAEBaseline()
    clone.load_state_dict(rae.state_dict())
    assert clone.advantage("tictactoe", "p1", 1.0) == pytest.approx(0.5)  # a new game starts at 0


def test_drop_zero_advantage_uses_the_scaled_advantage():
    """ADPO with floor 0 scales p̂ ≤ 0.3 to nothing: such samples carry no gradient."""
    turn = _turn("a")
    kept = [Sample(turn=turn, advantage=1.0, advantage_scale=0.6)]
    gone = [
        Sample(turn=turn, advantage=1.0, advantage_scale=0.0),
        Sample(turn=turn, advantage=1e-8),  # at the tolerance: dropped
        Sample(turn=turn, advantage=2e-8, advantage_scale=0.25),  # 5e-9 after scaling
    ]
    assert drop_zero_advantage(kept + gone) == kept


def test_rae_with_the_spiral_shaped_rewards():
    """Rewards other than ±1 (the −1.5/+0.5 invalid-move shaping): b ← α·b + (1−α)·R."""
    rae = RAEBaseline(alpha=0.5)
    assert rae.advantage("kuhn", "p1", 0.5) == pytest.approx(0.5 - 0.25)
    assert rae.advantage("kuhn", "p1", -1.5) == pytest.approx(-1.5 - (0.125 - 0.75))
    assert rae.values[("kuhn", "p1")] == pytest.approx(-0.625)


# ---- found by mutation testing once the timeout no longer hid survivors ----------------------


def test_reinforce_and_rloo_for_small_groups():
    assert group_advantages([1.0, -0.5, 2.0], "reinforce") == [1.0, -0.5, 2.0]  # no baseline
    assert group_advantages([3.0], "rloo") == [0.0]  # nothing to leave one out against
    # G = 2: r_i − r_j, the other sample's reward
    assert group_advantages([1.0, 0.0], "rloo") == pytest.approx([1.0, -1.0])
    assert group_advantages([1.0, 0.0, 0.0], "rloo") == pytest.approx([1.0, -0.5, -0.5])


def test_advantage_errors_name_the_bad_value():
    with pytest.raises(ValueError, match=r"^unknown group advantage mode 'ppo'$"):
        group_advantages([1.0, 0.0], "ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^RAE order must be 'paper' or 'code', not 'late'$"):
        RAEBaseline(order="late")  # type: ignore[arg-type]


def test_rae_default_alpha_is_the_papers_095():
    rae = RAEBaseline()
    assert rae.alpha == 0.95
    assert rae.advantage("kuhn", "p0", 1.0) == pytest.approx(1.0 - 0.05)  # b = 0.05 first


def test_adpo_eps_high_is_capped_at_0_3_for_hard_tasks():
    assert adpo_eps_high(0.0) == pytest.approx(0.3)  # (0.8 − 0)/0.5 = 1.6, clipped to 1
    assert adpo_eps_high(1.0) == pytest.approx(0.2)


def test_apply_adpo_uses_the_given_scale_floor():
    sample = Sample(turn=_turn("a"), advantage=1.0, pass_rate=0.3)
    apply_adpo([sample], scale_floor=0.2)
    assert sample.advantage_scale == pytest.approx(0.2) and sample.eps_high == pytest.approx(0.3)


def test_group_relative_samples_keep_their_group_id():
    episodes = [
        Episode(loop="x", env="e", turns=[_turn("a")], rewards={"a": r}, group_id="g7")
        for r in (1.0, 0.0)
    ]
    assert {s.group_id for s in group_relative_samples(episodes, "drgrpo")} == {"g7"}
