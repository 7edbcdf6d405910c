"""The explorer tests' shared fixtures, each built once per test module on the tiny world
(`explore_fixtures.world`): its folder, the session on it, the reference grafter, a Grafter of its
own on the same model folders (the numbers the page must show), the served app, and Debian's
Chromium with a fresh page per test that fails on any script error. A module that needs another
kind defines its own fixture of the same name."""

from __future__ import annotations

import pytest

from browser_fixtures import ARGS, CHROMIUM
from explore_fixtures import DONORS, open_world_session, world, world_reference
from weightgraft.engine.grafter import Grafter
from weightgraft.experiments.models import load_model
from weightgraft.explore.server import ServerThread


@pytest.fixture(scope="module")
def root(request, tmp_path_factory):
    """A folder per module (named after it: explore-browser, explore-exact, ...)."""
    return tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-"))


@pytest.fixture(scope="module")
def session(root):
    return open_world_session(root)


@pytest.fixture(scope="module")
def reference(root):
    return world_reference(root)


@pytest.fixture(scope="module")
def grafter(root):
    """A Grafter of its own on the same model folders: the numbers the page must show."""
    paths, _ = world(root)
    return Grafter(
        load_model(paths["pre"], "cpu", "float32"), donors={d: load_model(paths[d], "cpu", "float32") for d in DONORS}
    )


@pytest.fixture(scope="module")
def served(root):
    server = ServerThread(open_world_session(root))
    yield server.start()
    server.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    yield page
    context.close()
    assert not errors, errors
