"""Simple Negotiation: two traders with public inventories and private values.

Modelled on TextArena's SimpleNegotiation: resources Wheat, Wood, Sheep, Brick and Ore;
each player gets 5-25 of each and values each within +-20% of a base price. Players take
turns (10 in total by default) making offers, accepting or denying them, or talking.
At the end, the player whose inventory value (by their own prices) grew more wins.

Offers are parsed from the text, never matched against a list: the published SPIRAL code
checked actions against a list of 3 random offers, so real offers were scored as invalid.
Quantities are public so that a proposer can know whether the responder owns what is asked.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from games.base import DEFAULT_MAX_TURNS, NativeGame, winner_by_score

RESOURCES = ("Wheat", "Wood", "Sheep", "Brick", "Ore")
BASE_VALUES = {"Wheat": 5, "Wood": 10, "Sheep": 15, "Brick": 25, "Ore": 40}
QUANTITY_RANGE = (5, 25)
VALUE_SPREAD = 0.2
VALUE_BOUNDS = (5, 40)

OFFER_GRAMMAR = """\
How to act (exactly one action per turn, written in square brackets):
- [Offer: I give 2 Wheat, 1 Wood -> you give 1 Brick]
    Propose a trade. Left of "->" is what you give, right of it what you ask for; each side
    is a comma-separated list of "<count> <resource>" with whole counts of at least 1.
    You must own what you give and your opponent must own what you ask for.
- [Accept]  Accept the offer your opponent made on their last turn.
- [Deny]    Reject the offer your opponent made on their last turn.
- Any other bracketed text, e.g. [I need Ore. What would you want for it?], is a message to
    your opponent. An offer is only open for one turn: if you do not accept it, it lapses.
A malformed offer, an offer of resources that are not owned, or [Accept]/[Deny] when no
offer is open is an invalid move and loses the game."""

_CONTROL = re.compile(r"^\s*(offer|accept|deny)\b", re.IGNORECASE)
_ITEM = re.compile(r"^(\d+)\s*x?\s+([A-Za-z]+)$", re.IGNORECASE)
_ITEM_SEPARATOR = re.compile(r"\s*(?:,|;|\+|\band\b)\s*", re.IGNORECASE)
_GIVE_PREFIX = re.compile(r"^(?:i\s+(?:give|offer)|i'll\s+give)\s*:?\s*", re.IGNORECASE)
_ASK_PREFIX = re.compile(
    r"^(?:you\s+give(?:\s+me)?|i\s+(?:want|get|ask\s+for)|for)\s*:?\s*", re.IGNORECASE
)
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")


def _check_table(table: dict[int, dict[str, int]]) -> None:
    for player in (0, 1):
        if set(table.get(player, {})) != set(RESOURCES):
            raise ValueError(f"player {player} needs exactly the resources {RESOURCES}")
        if any(n < 0 for n in table[player].values()):
            raise ValueError("quantities and values must be >= 0")


def _copy_table(table: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    return {p: {r: int(table[p][r]) for r in RESOURCES} for p in (0, 1)}


class OfferError(ValueError):
    """An offer that does not follow the grammar; the message says what is wrong."""


@dataclass(frozen=True)
class Offer:
    """A trade proposal from `proposer`'s point of view."""

    give: dict[str, int]  # what the proposer hands over
    get: dict[str, int]  # what the proposer asks for in return

    def describe(self) -> str:
        """In the offer grammar, from the proposer's point of view."""
        return f"[Offer: I give {_items_text(self.give)} -> you give {_items_text(self.get)}]"

    def between(self, proposer: int) -> str:
        """Neutral wording for the history, which both players read."""
        return (
            f"Player {proposer} gives {_items_text(self.give)}; "
            f"Player {1 - proposer} gives {_items_text(self.get)}"
        )


def _items_text(items: dict[str, int]) -> str:
    return ", ".join(f"{count} {name}" for name, count in items.items())


