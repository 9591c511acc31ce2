"""Bounded Cell placement (MemCompile paper, Section 3.2.2, Appendix B.2, Algorithm 2).

Descriptors arrive one at a time in dialogue and claim order. Every existing Cell that can
still take the descriptor (token and item capacity, Eq. 3) competes with a fresh Cell under
the placement objective ``S = L + beta*C - gamma*X - eta*E`` (Eqs. 4, 17-21); the best
candidate receives the descriptor.

Choices the paper leaves open, fixed here:

* Set elements. Keywords are compared as whole normalized phrases
  (``text.normalize_name``: lowercased word runs joined by one space), people as normalized
  names. Placement compares a descriptor against a Cell, and both sides carry phrases made by
  the same extractor, so phrase identity is the natural unit. Query-side matching (routing,
  Eq. 7) works on terms instead, because a question is free text; see ``routing.py``.
* Entropies. ``H_K`` and ``H_P`` are Shannon entropies in nats of the keyword and person
  frequency distributions of the Cell: each descriptor contributes one count per distinct
  keyword (person) it carries, and ``p = count / total count``. They are computed from the
  histogram of counts, so ``H`` depends only on the Cell's contents, not on insertion order.
* Dialogue identifier ``d`` of the repeated-dialogue term is the descriptor's packet id.
* ``n_i`` is ``Descriptor.n_tokens``; a descriptor that carries no count (0) is measured with
  ``text.count_tokens`` on its claim text.
* Ties. The argmax scans existing Cells in ascending id and the new Cell last, keeping the
  first maximum: an existing Cell with the smallest id wins a tie, and a new Cell is created
  only when it scores strictly higher than every feasible existing Cell.
* Cell ids are consecutive integers from 0 in creation order.

Speed. A Cell that shares no keyword and no person with the descriptor has ``L = 0`` and
``C <= coherence_time * max(time weights)``, and ``E >= n_i / B_C``. Whenever that bound lies
strictly below the new-Cell score (true for the paper's constants) such a Cell can never be
the argmax, so only Cells reached through the keyword/person inverted index are scored. The
exhaustive scan (``exhaustive=True``) gives identical placements and is kept as the reference.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ..config import PlacementConfig
from ..errors import DataFormatError
from ..types import Cell, Descriptor
from ..language.tokens import count_tokens, normalize_name

# A Cell title lists its most frequent people, then its most frequent keyword phrases.
TITLE_PEOPLE = 2
TITLE_KEYWORDS = 4

DescriptorLookup = Mapping[str, Descriptor] | Callable[[str], Descriptor]


# normalize_name is a pure function of its string, and placement sees the same few thousand
# keywords and names again and again (every LongMemEval haystack repeats them).
_normalize = functools.lru_cache(maxsize=1 << 16)(normalize_name)


def _normalized_set(values: Iterable[str]) -> tuple[str, ...]:
    """Distinct normalized phrases, sorted (a sorted tuple keeps float sums reproducible)."""
    if isinstance(values, tuple):
        return _normalized_tuple(values)
    return tuple(sorted({n for n in (_normalize(v) for v in values) if n}))


@functools.lru_cache(maxsize=1 << 16)
def _normalized_tuple(values: tuple[str, ...]) -> tuple[str, ...]:
    # Descriptors carry their keywords and people as tuples, and the same ones recur.
    return tuple(sorted({n for n in (_normalize(v) for v in values) if n}))


def descriptor_tokens(descriptor: Descriptor) -> int:
    """n_i: the stored token count, or the shared tokenizer's count when none was stored."""
    return descriptor.n_tokens if descriptor.n_tokens > 0 else count_tokens(descriptor.text)


@dataclass(frozen=True)
class _Item:
    """What placement needs to know about one descriptor."""

    descriptor_id: str
    dialogue: str
    session: int
    n_tokens: int
    keywords: tuple[str, ...]  # normalized phrases, sorted, distinct
    people: tuple[str, ...]  # normalized names, sorted, distinct
    negated: bool
    has_time: bool

    @classmethod
    def of(cls, d: Descriptor) -> "_Item":
        return cls(
            descriptor_id=d.descriptor_id,
            dialogue=d.packet_id,
            session=d.session_index,
            n_tokens=descriptor_tokens(d),
            keywords=_normalized_set(d.keywords),
            people=_normalized_set(d.people),
            negated=bool(d.negated),
            has_time=bool((d.event_time or "").strip()),
        )


