"""Kuhn Poker over several rounds; the game goes to the chip leader after the last round.

Each round: both players ante 1 chip and get one card from {J, Q, K}. Betting, with the
round's first player A and the other B:
    check, check            -> showdown for a pot of 2
    bet, call               -> showdown for a pot of 4
    bet, fold               -> A takes the pot of 3
    check, bet, call        -> showdown for a pot of 4
    check, bet, fold        -> B takes the pot of 3
The first player alternates between rounds. The published SPIRAL code scored the game by the
winner of the *last round*; here the winner is whoever has more chips after all rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from games.actions import match_legal
from games.base import DEFAULT_MAX_TURNS, NativeGame, winner_by_score

CARDS = ("J", "Q", "K")  # in rank order
ANTE = 1
BET = 1
_RULES = """\
Rules:
- The deck has three cards, J < Q < K. Each round both players ante {ante} chip and each \
gets one private card.
- [check]: pass without betting (only when no bet is on the table).
- [bet]: put {bet} more chip into the pot (only when no bet is on the table).
- [call]: match your opponent's bet.
- [fold]: give up the round; your opponent takes the pot.
- If nobody folds, the higher card takes the pot at the showdown.
- The first player alternates between rounds.
- After {rounds} rounds the player with more chips wins the game; equal chips is a draw."""


class KuhnPoker(NativeGame):
    id = "kuhn_poker"

    def __init__(
        self,
        rounds: int = 5,
        deals: Sequence[tuple[str, str]] | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        """`deals`: optional fixed (player 0 card, player 1 card) per round, for tests and
        paired evaluation; otherwise cards are dealt from the reset seed."""
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        if deals is not None:
            _check_deals(deals, rounds)
        self.rounds = rounds
        self.deals = [tuple(deal) for deal in deals] if deals is not None else None
        super().__init__(max_turns=max_turns)

    # ---- state ---------------------------------------------------------------------------
    def _setup(self) -> None:
        self.chips = {0: 0, 1: 0}  # net chips won or lost since the start
        self.round = 0
        self.results: list[str] = []  # one line per finished round, for the observation
        self.round_log: list[dict[str, Any]] = []  # the same, structured, for analysis
        self._start_round()

    def _start_round(self) -> None:
        self.round += 1
        deal = self.deals[self.round - 1] if self.deals else tuple(self.rng.sample(CARDS, 2))
        self.cards = {0: deal[0], 1: deal[1]}
        self.put_in = {0: ANTE, 1: ANTE}  # chips each player has in this round's pot
        self.moves: list[tuple[int, str]] = []  # (player, move) this round
        self.current_player = (self.round - 1) % 2

    @property
    def pot(self) -> int:
        return self.put_in[0] + self.put_in[1]

    def legal_actions(self, player: int) -> list[str] | None:
        if not self._to_move(player):
            return []
        facing_bet = bool(self.moves) and self.moves[-1][1] == "bet"
        return ["[call]", "[fold]"] if facing_bet else ["[check]", "[bet]"]

    # ---- play ----------------------------------------------------------------------------
    def _apply(self, action: str) -> str | None:
        player = self.current_player
        legal = self.legal_actions(player) or []
        chosen = match_legal(action, legal)
        if chosen is None:
            return f"{action!r} is not allowed now; choose one of {', '.join(legal)}"
        move = chosen.strip("[]")
        self.moves.append((player, move))
        if move in ("bet", "call"):
            self.put_in[player] += BET
        self._after_move(player, move)
        return None

    def _after_move(self, player: int, move: str) -> None:
        sequence = tuple(m for _, m in self.moves)
        if move == "fold":
            self._end_round(1 - player, f"Player {player} folded")
        elif sequence in (("check", "check"), ("bet", "call"), ("check", "bet", "call")):
            self._showdown()
        else:
            self.current_player = 1 - player

    def _showdown(self) -> None:
        winner = 0 if CARDS.index(self.cards[0]) > CARDS.index(self.cards[1]) else 1
        why = f"showdown: Player 0 had {self.cards[0]}, Player 1 had {self.cards[1]}"
        self._end_round(winner, why)

    def _end_round(self, winner: int, why: str) -> None:
        pot = self.pot
        self.chips[winner] += pot - self.put_in[winner]
        self.chips[1 - winner] -= self.put_in[1 - winner]
        moves = ", ".join(f"Player {p} [{m}]" for p, m in self.moves)
        self.round_log.append(
            {
                "round": self.round,
                "cards": dict(self.cards),
                "moves": list(self.moves),
                "winner": winner,
                "pot": pot,
            }
        )
        self.results.append(
            f"Round {self.round}: {moves}; {why}. Player {winner} won the pot of {pot} chips."
        )
        if self.round < self.rounds:
            self._start_round()
        else:
            self._finish_game()

    def _finish_game(self) -> None:
        chips = f"Player 0: {self.chips[0]:+d}, Player 1: {self.chips[1]:+d} chips"
        leader = winner_by_score(self.chips)
        if leader is None:
            self._finish(None, f"Equal chips after {self.rounds} rounds ({chips}): draw")
        else:
            self._finish(
                leader, f"Player {leader} has more chips after {self.rounds} rounds ({chips})"
            )

    # ---- text ----------------------------------------------------------------------------
    def _render(self, player: int) -> str:
        parts = [
            f"You are Player {player} in a {self.rounds}-round game of Kuhn Poker.",
            _RULES.format(ante=ANTE, bet=BET, rounds=self.rounds),
        ]
        if self.results:
            parts.append("Finished rounds:\n" + "\n".join(self.results))
        parts.append(
            f"Chips won so far: Player 0: {self.chips[0]:+d}, Player 1: {self.chips[1]:+d}."
        )
        parts.append(self._render_now(player))
        return "\n\n".join(parts)

    def _render_now(self, player: int) -> str:
        if self.done:
            return f"The game is over. {self.reason}."
        lines = [
            f"Round {self.round} of {self.rounds}. Your card: {self.cards[player]}. "
            f"Pot: {self.pot} chips."
        ]
        if self.moves:
            lines.append(
                "Actions this round: " + ", ".join(f"Player {p} [{m}]" for p, m in self.moves) + "."
            )
        lines.append(self._turn_text(player))
        return "\n".join(lines)

    def _extra_info(self) -> dict[str, Any]:
        chips = dict(getattr(self, "chips", {}))
        # "returns": the payoff per seat in chips, under the key every game with a payoff uses
        # (SPIRAL's `reward: payoff` reads it); chips won so far if the game was cut short
        return {"chips": chips, "returns": chips, "round": getattr(self, "round", 0)}


def _check_deals(deals: Sequence[tuple[str, str]], rounds: int) -> None:
    if len(deals) < rounds:
        raise ValueError(f"deals has {len(deals)} rounds, need {rounds}")
    for deal in deals:
        if len(deal) != 2 or deal[0] == deal[1] or not set(deal) <= set(CARDS):
            raise ValueError(f"bad deal {deal!r}: two different cards from {CARDS}")


# ---- OpenSpiel's kuhn_poker, as our one-round game ------------------------------------------
# OpenSpiel deals card ids 0, 1, 2 (J, Q, K) to player 0 then player 1, and its two actions
# are 0 = Pass (check, or fold facing a bet) and 1 = Bet (bet, or call facing one); player 0
# opens, as in our first round.
def from_openspiel(state: Any) -> KuhnPoker:
    """Our one-round Kuhn Poker at a state of OpenSpiel's ``kuhn_poker`` (after the deal): the
    same cards, the same moves, so it renders what a player sees there."""
    history = [int(a) for a in state.history()]
    if len(history) < 2:
        raise ValueError("an OpenSpiel kuhn_poker state before the deal has no cards to show")
    game = KuhnPoker(rounds=1, deals=[(CARDS[history[0]], CARDS[history[1]])])
    game.reset(0)
    for action in history[2:]:
        game.step(openspiel_move(game, game.current_player, action))
    return game


def openspiel_move(game: KuhnPoker, player: int, action: int) -> str:
    """Our move (bracketed) for OpenSpiel's action ``action`` of ``player`` now."""
    legal = game.legal_actions(player) or []
    facing_bet = legal == ["[call]", "[fold]"]
    return ("[fold]", "[call]")[action] if facing_bet else ("[check]", "[bet]")[action]


def to_openspiel(game: KuhnPoker, spiel_game: Any) -> Any:
    """The state of OpenSpiel's one-round ``kuhn_poker`` (``spiel_game``) that the current
    round of ``game`` is at: the round's first player is OpenSpiel's player 0, the deal and the
    moves are the round's (check or fold is OpenSpiel's Pass, bet or call its Bet). Every
    round is such a game; the rounds before it do not enter."""
    if game.done:
        raise ValueError("the game is over: no round is being played")
    first = (game.round - 1) % 2
    state = spiel_game.new_initial_state()
    for player in (first, 1 - first):  # OpenSpiel deals player 0's card first
        state.apply_action(CARDS.index(game.cards[player]))
    for _, move in game.moves:
        state.apply_action(1 if move in ("bet", "call") else 0)
    return state
