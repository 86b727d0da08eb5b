"""The one episode loop's own rules (envs/episodes/loop.py), around a scripted episode: turns numbered on from
``played``, the text policy's conversation, ``max_turns``, a policy out of room, a submission at the end, the time
limit. Real episodes go through it in tests/envs/test_search.py, tests/scripts/test_train_cli.py and the trainer's
rollout tests."""

from __future__ import annotations

import time

import pytest
from swebox.envs.episodes.episode import StepResult
from swebox.envs.episodes.loop import EpisodeLoop, PolicyReply, TextPolicy


class Scripted:
    """Observations 'obs 1', 'obs 2', ...; ends after ``turns`` replies, reward 1 when the last one was 'ok'."""

    def __init__(self, turns: int = 3, submit: str | None = None) -> None:
        self.turns, self.submit, self.replies = turns, submit, []

    def reset(self):
        return [{"role": "user", "content": "fix it"}]

    def step(self, reply: str) -> StepResult:
        self.replies.append(reply)
        if len(self.replies) == self.turns or reply == self.submit:
            return StepResult("", float(reply in ("ok", self.submit)), True, False, {"reason": "submitted"})
        return StepResult(f"obs {len(self.replies)}", 0.0, False, False, {"exit_code": 0})

    def submit_reply(self) -> str | None:
        return self.submit

    def close(self) -> None:
        pass


def test_text_policy_plays_to_the_end_and_records_every_turn() -> None:
    episode = Scripted(3)
    replies = iter(["a", "b", "ok"])
    policy = TextPolicy(lambda messages: next(replies), list(episode.reset()))
    loop = EpisodeLoop(episode, policy)
    assert loop.step() is False and loop.step() is False
    assert loop.step() is True and loop.done and not loop.out_of_room
    assert [t["turn"] for t in loop.turns] == [1, 2, 3]
    assert [t["text"] for t in loop.turns] == ["a", "b", "ok"]
    assert [t["observation"] for t in loop.turns] == ["obs 1", "obs 2", ""]
    assert loop.reward == 1.0 and loop.info == {"reason": "submitted"}
    # the conversation: first message, then each reply and the observation after it (none after the last)
    assert [m["content"] for m in policy.messages] == ["fix it", "a", "obs 1", "b", "obs 2", "ok"]
    assert loop.step() is True and len(loop.turns) == 3  # an ended loop plays no more
    assert {kind for kind, _, _ in loop.intervals} == {"generate", "env"}


def test_a_forked_line_numbers_its_turns_on_and_max_turns_stops_the_loop() -> None:
    episode = Scripted(10)
    policy = TextPolicy(lambda messages: "x", [{"role": "user", "content": "fix it"}])
    loop = EpisodeLoop(episode, policy, played=4)
    assert loop.play(max_turns=2) is False and not loop.ended
    assert [t["turn"] for t in loop.turns] == [5, 6]
    child = policy.fork()
    child.messages.append({"role": "user", "content": "only the child's"})
    assert policy.messages[-1] == {"role": "user", "content": "obs 2"}


class Room:
    """A policy with room for ``replies`` replies and ``observations`` observations."""

    def __init__(self, replies: int, observations: int) -> None:
        self.replies, self.observations = replies, observations

    def reply(self, number: int) -> PolicyReply | None:
        self.replies -= 1
        return PolicyReply(f"r{number}", tokens=2, finish_reason="length") if self.replies >= 0 else None

    def observe(self, reply: PolicyReply, observation: str) -> bool:
        self.observations -= 1
        return self.observations >= 0


@pytest.mark.parametrize("replies, observations, turns", [(1, 5, 1), (5, 1, 2)])
def test_a_policy_out_of_room_ends_the_loop_and_submit_grades_it(replies, observations, turns) -> None:
    episode = Scripted(10, submit="SUBMIT")
    loop = EpisodeLoop(episode, Room(replies, observations))
    loop.reset()
    assert loop.play() is True
    assert loop.out_of_room and not loop.done and len(loop.turns) == turns
    assert loop.turns[-1]["tokens"] == 2 and loop.turns[-1]["finish_reason"] == "length"
    assert loop.submit() is True
    assert loop.done and loop.reward == 1.0 and episode.replies[-1] == "SUBMIT"
    assert len(loop.turns) == turns  # the submission is not a policy turn


def test_submit_without_an_action_style_and_the_time_limit() -> None:
    loop = EpisodeLoop(Scripted(10), Room(0, 0))
    assert loop.play() is True and loop.out_of_room and loop.submit() is False and not loop.done
    late = EpisodeLoop(Scripted(10), Room(5, 5), time_limit_s=0.01)
    time.sleep(0.05)
    with pytest.raises(TimeoutError, match="time limit"):
        late.step()
    assert len(late.turns) == 1  # the turn that ran past the limit is recorded
