"""The legal-move oracle: exact sets on hand-set positions, no side effects, honest reporting."""

from __future__ import annotations

import copy

import pytest

import games
from games import TextArenaGame, UnplayableGameError
from games.actions import normalize_action
from games.opponents import RandomOpponent, legal_example_action, options
from games.oracle import (
    LISTING,
    ORACLE,
    PARTIAL,
    UNKNOWN,
    axis_letters,
    axis_numbers,
    board_cells,
    candidates,
    find_legal,
)


def new_game(env_id: str, seed: int = 0, **kwargs: int) -> TextArenaGame:
    game = TextArenaGame(env_id, **kwargs)
    game.reset(seed)
    return game


def keys(actions: list[str] | tuple[str, ...] | None) -> set[str]:
    return {normalize_action(a) for a in actions or ()}


def nim_rules(piles: list[int]) -> set[str]:
    """Nim's legal moves from its rules: any 1..n objects from one non-empty pile."""
    return {f"{i} {q}" for i, n in enumerate(piles) for q in range(1, n + 1)}


# ---------------------------------------------------------------------- exact sets
def test_nim_opening_set_matches_the_rules() -> None:
    game = new_game("Nim-v0")
    legal = game.legal_set(0)
    assert legal.source == ORACLE and legal.known
    assert keys(legal.actions) == nim_rules([3, 4, 5])  # 12 moves
    assert keys(game.legal_actions(0)) == nim_rules([3, 4, 5])


def test_nim_after_moves_matches_the_rules() -> None:
    game = new_game("Nim-v0")
    game.step("[0 3]")  # piles 0 4 5
    game.step("[1 2]")  # piles 0 2 5
    assert keys(game.legal_actions(0)) == nim_rules([0, 2, 5])


def test_nim_hand_set_position_is_judged_on_the_state_not_the_text() -> None:
    game = new_game("Nim-v0")
    game.env.state.game_state["piles"] = [1, 0, 2]  # the observation still shows 3 4 5
    assert keys(game.legal_actions(0)) == nim_rules([1, 0, 2])


def connect_four_rules(game: TextArenaGame) -> set[str]:
    board = game.env.state.game_state["board"]
    return {f"col {c}" for c in range(len(board[0])) if board[0][c] == "."}


def test_connect_four_full_column_is_not_legal() -> None:
    game = new_game("ConnectFour-v0")
    assert keys(game.legal_actions(0)) == {f"col {c}" for c in range(7)}
    for _ in range(6):  # alternate discs up column 3: no four in a row, column full
        assert game.step("[col 3]").valid
    assert keys(game.legal_actions(0)) == {f"col {c}" for c in range(7) if c != 3}
    assert keys(game.legal_actions(0)) == connect_four_rules(game)


def test_connect_four_hand_set_position() -> None:
    game = new_game("ConnectFour-v0")
    board = game.env.state.game_state["board"]
    for col in (0, 5, 6):
        for row in range(6):
            board[row][col] = "X" if row % 2 else "O"
    assert keys(game.legal_actions(0)) == {"col 1", "col 2", "col 3", "col 4"}


def test_listed_moves_come_from_the_listing() -> None:
    game = new_game("TicTacToe-v0")
    assert game.legal_set(0).source == LISTING and game.legal_set(0).trials == 0


def test_not_your_turn_means_no_moves() -> None:
    game = new_game("Nim-v0")
    assert game.legal_actions(1) == [] and game.example_actions(1) == []


# ---------------------------------------------------------------------- no side effects
def test_the_oracle_never_changes_the_real_game() -> None:
    """Same seed, same moves: with the oracle consulted every turn or never, the same game.

    Liar's Dice rolls dice from the global `random` stream at each round; trial moves on
    copies would shift those rolls if the oracle leaked.
    """
    probed = new_game("LiarsDice-v0", seed=3)
    opponent, actions, seen = RandomOpponent(3), [], []
    while not probed.done:
        seen.append(probed.observation(probed.current_player))
        actions.append(opponent.act(probed, probed.current_player))
        probed.step(actions[-1])
    assert probed.legal_sources[ORACLE] + probed.legal_sources[PARTIAL] > 0

    plain = new_game("LiarsDice-v0", seed=3, oracle_trials=0)
    replayed = []
    for action in actions:
        replayed.append(plain.observation(plain.current_player))
        plain.step(action)
    assert replayed == seen
    assert plain.done and plain.outcome() == probed.outcome()
    assert plain.raw_rewards == probed.raw_rewards and plain.reason == probed.reason


