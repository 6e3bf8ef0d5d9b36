"""Any two-player TextArena environment behind the `Game` protocol, with no per-game code.

TextArena facts this relies on (textarena 0.7.4, read from its source):
- `ta.make(id)` already applies the id's default wrappers; wrapping again raises.
- The state object (`env.state`, a `TwoPlayerState` for most games) is created anew in
  `env.reset`, so `error_allowance` must be set to 0 *after* every reset. With allowance 0,
  `state.set_invalid_move` ends the game at the first invalid move and sets
  `state.game_info[pid]["invalid_move"] = True` for the offender.
- `env.get_observation()` *drains* the pending messages of the current player, so it is
  called exactly once per turn here and the rendered text is cached.
- Observations are strings with the default LLM wrappers, but a list of
  (sender, message, type) tuples for "-raw" ids; both are rendered to text. The wrappers'
  strings hold the whole game so far; a "-raw" list holds only the messages since the
  player's last turn (the rules, with the move format, come once, at the start).
- KuhnPoker's env never puts a bet or a call into the pot (its rules text says it does), so
  every called bet pays 1 chip instead of 2. The adapter plays it by Kuhn's rules instead
  (`KuhnPokerByTheRules`, below); no other env is changed.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import io
import random
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from games.actions import legal_actions_from_text
from games.base import DEFAULT_MAX_TURNS, TwoPlayerGame, winner_by_score
from games.oracle import DEFAULT_MAX_TRIALS, KNOWN_SOURCES, LISTING, UNKNOWN, LegalSet, find_legal

TEXTARENA_PREFIX = "textarena:"


def _textarena() -> Any:
    """Import textarena on first use: it pulls in nltk and takes about a second."""
    return importlib.import_module("textarena")


def textarena_ids() -> list[str]:
    """Every id in textarena's registry (not all are two-player or work offline)."""
    return sorted(_textarena().envs.registration.ENV_REGISTRY)


def render_observation(observation: Any) -> str:
    """TextArena observation (string, or list of (sender, message[, type])) as text."""
    if observation is None:
        return ""
    if isinstance(observation, str):
        return observation
    lines = []
    for item in observation:
        if isinstance(item, (tuple, list)) and len(item) >= 2:
            sender, message = item[0], item[1]
            name = "GAME" if sender == -1 else f"Player {sender}"
            lines.append(f"[{name}] {message}")
        else:
            lines.append(str(item))
    return "\n".join(lines)


_KUHN_MOVE = re.compile(r"\[(Check|Bet|Fold|Call)\]", re.IGNORECASE)  # the env's own pattern
_KUHN_ENV = ("textarena.envs.KuhnPoker.env", "KuhnPokerEnv")


def base_env(env: Any) -> Any:
    """The env under TextArena's wrappers (each wrapper keeps the one it wraps in ``.env``)."""
    while hasattr(env, "env"):
        env = env.env
    return env


@functools.cache
def _kuhn_by_the_rules(env_class: type) -> type:
    """A subclass of textarena 0.7.4's ``KuhnPokerEnv`` that plays by Kuhn's rules.

    The env antes 1 chip per player and pays the pot to the round's winner, but a ``[bet]`` or a
    ``[call]`` never adds a chip to the pot, so bet-call and check-bet-call pay 1 chip where
    Kuhn's rules (and the env's own rules text, and OpenSpiel) pay 2: 12 of the 30 one-round
    histories. Here a legal bet or call puts 1 chip in (before the env resolves the round, so
    its showdown message, its running scores and its winner all count it), and ``net_chips``
    keeps each player's net chips over the finished rounds, computed from the round's history
    by Kuhn's rules: the winner takes what the loser put in. (The env's ``player_chips`` also
    take the next round's ante as soon as a round ends, the last one included.)
    """

    class KuhnPokerByTheRules(env_class):  # type: ignore[misc, valid-type]
        def reset(self, num_players: int, seed: int | None = None) -> Any:
            self.net_chips = {0: 0, 1: 0}
            self.put_in = {0: 0, 1: 0}
            return super().reset(num_players=num_players, seed=seed)

        def _init_round(self) -> None:
            self.put_in = {0: self.ante, 1: self.ante}
            super()._init_round()

        def step(self, action: str) -> Any:
            game_state = self.state.game_state
            tree = game_state["current_legal_action_tree"]
            match = _KUHN_MOVE.search(action.strip())
            move = match.group(1).lower() if match else None
            if move in ("bet", "call") and isinstance(tree, dict) and move in tree:
                player = self.state.current_player_id
                game_state["pot"] += 1
                game_state["player_chips"][player] -= 1
                self.put_in[player] += 1
            return super().step(action)

        def _set_round_winner(self, player_id: int, reason: str) -> None:
            self.net_chips[player_id] += self.put_in[1 - player_id]
            self.net_chips[1 - player_id] -= self.put_in[1 - player_id]
            super()._set_round_winner(player_id, reason)

    KuhnPokerByTheRules.__qualname__ = KuhnPokerByTheRules.__name__
    return KuhnPokerByTheRules


