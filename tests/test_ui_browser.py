"""The memory inspector in a real browser (issue 50, items 3 and 4): headless Debian chromium
driven by Selenium against real ``memcompile-local serve`` processes on 127.0.0.1.

Covered: sign-in (key kept for the tab only); turns appended through REST in the timeline; a
question's expected turn first, with its per-channel contributions when the server explains its
selections; filters narrowing the timeline; delete, forget and import saying what they did; a key
of one tenant never showing another tenant's users (a seeded property loop over random users);
a run page showing a known run's recall; keyboard navigation; states readable without colour;
1280x800 and a narrow screen; a 300,000-character reply collapsed; hostile text never run.
Screenshots of every page land in ``tests/artifacts/ui/``.
"""

from __future__ import annotations

import json
import random
import shutil
import string
from pathlib import Path

import httpx
import pytest

from memcompile_local.bench.run_view import load_run, question_page, run_summary

from _fake_openai import FakeOpenAIServer, Reply, chat_body
from _service_util import running, write_config, write_keys
from _ui_browser import NARROW, WIDE, Browser, require_browser
from test_ui_runs import HOSTILE, make_run

pytestmark = pytest.mark.slow

KEY_A = "mcl_ui-browser-key-of-acme-0123456789"
KEY_B = "mcl_ui-browser-key-of-globex-9876543"
ANSWER = "Your beagle is called Biscuit."
SERVE = ("--embedder", "hash", "--preset", "model-free")


@pytest.fixture(scope="module", autouse=True)
def _browser_present():
    require_browser()


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ui-runs")
    make_run(root / "locomo-mf")
    make_run(root / "locomo-judged", judged=True)
    shutil.copytree(root / "locomo-mf", root / "hostile")
    preds = root / "hostile" / "predictions.jsonl"
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    rows[0]["question"] = HOSTILE
    rows[0]["gold"] = '<img src=x onerror="window.__pwned=7">'
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="module")
def model():
    """An OpenAI-compatible answer model on loopback that always gives the same answer."""
    with FakeOpenAIServer(lambda path, body, n: Reply(body=chat_body(ANSWER))) as srv:
        yield srv


@pytest.fixture(scope="module")
def local(tmp_path_factory, runs_dir, model):
    """A server without keys (the local tenant), with run folders and an answer model."""
    d = tmp_path_factory.mktemp("ui-local")
    cfg = write_config(d / "c.yaml", {"model": {"backend": "openai", "base_url": model.base_url, "model": "fake-model",
                                                "timeout_s": 10, "options": {"max_retries": 0, "api_key": "unused"}}})
    with running(d / "m.sqlite", *SERVE, "--runs", str(runs_dir), "--max-text-chars", "400000",
                 "--max-body-bytes", "2000000", config=cfg) as srv:
        srv.http = httpx.Client(base_url=srv.url, timeout=60)
        yield srv


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """A server with two tenants' keys, whose answer model is a server on a closed port."""
    d = tmp_path_factory.mktemp("ui-keyed")
    keys = write_keys(d / "keys.yaml", {"acme": [(KEY_A, False)], "globex": [(KEY_B, False)]})
    cfg = write_config(d / "c.yaml", {"model": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1",
                                                "model": "none", "timeout_s": 5,
                                                "options": {"max_retries": 0, "api_key": "unused"}}})
    with running(d / "m.sqlite", *SERVE, "--keys", str(keys), config=cfg) as srv:
        yield srv


@pytest.fixture(scope="module")
def b():
    browser = Browser(WIDE)
    try:
        yield browser
    finally:
        browser.quit()