def _entropy(hist: Mapping[int, int], total: int) -> float:
    """Shannon entropy (nats) of a distribution given as {count: number of values with it}.

    H = log(T) - (1/T) * sum_v c_v log c_v, with T the total count.
    """
    if total <= 0:
        return 0.0
    s = 0.0
    for c in sorted(hist):
        if c > 1 and hist[c]:
            s += hist[c] * c * math.log(c)
    return math.log(total) - s / total


def _bumped(hist: Mapping[int, int], counts: Mapping[str, int], keys: Sequence[str]) -> dict[int, int]:
    """The count histogram after adding one to the count of each (distinct) key."""
    out = dict(hist)
    for k in keys:
        c = counts.get(k, 0)
        if c:
            out[c] -= 1
        out[c + 1] = out.get(c + 1, 0) + 1
    return out


@dataclass(frozen=True)
class PlacementScore:
    """The terms of Eq. 4 for one (descriptor, Cell) pair, kept for inspection and tests."""

    locality: float  # L
    coherence: float  # C
    inconsistency: float  # X
    pressure: float  # E
    entropy: float  # H(c)
    entropy_after: float  # H(c ∪ {x_i})
    total: float  # S = L + beta*C - gamma*X - eta*E


class _CellState:
    """Mutable per-Cell counters that make every placement term O(|x_i| + M_C)."""

    __slots__ = (
        "cell_id", "items", "tokens", "kw", "kw_hist", "kw_total", "per", "per_hist",
        "per_total", "dialogues", "session_min", "session_max", "has_time", "entropy", "cfg",
    )

    def __init__(self, cell_id: int, cfg: PlacementConfig) -> None:
        self.cell_id = cell_id
        self.cfg = cfg
        self.items: list[_Item] = []
        self.tokens = 0
        self.kw: Counter[str] = Counter()
        self.kw_hist: dict[int, int] = {}
        self.kw_total = 0
        self.per: Counter[str] = Counter()
        self.per_hist: dict[int, int] = {}
        self.per_total = 0
        self.dialogues: Counter[str] = Counter()
        self.session_min = 0
        self.session_max = 0
        self.has_time = False
        self.entropy = 0.0

    # -- H(c), Eq. 20 -------------------------------------------------------------------
    def _h(self, kw_hist, kw_total, per_hist, per_total, smin, smax, size, distinct) -> float:
        cfg = self.cfg
        repeated = (size - distinct) / size if size else 0.0
        return (
            _entropy(kw_hist, kw_total)
            + _entropy(per_hist, per_total)
            + cfg.session_span_weight * math.log(1 + smax - smin)
            + repeated
        )

    def entropy_with(self, x: _Item) -> float:
        """H(c ∪ {x}) without changing the Cell."""
        size = len(self.items)
        smin = min(self.session_min, x.session) if size else x.session
        smax = max(self.session_max, x.session) if size else x.session
        distinct = len(self.dialogues) + (0 if x.dialogue in self.dialogues else 1)
        return self._h(
            _bumped(self.kw_hist, self.kw, x.keywords), self.kw_total + len(x.keywords),
            _bumped(self.per_hist, self.per, x.people), self.per_total + len(x.people),
            smin, smax, size + 1, distinct,
        )

    def add(self, x: _Item) -> None:
        if not self.items:
            self.session_min = self.session_max = x.session
        else:
            self.session_min = min(self.session_min, x.session)
            self.session_max = max(self.session_max, x.session)
        self.kw_hist = _bumped(self.kw_hist, self.kw, x.keywords)
        self.per_hist = _bumped(self.per_hist, self.per, x.people)
        self.kw.update(x.keywords)
        self.per.update(x.people)
        self.kw_total += len(x.keywords)
        self.per_total += len(x.people)
        self.dialogues[x.dialogue] += 1
        self.items.append(x)
        self.tokens += x.n_tokens
        self.has_time = self.has_time or x.has_time
        self.entropy = self._h(
            self.kw_hist, self.kw_total, self.per_hist, self.per_total,
            self.session_min, self.session_max, len(self.items), len(self.dialogues),
        )

    # -- Eqs. 3-4 and 17-21 ---------------------------------------------------------------
    def feasible(self, x: _Item) -> bool:
        cfg = self.cfg
        return self.tokens + x.n_tokens <= cfg.token_cap and len(self.items) < cfg.item_cap

    def _fit_terms(self, x: _Item) -> tuple[float, float, float]:
        """(locality, coherence, inconsistency) of placing ``x`` here: the terms of Eq. 4 that
        need no entropy, shared by ``score`` and ``total_above`` so both compute them alike."""
        cfg = self.cfg
        inter_k = sum(1 for k in x.keywords if k in self.kw)
        inter_p = sum(1 for p in x.people if p in self.per)
        union_k = len(x.keywords) + len(self.kw) - inter_k
        union_p = len(x.people) + len(self.per) - inter_p
        j_k = inter_k / union_k if union_k else 0.0
        j_p = inter_p / union_p if union_p else 0.0
        in_span = self.session_min <= x.session <= self.session_max + 1
        t = cfg.time_in_span if in_span else cfg.time_out_of_span
        coherence = cfg.coherence_keyword * j_k + cfg.coherence_person * j_p + cfg.coherence_time * t
        locality = math.log(1 + inter_k + inter_p)
        inconsistency = 0.0
        if inter_k and inter_p:  # only then can a member share both a person and a keyword
            xk, xp = set(x.keywords), set(x.people)
            for m in self.items:
                if m.negated != x.negated and xp.intersection(m.people) and xk.intersection(m.keywords):
                    inconsistency = cfg.inconsistency_penalty
                    break
        return locality, coherence, inconsistency

    def score(self, x: _Item) -> PlacementScore:
        """Every term of Eq. 4 for placing ``x`` here (the reference; ``total_above`` is the fast path)."""
        cfg = self.cfg
        locality, coherence, inconsistency = self._fit_terms(x)
        h = self.entropy
        h_after = self.entropy_with(x)
        room = max(1, cfg.token_cap - self.tokens)
        pressure = (
            x.n_tokens / room
            + cfg.entropy_delta_weight * max(0.0, h_after - h)
            + cfg.fill_weight * max(0.0, (len(self.items) + 1) / cfg.item_cap - coherence)
            + cfg.entropy_excess_weight * max(0.0, h - cfg.entropy_threshold)
        )
        total = locality + cfg.beta * coherence - cfg.gamma * inconsistency - cfg.eta * pressure
        return PlacementScore(locality, coherence, inconsistency, pressure, h, h_after, total)

    def total_above(self, x: _Item, best: float, floor: float) -> float | None:
        """``score(x).total`` when it can change the argmax (it exceeds ``best`` and reaches
        ``floor``, the new Cell's score), else None.

        Every term but H(c ∪ {x}) is cheap. ``max(0, H_after - H) >= 0`` only adds to the
        pressure E, so the score with that term left out bounds the real one from above (IEEE
        rounding is monotone, and eta >= 0 whenever this path is used); H_after is computed only
        when that bound passes. The returned total is computed exactly as ``score`` computes it.
        """
        cfg = self.cfg
        locality, coherence, inconsistency = self._fit_terms(x)
        h = self.entropy
        room = max(1, cfg.token_cap - self.tokens)
        fill = cfg.fill_weight * max(0.0, (len(self.items) + 1) / cfg.item_cap - coherence)
        excess = cfg.entropy_excess_weight * max(0.0, h - cfg.entropy_threshold)
        bound = locality + cfg.beta * coherence - cfg.gamma * inconsistency - cfg.eta * (
            x.n_tokens / room + 0.0 + fill + excess)
        if bound <= best or bound < floor:
            return None
        h_after = self.entropy_with(x)
        pressure = x.n_tokens / room + cfg.entropy_delta_weight * max(0.0, h_after - h) + fill + excess
        return locality + cfg.beta * coherence - cfg.gamma * inconsistency - cfg.eta * pressure

    def freeze(self) -> Cell:
        people = sorted(self.per.items(), key=lambda kv: (-kv[1], kv[0]))[:TITLE_PEOPLE]
        keywords = sorted(self.kw.items(), key=lambda kv: (-kv[1], kv[0]))[:TITLE_KEYWORDS]
        return Cell(
            cell_id=self.cell_id,
            descriptor_ids=tuple(m.descriptor_id for m in self.items),
            tokens=self.tokens,
            people=frozenset(self.per),
            keywords=frozenset(self.kw),
            session_min=self.session_min,
            session_max=self.session_max,
            title=", ".join(name for name, _ in people + keywords),
            has_time=self.has_time,
        )