def test_asking_for_moves_leaves_state_and_observation_alone() -> None:
    game = new_game("ConnectFour-v0")
    game.step("[col 2]")
    before = copy.deepcopy(game.env.state.game_state), game.observation(1), game.turn
    game.legal_actions(1)
    assert (game.env.state.game_state, game.observation(1), game.turn) == before
    assert game.step("[col 2]").valid and game.env.state.game_state["board"][4][2] != "."


def test_results_are_cached_per_state() -> None:
    game = new_game("Nim-v0")
    first = game.legal_set(0)
    assert game.legal_set(0) is first and game.legal_sources[ORACLE] == 1
    game.step("[2 5]")
    assert game.legal_set(1) is not first and game.legal_sources[ORACLE] == 2


# ---------------------------------------------------------------------- honest reporting
def test_a_chat_turn_is_reported_unknown() -> None:
    game = new_game("IteratedPrisonersDilemma-v0")  # round 1 opens with a free chat turn
    legal = game.legal_set(game.current_player)
    assert legal.source == UNKNOWN and "arbitrary text" in legal.reason
    assert game.legal_actions(game.current_player) is None
    assert game.info["legal_set_unknown"] is True


def test_a_known_game_is_reported_known() -> None:
    game = new_game("Nim-v0")
    game.legal_actions(0)
    assert game.info["legal_moves"] == {ORACLE: 1} and game.info["legal_set_unknown"] is False


def test_a_sample_that_misses_nothing_is_still_partial() -> None:
    """Templates too big for the budget are sampled: the moves found are legal, the set is not
    claimed complete."""
    text = "Move like '[a2a3]'.\n a b c d e f g h\n8 |\n7 |\n6 |\n5 |\n4 |\n3 |\n2 |\n1 |"
    legal = {"[a2a3]", "[b2b3]"}
    found = find_legal(text, lambda m: m in legal, max_trials=64)
    assert found.source == PARTIAL and set(found.actions) <= legal and found.actions
    assert not candidates(text, max_trials=64).complete


def test_without_any_accepted_move_the_set_is_unknown() -> None:
    found = find_legal("Play '[go 1]'.", lambda m: False)
    assert found.source == UNKNOWN and found.actions == ()


def test_oracle_can_be_turned_off() -> None:
    game = new_game("Nim-v0", oracle_trials=0)
    assert game.legal_actions(0) is None and game.legal_set(0).source == UNKNOWN


# ---------------------------------------------------------------------- reading the page
def test_board_axes_are_read() -> None:
    board = " 8 | B B\n 7 | . .\n 6 | . .\n     a b c d e f g h"
    assert axis_letters(board) == "abcdefgh" and axis_numbers(board) == [6, 7, 8]
    rows = "    0  1  2\nA   ~  ~  ~\nB   ~  ~  ~\nC   ~  ~  ~"
    assert axis_letters(rows) == "abc" and axis_numbers(rows) == [0, 1, 2]


def test_templates_fill_integer_ranges_and_placeholders() -> None:
    moves = set(candidates("Remove with '[pile quantity]', e.g. '[0 3]'. piles: 2").moves)
    assert {"[0 0]", "[3 3]", "[1 2]"} <= moves
    bets = set(candidates("Valid: '[bet X]' (X <= 5)").moves)
    assert {"[bet 1]", "[bet 5]"} <= bets


# ---------------------------------------------------------------------- moves naming two squares
BREAKTHROUGH_BOARD = """[GAME] Use UCI-like notation in brackets, e.g. [a2a3].
 3 | B B B
 2 | . . .
 1 | W W W
     a b c
[White] [a2a3]
 3 | B . B
 2 | . . .
 1 | W . W
     a b c"""

LINES_BOARD = """Move format: `[b1b3]`.
    a   b   c
  +---+---+---+
3 | X |   |   | 3
  +---+---+---+
2 |   | O |   | 2
  +---+---+---+
1 |   |   | O | 1
  +---+---+---+
    a   b   c"""

CHECKERS_BOARD = """Make your move in the format [rowFrom colFrom rowTo colTo], e.g. '[2 1 3 2]'.
     0  1  2
   +---------
 0 | .  b  .
 1 | .  .  .
 2 | r  .  r
"""

