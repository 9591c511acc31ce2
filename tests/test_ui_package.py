"""The inspector's files as shipped: every one in the wheel, every reference between them
resolved, nothing loaded from elsewhere, and no way in the sources to turn data into markup."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from memcompile_local.service.inspector import UI_DIR

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for p in UI_DIR.rglob("*") if p.is_file())
SOURCES = [p for p in FILES if p.suffix in (".js", ".html", ".css")]


def test_the_app_is_plain_files_with_every_reference_resolved():
    names = {p.relative_to(UI_DIR).as_posix() for p in FILES}
    assert {"index.html", "style.css", "js/app.js"} <= names
    html = (UI_DIR / "index.html").read_text(encoding="utf-8")
    for ref in re.findall(r'(?:src|href)="([^"#][^"]*)"', html):
        if ref.startswith("../"):  # the server's own /docs page
            continue
        assert (UI_DIR / ref).is_file(), f"index.html refers to a missing {ref}"
    imported = set()
    for js in UI_DIR.glob("js/*.js"):
        for ref in re.findall(r'^import .* from "(\.[^"]+)";$', js.read_text(encoding="utf-8"), flags=re.M):
            target = (js.parent / ref).resolve()
            assert target.is_file(), f"{js.name} imports a missing {ref}"
            imported.add(target.name)
    # Every module is used by the app (nothing shipped that nothing loads).
    assert {p.name for p in UI_DIR.glob("js/*.js")} - imported <= {"app.js"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(UI_DIR).as_posix())
def test_nothing_is_loaded_from_elsewhere_and_no_text_becomes_markup(path):
    text = path.read_text(encoding="utf-8")
    # No CDN, font service or any other host: the page works offline.
    external = [u for u in re.findall(r"https?://[^\s\"')]+", text) if not u.startswith("http://www.w3.org/")]
    assert not external, external
    assert "@import" not in text
    if path.suffix == ".js":
        code = "\n".join(line.split("//")[0] for line in text.splitlines())  # comments may name them
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                     "setAttribute(\"on", "srcdoc", "javascript:", "localStorage"):
            assert sink not in code, f"{path.name} uses {sink}"


@pytest.mark.slow
def test_the_wheel_ships_every_file_of_the_app(built_wheel):
    names = set(zipfile.ZipFile(built_wheel).namelist())
    for p in FILES:
        rel = p.relative_to(ROOT).as_posix()
        assert rel in names, f"{rel} is missing from the wheel (package-data in pyproject.toml)"
    assert "memcompile_local/service/inspector.py" in names