def play_by_the_rules(env: Any) -> None:
    """Make the env follow its game's rules where textarena 0.7.4 does not (Kuhn Poker's
    bets); every other env is left as it is. Call before ``reset``."""
    base = base_env(env)
    if (type(base).__module__, type(base).__name__) == _KUHN_ENV:
        base.__class__ = _kuhn_by_the_rules(type(base))


class _ThreadMutedStdout(io.TextIOBase):
    """sys.stdout that drops what muted threads print and passes everything else through.

    `contextlib.redirect_stdout` is process-wide: with async rollouts the oracle runs on the
    rollout thread, and the main thread's progress output must not vanish meanwhile.
    """

    def __init__(self, target: Any) -> None:
        self.target = target
        self.muted: set[int] = set()

    def write(self, text: str) -> int:
        if threading.get_ident() in self.muted:
            return len(text)
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


_STDOUT_LOCK = threading.Lock()


@contextlib.contextmanager
def _muted_stdout() -> Iterator[None]:
    """Silence this thread's prints (NewRecruit prints while parsing every trial move)."""
    with _STDOUT_LOCK:
        if not isinstance(sys.stdout, _ThreadMutedStdout):
            sys.stdout = _ThreadMutedStdout(sys.stdout)
        proxy = sys.stdout
        proxy.muted.add(threading.get_ident())
    try:
        yield
    finally:
        with _STDOUT_LOCK:
            proxy.muted.discard(threading.get_ident())
            if not proxy.muted and sys.stdout is proxy:
                sys.stdout = proxy.target


@contextlib.contextmanager
def isolated_side_effects() -> Iterator[None]:
    """Keep trial moves from touching the real game's world: global RNGs and stdout.

    TextArena seeds and draws from Python's global `random` (and some envs numpy's) during
    play; a trial move on a copy must not advance the stream the real game will use.
    """
    state = random.getstate()
    numpy = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        with _muted_stdout():
            yield
    finally:
        random.setstate(state)
        if numpy is not None and numpy_state is not None:
            numpy.random.set_state(numpy_state)


def invalid_flags(state: Any) -> set[int]:
    """Players whose `game_info` carries TextArena's invalid-move flag."""
    game_info = getattr(state, "game_info", None) or {}
    return {
        pid
        for pid, data in game_info.items()
        if isinstance(data, dict) and data.get("invalid_move")
    }


