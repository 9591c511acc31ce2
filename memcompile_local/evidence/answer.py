"""The answer step: one model call over the compiled reader context.

Two system prompts (``prompts.ANSWER`` and ``prompts.TEMPORAL_ANSWER``); the temporal one is
used for questions about time. Which one applies is a rule, :func:`use_temporal_prompt`, the
one temporal-question classifier the whole pipeline shares (``is_temporal_question``).

The reply is post-processed into one short line: surrounding whitespace removed, a leading
label such as ``Answer:`` dropped, bullet lists joined with commas, and otherwise only the
first non-empty line kept (small models like to add an explanation on the next line).

A very small answer model cannot follow those prompts. :func:`answer_settings` maps the model
section of the config (``model.answer_prompt``: ``auto``, ``full`` or ``small``) to the prompt,
completion cap and number of context blocks to use; "small" (the default for the embedded
SmolLM2-135M) is ``prompts.SMALL_ANSWER`` over the first block, 16 tokens, with a restated
question dropped from the reply (:func:`strip_restated_question`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from memcompile_local.config import ModelConfig
from memcompile_local.errors import OutputValidationError
from memcompile_local.language.stemming import stem_words
from memcompile_local.language.timecues import is_temporal_question
from memcompile_local.llm.interface import LLMRequest, Message, TextSpec

from .prompts import ANSWER, SMALL_ANSWER, TEMPORAL_ANSWER, PromptTemplate, answer_user_message

logger = logging.getLogger(__name__)

__all__ = [
    "AnswerResult",
    "AnswerSettings",
    "answer_settings",
    "first_blocks",
    "SMALL_MODELS",
    "answer_question",
    "answer_request",
    "postprocess_answer",
    "strip_restated_question",
    "use_temporal_prompt",
    "UNKNOWN",
]

UNKNOWN = "Unknown"
DEFAULT_ANSWER_MAX_TOKENS = 128


@dataclass(frozen=True)
class AnswerResult:
    """The post-processed answer, the prompt version that produced it and the raw reply."""

    text: str
    prompt_version: str
    raw: str = ""
    temporal: bool = False


# A leading label the model may put before its answer ("Answer:", "Final answer -", "A:").
_LABEL = re.compile(
    r"^\s*(?:\*\*)?\s*(?:"
    r"(?:(?:final|short|shortest)\s+)?answer\s*(?:\*\*)?\s*(?::|[-–](?=\s))"  # "Answer:", "Final answer -"
    r"|a\s*(?:\*\*)?\s*:"  # "A:" (not "A-list")
    r")\s*(?:\*\*)?\s*",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")

# (backend, model) pairs answered with the small-model settings when answer_prompt is "auto".
SMALL_MODELS: frozenset[tuple[str, str]] = frozenset({("llamacpp", "smollm2-135m")})
# Small-model settings, chosen on the example conversation's questions (our own writing; see
# the demo): SmolLM2-135M does best reading the first block only (4/10 right, against 1/10
# with two blocks and 0-1/10 with three), and 16 tokens hold any short answer.
SMALL_ANSWER_MAX_TOKENS = 16
SMALL_ANSWER_BLOCKS = 1


@dataclass(frozen=True)
class AnswerSettings:
    """How to ask the answer model: the prompt (None: ANSWER or TEMPORAL_ANSWER by question),
    the completion cap and how many leading blocks of the context it reads (None: all)."""

    prompt: PromptTemplate | None
    max_tokens: int
    max_blocks: int | None = None
    strip_restatement: bool = False  # apply strip_restated_question to the reply

    def describe(self) -> str:
        """A short human-readable summary, for the demo and run logs."""
        prompt = self.prompt.version if self.prompt else "answer/temporal prompts"
        if self.max_blocks is None:
            blocks = "all blocks"
        else:
            blocks = "first block only" if self.max_blocks == 1 else f"first {self.max_blocks} blocks"
        return f"{prompt}, at most {self.max_tokens} tokens, {blocks}"

    def shown(self, context_text: str) -> str:
        """The part of a rendered context the answer model reads under these settings."""
        return first_blocks(context_text, self.max_blocks)

    def answer(self, client: Any, question: str, context_text: str, *, namespace: str | None = None,
               question_date: str | None = None) -> AnswerResult:
        """Answer ``question`` from a rendered context under these settings: the one place
        that applies the block cut, the temporal-prompt rule, the cap and the reply cleaning,
        so ``Memory.answer``, the demo and the benchmark runner ask the model alike."""
        return answer_question(client, question, self.shown(context_text),
                               temporal=use_temporal_prompt(question), namespace=namespace,
                               max_tokens=self.max_tokens, question_date=question_date,
                               prompt=self.prompt, strip_restatement=self.strip_restatement)


def answer_settings(model: ModelConfig) -> AnswerSettings:
    """The answer settings of a model section: ``model.answer_prompt`` "full", "small" or "auto"
    ("small" for the models in :data:`SMALL_MODELS`, else "full")."""
    style = model.answer_prompt
    if style == "auto":
        style = "small" if (model.backend, model.model) in SMALL_MODELS else "full"
    if style == "small":
        return AnswerSettings(SMALL_ANSWER, min(model.max_tokens, SMALL_ANSWER_MAX_TOKENS),
                              SMALL_ANSWER_BLOCKS, strip_restatement=True)
    return AnswerSettings(None, model.max_tokens, None)


def first_blocks(context_text: str, n: int | None) -> str:
    """The first ``n`` evidence blocks of a rendered context (all of it when ``n`` is None).

    Blocks are separated by one blank line, and fenced content never holds one
    (``fence.quote_block``), so splitting on blank lines is exact.
    """
    if n is None:
        return context_text
    return "\n\n".join(context_text.split("\n\n")[:n])


def use_temporal_prompt(question: str) -> bool:
    """Rule that picks the temporal answer prompt: the pipeline's shared temporal classifier."""
    return bool(is_temporal_question(question))


