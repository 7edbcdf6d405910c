"""The explorer on tokenizers whose tokens carry spaces and bytes (byte-level BPE, SentencePiece
with byte fallback), which the tests' word-level world cannot show: a token that holds part of a
character's bytes is shown as those bytes, never as the replacement character; over HTTP."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
import torch

import tiny_world
from tiny_model_fixtures import tiny_llama
from tokenizer_fixtures import byte_level_bpe, sentencepiece_unigram
from weightgraft.engine.grafter import Grafter
from weightgraft.explore.server import ServerThread
from weightgraft.explore.session import ExploreSession
from weightgraft.explore.tokens import shown_bytes, token_text

TEXTS = [p.text + p.target for p in tiny_world.make_prompts()] * 4
NON_ASCII = "Ada Brook stars in Tōkyō 東京"


def _as_bytes(shown: str) -> bytes:
    """The page's token text back to bytes: <0xNN> is one byte, the rest UTF-8."""
    parts = re.split(r"(<0x[0-9A-F]{2}>)", shown)
    return b"".join(bytes([int(p[3:5], 16)]) if re.fullmatch(r"<0x[0-9A-F]{2}>", p) else p.encode() for p in parts)


def _tiny_llama(vocab: int, seed: int):
    return tiny_llama(vocab, seed)


@pytest.fixture(scope="module")
def tokenizer():
    return byte_level_bpe(TEXTS, 400)


@pytest.fixture(scope="module")
def served(tokenizer):
    grafter = Grafter(_tiny_llama(len(tokenizer), 0), donors={"sft": _tiny_llama(len(tokenizer), 1)})
    session = ExploreSession(grafter, tokenizer)
    server = ServerThread(session)
    url = server.start()
    yield url, session
    server.stop()


def _post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("build", [byte_level_bpe, sentencepiece_unigram])
def test_a_token_of_partial_bytes_is_shown_as_its_bytes(build):
    tok = build(TEXTS, 400)
    ids = tok(" 東京 é")["input_ids"]
    assert any("\ufffd" in tok.decode([i]) for i in ids)  # what the page showed before
    shown = [token_text(tok, i) for i in ids]
    assert not any("\ufffd" in s for s in shown)
    assert "<0xE6>" in shown  # 東 is E6 9D B1
    assert b"".join(_as_bytes(s) for s in shown[1:]).replace(b" ", b"") == "東京é".encode()  # spaces aside


def test_shown_bytes_keeps_whole_characters_as_text():
    assert shown_bytes("é".encode() + b"\xe6\x9d") == "é<0xE6><0x9D>"
    assert shown_bytes(b"\xb1a") == "<0xB1>a"


def test_the_page_gets_bytes_not_replacement_characters(served):
    url, _ = served
    data = _post(url, "/api/predict", {"prompt": {"text": NON_ASCII, "target": ""}, "top_k": 20})
    assert not any("\ufffd" in t for t in data["tokens"])
    assert b"".join(_as_bytes(t) for t in data["tokens"][1:]) == NON_ASCII.encode()
    for row in data["predictions"]:
        assert not any("\ufffd" in t["token"] for t in row["top"])


PROMPT = "Ada Brook stars in a movie alongside"


def test_the_whole_target_is_scored_teacher_forced(served, tokenizer):
    """The comparison's whole-target log-probability: the sum over the target's tokens of the
    recipient's log-probability given the prompt and the target's tokens before it."""
    url, session = served
    data = _post(url, "/api/predict", {"prompt": {"text": PROMPT, "target": " Cyril Dane"}, "competitor": " Hale"})
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    target_ids = tokenizer(PROMPT + " Cyril Dane")["input_ids"][len(prompt_ids) :]
    assert len(target_ids) > 1 and data["target_tokens"] == [tokenizer.decode([t]) for t in target_ids]
    with torch.no_grad():
        logits = session.grafter.recipient(torch.tensor([prompt_ids + target_ids[:-1]])).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt_ids) - 1 :], -1)
    whole = sum(float(logp[j, t]) for j, t in enumerate(target_ids))
    recipient = data["compare"]["columns"][0]
    assert recipient["target_logprob"] == pytest.approx(whole, abs=1e-5)
    assert recipient["logprob"] == pytest.approx(float(logp[0, target_ids[0]]), abs=1e-5)
    rival = tokenizer(PROMPT + " Hale")["input_ids"][len(prompt_ids)]
    step = logits[len(prompt_ids) - 1]
    assert recipient["logit_diff"] == pytest.approx(float(step[target_ids[0]] - step[rival]), abs=1e-5)
    assert data["target_note"] is None


def test_a_target_without_its_leading_space_is_warned_of(served, tokenizer):
    url, _ = served
    data = _post(url, "/api/predict", {"prompt": {"text": PROMPT, "target": "Cyril"}})
    without = tokenizer(PROMPT + "Cyril")["input_ids"][len(tokenizer(PROMPT)["input_ids"]) :]
    with_space = tokenizer(PROMPT + " Cyril")["input_ids"][len(tokenizer(PROMPT)["input_ids"]) :]
    assert without != with_space and data["target_tokens"] == [tokenizer.decode([t]) for t in without]
    assert (
        "has no leading space" in data["target_note"] and repr(tokenizer.decode([with_space[0]])) in data["target_note"]
    )


def test_a_competitor_scored_at_another_step_is_refused(served):
    url, _ = served
    body = {"prompt": {"text": PROMPT, "target": " Cyril"}, "competitor": "\n\n Hale"}
    request = urllib.request.Request(url + "api/predict", data=json.dumps(body).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 400 and "scored after other tokens" in json.loads(err.value.read())["error"]