CHESS_BOARD = """Make your moves in UCI format (e.g., [e2e4]).
    a    b    c
  \u250c\u2500\u2500\u2500\u2500\u252c\u2500\u2500\u2500\u2500\u252c\u2500\u2500\u2500\u2500\u2510
2 \u2502 \u265c  \u2502    \u2502    \u2502 2
  \u251c\u2500\u2500\u2500\u2500\u253c\u2500\u2500\u2500\u2500\u253c\u2500\u2500\u2500\u2500\u2524
1 \u2502    \u2502 \u2654  \u2502    \u2502 1
  \u2514\u2500\u2500\u2500\u2500\u2534\u2500\u2500\u2500\u2500\u2534\u2500\u2500\u2500\u2500\u2518
    a    b    c"""


def pieces(text: str) -> set[tuple[str, str]]:
    return {square for square, shows_piece in board_cells(text).items() if shows_piece}


def test_the_latest_board_on_the_page_is_read() -> None:
    assert set(board_cells(BREAKTHROUGH_BOARD)) == {(r, f) for r in "123" for f in "abc"}
    assert pieces(BREAKTHROUGH_BOARD) == {("3", "a"), ("3", "c"), ("1", "a"), ("1", "c")}
    assert pieces(LINES_BOARD) == {("3", "a"), ("2", "b"), ("1", "c")}  # walls and rules skipped
    assert pieces(CHECKERS_BOARD) == {("0", "1"), ("2", "0"), ("2", "2")}
    assert pieces(CHESS_BOARD) == {("2", "a"), ("1", "b")}
    assert board_cells("Nim: piles 3 4 5. Remove with [pile quantity].") == {}


def five_by_five(moves: str, board: list[str]) -> str:
    rows = [f"{5 - i} | {row}" for i, row in enumerate(board)]
    return "\n".join([f"Submit moves as '{moves}' (from -> to).", *rows, "    a b c d e"])


def test_a_capture_two_squares_away_is_found() -> None:
    """Every step is blocked, the one legal move jumps: a sample of neighbouring squares (the
    old candidates) never names it, so the random player had to guess and lost."""
    text = five_by_five(
        "[a2 a3]", ["B B B B B", "B B B B B", "R R R R R", ". . B . .", "R R R R R"]
    )
    found = find_legal(text, lambda move: move == "[c1 c3]")
    assert found.actions == ("[c1 c3]",) and found.source == PARTIAL


def test_a_slide_across_the_board_is_found() -> None:
    text = LINES_BOARD.replace("3 | X |", "3 |   |") + "\n"  # two pieces: b2 and c1
    text = text.replace("    a   b   c\n  +", "    a   b   c   d   e   f   g   h\n  +", 1)
    legal = {"[c1c3]", "[b2b1]"}
    found = find_legal(text, lambda move: move in legal)
    assert set(found.actions) == legal


def test_pairs_from_pieces_come_first() -> None:
    moves = candidates(five_by_five("[a2 a3]", [". . . . .", ". . B . .", ". . . . .",
                                                ". . . . .", "R . . . ."]), 16).moves  # fmt: skip
    pairs = [m for m in moves if m != "[a2 a3]"]
    assert pairs and all(m[1:3] in ("c4", "a1") for m in pairs)


def test_two_squares_without_a_board_range_over_the_page_size() -> None:
    """Blind Breakthrough draws no board: files a..h are guessed from "8x8" (they used to be
    the example's own letter only, so the random player moved column a until it was stuck)."""
    text = "You move up on an 8x8 board. Use UCI-like notation, e.g. [a2a3]."
    found = find_legal(text, lambda move: move in {"[h2h3]", "[g2g3]"})
    assert set(found.actions) == {"[h2h3]", "[g2g3]"} and found.source == PARTIAL


def test_a_format_spelled_in_words_beside_a_board() -> None:
    text = "Provide your move in the format '[row, col]'.\n  0 1 2\n0|.|.|.|\n1|.|B|W|\n2|.|.|.|"
    found = find_legal(text, lambda move: move in {"[0, 2]", "[2, 0]"})
    assert set(found.actions) == {"[0, 2]", "[2, 0]"} and found.source == PARTIAL
    assert candidates("[row, col] with no board", 50).moves == ["[row, col]"]


