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
4. The **responder** answers each grounded question ``solver_samples`` times, reading every
   document of the cluster (``responder_context: documents``) or nothing (``none``).
5. The **verifier** votes ``verifier_votes`` times on each answer against the reference; the
   responder's reward is max(rule score ``sub_em_strict``, the votes' majority) when the
   majority is valid; a vote earns 1 when it equals the majority, 0 otherwise, −1 unparsable.
6. The questioner's reward from p̂ = r̄, the responder's mean reward (``questioner_reward``:
   a p̂ → reward of ``curricula/rewards.py``, gaussian by default; ``curricula/spell_rewards.py``);
   accepted questions (r̄ in [0.01, 1]) join their cluster's memory.

Advantages (GRPO, ``train.loss: grpo``): the questioner's rewards standardised over the step's
batch (one group), the responder's per question and the verifier's per answer. Verifier groups
train only when their majority share is in [0.51, 0.99] and agrees with the rule score, at most
``verifier_fraction`` of the responder's samples; bad questions train at most 1:1 with good.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from corpora.documents import load_documents, manifest_path
from curricula import spell_rewards as rules
from curricula.curriculum import Curriculum, Group
from curricula.rewards import gaussian
from selfplay.engines.models import tokenizer_for
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.propose import proposer_reward, solve_groups
from selfplay.loops.spell.clusters import Clusters, Plan, fit
from selfplay.loops.spell.records import Answer, Question, step_metrics
from selfplay.loops.spell.settings import SpellSettings
from selfplay.types import Collected, Episode

QUESTIONER, RESPONDER, VERIFIER = "questioner", "responder", "verifier"