class TextArenaGame(TwoPlayerGame):
    """One TextArena id as a `Game`. Invalid moves end the game (error allowance 0).

    Turns, invalid moves, the turn limit and the outcome are `TwoPlayerGame`'s; this class
    only drives the env, finds who broke a rule and reads the winner from the env's rewards.
    `oracle_trials` bounds the moves tried on copies of the state to find the legal set when
    the observation lists none (0 turns the oracle off; see games/oracle.py).
    `by_the_rules=False` plays the env exactly as textarena ships it, Kuhn Poker's unpaid bets
    included (see `play_by_the_rules`).
    """

    def __init__(
        self,
        env_id: str,
        max_turns: int = DEFAULT_MAX_TURNS,
        oracle_trials: int = DEFAULT_MAX_TRIALS,
        by_the_rules: bool = True,
    ) -> None:
        self.env_id = env_id
        self.id = TEXTARENA_PREFIX + env_id
        self.oracle_trials = oracle_trials
        self.by_the_rules = by_the_rules
        self.env: Any = None
        super().__init__(max_turns=max_turns)

    def _clear(self) -> None:
        super()._clear()
        self.env_error: str | None = None
        self.raw_rewards: dict[int, float] | None = None
        self._seen: dict[int, str] = {}
        self._pages: dict[int, str] = {}  # everything each player was shown (the oracle's page)
        self._invalid_calls: list[tuple[int, str]] = []  # (player, reason) per call
        self._legal: dict[tuple[int, int], LegalSet] = {}  # (turn, player) -> legal set
        self.legal_sources: Counter[str] = Counter()  # states asked about, by source

    # ---- lifecycle -------------------------------------------------------------------
    def reset(self, seed: int) -> None:
        self._clear()
        # A fresh env per game: some envs keep state across resets (wrappers' histories).
        self.env = _textarena().make(self.env_id)
        if self.by_the_rules:
            play_by_the_rules(self.env)
        self.env.reset(num_players=self.num_players, seed=seed)
        self.env.state.error_allowance = 0  # the state is rebuilt by reset, so set it now
        self._record_invalid_moves(self.env.state)
        self._observe()

    def _record_invalid_moves(self, state: Any) -> None:
        """Note who the game calls invalid and why, whatever the game does next.

        Games on multi-player states (e.g. Liar's Dice) eliminate the offender and then
        overwrite the reason with the final ranking; recording the call keeps the real one.
        """
        original = state.set_invalid_move

        def set_invalid_move(*args: Any, **kwargs: Any) -> Any:
            reason = kwargs.get("reason", args[0] if args else "")
            self._invalid_calls.append((int(state.current_player_id), str(reason or "")))
            return original(*args, **kwargs)

        state.set_invalid_move = set_invalid_move

    def _observe(self) -> None:
        """Fetch the next player's observation (once: get_observation drains messages)."""
        player, observation = self.env.get_observation()
        self.current_player = int(player)
        text = render_observation(observation)
        self._seen[self.current_player] = text
        if isinstance(observation, str):  # a wrapper's text: the whole game so far
            self._pages[self.current_player] = text
        else:  # a "-raw" list: the messages since this player's last turn, added up
            earlier = self._pages.get(self.current_player)
            self._pages[self.current_player] = f"{earlier}\n{text}" if earlier else text

    def _play(self, actor: int, action: str) -> tuple[int, str] | None:
        """Step the env; who broke a rule and why, or None (then an env ending is read)."""
        flagged_before = self._invalid_flags()
        self._invalid_calls.clear()
        try:
            done, _ = self.env.step(action)
        except Exception as error:  # a buggy env must not take the whole batch down
            # Flagged as env_error so a training loop can drop the episode instead.
            self.env_error = f"{type(error).__name__}: {error}"
            return actor, f"the game raised {self.env_error}"
        foul = self._offender(flagged_before, actor)
        if foul is None and done:
            self._finish_from_env()
        return foul

    def _next_turn(self) -> None:
        self._observe()

    # ---- invalid moves -----------------------------------------------------------------
    def _invalid_flags(self) -> set[int]:
        return invalid_flags(self.env.state)

    def _offender(self, flagged_before: set[int], actor: int) -> tuple[int, str] | None:
        """Who broke the rules in this step, and why: None if nobody did.

        Two signals, because games differ: a `set_invalid_move` call during the step, and
        the `game_info[pid]["invalid_move"]` flag the states set when allowance runs out.
        """
        if self._invalid_calls:
            player, reason = self._invalid_calls[0]
            return player, reason or "invalid move"
        fresh = self._invalid_flags() - flagged_before
        if not fresh:
            return None
        player = actor if actor in fresh else min(fresh)
        return player, self._state_reason(player) or "invalid move"

    def _state_reason(self, player: int) -> str:
        game_info = getattr(self.env.state, "game_info", None) or {}
        data = game_info.get(player, {})
        return str(data.get("reason") or "") if isinstance(data, dict) else ""

    # ---- endings -----------------------------------------------------------------------
    def _finish_from_env(self) -> None:
        rewards, game_info = self.env.close()
        rewards = {int(pid): float(value) for pid, value in (rewards or {}).items()}
        self.raw_rewards = rewards
        reasons = [str(d.get("reason")) for d in (game_info or {}).values() if d.get("reason")]
        reason = reasons[0] if reasons else "game over"
        # Zero-sum from the raw rewards: higher wins, equal (or missing) rewards are a draw.
        self._finish(winner_by_score(rewards), reason)

    # ---- what players see ----------------------------------------------------------------
    def observation(self, player: int) -> str:
        """Latest text `player` was shown (the current player's is always up to date).

        TextArena only renders an observation for the player about to act, so the other
        player's text is the one from their last turn.
        """
        return self._seen.get(player, "")

    def legal_actions(self, player: int) -> list[str] | None:
        """The exact legal moves: listed in the observation, or found by the oracle.

        None when neither knows the whole set (the game judges every move anyway); [] when it
        is not `player`'s turn or the game is over: nothing is playable then.
        """
        legal = self.legal_set(player)
        return list(legal.actions) if legal.known else None

    def example_actions(self, player: int) -> list[str]:
        """Moves the game accepted on a copy of this state, even where the set is partial."""
        return list(self.legal_set(player).actions)

    def legal_set(self, player: int) -> LegalSet:
        """Legal moves of `player` now and where they come from (cached per state)."""
        if not self._to_move(player):
            return LegalSet((), LISTING)
        key = (self.turn, player)
        if key not in self._legal:
            self._legal[key] = self._find_legal(player)
            self.legal_sources[self._legal[key].source] += 1
        return self._legal[key]

    def _find_legal(self, player: int) -> LegalSet:
        text = self.observation(player)
        listed = legal_actions_from_text(text)
        if listed:
            return LegalSet(tuple(listed), LISTING)
        if self.oracle_trials <= 0:
            return LegalSet((), UNKNOWN, "the legal-move oracle is off (oracle_trials: 0)")
        # the oracle reads everything the player was shown: a "-raw" turn's text alone lacks
        # the rules' move format
        page = self._pages.get(player, text)
        with isolated_side_effects():
            return find_legal(page, self.accepts, self.oracle_trials, seed=self.turn)

    def accepts(self, action: str) -> bool:
        """Whether the game would accept `action` now: played on a deep copy of the env.

        The real env is never stepped. The copy gets its own invalid-move recorder (the real
        state's recorder, copied by reference, would report into this game).
        """
        try:
            trial = copy.deepcopy(self.env)
        except Exception:
            return False
        state = trial.state
        calls: list[object] = []
        method = type(state).set_invalid_move.__get__(state)

        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append(args)
            return method(*args, **kwargs)

        state.set_invalid_move = record
        before = invalid_flags(state)
        try:
            trial.step(action)
        except Exception:
            return False
        return not calls and not (invalid_flags(state) - before)

    def _step_info(self) -> dict[str, Any]:
        # env_error is only ever set by the invalid move that ends the game
        return {"env_error": self.env_error} if self.env_error else {}

    def _extra_info(self) -> dict[str, Any]:
        net_chips = getattr(base_env(self.env), "net_chips", None) if self.env else None
        payoff = {"returns": dict(net_chips)} if net_chips is not None else {}
        return {
            **payoff,  # Kuhn Poker played by the rules: net chips over the finished rounds
            "raw_rewards": self.raw_rewards,
            "env_error": self.env_error,
            # where each asked-about state's legal moves came from; a set that is not known
            # (partial or unknown) makes "vs random" figures on this game doubtful
            "legal_moves": dict(self.legal_sources),
            "legal_set_unknown": any(source not in KNOWN_SOURCES for source in self.legal_sources),
        }