# Words a restatement may add besides the question's own: articles, "answer", copulas.
_FILLER = frozenset({"the", "a", "an", "answer", "is", "was", "are", "were"})
_COPULAS = frozenset({"is", "was", "are", "were"})
_TOKEN = re.compile(r"\S+")


def _bare(token: str) -> str:
    word = token.lower().strip(".,;:!?\"'()")
    return word[:-2] if word.endswith("'s") else word


def strip_restated_question(answer: str, question: str) -> str:
    """Drop a leading restatement of the question: "The name of Ana's cat is Pepper." -> "Pepper".

    Small models like to answer in a sentence that repeats the question. When the answer
    starts with words that all come from the question (stems compared, plus articles and
    "answer") followed by a copula (is/was/are/were), only what follows is kept. Anything
    else is returned unchanged, so a short answer is never touched.
    """
    tokens = list(_TOKEN.finditer(answer))
    known = set(stem_words([_bare(t) for t in _TOKEN.findall(question)])) | _FILLER
    stems = stem_words([_bare(t.group()) for t in tokens])
    for i, (match, stem) in enumerate(zip(tokens, stems)):
        if stem not in known and _bare(match.group()) not in _FILLER:
            return answer  # a word the question does not have: no restatement
        if i >= 1 and _bare(match.group()) in _COPULAS:
            rest = answer[match.end():].strip().lstrip(":").strip().rstrip(".").strip()
            return rest or answer
    return answer


def postprocess_answer(text: str) -> str:
    """Turn a raw reply into one short answer line (see the module docstring).

    Returns ``"Unknown"`` when nothing is left.
    """
    lines = [line.strip() for line in (text or "").strip().splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return UNKNOWN
    first = _LABEL.sub("", lines[0], count=1).strip()
    rest = lines[1:]
    if not first and rest:  # "Answer:" alone on its line, the value below it
        first, rest = rest[0], rest[1:]
    bullets = [line for line in ([first] + rest) if _BULLET.match(line)]
    if len(bullets) >= 2 and len(bullets) >= len([first] + rest) - 1:
        # A list answer written one item per line: join the items.
        items = [_BULLET.sub("", line).strip() for line in bullets]
        answer = ", ".join(item for item in items if item)
    else:
        answer = _BULLET.sub("", first).strip() if _BULLET.match(first) else first
    answer = answer.strip().strip("*").strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "\"'`":
        answer = answer[1:-1].strip()
    return answer or UNKNOWN


def answer_request(
    question: str,
    context_text: str,
    *,
    temporal: bool,
    namespace: str | None = None,
    max_tokens: int = DEFAULT_ANSWER_MAX_TOKENS,
    question_date: str | None = None,
    prompt: PromptTemplate | None = None,
) -> LLMRequest:
    """The answer request (stage "answer", free text) for one question and context."""
    template = prompt or (TEMPORAL_ANSWER if temporal else ANSWER)
    return LLMRequest(
        messages=(
            Message("system", template.system),
            Message("user", answer_user_message(question, context_text, question_date)),
        ),
        stage="answer",
        output=TextSpec(),
        max_tokens=max_tokens,
        prompt_version=template.version,
        namespace=namespace,
    )


def answer_question(
    client: Any,
    question: str,
    context_text: str,
    *,
    temporal: bool,
    namespace: str | None = None,
    max_tokens: int = DEFAULT_ANSWER_MAX_TOKENS,
    question_date: str | None = None,
    prompt: PromptTemplate | None = None,
    strip_restatement: bool = False,
) -> AnswerResult:
    """Answer ``question`` from ``context_text`` with one call of ``client.complete``.

    ``temporal`` selects the temporal prompt (see :func:`use_temporal_prompt`); ``question_date``
    (LongMemEval) is shown under the question when given. An empty reply (the client raises
    ``OutputValidationError`` for it) becomes "Unknown"; other model errors propagate.
    ``strip_restatement`` also drops a restated question (:func:`strip_restated_question`).
    """
    request = answer_request(question, context_text, temporal=temporal, namespace=namespace,
                             max_tokens=max_tokens, question_date=question_date, prompt=prompt)
    try:
        response = client.complete(request)
        raw = response.text
    except OutputValidationError as exc:
        if (exc.text or "").strip():
            raise
        logger.info("empty answer for %r; answering %s", question[:60], UNKNOWN)
        raw = ""
    text = postprocess_answer(raw)
    if strip_restatement:
        text = strip_restated_question(text, question)
    return AnswerResult(text=text, prompt_version=request.prompt_version, raw=raw, temporal=temporal)
