"""The explorer's HTTP side, over a real socket: bad, malformed and oversized requests get a clear
JSON message (never a traceback) and the server goes on answering; nothing outside the package's
page can be read; unknown Host headers are refused."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request

import pytest

import tiny_world
from explore_fixtures import open_world_session
from weightgraft.explore.api import MAX_BODY_BYTES
from weightgraft.explore.server import ServerThread

PROMPT = tiny_world.make_prompts()[2]
GOOD = {"prompt": {"text": PROMPT.text, "target": PROMPT.target, "prompt_id": PROMPT.id}, "cells": []}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    session = open_world_session(tmp_path_factory.mktemp("explore-api"))
    server = ServerThread(session)
    url = server.start()
    yield url, session
    server.stop()


def _post(url: str, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url.rstrip("/") + path, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _still_answers(url: str) -> None:
    status, data = _post(url, "/api/predict", json.dumps(GOOD).encode())
    assert status == 200 and data["tokens"][0] == "<s>" and len(data["predictions"]) == 4


def test_the_page_and_info(served):
    url, session = served
    with urllib.request.urlopen(url, timeout=30) as response:
        page = response.read().decode()
    assert "/static/app.js" in page and "http" not in page.replace("http-equiv", "")  # no CDN
    with urllib.request.urlopen(url + "api/info", timeout=30) as response:
        info = json.loads(response.read())
    assert info["donors"] == ["sft", "task"] and len(info["prompts"]) == len(tiny_world.make_prompts())
    _still_answers(url)


BAD = {
    "not JSON": (b"{not json", 400, "not JSON"),
    "not UTF-8": (b"\xff\xfe\x00", 400, "not JSON"),
    "a list": (b"[1, 2]", 422, "bad request"),
    "nested thousands deep": (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    "an object nested deep": (b'{"a":' * 30_000 + b"1" + b"}" * 30_000, 400, "nested too deeply"),
    "no prompt": (b"{}", 422, "prompt"),
    "unknown field": (json.dumps({**GOOD, "path": "/etc/passwd"}).encode(), 422, "path"),
    "wrong type": (json.dumps({**GOOD, "top_k": "5"}).encode(), 422, "top_k"),
    "huge top_k": (json.dumps({**GOOD, "top_k": 10**9}).encode(), 422, "top_k"),
    "a bool as int": (json.dumps({**GOOD, "top_k": True}).encode(), 422, "top_k"),
    "long text": (json.dumps({"prompt": {"text": "a" * 5000}}).encode(), 422, "prompt.text"),
    "too many tokens": (json.dumps({"prompt": {"text": "Ada " * 300}}).encode(), 400, "at most"),
    "bad cell": (
        json.dumps({**GOOD, "cells": [{"donor": "sft", "group": "O", "layer": 99, "positions": [1]}]}).encode(),
        400,
        "layer",
    ),
    "unknown donor": (
        json.dumps({**GOOD, "cells": [{"donor": "../x", "group": "O", "layer": 0, "positions": [1]}]}).encode(),
        400,
        "unknown donor",
    ),
    "too many positions": (
        json.dumps({**GOOD, "cells": [{"donor": "sft", "group": "O", "layer": 0, "positions": [1] * 300}]}).encode(),
        422,
        "positions",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_requests_get_a_message_and_the_server_goes_on(served, case):
    url, _ = served
    body, status, words = BAD[case]
    got, data = _post(url, "/api/predict", body)
    assert got == status, data
    assert words in data["error"] and "Traceback" not in data["error"]
    _still_answers(url)


def test_oversized_bodies_are_refused_unread(served):
    url, _ = served
    big = b'{"prompt": {"text": "' + b"a" * (MAX_BODY_BYTES + 10) + b'"}}'
    status, data = _post(url, "/api/predict", big)
    assert status == 413 and "larger than" in data["error"]
    # A body that claims to be small but streams on (chunked, no Content-Length) is cut off too.
    host, port = url.split("//")[1].rstrip("/").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest("POST", "/api/predict")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.putheader("Content-Type", "application/json")
    connection.endheaders()
    chunk = b"a" * 65536
    try:
        for _ in range(MAX_BODY_BYTES // len(chunk) + 2):
            connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        connection.send(b"0\r\n\r\n")
    except OSError:
        pass  # the server may close the connection before the rest is sent
    response = connection.getresponse()
    assert response.status == 413
    connection.close()
    _still_answers(url)


def test_files_hosts_and_methods(served):
    url, _ = served
    for path in ("static/../session.py", "static/%2e%2e/session.py", "etc/passwd", "api/../../setup.py"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + path, timeout=30)
        assert err.value.code == 404
    request = urllib.request.Request(url + "api/info", headers={"Host": "attacker.example"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url + "api/predict", timeout=30)  # GET
    assert err.value.code == 405
    _still_answers(url)


def test_an_unexpected_error_is_one_line_and_the_server_goes_on(served, monkeypatch):
    url, session = served

    def broken(*args, **kwargs):
        raise RuntimeError("a bug deep inside")

    monkeypatch.setattr(session, "predict", broken)
    status, data = _post(url, "/api/predict", json.dumps(GOOD).encode())
    assert status == 500 and data["error"] == "internal error (RuntimeError); see the server's log"
    monkeypatch.undo()
    _still_answers(url)


def test_answers_say_what_the_server_spent(served):
    """The Server-Timing header splits a click's time: reading the request, the model work, the JSON."""
    url, _ = served
    request = urllib.request.Request(url + "api/predict", data=json.dumps(GOOD).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        timing = response.headers["Server-Timing"]
    parts = dict(part.strip().split(";dur=") for part in timing.split(","))
    assert set(parts) == {"read", "work", "json"} and all(float(v) >= 0 for v in parts.values())


def test_generate_and_attribute_endpoints(served):
    url, _ = served
    status, data = _post(url, "/api/generate", json.dumps({**GOOD, "max_new_tokens": 3}).encode())
    assert status == 200 and [c["name"] for c in data["continuations"]] == ["recipient", "sft", "task", "graft"]
    status, data = _post(url, "/api/generate", json.dumps({**GOOD, "max_new_tokens": 1000}).encode())
    assert status == 422 and "max_new_tokens" in data["error"]
    body = {"prompt": GOOD["prompt"], "donor": "sft"}
    status, data = _post(url, "/api/attribute", json.dumps(body).encode())
    assert status == 200 and len(data["values"]) == 8
    status, data = _post(url, "/api/attribute", json.dumps({**body, "method": "eval"}).encode())
    assert status == 422 and "method" in data["error"]


def test_the_command_prints_its_loopback_address_and_serves(tmp_path):
    """`weightgraft explore` as a user runs it: the address line, then the page at that address."""
    import signal
    import subprocess
    import sys

    from explore_fixtures import world

    paths, data = world(tmp_path)
    command = [sys.executable, "-c", "from weightgraft.cli import main; main()", "explore", "--recipient", paths["pre"]]
    command += ["--donor", paths["sft"], "--donors", f"task={paths['task']}", "--data", str(data), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("weightgraft explore: open http://127.0.0.1:"), (line, process.stderr.read())
        url = line.split("open ")[1].split()[0]
        with urllib.request.urlopen(url + "api/info", timeout=30) as response:
            assert json.loads(response.read())["donors"] == ["donor", "task"]
        _still_answers(url)
        # The port is taken now: a second explorer on it fails with one line, before loading models.
        port = url.rstrip("/").rsplit(":", 1)[1]
        taken = subprocess.run(command[:-1] + [port], capture_output=True, text=True, timeout=120)
        assert taken.returncode == 2 and taken.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}")
        # Ctrl-C stops it with a plain line, not the resume hint of `weightgraft run`.
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        assert "weightgraft explore: stopped" in out + err and "resume" not in out + err and "interrupted" not in err
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


def test_bad_command_lines_are_one_line(tmp_path):
    from data_cli_fixtures import run_cli

    bad = run_cli("explore", "--recipient", "x", "--donors", "task", "--port", "0")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --donors 'task': write NAME=PATH")
    lonely = run_cli("explore", "--donor", "x", "--port", "0")
    assert lonely.returncode == 2 and "need a --recipient" in lonely.stderr
