"""SPELL (Yang et al. 2025, arXiv:2509.23863; docs/algorithms.md#spell): one policy questions,
answers and verifies over clusters of corpus documents, with a context that grows each round.

One policy, three roles (``questioner``, ``responder``, ``verifier``; shared weights). Each step:

1. ``clusters_per_step`` clusters (the chunks of one corpus source) are drawn by the curriculum;
   each gives a context of its memory's past evidence plus ``new_documents`` unseen documents,
   cut to the step's token budget, with its past questions as examples (``clusters.py``).
2. The **questioner** writes a question and its reference answer (``questions_per_cluster``
   samples per cluster). A reply that does not parse is a counted bad-format question (−1).
3. Grounding filter: every question is answered ``closed_book_samples`` times with no documents;
   a mean rule score ≥ 0.1 marks it ``bad_ground`` (−0.5, and no responder group).
4. The **responder** answers each grounded question ``responder_samples`` times, reading every
   document of the cluster (``responder_context: documents``) or nothing (``none``).
5. The **verifier** votes ``verifier_votes`` times on each answer against the reference; the
   responder's reward is max(rule score ``sub_em_strict``, the votes' majority) when the
   majority is valid; a vote earns 1 when it equals the majority, 0 otherwise, −1 unparsable.
6. The questioner's reward from r̄ (``curricula/spell_rewards.py``); accepted questions (r̄ in
   [0.01, 1]) join their cluster's memory.

Advantages (GRPO, ``train.loss: grpo``): the questioner's rewards standardised over the step's
batch (one group), the responder's per question and the verifier's per answer. Verifier groups
train only when their majority share is in [0.51, 0.99] and agrees with the rule score, at most
``verifier_fraction`` of the responder's samples; bad questions train at most 1:1 with good.
"""

from __future__ import annotations

import math
from pathlib import Path

from curricula import spell_rewards as rules
from curricula.curriculum import Curriculum, Group
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.reasoning import build_tasks, reasoning_accuracy
from selfplay.loops.spell.clusters import Clusters, Plan, fit
from selfplay.loops.spell.records import Answer, Proposal, step_metrics
from selfplay.loops.spell.settings import SpellSettings
from selfplay.loops.spice.documents import corpus_manifest, load_documents
from selfplay.types import Collected, Episode

QUESTIONER, RESPONDER, VERIFIER = "questioner", "responder", "verifier"


