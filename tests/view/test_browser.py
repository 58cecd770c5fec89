"""traj view in a real headless browser (Debian's chromium driven by playwright; nothing is
downloaded): open the list, filter it, open a trajectory, switch the Tokens view's colourings,
and check that the numbers a token shows on hover are the stored ones, bit for bit.

Skips, saying why, when playwright or chromium is missing (``.ci/run`` installs chromium).
Set ``TRAJ_VIEW_SCREENSHOTS=DIR`` to keep a screenshot of each page (to look at them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.view import TRAINED_RUN, serving, write_trained_store
from trajstore import audit, read_trajectories_by_id
from trajstore.schema import ACTION_LOGPROBS_COLUMN
from trajstore.view import ViewConfig, create_app

CHROMIUM = os.environ.get("TRAJ_VIEW_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
LOADED_MACHINE_MS = 120_000
"""How long a page may take to load or show an element before the test fails: a bound on a hang, generous
for a loaded machine (playwright's default is 30 s)."""

@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    return write_trained_store(tmp_path_factory.mktemp("view") / "s")


def shot(page, name: str) -> None:  # noqa: ANN001
    where = os.environ.get("TRAJ_VIEW_SCREENSHOTS")
    if where:
        page.screenshot(path=str(Path(where) / f"view-{name}.png"), full_page=False)


def tip_values(page) -> dict[str, str]:  # noqa: ANN001
    rows = page.locator("#tip tr[data-field]")
    return {rows.nth(i).get_attribute("data-field"): rows.nth(i).locator("td.v").inner_text()
            for i in range(rows.count())}


def test_known_store_list_filter_open_and_hover(browser, known_store):
    """Fast (no training): the list filters, a trajectory opens, and the engine log-prob, policy
    version and staleness a token shows are the stored ones (known store: A's actions v5 and v7,
    log-prob -0.5; run r1 trained A at v8)."""
    with serving(create_app(ViewConfig(store=known_store.uri))) as url:
        page = browser.new_page(viewport={"width": 1300, "height": 800})
        page.set_default_timeout(LOADED_MACHINE_MS)
        page.goto(url + "/")
        assert page.locator("#list tr.row").count() == 6
        page.select_option("select[name=source]", "sdk")
        page.select_option("select[name=status]", "completed")
        page.click("#apply")
        page.wait_for_load_state()
        rows = page.locator("#list tr.row").evaluate_all("rows => rows.map(r => r.dataset.id)")
        assert sorted(rows) == ["A", "F"]
        page.click("#list tr.row[data-id='A'] a.tid")
        page.wait_for_selector("section.span")
        page.select_option("#run", "r1")  # submits: the page reloads with the run
        page.wait_for_url("**/t/A?run=r1")
        page.click("#tab-tokens")
        page.wait_for_selector("#tokens .t.a")
        tokens = page.locator("#tokens .t.a")
        assert tokens.count() == 4
        page.locator("button.mode[data-mode=st]").click()
        assert page.locator("#tokens").get_attribute("data-mode") == "st"
        for a, (version, staleness) in enumerate([(5, 3), (5, 3), (5, 3), (7, 1)]):
            tokens.nth(a).hover()
            page.wait_for_selector("#tip:not([hidden])")
            got = tip_values(page)
            assert (got["lp"], got["pv"], got["st"]) == ("-0.5", str(version), str(staleness))
        assert page.locator("button.mode[data-mode=tlp]").is_disabled()  # r1 recorded no annotations
        page.close()


@pytest.mark.slow
def test_list_filter_open_and_colour_tokens(browser, trained):
    conn = audit.connect(trained)
    with serving(create_app(ViewConfig(store=trained))) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(LOADED_MACHINE_MS)
        page.goto(url + "/")
        assert page.locator("#list tr.row").count() == 12
        shot(page, "list")
        # filter: trajectories with a reward of 1 that r1 trained, most stale first
        page.fill("input[name=reward_min]", "1")
        page.select_option("select[name=run]", TRAINED_RUN)
        page.select_option("select[name=sort]", "staleness")
        page.click("#apply")
        page.wait_for_load_state()
        want = [r[0] for r in conn.sql("SELECT trajectory_id FROM trajectories WHERE reward >= 1").fetchall()]
        shown = page.locator("#list tr.row").evaluate_all("rows => rows.map(r => r.dataset.id)")
        assert sorted(shown) == sorted(want) and shown
        assert page.locator("#total").inner_text() == str(len(want))
        shot(page, "list-filtered")
        # open the first one; the transcript, then the Tokens view
        tid = shown[0]
        page.click(f"#list tr.row[data-id='{tid}'] a.tid")
        page.wait_for_selector("section.span")
        assert page.locator("#tid").inner_text() == tid
        shot(page, "transcript")
        page.click("#tab-tokens")
        page.wait_for_selector("#tokens .t.a")
        stored = read_trajectories_by_id(trained, [tid])
        lps = stored[ACTION_LOGPROBS_COLUMN][0].values.to_numpy()
        ann = {a: (tlp, ratio, band, adv) for a, tlp, ratio, band, adv in conn.sql(
            "SELECT s.logprob_start + t.position - s.start, t.trainer_logprob, t.ratio, t.band, t.advantage "
            "FROM token_annotations t JOIN spans s ON s.trajectory_id = t.trajectory_id AND t.position >= s.start "
            f"AND t.position < s.\"end\" WHERE t.trajectory_id = '{tid}'").fetchall()}
        tokens = page.locator("#tokens .t.a")
        assert tokens.count() == len(lps)
        backgrounds = {}
        for mode in ("lp", "pv", "st", "tlp", "ratio", "band", "adv", "value", "ret"):
            button = page.locator(f"button.mode[data-mode={mode}]")
            assert button.is_enabled(), mode
            button.click()
            backgrounds[mode] = tokens.nth(0).evaluate("el => getComputedStyle(el).backgroundColor")
            assert page.locator("#legend").inner_text().strip(), mode
        assert len(set(backgrounds.values())) > 3  # the colourings colour differently
        page.locator("button.mode[data-mode=ratio]").click()
        shot(page, "tokens-ratio")
        for a in sorted(ann)[:6]:  # hover action tokens: shown values = stored values
            tokens.nth(a).hover()
            page.wait_for_selector("#tip:not([hidden])")
            got = tip_values(page)
            assert int(got["action_index"]) == a
            assert np.float32(got["lp"]) == lps[a]
            tlp, ratio, band, adv = ann[a]
            assert np.float32(got["tlp"]) == np.float32(tlp) and np.float32(got["ratio"]) == np.float32(ratio)
            assert np.float32(got["adv"]) == np.float32(adv) and got["band"].startswith(f"{band}:")
        page.locator("button.mode[data-mode=band]").click()
        shot(page, "tokens-band")
        # the colouring sticks in the URL: a reload keeps it
        page.reload()
        assert page.locator("button.mode.on").get_attribute("data-mode") == "band"
        page.close()


@pytest.mark.slow
def test_fixture_transcript_in_the_browser(browser, ingested_fixtures):
    """A real ingested log (SmolLM2's tokenizer decodes it): the transcript shows its turns, and a
    tool call's link jumps to the observation that answers it."""
    (tid,), = audit.connect(ingested_fixtures).sql(
        "SELECT min(trajectory_id) FROM spans WHERE kind = 'observation' AND cause_id IS NOT NULL").fetchall()
    with serving(create_app(ViewConfig(store=ingested_fixtures))) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(LOADED_MACHINE_MS)
        page.goto(url + "/")
        page.fill("input[name=where]", f"trajectory_id = '{tid}'")
        page.click("#apply")
        page.wait_for_load_state()
        assert page.locator("#list tr.row").evaluate_all("rows => rows.map(r => r.dataset.id)") == [tid]
        page.locator("#list a.tid").first.click()
        page.wait_for_selector("section.span.kind-action")
        text = page.locator("section.span.kind-prompt pre.text").first.inner_text()
        assert "<|im_start|>" in text and "⟨" not in text  # decoded text, not ids
        link = page.locator("a.toolcall[href^='#span-']").first
        target = link.get_attribute("href")
        link.click()
        assert page.evaluate("location.hash") == target
        assert page.locator(f"{target}.kind-observation").count() == 1
        shot(page, "fixture-transcript")
        page.click("#tab-tokens")
        page.wait_for_selector("#tokens .t.a")
        shot(page, "fixture-tokens")
        # episodes: the split one (most parts) first, linking its first part
        page.goto(url + "/?mode=episodes&sort=trajectories")
        first = page.locator("#list tr.row").first
        assert int(first.locator("td.num").first.inner_text()) > 1
        shot(page, "episodes")
        first.locator("a.tid").click()
        page.wait_for_selector("#lineage li.current")
        shot(page, "fixture-parts")
        page.close()