def new_cell_score(descriptor: Descriptor, cfg: PlacementConfig = PlacementConfig()) -> float:
    """Score of opening a fresh Cell: L = 0, C = 0.55, X = 0, E = 0.65 + n_i / B_C."""
    n = descriptor_tokens(descriptor)
    return _new_score(n, cfg)


def _new_score(n_tokens: int, cfg: PlacementConfig) -> float:
    return cfg.beta * cfg.new_cell_coherence - cfg.eta * (cfg.new_cell_pressure + n_tokens / cfg.token_cap)


def placement_score(
    descriptor: Descriptor, cell_members: Sequence[Descriptor], cfg: PlacementConfig = PlacementConfig()
) -> PlacementScore:
    """Eq. 4 for putting ``descriptor`` into a Cell that holds ``cell_members`` (in order).

    Capacity (Eq. 3) is not checked here; ``place_descriptors`` only scores feasible Cells.
    """
    if not cell_members:
        raise ValueError("placement_score needs a non-empty Cell; use new_cell_score for a new one")
    return _state_of(0, cell_members, cfg).score(_Item.of(descriptor))


def cell_from_descriptors(cell_id: int, members: Sequence[Descriptor], cfg: PlacementConfig = PlacementConfig()) -> Cell:
    """A Cell record for a fixed member list (used by the block layouts of Appendix B.4)."""
    return _state_of(cell_id, members, cfg).freeze()


