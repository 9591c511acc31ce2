"""Typed errors. Each names what was wrong, where, and what was expected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .types import Descriptor


class MemCompileError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(MemCompileError, ValueError):
    pass


class NamespaceError(MemCompileError, ValueError):
    """A missing or malformed namespace id."""


class InvalidArgumentError(MemCompileError, ValueError):
    """A value handed to the Python API is not one it can read; names the argument."""

    def __init__(self, argument: str, expected: str, found: str):
        self.argument = argument
        self.expected = expected
        self.found = found
        super().__init__(f"{argument}: expected {expected} ({found})")


class StoreError(MemCompileError):
    pass


class StalePlanError(StoreError):
    """A deletion plan was read at a generation the namespace has moved on from; plan again."""


class ImmutablePacketError(StoreError):
    """An existing SourcePacket id was ingested again with different content."""


class DataFormatError(MemCompileError, ValueError):
    """A dataset or memory file does not have the expected shape.

    Carries the file, a JSON path such as ``$[0].conversation.session_3[2].text`` and what
    was expected, so a user can open the file at the right place.
    """

    def __init__(self, path: str, where: str, expected: str, detail: str | None = None):
        self.path = path
        self.where = where
        self.expected = expected
        self.detail = detail
        msg = f"{path}: at {where}: expected {expected}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class MissingExtraError(MemCompileError, ImportError):
    """An optional backend's package is not installed."""

    def __init__(self, package: str, extra: str, purpose: str = ""):
        self.package = package
        self.extra = extra
        what = f" for {purpose}" if purpose else ""
        super().__init__(
            f"{package!r} is needed{what} but is not installed; "
            f"install it with: pip install 'memcompile-local[{extra}]'"
        )


class ModelNotFoundError(MemCompileError, FileNotFoundError):
    """A shipped model package is missing or its file does not match the pinned hash."""


class ModelError(MemCompileError):
    """Base of errors raised by the model interface."""


class TransportError(ModelError):
    """The backend could not be reached or answered with an error.

    ``retryable`` says whether the same request may succeed later (429, 5xx, timeouts).
    """

    def __init__(self, message: str, *, retryable: bool, status: int | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class OutputValidationError(ModelError):
    """A response arrived but does not satisfy the request's output spec."""

    def __init__(self, message: str, *, text: str = "", finish_reason: str | None = None,
                 parsed=None, prompt_tokens: int = 0, completion_tokens: int = 0):
        super().__init__(message)
        self.text = text
        self.finish_reason = finish_reason
        self.parsed = parsed  # whatever could be parsed (e.g. a label list with duplicates)
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens


class UnexpectedRequestError(ModelError):
    """The scripted test backend received a request it has no answer for."""


class ExtractionError(ModelError):
    """The model failed to extract descriptors for some turns of a memory.

    The other turns were saved; rerunning the build retries only ``packet_ids`` (set
    ``extraction.on_failure = "rule"`` to extract them with the rule-based extractor).
    """

    def __init__(self, namespace: str, packet_ids, cause: Exception | None = None):
        self.namespace = namespace
        self.packet_ids = tuple(packet_ids)
        shown = ", ".join(self.packet_ids[:5]) + (f" (+{len(self.packet_ids) - 5} more)" if len(self.packet_ids) > 5 else "")
        super().__init__(f"{namespace}: descriptor extraction failed for {len(self.packet_ids)} turn(s): {shown}"
                         + (f"; first error: {cause}" if cause else ""))


@dataclass(frozen=True)
class PacketFailure:
    """One packet whose extraction failed, the stage that failed and the error."""

    namespace: str
    packet_id: str
    stage: str
    error: BaseException

    def describe(self) -> str:
        return f"{self.namespace}/{self.packet_id} ({self.stage}: {type(self.error).__name__}: {self.error})"


class PacketExtractionError(ModelError):
    """Extraction failed for one or more packets of a batch.

    ``failures`` names each failed packet; ``partial`` has one entry per batch item: the
    descriptor list of a packet that succeeded, None for a failed one. The caller may save
    the successful packets and retry or skip the failed ones.
    """

    def __init__(self, failures: Sequence[PacketFailure], partial: Sequence["list[Descriptor] | None"]):
        self.failures = tuple(failures)
        self.partial = list(partial)
        shown = "; ".join(f.describe() for f in self.failures[:3])
        more = f" (+{len(self.failures) - 3} more)" if len(self.failures) > 3 else ""
        super().__init__(f"descriptor extraction failed for {len(self.failures)} packet(s): {shown}{more}")

    @property
    def packet_ids(self) -> tuple[str, ...]:
        return tuple(f.packet_id for f in self.failures)
