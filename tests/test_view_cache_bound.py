"""The view cache holds a bounded working set: least recently used namespaces leave first.

A server answers many users from one ``Memory``; without a bound every user it ever searched
would stay loaded. Evicted namespaces load again from the store on their next search, with the
same results.
"""

from __future__ import annotations

import threading

import pytest

from memcompile_local import Memory, PipelineConfig
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.views.cache import ViewCache, estimate_view_bytes

CFG = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})


def add_user(mem: Memory, user: str, n: int = 6) -> None:
    mem.add(user, [{"time": "2024-05-01 09:00", "turns": [
        {"speaker": "Ana", "text": f"{user} keeps {i} jars of honey in the pantry.", "id": f"t{i}"}
        for i in range(n)]}])


def held(mem: Memory) -> list[str]:
    return [key[0] for key in mem.views.keys()]


def test_least_recently_used_namespaces_leave_first_and_reload_the_same(tmp_path):
    with Memory(tmp_path / "m.sqlite", CFG, max_views=3) as mem:
        for u in ("u1", "u2", "u3"):
            add_user(mem, u)
            mem.search(u, "How many jars of honey?", k=2)
        first = [h.packet.packet_id for h in mem.search("u1", "How many jars of honey?", k=3)]  # u1 used last
        add_user(mem, "u4")
        mem.search("u4", "How many jars of honey?", k=2)
        assert sorted(held(mem)) == ["u1", "u3", "u4"]  # u2 was the least recently used
        assert mem.views.evictions == 1
        assert not mem.views.loader.remembered("u2")  # its remembered load left with it
        again = [h.packet.packet_id for h in mem.search("u2", "How many jars of honey?", k=3)]
        assert again and "u2" in held(mem) and len(held(mem)) == 3
        assert [h.packet.packet_id for h in mem.search("u1", "How many jars of honey?", k=3)] == first


def test_the_byte_bound_holds_and_the_estimate_grows_with_the_view(tmp_path):
    with Memory(tmp_path / "m.sqlite", CFG) as mem:
        add_user(mem, "small", 2)
        add_user(mem, "large", 40)
    with Memory(tmp_path / "m.sqlite", CFG) as mem:  # views loaded from the store, as below
        small = estimate_view_bytes(mem.view("small"))
        large = estimate_view_bytes(mem.view("large"))
        assert 0 < small < large
    with Memory(tmp_path / "m.sqlite", CFG, max_view_bytes=large + small + small // 2) as mem:
        mem.view("large")
        mem.view("small")
        assert held(mem) == ["large", "small"]
        add_user(mem, "other", 2)
        mem.view("other")  # over the bound: "large" is the least recently used and leaves
        assert held(mem) == ["small", "other"]
        assert mem.views.held_bytes <= large + small + small // 2


def test_a_single_view_larger_than_the_bound_is_still_served(tmp_path):
    with Memory(tmp_path / "m.sqlite", CFG, max_view_bytes=1) as mem:
        add_user(mem, "u1")
        assert mem.search("u1", "honey jars", k=1)
        add_user(mem, "u2")
        assert mem.search("u2", "honey jars", k=1)
        assert held(mem) == ["u2"] and mem.views.evictions >= 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_bad_bounds_are_refused(bad):
    with pytest.raises(ValueError, match="positive integer"):
        ViewCache(max_namespaces=bad)


def test_concurrent_searches_over_more_users_than_the_bound_equal_the_serial_run(tmp_path):
    users = [f"u{i}" for i in range(8)]
    with Memory(tmp_path / "m.sqlite", CFG) as mem:
        for u in users:
            add_user(mem, u)
        serial = {u: [h.packet.packet_id for h in mem.search(u, "Who keeps jars of honey?", k=3)] for u in users}
    with Memory(tmp_path / "m.sqlite", CFG, max_views=3) as mem:
        results: dict[tuple[str, int], list[str]] = {}
        errors: list[BaseException] = []

        def run(t: int) -> None:
            try:
                for r in range(3):
                    u = users[(t + r) % len(users)]
                    results[(u, t * 3 + r)] = [h.packet.packet_id for h in mem.search(u, "Who keeps jars of honey?", k=3)]
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        assert all(ids == serial[u] for (u, _), ids in results.items())
        assert len(mem.views) <= 3 and mem.views.evictions > 0