# Ids whose three seeded random games all used to end by an invalid move of the random player
# (issue 24), with a turn cap past the first such move (the oracle, before: no move found).
NAMED_SQUARE_GAMES = [
    ("Alquerque-v0", 15),  # [a2 a3]; when every step is blocked, only a two-square jump is left
    ("LinesOfAction-v0", 6),  # [b1b3]; a piece slides as far as its line holds pieces
    ("Breakthrough-v0-blind", 10),  # [a2a3] with no board drawn
    ("Othello-v0-hard", 3),  # [row, col] spelled in words, no move listed
    ("LiarsDice-v0-raw", 7),  # a -raw turn shows only new messages, without the move format
]


@pytest.mark.parametrize(("env_id", "max_turns"), NAMED_SQUARE_GAMES)
def test_random_player_moves_legally_on_board_games(env_id: str, max_turns: int) -> None:
    from games.verify_offline import play_random

    for seed in range(3):
        game = play_random(env_id, seed=seed, max_turns=max_turns)
        assert game.invalid_move_by is None, (env_id, seed, game.turn, game.reason)
        assert all(legal.actions for legal in game._legal.values()), (env_id, seed)


# Ids whose three seeded random games all ended by an invalid move before issue 31: their
# moves are not playable as the page shows them (the oracle found no move at the first turn).
FORMAT_GAMES = [
    ("IteratedTwoThirdsAverage-v0", 6),  # '[<number>]': a placeholder right after the bracket
    ("TwoDollar-v0", 6),  # '[Propose] $X.XX': the argument follows the bracket
    ("NewRecruit-v0", 6),  # '[Propose] CCAACCCC': the same, the format's own example
    ("ColonelBlotto-v0-large", 4),  # '[A4 B2 C2]' must sum to the 50 units the page names
]


@pytest.mark.parametrize(("env_id", "max_turns"), FORMAT_GAMES)
def test_random_player_moves_legally_where_the_format_is_not_a_move(
    env_id: str, max_turns: int
) -> None:
    from games.verify_offline import play_random

    for seed in range(3):
        game = play_random(env_id, seed=seed, max_turns=max_turns)
        assert game.invalid_move_by is None, (env_id, seed, game.turn, game.reason)


def test_arguments_after_the_bracket_and_totals_are_tried_only_when_nothing_else_plays() -> None:
    from games.oracle import argument_moves, total_moves

    page = ('- Make a proposal: "I think this is fair because... [Propose] $X.XX"\n'
            "    [Propose] CCAACCCC\n  - [Accept]: Accept the current proposal.\n"
            "[GAME] ===\nYou have 3 rounds.")
    assert argument_moves(page, ("0", "1", "2"), 10) == [
        "[Propose] $0.00", "[Propose] $1.00", "[Propose] $2.00", "[Propose] CCAACCCC"]
    assert total_moves("allocate exactly 50 units. Format: '[A4 B2 C2]'", 10) == [
        "[A50 B0 C0]", "[A0 B50 C0]", "[A0 B0 C50]"]
    assert "[<number>]" in candidates("Guess in the format '[<number>]' (0-3).").moves
    assert "[2]" in candidates("Guess in the format '[<number>]' (0-3).").moves
    # a page token that plays: the argument and total guesses are not tried
    found = find_legal(page + " Total 50.", lambda move: move in {"[Accept]", "[Propose] $1.00"})
    assert found.actions == ("[Accept]",)
    found = find_legal(page, lambda move: move == "[Propose] $1.00")
    assert found.actions == ("[Propose] $1.00",) and found.source == PARTIAL


def test_a_raw_page_keeps_what_the_player_was_shown() -> None:
    game = new_game("Alquerque-v0-raw")
    for move in ("[a2 a3]", "[a4 b3]"):
        assert game.step(move).valid
    assert "[a2 a3]'" not in game.observation(0)  # this turn's messages only
    assert "Submit moves as '[a2 a3]'" in game._pages[0]
    assert game.example_actions(0)


# ---------------------------------------------------------------------- players and prompts
def test_random_opponent_never_guesses_on_nim_and_connect_four() -> None:
    """The issue's measurement: 12 seeded games each used to end by the random player's own
    invalid move 12 and 11 times."""
    for env_id in ("Nim-v0", "ConnectFour-v0"):
        for seed in range(12):
            game, players = new_game(env_id, seed=seed), RandomOpponent(seed)
            while not game.done:
                game.step(players.act(game, game.current_player))
            assert game.invalid_move_by is None, (env_id, seed, game.reason)
            assert players.verified