def _state_of(cell_id: int, members: Sequence[Descriptor], cfg: PlacementConfig) -> _CellState:
    state = _CellState(cell_id, cfg)
    for m in members:
        state.add(_Item.of(m))
    return state


def _zero_overlap_can_win(cfg: PlacementConfig) -> bool:
    """Whether a Cell sharing no keyword and no person could ever beat a new Cell.

    For such a Cell S <= beta * coherence_time * max(T) - eta * n_i / B_C (L = 0, X = 0, every
    other E term >= 0), while a new Cell scores beta*C_new - eta*(P_new + n_i / B_C). When the
    first bound is strictly lower the inverted-index shortcut is exact; otherwise (unusual
    weights) every feasible Cell is scored.
    """
    weights = (cfg.beta, cfg.gamma, cfg.eta, cfg.entropy_delta_weight, cfg.fill_weight,
               cfg.entropy_excess_weight, cfg.coherence_time)
    if min(weights) < 0 or cfg.token_cap < 1:
        return True
    bound = cfg.beta * cfg.coherence_time * max(cfg.time_in_span, cfg.time_out_of_span)
    new_without_size = cfg.beta * cfg.new_cell_coherence - cfg.eta * cfg.new_cell_pressure
    return not bound < new_without_size


def _lookup_fn(lookup: DescriptorLookup | None) -> Callable[[str], Descriptor]:
    if lookup is None:
        def missing(did: str) -> Descriptor:
            raise DataFormatError("<cells>", f"descriptor {did!r}",
                                  "a descriptor_lookup that resolves the ids of existing Cells")
        return missing
    if callable(lookup) and not isinstance(lookup, Mapping):
        return lookup

    def get(did: str) -> Descriptor:
        try:
            return lookup[did]  # type: ignore[index]
        except KeyError:
            raise DataFormatError("<cells>", f"descriptor {did!r}",
                                  "an id present in descriptor_lookup") from None
    return get


class _Placer:
    """The running state of Algorithm 2: Cells plus an inverted index over open Cells."""

    def __init__(self, cfg: PlacementConfig, exhaustive: bool) -> None:
        self.cfg = cfg
        self.cells: list[_CellState] = []
        self.open: set[int] = set()  # Cells with |c| < M_C (a full Cell never reopens)
        self.by_keyword: dict[str, set[int]] = {}
        self.by_person: dict[str, set[int]] = {}
        self.exhaustive = exhaustive or _zero_overlap_can_win(cfg)
        # The score bound of ``total_above`` needs a non-negative entropy-delta weight and eta;
        # the exhaustive reference always scores in full.
        self.bounded = not exhaustive and cfg.eta >= 0 and cfg.entropy_delta_weight >= 0
        self.seen: set[str] = set()

    def _index(self, cell: _CellState, x: _Item) -> None:
        cid = cell.cell_id
        if len(cell.items) >= self.cfg.item_cap:
            if cid in self.open:
                self.open.discard(cid)
                for k in cell.kw:
                    self.by_keyword.get(k, set()).discard(cid)
                for p in cell.per:
                    self.by_person.get(p, set()).discard(cid)
            return
        self.open.add(cid)
        for k in x.keywords:
            self.by_keyword.setdefault(k, set()).add(cid)
        for p in x.people:
            self.by_person.setdefault(p, set()).add(cid)

    def _append(self, cell: _CellState, x: _Item) -> None:
        if x.descriptor_id in self.seen:
            raise DataFormatError("<cells>", f"descriptor {x.descriptor_id!r}",
                                  "each descriptor id placed at most once")
        self.seen.add(x.descriptor_id)
        cell.add(x)
        self._index(cell, x)

    def restore(self, cell: Cell, lookup: Callable[[str], Descriptor]) -> None:
        if cell.cell_id != len(self.cells):
            raise DataFormatError("<cells>", f"cell {cell.cell_id}",
                                  f"existing Cells with consecutive ids from 0 (next is {len(self.cells)})")
        state = _CellState(cell.cell_id, self.cfg)
        self.cells.append(state)
        for did in cell.descriptor_ids:
            self._append(state, _Item.of(lookup(did)))
        rebuilt = state.freeze()
        if (rebuilt.tokens, rebuilt.people, rebuilt.keywords, rebuilt.session_min, rebuilt.session_max) != (
            cell.tokens, cell.people, cell.keywords, cell.session_min, cell.session_max
        ):
            raise DataFormatError("<cells>", f"cell {cell.cell_id}",
                                  "Cell metadata that matches its descriptors as looked up")

    def candidates(self, x: _Item) -> list[int]:
        if self.exhaustive:
            return sorted(self.open)
        ids: set[int] = set()
        for k in x.keywords:
            ids.update(self.by_keyword.get(k, ()))
        for p in x.people:
            ids.update(self.by_person.get(p, ()))
        return sorted(ids)

    def place(self, x: _Item) -> int:
        best_score = -math.inf
        best: _CellState | None = None
        new_score = _new_score(x.n_tokens, self.cfg)
        for cid in self.candidates(x):
            cell = self.cells[cid]
            if not cell.feasible(x):
                continue
            if self.bounded:
                # A Cell that cannot beat the best so far, or that scores below a new Cell (which
                # would then win anyway), cannot change the outcome: its entropy is not computed.
                s = cell.total_above(x, best_score, new_score)
                if s is None:
                    continue
            else:
                s = cell.score(x).total
            if s > best_score:  # strict: the smallest id keeps a tie
                best_score, best = s, cell
        if best is None or new_score > best_score:
            best = _CellState(len(self.cells), self.cfg)
            self.cells.append(best)
        self._append(best, x)
        return best.cell_id