def _resource_name(word: str) -> str | None:
    """Canonical resource name: case-insensitive, plural "s" tolerated ("bricks")."""
    for name in RESOURCES:
        if word.lower() in (name.lower(), name.lower() + "s"):
            return name
    return None


def _parse_items(text: str, side: str) -> dict[str, int]:
    items: dict[str, int] = {}
    text = text.strip().rstrip(".!")
    if not text:
        raise OfferError(f"nothing listed on the {side} side")
    for part in _ITEM_SEPARATOR.split(text):
        match = _ITEM.match(part.strip())
        if not match:
            raise OfferError(f"cannot read {part.strip()!r}; write items like '2 Wheat'")
        count, name = int(match.group(1)), _resource_name(match.group(2))
        if name is None:
            raise OfferError(f"unknown resource {match.group(2)!r}; use {', '.join(RESOURCES)}")
        if count < 1:
            raise OfferError(f"count for {name} must be at least 1")
        items[name] = items.get(name, 0) + count
    return items


def parse_offer(text: str) -> Offer:
    """Parse "[Offer: I give 2 Wheat, 1 Wood -> you give 1 Brick]" (brackets optional).

    Also accepts TextArena's shorter "[Offer: 3 Sheep, 2 Ore -> 5 Brick]".
    Raises OfferError saying what is wrong.
    """
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    head = re.match(r"^\s*offer\s*:?\s*", body, re.IGNORECASE)
    if not head:
        raise OfferError("an offer starts with 'Offer:'")
    sides = re.split(r"\s*->\s*", body[head.end() :].strip())
    if len(sides) != 2:
        raise OfferError("an offer needs exactly one '->' between what you give and what you ask")
    give = _parse_items(_GIVE_PREFIX.sub("", sides[0].strip()), "give")
    get = _parse_items(_ASK_PREFIX.sub("", sides[1].strip()), "ask")
    both = sorted(set(give) & set(get))
    if both:
        raise OfferError(f"{', '.join(both)} is on both sides of the offer")
    return Offer(give=give, get=get)