class SpellLoop(Loop):
    name = "spell"
    Settings = SpellSettings
    spec = LoopSpec(
        roles={QUESTIONER: ("context", "examples"), RESPONDER: ("context", "question"),
               VERIFIER: ("question", "reference", "response")},
        tasks="document clusters",
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SpellSettings = self.settings
        self.questioner_reward = lambda r_bar, bad: rules.questioner_reward(
            r_bar, s.questioner_reward, bad, s.sigma)
        self.documents = load_documents(s)
        if s.max_clusters is not None:  # the first N sources' documents
            sources = list(dict.fromkeys(d.source for d in self.documents))[: s.max_clusters]
            self.documents = [d for d in self.documents if d.source in set(sources)]
        self.clusters = Clusters.by_source([d.source for d in self.documents])
        # the clusters are the curriculum's tasks (family: the cluster's source)
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)
        self.curriculum.buffer.add_many(self.clusters.names, self.clusters.names,
                                        [math.nan] * len(self.clusters.names))
        self.eval_tasks = build_tasks(s.eval_reasoning, s.eval_reasoning_size, config.seed + 20_000)
        self._tokens: dict[int, list[int]] = {}

    def inputs(self) -> dict[str, Path]:
        return {"corpus/manifest.json": corpus_manifest(self.settings)}

    # ---------------------------------------------------------------- contexts
    def tokens(self, document: int, tokenizer) -> list[int]:
        """A document's token ids, cut to ``document_max_tokens`` (cached)."""
        if document not in self._tokens:
            ids = tokenizer(self.documents[document].text, add_special_tokens=False).input_ids
            self._tokens[document] = list(ids[: self.settings.document_max_tokens])
        return self._tokens[document]

    def context(self, documents: list[int], keep: set[int], budget: int, tokenizer) -> str:
        """The documents that fit ``budget`` tokens (``fit``), joined and cut to the budget."""
        lengths = {d: len(self.tokens(d, tokenizer)) + 2 for d in documents}  # + the separator
        chosen = fit(documents, keep, lengths, budget)
        text = "\n\n".join(tokenizer.decode(self.tokens(d, tokenizer)) for d in chosen)
        ids = tokenizer(text, add_special_tokens=False).input_ids
        return text if len(ids) <= budget else tokenizer.decode(ids[:budget])

    def responder_context(self, plan: Plan, tokenizer) -> str:
        """Every document of the cluster in corpus order (the questioner's kept first when the
        budget binds), or nothing (``responder_context: none``)."""
        s = self.settings
        if s.responder_context == "none":
            return ""
        members = self.clusters.members[plan.cluster]
        return self.context(members, set(plan.documents), s.responder_context_tokens, tokenizer)

    # ---------------------------------------------------------------- the three roles
    async def propose(self, policy: BatchingPolicy, index: int, plan: Plan, step: int) -> Proposal:
        s = self.settings
        budget = s.context_budget(step)
        text = self.context(plan.documents, set(plan.new), budget, policy.tokenizer)
        examples = "\n".join(f"Question: {e.question}\nAnswer: {e.answer}" for e in plan.examples)
        request = self.request(QUESTIONER, stop=tuple(s.questioner_stop),
                               max_new_tokens=s.questioner_max_tokens, context=text,
                               examples=examples)
        completion = await policy(request)
        return Proposal(index, plan, self.clusters.names[plan.cluster],
                        len(policy.tokenizer(text, add_special_tokens=False).input_ids),
                        self.turn(request, completion, policy), completion.reply,
                        rules.parse_question(completion.reply, s.max_answer_words))

    async def respond(self, policy: BatchingPolicy, proposal: Proposal, context: str) -> Answer:
        s = self.settings
        request = self.request(RESPONDER, stop=tuple(s.responder_stop),
                               max_new_tokens=s.responder_max_tokens, context=context,
                               question=proposal.parsed[0])
        completion = await policy(request)
        answer = rules.final_answer(completion.reply)
        return Answer(self.turn(request, completion, policy), answer,
                      rules.sub_em_strict(answer, proposal.parsed[1]))

    async def verify(self, policy: BatchingPolicy, proposal: Proposal, answer: Answer) -> None:
        """``verifier_votes`` votes on one answer (none for an answer not stated: reward 0)."""
        s = self.settings
        if answer.answer is None:
            return
        question, reference = proposal.parsed
        requests = [self.request(VERIFIER, stop=tuple(s.verifier_stop),
                                 max_new_tokens=s.verifier_max_tokens, question=question,
                                 reference=reference, response=answer.answer)
                    for _ in range(s.verifier_votes)]
        completions = await policy.gather(policy(r) for r in requests)
        answer.vote_turns = [self.turn(r, c, policy) for r, c in zip(requests, completions,
                                                                     strict=True)]
        answer.votes = [rules.parse_vote(c.reply) for c in completions]
        answer.verdict = rules.majority(answer.votes)

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s, tokenizer = self.settings, policy.tokenizer
        plans = [self.clusters.plan(c, s.new_documents, self.rng) for c in self.draw(step)]
        proposals = await policy.gather(
            self.propose(policy, k * s.questions_per_cluster + j, plan, step)
            for k, plan in enumerate(plans) for j in range(s.questions_per_cluster))
        valid = [p for p in proposals if p.valid]
        if s.grounding_filter:  # closed-book pass: one wave, never trained
            closed = await policy.gather(self.respond(policy, p, "") for p in valid
                                         for _ in range(s.closed_book_samples))
            for k, p in enumerate(valid):
                chunk = closed[k * s.closed_book_samples : (k + 1) * s.closed_book_samples]
                p.closed_book = [a.rule for a in chunk]
                p.bad_ground = rules.is_bad_ground(p.closed_book)
        grounded = [p for p in valid if not p.bad_ground]
        contexts = {id(p): self.responder_context(p.plan, tokenizer) for p in grounded}
        answers = await policy.gather(self.respond(policy, p, contexts[id(p)]) for p in grounded
                                      for _ in range(s.responder_samples))
        for k, p in enumerate(grounded):
            p.answers = answers[k * s.responder_samples : (k + 1) * s.responder_samples]
        await policy.gather(self.verify(policy, p, a) for p in grounded for a in p.answers)
        self.score(proposals, step)
        return Collected(self.episodes(proposals, step),
                         self.curriculum.metrics(step) | step_metrics(proposals,
                                                                      s.context_budget(step)),
                         [p.row(step) for p in proposals])

    def draw(self, step: int) -> list[int]:
        """``clusters_per_step`` clusters drawn by the curriculum, distinct while there are
        enough (then the rest with replacement, so the batch keeps its size)."""
        count, known = self.settings.clusters_per_step, len(self.clusters.names)
        drawn = self.curriculum.draw(min(count, known), step).tolist()
        if count > known:
            drawn += self.curriculum.draw(count - known, step, replace=True).tolist()
        return [int(c) for c in drawn]

    def score(self, proposals: list[Proposal], step: int) -> None:
        """Every reward of the step, which groups train, and the clusters' memories."""
        s = self.settings
        answers = [a for p in proposals for a in p.answers]
        for a in answers:
            a.reward = rules.responder_reward(a.rule, a.verdict)
            a.verifier_trains = bool(a.votes) and rules.verifier_trains(a.votes, a.rule)
        eligible = [a for a in answers if a.verifier_trains]
        if s.verifier_fraction is not None and eligible:
            cap = math.ceil(s.verifier_fraction * len(answers) / s.verifier_votes)
            kept = {id(a) for a in self.rng.sample(eligible, min(cap, len(eligible)))}
            for a in eligible:
                a.verifier_trains = id(a) in kept
        for p in proposals:
            p.reward = self.questioner_reward(p.mean_reward, p.bad_ground)
            p.accepted = rules.accepted(p.mean_reward, p.bad_ground)
            if p.accepted:
                self.clusters.accept(p.plan, *p.parsed, s.memory_size)
        bad = [p for p in proposals if p.bad]
        good = len(proposals) - len(bad)
        if s.balance_bad and len(bad) > good:  # bad cases kept 1:1 with good ones
            kept = {id(p) for p in self.rng.sample(bad, good)}
            for p in bad:
                p.trained = id(p) in kept
        self.curriculum.report([Group(task=p.plan.cluster, successes=sum(a.reward for a in
                                      p.answers), attempts=len(p.answers),
                                      rewards=[a.reward for a in p.answers])
                                for p in proposals if p.answers], step)

    def episodes(self, proposals: list[Proposal], step: int) -> list[Episode]:
        """The questioner's episodes (one group: the step's batch), the responder's (a group per
        question) and the verifier's (a group per answer; rewards only where it trains)."""
        episodes = [Episode(loop=self.name, env=QUESTIONER, turns=[p.turn],
                            rewards={QUESTIONER: p.reward} if p.trained else {},
                            group_id=f"s{step}-questioner", info=p.info())
                    for p in proposals]
        for p in proposals:
            for j, a in enumerate(p.answers):
                group = f"s{step}-q{p.index}"
                episodes.append(Episode(
                    loop=self.name, env=RESPONDER, turns=[a.turn], rewards={RESPONDER: a.reward},
                    group_id=group, info={"answer": a.answer, "rule": a.rule,
                                          "verdict": a.verdict, "correct": a.reward > 0}))
                rewards = rules.verifier_rewards(a.votes)
                episodes += [Episode(
                    loop=self.name, env=VERIFIER, turns=[turn],
                    rewards={VERIFIER: reward} if a.verifier_trains else {},
                    group_id=f"{group}-a{j}", info={"vote": vote, "majority": a.verdict,
                                                    "rule": a.rule})
                    for turn, vote, reward in zip(a.vote_turns, a.votes, rewards, strict=True)]
        return episodes

    # ---------------------------------------------------------------- evaluation and state
    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Greedy accuracy of the responder (no documents) on held-out reasoning-gym tasks."""
        if not self.eval_tasks:
            return {}
        return await reasoning_accuracy(policy, self.eval_tasks, lambda entry: self.request(
            RESPONDER, greedy=True, max_new_tokens=self.settings.responder_max_tokens,
            context="", question=entry["question"]))

    def state_dict(self) -> dict:
        return super().state_dict() | {"clusters": self.clusters.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.clusters.load_state_dict(state["clusters"])