class PlacementState:
    """Algorithm 2's running state over stored Cells, kept so later batches can be placed.

    Built from ``existing_cells`` (members resolvable through ``descriptor_lookup``, see
    ``place_descriptors``); ``place`` adds descriptors in dialogue and claim order and
    ``cells`` returns every Cell by id. Placing batch B into the state left by batch A gives
    the Cells a single run over A then B gives, because the algorithm only ever appends.
    Not thread-safe: one caller at a time may place into a state.
    """

    def __init__(self, cfg: PlacementConfig = PlacementConfig(), existing_cells: Sequence[Cell] = (),
                 descriptor_lookup: DescriptorLookup | None = None, *, exhaustive: bool = False) -> None:
        self._placer = _Placer(cfg, exhaustive)
        lookup = _lookup_fn(descriptor_lookup)
        for cell in sorted(existing_cells, key=lambda c: c.cell_id):
            self._placer.restore(cell, lookup)
        # Frozen Cells, reused until a Cell takes a descriptor (freezing sorts its counters).
        self._frozen: list[Cell | None] = [None] * len(self._placer.cells)

    @property
    def placed_ids(self) -> frozenset[str]:
        """Ids of every descriptor in some Cell."""
        return frozenset(self._placer.seen)

    def place(self, descriptors: Iterable[Descriptor]) -> None:
        """Place ``descriptors`` in order; DataFormatError for an id already placed."""
        for d in descriptors:
            cid = self._placer.place(_Item.of(d))
            if cid == len(self._frozen):
                self._frozen.append(None)
            self._frozen[cid] = None

    def cells(self) -> list[Cell]:
        """Every Cell, ordered by id."""
        for i, cell in enumerate(self._placer.cells):
            if self._frozen[i] is None:
                self._frozen[i] = cell.freeze()
        return list(self._frozen)  # type: ignore[arg-type]  # every entry frozen just above


def place_descriptors(
    descriptors: Sequence[Descriptor],
    cfg: PlacementConfig = PlacementConfig(),
    existing_cells: Sequence[Cell] = (),
    descriptor_lookup: DescriptorLookup | None = None,
    *,
    exhaustive: bool = False,
) -> list[Cell]:
    """Run Algorithm 2 over ``descriptors`` (given in dialogue and claim order).

    ``existing_cells`` (with their member descriptors resolvable through ``descriptor_lookup``,
    a mapping or a callable from descriptor id to Descriptor) are restored first, so placing
    batch B after building from batch A gives the same Cells as building from A followed by B.
    Returns every Cell (existing ones updated, new ones appended) ordered by id.
    ``exhaustive=True`` scores every feasible Cell instead of using the inverted index.
    Raises DataFormatError for a descriptor id placed twice or an unresolvable existing Cell.
    """
    state = PlacementState(cfg, existing_cells, descriptor_lookup, exhaustive=exhaustive)
    state.place(descriptors)
    return state.cells()