class SimpleNegotiation(NativeGame):
    id = "simple_negotiation"

    def __init__(
        self,
        turns: int = 10,
        inventories: dict[int, dict[str, int]] | None = None,
        values: dict[int, dict[str, int]] | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        """`turns`: actions in total (both players) before the game is scored.
        `inventories` / `values`: optional fixed start per player (tests, paired evaluation);
        otherwise both are drawn from the reset seed."""
        if turns < 1:
            raise ValueError(f"turns must be >= 1, got {turns}")
        for table in (inventories, values):
            if table is not None:
                _check_table(table)
        self.turns = turns
        self.fixed_inventories = inventories
        self.fixed_values = values
        super().__init__(max_turns=max_turns)

    # ---- state ---------------------------------------------------------------------------
    def _setup(self) -> None:
        # Draw both tables even when fixed, so a seed deals the same whatever is overridden.
        drawn_inventory = {
            p: {r: self.rng.randint(*QUANTITY_RANGE) for r in RESOURCES} for p in (0, 1)
        }
        drawn_values = {p: {r: self._draw_value(r) for r in RESOURCES} for p in (0, 1)}
        self.inventory = _copy_table(self.fixed_inventories or drawn_inventory)
        self.values = _copy_table(self.fixed_values or drawn_values)
        self.initial_value = {p: self.inventory_value(p) for p in (0, 1)}
        self.pending: tuple[int, Offer] | None = None  # (proposer, offer), open for one turn
        self.history: list[str] = []
        self.trades = 0
        self.current_player = 0

    def _draw_value(self, resource: str) -> int:
        # TextArena's rule: base +-20%, kept within [5, 40].
        base = BASE_VALUES[resource]
        spread = int(VALUE_SPREAD * base)
        return self.rng.randint(
            max(base - spread, VALUE_BOUNDS[0]), min(base + spread, VALUE_BOUNDS[1])
        )

    def inventory_value(self, player: int) -> int:
        return sum(qty * self.values[player][r] for r, qty in self.inventory[player].items())

    def value_change(self, player: int) -> int:
        return self.inventory_value(player) - self.initial_value[player]

    def legal_actions(self, player: int) -> list[str] | None:
        """None on your turn: offers and messages are free-form, judged by the parser."""
        if not self._to_move(player):
            return []
        return None

    # ---- play ----------------------------------------------------------------------------
    def _apply(self, action: str) -> str | None:
        player = self.current_player
        controls = [b for b in _BRACKETED.findall(action) if _CONTROL.match(b)]
        if len(controls) > 1:
            return "use only one of [Offer: ...], [Accept] or [Deny] per turn"
        open_offer = self.pending if self.pending and self.pending[0] != player else None
        self.pending = None  # an offer is open for exactly one reply
        error = self._act(player, controls[0] if controls else None, action, open_offer)
        if error is not None:
            return error
        self.current_player = 1 - player
        if self.turn >= self.turns:
            self._score()
        return None

    def _act(
        self, player: int, control: str | None, action: str, open_offer: tuple[int, Offer] | None
    ) -> str | None:
        if control is None:
            return self._talk(player, action, open_offer)
        keyword = _CONTROL.match(control).group(1).lower()  # type: ignore[union-attr]
        if keyword == "offer":
            return self._propose(player, control, open_offer)
        if control.strip().lower().rstrip(".!") not in ("accept", "deny"):
            return f"write [{keyword.title()}] on its own, not [{control.strip()}]"
        if open_offer is None:
            return f"there is no open offer to {keyword}"
        if keyword == "accept":
            return self._trade(player, open_offer)
        self._log(player, "denied the offer.")
        return None

    def _talk(self, player: int, action: str, open_offer: tuple[int, Offer] | None) -> None:
        """A message to the opponent; it never breaks a rule."""
        message = " ".join(action.strip().removeprefix("[").removesuffix("]").split())
        self._log(player, f'said: "{message}"' + (" (the open offer lapsed)" if open_offer else ""))
        return None

    def _propose(self, player: int, text: str, open_offer: tuple[int, Offer] | None) -> str | None:
        try:
            offer = parse_offer(text)
        except OfferError as error:
            return f"malformed offer: {error}"
        missing = self._missing(player, offer.give)
        if missing:
            return f"you offered {missing} that you do not own"
        missing = self._missing(1 - player, offer.get)
        if missing:
            return f"you asked for {missing} that Player {1 - player} does not own"
        self.pending = (player, offer)
        lapsed = " (a counter-offer; the open offer lapsed)" if open_offer else ""
        self._log(player, f"offered a trade: {offer.between(player)}{lapsed}")
        return None

    def _missing(self, player: int, items: dict[str, int]) -> str:
        """Items `player` lacks, as text ("" when they own everything)."""
        short = {r: n for r, n in items.items() if self.inventory[player][r] < n}
        return _items_text(short)

    def _trade(self, player: int, open_offer: tuple[int, Offer]) -> str | None:
        proposer, offer = open_offer
        # Inventories cannot change while an offer is open, but check again: it is cheap.
        if self._missing(proposer, offer.give) or self._missing(player, offer.get):
            return "the offer can no longer be executed"
        for resource, count in offer.give.items():
            self.inventory[proposer][resource] -= count
            self.inventory[player][resource] += count
        for resource, count in offer.get.items():
            self.inventory[player][resource] -= count
            self.inventory[proposer][resource] += count
        self.trades += 1
        self._log(player, f"accepted the trade: {offer.between(proposer)}.")
        return None

    def _log(self, player: int, text: str) -> None:
        self.history.append(f"Turn {self.turn}, Player {player} {text}")

    def _score(self) -> None:
        change = {p: self.value_change(p) for p in (0, 1)}
        changes = f"value change Player 0: {change[0]:+d}, Player 1: {change[1]:+d}"
        winner = winner_by_score(change)
        if winner is None:
            self._finish(None, f"Both inventories changed equally in value ({changes}): draw")
        else:
            self._finish(winner, f"Player {winner} gained more inventory value ({changes})")

    # ---- helpers for non-model players ----------------------------------------------------
    def example_actions(self, player: int) -> list[str]:
        """A few valid actions (for random opponents); not a list of what is legal."""
        rng = random.Random(f"{self.turn}-{player}-{self.inventory}")
        examples = ["[Let us trade. What do you need?]"]
        if self.pending and self.pending[0] != player:
            examples += ["[Accept]", "[Deny]"]
        examples += [self._random_offer(player, rng) for _ in range(2)]
        return [e for e in examples if e]

    def _random_offer(self, player: int, rng: random.Random) -> str:
        mine = [r for r in RESOURCES if self.inventory[player][r] > 0]
        theirs = [r for r in RESOURCES if self.inventory[1 - player][r] > 0]
        if not mine or not theirs:
            return ""
        give = rng.choice(mine)
        wanted = [r for r in theirs if r != give]
        if not wanted:
            return ""
        get = rng.choice(wanted)
        n_give = rng.randint(1, min(3, self.inventory[player][give]))
        n_get = rng.randint(1, min(3, self.inventory[1 - player][get]))
        return f"[Offer: I give {n_give} {give} -> you give {n_get} {get}]"

    # ---- text ----------------------------------------------------------------------------
    def _render(self, player: int) -> str:
        other = 1 - player
        parts = [
            f"You are Player {player} in Simple Negotiation, a trading game.",
            "Both players own Wheat, Wood, Sheep, Brick and Ore and value them differently; "
            "each player sees only their own values.\n"
            f"After {self.turns} turns in total (both players' turns count), the player whose "
            "inventory value grew more, by their own values, wins. Equal growth is a draw.",
            self._render_inventory(player),
            f"Player {other}'s quantities (values hidden): "
            + ", ".join(f"{self.inventory[other][r]} {r}" for r in RESOURCES)
            + ".",
            OFFER_GRAMMAR,
        ]
        if self.history:
            parts.append("History:\n" + "\n".join(self.history))
        parts.append(self._render_now(player))
        return "\n\n".join(parts)

    def _render_inventory(self, player: int) -> str:
        lines = [
            f"  {r}: {self.inventory[player][r]} x {self.values[player][r]} = "
            f"{self.inventory[player][r] * self.values[player][r]}"
            for r in RESOURCES
        ]
        return (
            "Your inventory (quantity x your value per unit = value):\n"
            + "\n".join(lines)
            + f"\n  Total value: {self.inventory_value(player)} (at the start "
            f"{self.initial_value[player]}, change {self.value_change(player):+d})"
        )

    def _render_now(self, player: int) -> str:
        if self.done:
            return f"The game is over. {self.reason}."
        if player != self.current_player:
            return f"Waiting for Player {self.current_player} to act."
        lines = [f"Turn {self.turn + 1} of {self.turns}. It is your turn."]
        if self.pending and self.pending[0] != player:
            proposer, offer = self.pending
            lines.append(
                f"Player {proposer} offers to give you {_items_text(offer.give)} in "
                f"exchange for {_items_text(offer.get)} from you. "
                "Answer [Accept] or [Deny], or make a counter-offer."
            )
        lines.append("Choose your action.")
        return "\n".join(lines)

    def _extra_info(self) -> dict[str, Any]:
        if not hasattr(self, "inventory"):
            return {}
        return {
            "value_change": {p: self.value_change(p) for p in (0, 1)},
            "trades": self.trades,
            "inventory": {p: dict(self.inventory[p]) for p in (0, 1)},
        }