class SpellLoop(Loop):
    name = "spell"
    Settings = SpellSettings
    spec = LoopSpec(
        roles={QUESTIONER: ("context", "examples"), RESPONDER: ("context", "question"),
               VERIFIER: ("question", "reference", "response")},
        tasks="document clusters",
        reasoner=RESPONDER, reasoner_fields={"context": ""},  # held out: no documents
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SpellSettings = self.settings
        self.reward = (functools.partial(gaussian, sigma=s.sigma) if s.questioner_reward ==
                       "gaussian" else proposer_reward(s.questioner_reward, s.solver_samples))
        self.documents = load_documents(s.corpus, s.corpus_cache, tokenizer_for)
        if s.max_clusters is not None:  # the first N sources' documents
            sources = list(dict.fromkeys(d.source for d in self.documents))[: s.max_clusters]
            self.documents = [d for d in self.documents if d.source in set(sources)]
        self.clusters = Clusters.by_source([d.source for d in self.documents])
        # the clusters are the curriculum's tasks (family: the cluster's source)
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)
        self.curriculum.buffer.add_many(self.clusters.names, self.clusters.names,
                                        [math.nan] * len(self.clusters.names))
        self._tokens: dict[int, list[int]] = {}

    def inputs(self) -> dict[str, Path]:
        return {"corpus/manifest.json": manifest_path(self.settings.corpus,
                                                      self.settings.corpus_cache)}

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
    async def propose(self, policy: BatchingPolicy, index: int, plan: Plan, step: int
                      ) -> Question:
        s = self.settings
        budget = s.context_budget(step)
        text = self.context(plan.documents, set(plan.new), budget, policy.tokenizer)
        examples = "\n".join(f"Question: {e.question}\nAnswer: {e.answer}" for e in plan.examples)
        request = self.request(QUESTIONER, context=text, examples=examples)
        completion = await policy(request)
        question, reference = rules.parse_question(completion.reply, s.max_answer_words) or (
            None, None)
        return Question(task_id=f"s{step}-q{index}", turn=self.turn(request, completion, policy),
                        question=question, answer=reference, index=index, plan=plan,
                        cluster_name=self.clusters.names[plan.cluster],
                        context_tokens=len(policy.tokenizer(text, add_special_tokens=False)
                                           .input_ids))

    async def respond(self, policy: BatchingPolicy, question: Question, context: str) -> Answer:
        request = self.request(RESPONDER, context=context, question=question.question)
        completion = await policy(request)
        answer = rules.final_answer(completion.reply)
        return Answer(self.turn(request, completion, policy), answer,
                      rules.sub_em_strict(answer, question.answer))

    async def verify(self, policy: BatchingPolicy, question: Question, answer: Answer) -> None:
        """``verifier_votes`` votes on one answer (none for an answer not stated: reward 0)."""
        if answer.answer is None:
            return
        requests = [self.request(VERIFIER, question=question.question, reference=question.answer,
                                 response=answer.answer)
                    for _ in range(self.settings.verifier_votes)]
        completions = await policy.gather(policy(r) for r in requests)
        answer.vote_turns = [self.turn(r, c, policy) for r, c in zip(requests, completions,
                                                                     strict=True)]
        answer.votes = [rules.parse_vote(c.reply) for c in completions]
        answer.verdict = rules.majority(answer.votes)

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s, tokenizer = self.settings, policy.tokenizer
        plans = [self.clusters.plan(c, s.new_documents, self.rng) for c in self.draw(step)]
        questions = await policy.gather(
            self.propose(policy, k * s.questions_per_cluster + j, plan, step)
            for k, plan in enumerate(plans) for j in range(s.questions_per_cluster))
        valid = [p for p in questions if p.valid]
        if s.grounding_filter:  # closed-book pass: one wave, never trained
            closed = await solve_groups(policy, valid, s.closed_book_samples,
                                        lambda p: self.respond(policy, p, ""))
            for p, group in zip(valid, closed, strict=True):
                p.closed_book = [a.rule for a in group]
                p.bad_ground = rules.is_bad_ground(p.closed_book)
        grounded = [p for p in valid if not p.bad_ground]
        contexts = {id(p): self.responder_context(p.plan, tokenizer) for p in grounded}
        groups = await solve_groups(policy, grounded, s.solver_samples,
                                    lambda p: self.respond(policy, p, contexts[id(p)]))
        for p, group in zip(grounded, groups, strict=True):
            p.responses, p.answers = group, [a.answer for a in group]
        await policy.gather(self.verify(policy, p, a) for p in grounded for a in p.responses)
        self.score(questions, step)
        return Collected(self.episodes(questions, step),
                         self.curriculum.metrics(step) | step_metrics(questions,
                                                                      s.context_budget(step)),
                         [p.task_row(step) for p in questions])

    def draw(self, step: int) -> list[int]:
        """``clusters_per_step`` clusters drawn by the curriculum, distinct while there are
        enough (then the rest with replacement, so the batch keeps its size)."""
        count, known = self.settings.clusters_per_step, len(self.clusters.names)
        drawn = self.curriculum.draw(min(count, known), step).tolist()
        if count > known:
            drawn += self.curriculum.draw(count - known, step, replace=True).tolist()
        return [int(c) for c in drawn]

    def score(self, questions: list[Question], step: int) -> None:
        """Every reward of the step, which groups train, and the clusters' memories."""
        s = self.settings
        answers = [a for p in questions for a in p.responses]
        for a in answers:
            a.reward = rules.responder_reward(a.rule, a.verdict)
            a.verifier_trains = bool(a.votes) and rules.verifier_trains(a.votes, a.rule)
        eligible = [a for a in answers if a.verifier_trains]
        if s.verifier_fraction is not None and eligible:
            cap = math.ceil(s.verifier_fraction * len(answers) / s.verifier_votes)
            kept = {id(a) for a in self.rng.sample(eligible, min(cap, len(eligible)))}
            for a in eligible:
                a.verifier_trains = id(a) in kept
        for p in questions:
            p.scores = [a.reward for a in p.responses]
            r_bar = None if not p.valid else p.p_hat or 0.0  # grounded out: 0, unanswered
            p.reward = rules.questioner_reward(r_bar, self.reward, p.bad_ground)
            p.accepted = rules.accepted(r_bar, p.bad_ground)
            if p.accepted:
                self.clusters.accept(p.plan, p.question, p.answer, s.memory_size)
        bad = [p for p in questions if p.bad]
        good = len(questions) - len(bad)
        if s.balance_bad and len(bad) > good:  # bad cases kept 1:1 with good ones
            kept = {id(p) for p in self.rng.sample(bad, good)}
            for p in bad:
                p.trained = id(p) in kept
        self.curriculum.report([Group(task=p.plan.cluster, successes=sum(p.scores),
                                      attempts=len(p.scores), rewards=list(p.scores))
                                for p in questions if p.scores], step)

    def episodes(self, questions: list[Question], step: int) -> list[Episode]:
        """The questioner's episodes (one group: the step's batch), the responder's (a group per
        question) and the verifier's (a group per answer; rewards only where it trains)."""
        episodes = [Episode(loop=self.name, env=QUESTIONER, turns=[p.turn],
                            rewards={QUESTIONER: p.reward} if p.trained else {},
                            group_id=f"s{step}-questioner", info=p.info())
                    for p in questions]
        for p in questions:
            for j, a in enumerate(p.responses):
                group = f"s{step}-q{p.index}"
                episodes.append(Episode(
                    loop=self.name, env=RESPONDER, turns=[a.turn], rewards={RESPONDER: a.reward},
                    group_id=group, info={"answer": a.answer, "rule": a.rule,
                                          "verdict": a.verdict}, correct=a.reward > 0))
                rewards = rules.verifier_rewards(a.votes)
                episodes += [Episode(
                    loop=self.name, env=VERIFIER, turns=[turn],
                    rewards={VERIFIER: reward} if a.verifier_trains else {},
                    group_id=f"{group}-a{j}", info={"vote": vote, "majority": a.verdict,
                                                    "rule": a.rule})
                    for turn, vote, reward in zip(a.vote_turns, a.votes, rewards, strict=True)]
        return episodes

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return super().state_dict() | {"clusters": self.clusters.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.clusters.load_state_dict(state["clusters"])