def test_legal_example_is_a_legal_move() -> None:
    """`spiral.example: legal` (the prompts' example before issue 31) shows a legal move."""
    game = new_game("ConnectFour-v0")
    example = legal_example_action(game, 0)
    assert example in game.legal_actions(0)
    assert game.step(example).valid
    native = games.make("tictactoe")
    native.reset(0)
    assert legal_example_action(native, 0) in native.legal_actions(0)


def test_legal_example_falls_back_to_the_rules_format() -> None:
    game = new_game("IteratedPrisonersDilemma-v0")
    moves, verified = options(game, game.current_player)
    assert moves  # the chat turn accepts text: verified moves exist
    assert legal_example_action(game, game.current_player) in moves


# ---------------------------------------------------------------------- unplayable ids
@pytest.mark.parametrize(
    ("game_id", "words"),
    [
        ("textarena:Chess-v0", "does not import under Python"),
        ("textarena:Sudoku-v0", "does not start a two-player game"),
    ],
)
def test_unplayable_ids_fail_in_one_line(game_id: str, words: str) -> None:
    with pytest.raises(UnplayableGameError) as caught:
        games.make(game_id)
    message = str(caught.value)
    assert words in message and "\n" not in message and game_id in message


# ---------------------------------------------------------------------- every known id
def known_ids(cheap_only: bool) -> list[str]:
    """Verified ids whose every state had a known legal set (games/textarena_offline.json).

    The cheap subset: base ids (no -train/-raw variant) whose oracle costs under 30 ms a state.
    """
    from games.registry import legal_move_records

    records = legal_move_records()
    return sorted(
        env_id
        for env_id, record in records.items()
        if record["legal"] in (LISTING, ORACLE)
        and (
            not cheap_only
            or (not env_id.endswith(("-raw", "-train")) and record["oracle_us_per_call"] < 30_000)
        )
    )


def test_the_verification_file_covers_the_verified_ids() -> None:
    from games.registry import legal_move_records

    records = legal_move_records()
    assert set(records) == set(games.verified_textarena_ids())
    assert len(known_ids(cheap_only=False)) >= 40
    assert records["Nim-v0"]["legal"] == ORACLE and records["TicTacToe-v0"]["legal"] == LISTING
    assert records["Nim-v0"]["random_invalid_rate"] == 0.0


def random_games_without_invalid_moves(env_id: str, seeds: range, max_turns: int) -> None:
    """The random player never loses by an invalid move in a state whose legal set is known.

    (`play_random` also fails if a move known to be legal is rejected.) One env defect is
    allowed for: a state with no legal move at all that the env does not end (QuantumTicTacToe
    with every cell solidified); the oracle reports it `unknown` and the player must guess.
    """
    from games.verify_offline import play_random

    for seed in seeds:
        game = play_random(env_id, seed=seed, max_turns=max_turns)
        if game.invalid_move_by is not None:
            last = game._legal[max(game._legal)]
            assert last.source == UNKNOWN and not last.actions, (env_id, seed, game.reason)


@pytest.mark.parametrize("env_id", known_ids(cheap_only=True))
def test_random_player_makes_no_invalid_move_where_moves_are_known(env_id: str) -> None:
    random_games_without_invalid_moves(env_id, range(10, 12), max_turns=20)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", known_ids(cheap_only=False))
def test_random_player_makes_no_invalid_move_on_every_known_id(env_id: str) -> None:
    random_games_without_invalid_moves(env_id, range(10, 13), max_turns=30)


def test_trials_mute_only_their_own_thread(capsys: pytest.CaptureFixture) -> None:
    import sys
    import threading

    from games.textarena_adapter import isolated_side_effects

    before = sys.stdout
    ready, done = threading.Event(), threading.Event()

    def other_thread() -> None:
        ready.wait()
        print("progress from another thread")
        done.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with isolated_side_effects():
        print("a trial move's chatter")
        ready.set()
        done.wait()
    thread.join()
    out = capsys.readouterr().out
    assert "progress from another thread" in out and "chatter" not in out
    assert sys.stdout is before
