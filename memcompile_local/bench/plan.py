"""What a run is about to do, said before it starts: memories to build, questions to answer
and judge, and roughly how many model calls that is.

The figures are upper bounds of *new* calls: the request cache answers every call a former
run made, so a resumed or repeated run costs less than its plan. The two-step LLM extractor
makes one fact call per turn and one metadata call per extracted claim, counted here as two
calls per turn (turns hold one or two claims on LoCoMo); the combined extractor makes one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import PipelineConfig

__all__ = ["RunPlan", "question_calls", "turn_calls"]


def turn_calls(cfg: PipelineConfig) -> int:
    """Model calls the build makes per turn still to extract (0 with the rule extractor)."""
    if cfg.extraction.extractor != "llm":
        return 0
    return 1 if cfg.extraction.combined_call else 2


def question_calls(cfg: PipelineConfig, *, baseline: str | None, answer: bool) -> dict[str, int]:
    """Model calls per question by stage: intent, schedule, frontier (none for a baseline) and answer."""
    calls: dict[str, int] = {}
    if baseline is None:
        if cfg.extraction.use_intent and cfg.extraction.intent_source == "llm":
            calls["intent"] = 1
        if cfg.evidence.anchor_selector == "llm":
            calls["schedule"] = 1
        if cfg.evidence.frontier == "llm":
            calls["frontier"] = 1
    if answer:
        calls["answer"] = 1
    return calls


@dataclass(frozen=True)
class RunPlan:
    """The work of one run. ``to_build`` maps namespace -> turns not yet extracted (build
    phase; empty for a baseline, which builds nothing); ``built`` counts memories already
    complete; ``questions``/``judged`` count what is left to answer and to judge."""

    to_build: dict[str, int]
    built: int
    turn_calls: int
    questions: int
    per_question: dict[str, int]
    judged: int

    @property
    def build_calls(self) -> int:
        return self.turn_calls * sum(self.to_build.values())

    @property
    def model_calls(self) -> int:
        """At most this many new model calls (cached calls are free)."""
        return self.build_calls + self.questions * sum(self.per_question.values()) + self.judged

    def describe(self) -> str:
        """Three or four lines for the console."""
        turns = sum(self.to_build.values())
        if self.to_build:
            how = (f"about {self.build_calls} model calls" if self.turn_calls else "rule extractor, no model call")
            build = f"build {len(self.to_build)} memories ({turns} turns to extract: {how})"
        else:
            build = "build nothing new"
        if self.built:
            build += f"; {self.built} already built"
        stages = ", ".join(f"{k} {v}" for k, v in self.per_question.items()) or "no model call"
        lines = [f"plan: {build}",
                 f"      answer {self.questions} questions (per question: {stages})"]
        if self.judged:
            lines.append(f"      judge {self.judged} answers (1 call each)")
        lines.append(f"      at most {self.model_calls} new model calls; cached calls cost nothing")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"to_build": dict(self.to_build), "built": self.built, "turn_calls": self.turn_calls,
                "questions": self.questions, "per_question": dict(self.per_question), "judged": self.judged,
                "model_calls": self.model_calls}