# ------------------------------------------------------------------ helpers
def append(srv, user: str, body: dict, key: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(f"{srv.url}/v1/memories/{user}/turns", json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def turns_of(srv, user: str, key: str | None = None, **params) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.get(f"{srv.url}/v1/memories/{user}/turns", params={"limit": 500, **params}, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def go(b: Browser, srv, hash_: str, page: str | None = None) -> None:
    """Open ``hash_`` of ``srv``'s inspector and wait until the page is shown."""
    if not b.driver.current_url.startswith(srv.url + "/ui/"):
        b.open(f"{srv.url}/ui/{hash_}")
    else:
        b.js("""const m = document.getElementById('main'); m.dataset.state = 'navigating';
                if (location.hash === arguments[0]) window.dispatchEvent(new HashChangeEvent('hashchange'));
                else location.hash = arguments[0];""", hash_)
    b.wait_ready(page)


def act(b: Browser, fn) -> None:
    """Run ``fn`` (a click or a submit that re-renders) and wait until the page is shown again."""
    b.js("document.getElementById('main').dataset.state = 'navigating'")
    fn()
    b.wait_ready()


def type_into(b: Browser, css: str, text: str) -> None:
    el = b.find(css)
    el.clear()
    el.send_keys(text)


def main_text(b: Browser) -> str:
    return b.js("return document.getElementById('main').textContent")


def turn_ids_shown(b: Browser) -> list[str]:
    return b.js("return [...document.querySelectorAll('article.turn')].map(a => a.dataset.turn)")


def nothing_ran(b: Browser) -> None:
    """No injected script ran and no injected element exists on the current page."""
    assert b.js("return window.__pwned") is None
    assert b.js("return document.querySelectorAll('main img, main script, main iframe, main object, "
                "main embed, main [onerror], main [onload]').length") == 0
    assert b.js("return document.scripts.length") == 1  # the app's own module, nothing else


# ------------------------------------------------------------------ sign-in
def test_sign_in_keeps_the_key_for_the_tab_only(b, keyed):
    b.open(keyed.url + "/ui/#/users")
    b.wait_ready("signin")
    assert "Sign in" in main_text(b)
    b.screenshot("signin-1280x800")
    type_into(b, "#api-key", "mcl_not-a-key-of-anyone-000000000")
    b.find("form.signin button[type=submit]").click()
    b.wait(lambda: "refused" in b.find("form.signin .error").text, what="the refusal")
    assert b.state().endswith("/signin")
    type_into(b, "#api-key", KEY_A)
    act(b, lambda: b.find("form.signin button[type=submit]").click())
    assert b.state() == "ready/users"
    assert b.js("return sessionStorage.getItem('memcompile-inspector.key')") == KEY_A
    assert b.js("return localStorage.length") == 0 and b.driver.get_cookies() == []
    assert KEY_A not in b.driver.current_url
    assert "signed in" in b.find("#session").text and KEY_A not in b.find("#session").text
    # A reload keeps the tab's key; another tab starts signed out.
    b.driver.refresh()
    b.wait_ready("users")
    first = b.driver.current_window_handle
    b.driver.switch_to.new_window("tab")
    b.open(keyed.url + "/ui/")
    b.wait_ready("signin")
    b.driver.close()
    b.driver.switch_to.window(first)
    # Sign out forgets it.
    act(b, lambda: b.find("#session button").click())
    assert b.state() == "ready/signin"
    assert b.js("return sessionStorage.getItem('memcompile-inspector.key')") is None


def sign_in(b: Browser, srv, key: str) -> None:
    b.open(srv.url + "/ui/#/users")
    b.wait_ready()
    if b.state().endswith("/signin") or b.js("return sessionStorage.getItem('memcompile-inspector.key')") != key:
        b.js("sessionStorage.setItem('memcompile-inspector.key', arguments[0])", key)
        b.driver.refresh()
        b.wait_ready("users")


# ------------------------------------------------------------------ tenants
def _random_user(rng: random.Random) -> str:
    first = string.ascii_letters + string.digits + "_@-"
    rest = first + "."
    return rng.choice(first) + "".join(rng.choice(rest) for _ in range(rng.randint(0, 11)))


def _users_page_ids(b: Browser, srv, limit: int) -> list[str]:
    """Every user id the Users page lists, page by page with its Next link."""
    go(b, srv, f"#/users?limit={limit}", "users")
    seen = []
    while True:
        seen += b.js("return [...document.querySelectorAll('tr[data-user]')].map(r => r.dataset.user)")
        nxt = b.find_all("nav.pager a[rel=next]")
        if not nxt:
            return seen
        act(b, nxt[0].click)


def test_a_key_of_one_tenant_never_shows_another_tenants_users(b, keyed):
    """Property over random users (seeded loop): whatever ids the two tenants hold, ids shared
    between them included, a key's Users page lists exactly its tenant's users, and the other
    tenant's users and texts are nowhere on its pages."""
    rng = random.Random(50)
    owned: dict[str, dict[str, str]] = {"acme": {}, "globex": {}}
    keys = {"acme": KEY_A, "globex": KEY_B}
    for round_ in range(3):
        for tenant in ("acme", "globex"):
            for _ in range(rng.randint(1, 4)):
                other = "globex" if tenant == "acme" else "acme"
                # Now and then the id the other tenant already uses: same id, another memory.
                user = (rng.choice(sorted(owned[other])) if owned[other] and rng.random() < 0.3
                        else _random_user(rng))
                secret = f"secret-{tenant}-{rng.getrandbits(48):012x}"
                owned[tenant][user] = owned[tenant].get(user, "") + " " + secret
                append(keyed, user, {"speaker": "owner", "text": f"{secret} belongs to {tenant}",
                                     "time": "2024-05-01"}, key=keys[tenant])
        for tenant, other in (("acme", "globex"), ("globex", "acme")):
            sign_in(b, keyed, keys[tenant])
            listed = _users_page_ids(b, keyed, limit=rng.randint(2, 5))
            assert listed == sorted(owned[tenant]), (round_, tenant)
            other_secrets = " ".join(owned[other].values()).split()
            source = b.driver.page_source
            assert not any(s in source for s in other_secrets)
            only_other = sorted(set(owned[other]) - set(owned[tenant]))
            if only_other:
                go(b, keyed, f"#/timeline/{only_other[0]}")
                assert b.state() == "error/timeline" and "Not found" in main_text(b)
                assert not any(s in b.driver.page_source for s in other_secrets)
            shared = sorted(set(owned[other]) & set(owned[tenant]))
            if shared:
                go(b, keyed, f"#/timeline/{shared[0]}", "timeline")
                text = main_text(b)
                assert all(s in text for s in owned[tenant][shared[0]].split())
                assert not any(s in text for s in other_secrets)


# ------------------------------------------------------------------ timeline
HISTORY = {"sessions": [
    {"time": "2024-05-01 09:00", "id": "trip", "turns": [
        {"speaker": "Alice", "text": "We booked the ferry to the islands for June.", "metadata": {"topic": "travel"}},
        {"speaker": "Bob", "text": "Here is the kite I flew on the beach.", "image_caption": "a red kite over dunes",
         "agent_id": "helper"}]},
    {"time": "2024-05-20 18:30", "id": "garden", "turns": [
        {"speaker": "Alice", "text": "The tomatoes finally turned red.", "metadata": {"topic": "garden"}},
        {"speaker": "Bob", "text": "Save me a few for the sauce."}]},
    {"time": "2024-06-02 12:00", "id": "trip2", "turns": [
        {"speaker": "Bob", "text": "The ferry was late by an hour.", "metadata": {"topic": "travel"}}]},
]}


def test_turns_added_through_rest_appear_in_the_timeline(b, local):
    append(local, "tina", HISTORY)
    go(b, local, "#/timeline/tina", "timeline")
    expected = [t["id"] for t in turns_of(local, "tina")["turns"]]
    assert turn_ids_shown(b) == expected and len(expected) == 5
    assert b.find("#turn-count").text == "Turns 1–5 of 5"
    text = main_text(b)
    assert "Image: a red kite over dunes" in text and '{"topic":"travel"}' in text and "agent helper" in text
    assert [h.text.split(" · ")[0] for h in b.find_all("h2.session-head")] == [
        "Session trip", "Session garden", "Session trip2"]
    b.screenshot("timeline-1280x800")
    # More turns through REST: the next visit shows them, in order, at the end.
    added = append(local, "tina", {"turns": [{"speaker": "Alice", "text": "Packing list: sunscreen.",
                                              "time": "2024-06-03", "session_id": "trip2"}]})
    go(b, local, "#/timeline/tina", "timeline")
    assert turn_ids_shown(b) == expected + added["ids"]
    # The Users page counts them.
    go(b, local, "#/users", "users")
    cells = [td.text for td in b.find_all('tr[data-user="tina"] td')]
    assert cells[:2] == ["6", "3"] and cells[2] == "✓ built" and cells[3].startswith("2024-06-03")


def test_a_filter_narrows_the_timeline(b, local):
    if not _exists(local, "tina"):
        append(local, "tina", HISTORY)
    go(b, local, "#/timeline/tina", "timeline")
    total = int(b.find("#turn-count").get_attribute("data-total"))
    for field, value, params in (
            ("#f-speaker", "Bob", {"speaker": "Bob"}),
            ("#f-metadata", '{"topic": "travel"}', {"metadata": '{"topic": "travel"}'}),
            ("#f-session_id", "garden", {"session_id": "garden"}),
            ("#f-from", "2024-05-15", {"from": "2024-05-15"})):
        act(b, lambda: b.find("button.secondary[type=button]").click())  # Clear
        type_into(b, field, value)
        act(b, lambda: b.find("form.filters button[type=submit]").click())
        want = turns_of(local, "tina", **params)
        assert 0 < want["total"] < total, field
        assert turn_ids_shown(b) == [t["id"] for t in want["turns"]], field
        assert "matching the filters" in b.find("#turn-count").text
    act(b, lambda: b.find("button.secondary[type=button]").click())
    type_into(b, "#f-speaker", "Bob")
    act(b, lambda: b.find("form.filters button[type=submit]").click())
    assert {s.text for s in b.find_all("article.turn .speaker")} == {"Bob"}
    b.screenshot("timeline-filtered-1280x800")
    # A bad filter value keeps the form and says which field was wrong.
    act(b, lambda: b.find("button.secondary[type=button]").click())
    type_into(b, "#f-metadata", "{not json")
    act(b, lambda: b.find("form.filters button[type=submit]").click())
    assert b.state() == "error/timeline" and "metadata" in b.find("main .error").text
    assert b.find("#f-metadata").get_attribute("value") == "{not json"


def _exists(srv, user: str) -> bool:
    return httpx.get(f"{srv.url}/v1/memories/{user}", timeout=30).status_code == 200


def test_a_long_history_pages_and_keys_move_between_turns(b, local):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for start in range(0, 1200, 500):
        append(local, "pager", {"turns": [{"speaker": "Alice" if i % 2 else "Bob", "text": f"message number {i}",
                                           "time": f"2024-01-01 10:{i // 60 % 60:02d}", "session_id": f"s{i // 100}"}
                                          for i in range(start, min(1200, start + 500))]})
    go(b, local, "#/timeline/pager", "timeline")
    assert b.find("#turn-count").text == "Turns 1–100 of 1,200"
    act(b, lambda: b.find("nav.pager a:last-child").click())  # Last
    last = turns_of(local, "pager", offset=1100, limit=100)["turns"]
    assert turn_ids_shown(b) == [t["id"] for t in last]
    type_into(b, "#page-no", "5")
    act(b, lambda: b.find("#page-no").submit())
    assert b.find("#turn-count").text == "Turns 401–500 of 1,200"
    # Arrow keys move between turns; Home and End go to the ends.
    articles = b.find_all("article.turn")
    b.js("arguments[0].focus()", articles[0])
    keys = ActionChains(b.driver)
    keys.send_keys(Keys.ARROW_DOWN).send_keys(Keys.ARROW_DOWN).perform()
    assert b.js("return document.activeElement.dataset.turn") == articles[2].get_attribute("data-turn")
    ActionChains(b.driver).send_keys(Keys.END).perform()
    assert b.js("return document.activeElement.dataset.turn") == articles[-1].get_attribute("data-turn")
    ActionChains(b.driver).send_keys(Keys.ARROW_UP).perform()
    assert b.js("return document.activeElement.dataset.turn") == articles[-2].get_attribute("data-turn")
    ActionChains(b.driver).send_keys(Keys.HOME).perform()
    assert b.js("return document.activeElement.dataset.turn") == articles[0].get_attribute("data-turn")


# ------------------------------------------------------------------ ask
ASK_HISTORY = {"sessions": [
    {"time": "2024-03-02 10:00", "id": "pets", "turns": [
        {"speaker": "Sam", "text": "We adopted a beagle puppy and named him Biscuit."},
        {"speaker": "Kim", "text": "Cute! Does he like the park?"}]},
    {"time": "2024-03-09 10:00", "id": "work", "turns": [
        {"speaker": "Sam", "text": "The quarterly report is due on Friday."},
        {"speaker": "Kim", "text": "I will review the budget table tonight."}]},
    {"time": "2024-03-16 10:00", "id": "food", "turns": [
        {"speaker": "Sam", "text": "I tried a new ramen place downtown, the broth was great."},
        {"speaker": "Kim", "text": "Let us go there after the concert."}]},
    {"time": "2024-03-23 09:15", "id": "trip", "turns": [
        {"speaker": "Kim", "text": "The train to the coast leaves at seven on Saturday."},
        {"speaker": "Sam", "text": "I will pack sandwiches and the blue umbrella."},
        {"speaker": "Kim", "text": "Should we bring the puppy or leave him with my sister?"}]},
    {"time": "2024-03-30 20:40", "id": "house", "turns": [
        {"speaker": "Sam", "text": "The landlord fixed the kitchen tap at last."},
        {"speaker": "Kim", "text": "Good, the dripping kept me awake all week."},
        {"speaker": "Sam", "text": "Next is the squeaky door of the balcony."}]},
    {"time": "2024-04-06 11:00", "id": "hobby", "turns": [
        {"speaker": "Kim", "text": "My pottery class starts again in May."},
        {"speaker": "Sam", "text": "Make me a mug with a dog on it, please."},
        {"speaker": "Kim", "text": "Only if you walk the dog every morning that week."}]},
]}
QUESTION = "What did we name the beagle puppy?"


def test_a_question_shows_the_expected_turn_first_with_its_channels(b, local, model):
    stored = append(local, "asker", ASK_HISTORY)
    expected = stored["ids"][0]
    plain = local.http.post("/v1/memories/asker/search", json={"query": QUESTION}).json()
    assert plain["packets"][0]["id"] == expected  # the fixture is written so that this turn wins
    # Does this server explain its selections (the `explain` field)? The page must follow.
    probe = local.http.post("/v1/memories/asker/search", json={"query": QUESTION, "explain": True})
    explains = probe.status_code == 200 and "explain" in probe.json()["packets"][0]
    if not explains:  # a server without the field refuses it by name
        assert probe.status_code == 400 and probe.json()["error"]["field"] == "explain"

    go(b, local, "#/ask/asker", "ask")
    type_into(b, "#q", QUESTION)
    act(b, lambda: b.find("form.ask-form button[value=search]").click())
    b.js("window.scrollTo(0, 0)")
    b.full_screenshot("ask-full-1280x800", max_height=1500)
    hits = b.find_all("ol.hits > li")
    assert [h.get_attribute("data-turn") for h in hits] == [p["id"] for p in plain["packets"]]
    first = hits[0]
    assert first.get_attribute("data-rank") == "1" and first.get_attribute("data-turn") == expected
    assert f"{plain['packets'][0]['score']:.3f}" in first.find_element("css selector", ".score").text
    if explains:  # EXPLAIN: these lines run once the server returns per-channel contributions
        channels = probe.json()["packets"][0]["explain"]["channels"]
        rows = first.find_elements("css selector", "table.channels tbody tr")
        assert [r.get_attribute("data-channel") for r in rows] == [c["name"] for c in channels]
        assert len(rows) >= 1 and not b.find_all("#no-explain")
        assert probe.json()["packets"][0]["explain"]["selector"] in first.find_element(
            "css selector", "table.channels caption").text
    else:
        assert b.find("#no-explain").is_displayed() and not first.find_elements("css selector", "table.channels")
    # The context exactly as the reader gets it, and every stage's timing.
    assert b.js("return document.querySelector('.context-text').textContent") == plain["context"]
    timings = b.find("section.timings").text
    assert all(stage in timings for stage in plain["timings_ms"])
    b.screenshot("ask-1280x800")
    # The selected turns are marked in the timeline, the first one focused.
    act(b, lambda: first.find_element("css selector", "button").click())
    assert b.state() == "ready/timeline"
    focused = b.js("return document.activeElement.dataset.turn")
    assert focused == expected
    badge = b.find(f'article[data-turn="{expected}"] .hit-badge').text
    assert badge.startswith("★ selected #1")
    assert len(b.find_all("article.turn.selected")) == len(plain["packets"]) < len(turn_ids_shown(b))
    b.screenshot("timeline-marked-1280x800")
    b.js("window.scrollTo(0, 0)")
    b.full_screenshot("timeline-marked-full-1280x800", max_height=1400)
    # With an answer model configured, the answer.
    go(b, local, "#/ask/asker", "ask")
    act(b, lambda: b.find("form.ask-form button[value=answer]").click())
    assert ANSWER.rstrip(".") in b.find("section.answer").text


def test_answer_without_a_model_says_so(b, keyed):
    append(keyed, "nomodel", {"speaker": "Sam", "text": "The ferry leaves at nine.", "time": "2024-05-01"}, key=KEY_A)
    sign_in(b, keyed, KEY_A)
    go(b, keyed, "#/ask/nomodel", "ask")
    type_into(b, "#q", "When does the ferry leave?")
    act(b, lambda: b.find("form.ask-form button[value=answer]").click())
    text = b.find("form.ask-form .error").text
    assert b.state() == "error/ask" and text.startswith("No answer model is available on this server")


# ------------------------------------------------------------------ edit
def test_delete_and_forget_say_what_they_erased(b, local):
    ids = append(local, "eraser", HISTORY)["ids"]
    go(b, local, "#/timeline/eraser", "timeline")
    act(b, lambda: b.find(f'article[data-turn="{ids[1]}"] .turn-actions a').click())
    assert b.state() == "ready/edit" and b.find("#del-turn").get_attribute("value") == ids[1]
    b.screenshot("edit-1280x800")
    b.find("#del-turn").submit()
    confirm = b.wait(lambda: [x for x in b.find_all(".confirm button.danger") if x.is_displayed()], what="confirmation")
    confirm[0].click()
    result = b.wait(lambda: b.find("#delete-result").text, what="the delete's result")
    assert f"Deleted turn {ids[1]} of eraser" in result and "packets" in result
    assert [t["id"] for t in turns_of(local, "eraser")["turns"]] == ids[:1] + ids[2:]
    go(b, local, "#/timeline/eraser", "timeline")
    assert turn_ids_shown(b) == ids[:1] + ids[2:]
    # Forget needs the user id typed exactly.
    go(b, local, "#/edit/eraser", "edit")
    button = b.find("#forget-confirm").find_element("xpath", "ancestor::form//button[@type='submit']")
    type_into(b, "#forget-confirm", "erase")
    assert not button.is_enabled()
    type_into(b, "#forget-confirm", "eraser")
    assert button.is_enabled()
    button.click()
    result = b.wait(lambda: b.find("#forget-result").text, what="the forget's result")
    assert "Forgot user eraser" in result and "packets" in result
    assert httpx.get(f"{local.url}/v1/memories/eraser", timeout=30).status_code == 404
    go(b, local, "#/users", "users")
    assert not b.find_all('tr[data-user="eraser"]')


def test_import_a_file_shows_its_progress_and_outcome(b, local, tmp_path):
    history = tmp_path / "history.json"
    history.write_text(json.dumps({"sessions": [
        {"time": f"2024-04-{d:02d} 20:00", "turns": [{"speaker": "me", "text": f"diary entry of day {d}"},
                                                    {"speaker": "you", "text": f"reply to day {d}"}]}
        for d in range(1, 11)]}))
    go(b, local, "#/edit", "edit")
    type_into(b, "#imp-user", "diarist")
    b.find("#imp-file").send_keys(str(history))
    b.find("#imp-file").find_element("xpath", "ancestor::form").submit()
    b.wait(lambda: b.find_all('.job[data-state="done"], .job[data-state="failed"]'), timeout=60, what="the import")
    text = b.find("#import-result").text
    assert "✓ done" in text and "20 turns written" in text and "of 20" in text
    assert turns_of(local, "diarist")["total"] == 20
    act(b, lambda: b.find("#import-result a").click())
    assert b.state() == "ready/timeline" and len(turn_ids_shown(b)) == 20


# ------------------------------------------------------------------ runs
def test_a_run_page_shows_a_known_runs_recall(b, local, runs_dir):
    run = load_run(runs_dir / "locomo-mf", label="locomo-mf")
    s = run_summary(run)
    go(b, local, "#/runs", "runs")
    row = b.find('tr[data-run="locomo-mf"]')
    assert f"{100 * s['overall']['recall']:.1f}%" in row.text
    b.screenshot("runs-1280x800")
    act(b, lambda: row.find_element("css selector", "a").click())
    assert b.find("#overall-recall").text == f"{100 * s['overall']['recall']:.1f}%"
    assert b.find("#overall-accuracy").text == "n/a"
    for g in s["categories"]:
        cell = b.find(f'#category-table tr[data-category="{g["key"]}"] td.recall').text
        assert cell == ("n/a" if g["recall"] is None else f"{100 * g['recall']:.1f}%")
    assert b.find_all("svg.chart rect")
    questions = question_page(run, limit=50)["questions"]
    rows = b.find_all("tr[data-question]")
    assert [r.get_attribute("data-question") for r in rows] == [q["question_id"] for q in questions]
    first = rows[0].text
    for g in questions[0]["gold_ids"]:
        assert (f"✓ {g['id']} (selected)" if g["selected"] else f"✗ {g['id']} (missed)") in first
    b.full_screenshot("run-full-1280x800")
    # Only failing questions.
    b.find("#run-failing").click()
    act(b, lambda: b.find("#run-failing").submit())
    failing = question_page(run, failing=True, limit=50)
    assert len(b.find_all("tr[data-question]")) == len(failing["questions"])
    # A judged run: accuracy beside recall, failing questions marked.
    judged = load_run(runs_dir / "locomo-judged", label="locomo-judged")
    go(b, local, "#/runs/locomo-judged", "runs")
    assert b.find("#overall-accuracy").text == f"{100 * run_summary(judged)['overall']['accuracy']:.1f}%"
    assert b.find_all("tr.failing") and "✗ failing" in b.find("tr.failing").text
    b.full_screenshot("run-judged-full-1280x800", max_height=1700)


# ------------------------------------------------------------------ item 4
def test_keyboard_reaches_every_page_and_control(b, local):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    if not _exists(local, "tina"):
        append(local, "tina", HISTORY)
    go(b, local, "#/timeline/tina", "timeline")  # tina becomes the current user of the navigation
    go(b, local, "#/users", "users")

    def tab(n=1, shift=False):
        chain = ActionChains(b.driver)
        for _ in range(n):
            if shift:
                chain.key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT)
            else:
                chain.send_keys(Keys.TAB)
        chain.perform()
        return b.js("const a = document.activeElement; return a.getAttribute('href') || a.id || a.tagName")

    # The skip link is the page's first tab stop, and Enter on it takes the focus to the content.
    first = b.js("""return [...document.querySelectorAll('a[href], button, input, select, textarea, [tabindex]')]
                      .filter(e => e.tabIndex >= 0 && !e.disabled)[0].className""")
    assert first == "skip"
    b.js("document.querySelector('.skip').focus()")
    ActionChains(b.driver).send_keys(Keys.ENTER).perform()
    assert b.js("return document.activeElement.id") == "main" and b.state() == "ready/users"
    # Every page of the navigation is the next tab stop after it, in order.
    b.js("document.querySelector('.skip').focus()")
    assert [tab() for _ in range(5)] == ["#/users", "#/timeline/tina", "#/ask/tina", "#/edit/tina", "#/runs"]
    # A user's link opens the timeline with Enter; the heading then has the focus.
    b.js("document.querySelector('tr[data-user=\"tina\"] th a').focus()")
    act(b, lambda: ActionChains(b.driver).send_keys(Keys.ENTER).perform())
    assert b.state() == "ready/timeline" and b.js("return document.activeElement.tagName") == "H1"
    # The filter form works from the keyboard: type, Enter.
    b.js("document.getElementById('f-speaker').focus()")
    act(b, lambda: ActionChains(b.driver).send_keys("Alice").send_keys(Keys.ENTER).perform())
    assert {s.text for s in b.find_all("article.turn .speaker")} == {"Alice"}
    # Ask: type the question, Tab to Search, Enter; the results' heading gets the focus.
    go(b, local, "#/ask/tina", "ask")
    assert b.js("return document.activeElement.id") == "q"
    ActionChains(b.driver).send_keys("ferry to the islands").perform()
    for _ in range(12):
        tab()
        if b.js("return document.activeElement.value") == "search":
            break
    act(b, lambda: ActionChains(b.driver).send_keys(Keys.ENTER).perform())
    assert b.js("return document.activeElement.id") == "results-h"


def _long_reply(n: int) -> str:
    rng = random.Random(300)
    words = ["memory", "turn", "ferry", "garden", "kite", "ramen", "budget", "concert", "island", "tomato"]
    out = []
    size = 0
    while size < n:
        w = rng.choice(words)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n - 3] + " ok"


def test_a_300000_character_reply_collapses_instead_of_freezing(b, local):
    reply = _long_reply(300_000)
    assert len(reply) == 300_000
    ids = append(local, "longreply", {"sessions": [{"time": "2024-07-01", "turns": [
        {"speaker": "user", "text": "Tell me everything about the island ferry."},
        {"speaker": "assistant", "text": reply}]}]})["ids"]
    go(b, local, "#/timeline/longreply", "timeline")
    box = f'article[data-turn="{ids[1]}"] .text'
    assert b.js(f"return document.querySelector('{box}').dataset.collapsed") == "true"
    preview = b.js(f"return document.querySelector('{box} .preview').textContent.length")
    assert 0 < preview < 2_000
    assert b.js(f"return document.querySelector('{box} .full').childNodes.length") == 0  # not even in the DOM yet
    button = b.find(f"{box} .collapsed-note button")
    assert button.text == "Show all 300,000 characters" and button.get_attribute("aria-expanded") == "false"
    b.screenshot("long-reply-collapsed-1280x800")
    button.click()
    b.wait(lambda: button.get_attribute("aria-expanded") == "true", what="the expanded text")
    assert b.js(f"return document.querySelector('{box} .full').textContent.length") == 300_000
    height = b.js(f"return document.querySelector('{box} .full').clientHeight")
    assert 0 < height <= 24 * 16 + 20  # a bounded scroll box, not a 300,000-character wall
    assert b.find(f"{box} .preview").is_displayed() is False
    button.click()
    assert b.js(f"return document.querySelector('{box} .full').hidden") is True
    # A search that selects it shows it collapsed as well.
    go(b, local, "#/ask/longreply", "ask")
    type_into(b, "#q", "island ferry memory garden kite")
    act(b, lambda: b.find("form.ask-form button[value=search]").click())
    assert b.js(f"""return [...document.querySelectorAll('ol.hits > li[data-turn="{ids[1]}"] .text')]
                     .every(t => t.dataset.collapsed === 'true')""")


def test_hostile_text_in_a_turn_is_shown_never_run(b, local, runs_dir, tmp_path):
    hostile_speaker = '<img src=x onerror="window.__pwned=3">'
    caption = "<script>window.__pwned=4</script>"
    ids = append(local, "mallory", {"sessions": [{"time": "2024-08-01", "turns": [
        {"speaker": hostile_speaker, "text": HOSTILE, "image_caption": caption,
         "metadata": {"note": '<img src=x onerror="window.__pwned=5">'}},
        {"speaker": "Ann", "text": "an ordinary turn about onerror handlers"}]}]})["ids"]
    go(b, local, "#/timeline/mallory", "timeline")
    nothing_ran(b)
    article = f'article[data-turn="{ids[0]}"]'
    shown = b.js(f"return document.querySelector('{article}').textContent")
    assert "<script>window.__pwned=1</script>" in shown and 'onerror="window.__pwned=2"' in shown
    assert hostile_speaker in shown and caption in shown and "window.__pwned=5" in shown
    # The direction override is shown as a visible mark, not applied.
    assert "[U+202E]" in shown and "\u202e" not in shown
    b.screenshot("hostile-timeline-1280x800")
    go(b, local, "#/users", "users")
    nothing_ran(b)
    go(b, local, "#/ask/mallory", "ask")
    type_into(b, "#q", "script onerror pwned")
    act(b, lambda: b.find("form.ask-form button[value=search]").click())
    nothing_ran(b)
    assert "<script>window.__pwned=1</script>" in main_text(b)
    go(b, local, "#/edit/mallory", "edit")
    nothing_ran(b)
    # A run whose question and gold answer are hostile, on the Runs page and in the report file.
    go(b, local, "#/runs/hostile", "runs")
    nothing_ran(b)
    assert "<script>window.__pwned=1</script>" in main_text(b) and "[U+202E]" in main_text(b)
    from memcompile_local.bench.run_html import write_run_html
    page = write_run_html(runs_dir / "hostile", tmp_path / "hostile.html")
    b.open(page.as_uri())
    b.wait(lambda: b.js("return document.readyState") == "complete", what="the report")
    assert b.js("return window.__pwned") is None
    assert b.js("return document.querySelectorAll('img, script, [onerror]').length") == 0
    assert "<script>window.__pwned=1</script>" in b.js("return document.body.textContent")
    b.full_screenshot("report-html-1280x800")


def test_states_are_readable_without_colour(b, local, runs_dir):
    """Every state the pages colour also has words or symbols: checked with colour taken away."""
    if not _exists(local, "tina"):
        append(local, "tina", HISTORY)
    go(b, local, "#/users", "users")
    b.js("document.documentElement.style.filter = 'grayscale(1)'")
    assert "✓ built" in b.find('tr[data-user="tina"]').text
    go(b, local, "#/runs/locomo-mf", "runs")
    b.js("document.documentElement.style.filter = 'grayscale(1)'")
    tags = b.js("return [...document.querySelectorAll('ul.ids li')].map(li => li.textContent)")
    assert tags and all(t.startswith(("✓ ", "✗ ", "· ")) and t.rstrip().endswith(
        ("(selected)", "(missed)", "(gold)", "(not gold)")) for t in tags)
    marks = b.js("return [...document.querySelectorAll('tr[data-question] th strong')].map(s => s.textContent)")
    assert marks and set(marks) <= {"✓ ok", "✗ failing"}
    legend = b.js("return [...document.querySelectorAll('svg.chart text')].map(t => t.textContent).join(' | ')")
    assert "recall (solid)" in legend and "accuracy (hatched)" in legend and "R " in legend
    b.full_screenshot("run-grayscale-1280x800")
    b.js("document.documentElement.style.filter = ''")


PAGES = [("users", "#/users"), ("timeline", "#/timeline/tina"), ("ask", "#/ask/asker"), ("edit", "#/edit/tina"),
         ("runs", "#/runs"), ("run", "#/runs/locomo-mf"), ("import", "#/edit")]


@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["1280x800", "narrow-390x844"])
def test_every_page_fits_the_screen(b, local, size):
    if not _exists(local, "tina"):
        append(local, "tina", HISTORY)
    if not _exists(local, "asker"):
        append(local, "asker", ASK_HISTORY)
    b.resize(size)
    b.console_errors()  # only this test's
    try:
        for name, hash_ in PAGES:
            go(b, local, hash_)
            assert b.state().startswith("ready/"), (name, b.state())
            if name == "ask":
                type_into(b, "#q", QUESTION)
                act(b, lambda: b.find("form.ask-form button[value=search]").click())
            assert not b.overflows_horizontally(), f"{name} is wider than {size[0]} px"
            b.screenshot(f"{name}-{size[0]}x{size[1]}")
        assert not b.console_errors()
    finally:
        b.resize(WIDE)
