"""`kt.serving` through a real client: the `openai` package against the
app on an ephemeral loopback port, over the tiny Qwen2 chat folder.

Greedy replies equal `TextGenerator.chat` alone under any concurrency; a
seeded sampled reply is the same whatever runs beside it; streamed pieces
join to the reply; every bad input gets OpenAI's error JSON naming its
field; a disconnect and a full queue behave as specified; `/metrics`
counts what was sent. Every wait is bounded in time.
"""

import concurrent.futures
import json
import time

import httpx
import numpy as np
import openai
import pytest

import keras_transformer as kt
from keras_transformer.serving.app import build_app
from tests.helpers import RunningServer
from tests.tasks.test_chat import chat_folder

KEY = "test-key"
NAME = "tiny-qwen2"
SLOTS = 4
CONTEXT = 64
QUEUE = 12  # 16 requests fit: 4 decoding, 12 waiting
WAIT = 120  # seconds: the longest any call here may take


@pytest.fixture(scope="module")
def chatter(tmp_path_factory):
    return kt.tasks.from_pretrained(chat_folder(tmp_path_factory.mktemp("chat")))


@pytest.fixture(scope="module")
def engine(chatter):
    engine = kt.serving.Engine(
        chatter, slots=SLOTS, context_length=CONTEXT, max_queue=QUEUE
    )
    engine.warm_up()
    engine.start()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def server(engine):
    running = RunningServer(build_app(engine, NAME, api_key=KEY, max_body_bytes=4096))
    yield running
    running.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key=KEY, timeout=WAIT, max_retries=0
    )


def post(server, path, body, key=KEY, raw=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    content = raw if raw is not None else json.dumps(body)
    return httpx.post(server.url + path, content=content, headers=headers, timeout=WAIT)


QUESTIONS = ["Hello there, how are you?", "hi", "Tell me a story", "x y z",
             "What is two plus two?", "Name a colour", "ok", "Why?"]  # fmt: skip


def test_sixteen_concurrent_requests_equal_their_lone_runs(chatter, client):
    """16 requests, 4 slots: mixed prompts, lengths and options. Greedy
    ones equal `chat` alone; sampled ones equal the same request sent
    alone (their seed fixes them)."""
    requests = []
    for i in range(16):
        messages = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
        options = {"max_tokens": 3 + (5 * i) % 11}
        if i % 3 == 1:
            options |= {"temperature": 0.8, "top_p": 0.9, "seed": i}
        elif i % 3 == 2:
            options |= {"temperature": 1.3, "seed": 100 + i, "top_k": 5}
        else:
            options |= {"temperature": 0}
        requests.append((messages, options))

    def ask(request):
        messages, options = request
        extra = {"top_k": options.pop("top_k")} if "top_k" in options else {}
        reply = client.chat.completions.create(
            model=NAME, messages=messages, extra_body=extra, **options
        )
        options |= extra
        return reply.choices[0].message.content, reply.choices[0].finish_reason

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(ask, [(m, dict(o)) for m, o in requests]))
    for (messages, options), (text, finish) in zip(requests, together, strict=True):
        if options["temperature"] == 0:
            alone = chatter.chat(messages, max_new_tokens=options["max_tokens"])
        else:
            alone = ask((messages, dict(options)))[0]
        assert text == alone, (messages, options)
        assert finish in ("stop", "length")
    assert len({text for text, _ in together}) > 4  # the options mattered


def test_streamed_pieces_join_to_the_reply_with_usage(chatter, client):
    messages = [{"role": "user", "content": "Tell me a story"}]
    stream = client.chat.completions.create(
        model=NAME, messages=messages, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == chatter.chat(messages, max_new_tokens=12)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    prompt = len(chatter.chat_prompt(messages)[0])
    assert chunks[-1].usage.prompt_tokens == prompt
    assert chunks[-1].usage.completion_tokens == 12


def test_completions_models_and_health(chatter, client, server):
    reply = client.completions.create(
        model=NAME, prompt="Hello", max_tokens=5, temperature=0
    )
    assert reply.choices[0].text == chatter.generate("Hello", max_new_tokens=5)
    assert reply.usage.completion_tokens == 5
    assert [m.id for m in client.models.list().data] == [NAME]
    assert httpx.get(server.url + "/health", timeout=WAIT).json() == {"status": "ok"}


BAD = [
    # (body or raw bytes, status, param, words of the message)
    (b"{not json", 400, None, "not valid JSON"),
    ({"messages": []}, 400, "messages", "non-empty list"),
    ({"messages": "hi"}, 400, "messages", "non-empty list"),
    ({"messages": [{"content": "no role"}]}, 400, "messages", "`role` is"),
    ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages",
     "`role` is one of"),
    ({"messages": [{"role": "user"}]}, 400, "messages", "cannot render"),
    ({"max_tokens": 0}, 400, "max_tokens", "at least 1"),
    ({"max_tokens": "5"}, 400, "max_tokens", "integer"),
    ({"max_tokens": CONTEXT}, 400, "max_tokens", "room in the context"),
    ({"temperature": "hot"}, 400, "temperature", "number"),
    ({"temperature": 3}, 400, "temperature", "[0.0, 2.0]"),
    ({"top_p": 0}, 400, "top_p", "(0.0, 1.0]"),
    ({"stop": 5}, 400, "stop", "string or a list"),
    ({"stream": "yes"}, 400, "stream", "boolean"),
    ({"n": 2}, 400, "n", "not supported"),
    ({"model": "gpt-4"}, 404, "model", "does not exist"),
    (b"{" + b" " * 5000 + b"}", 413, None, "larger than 4096 bytes"),
]  # fmt: skip


@pytest.mark.parametrize("body, status, param, words", BAD)
def test_bad_input_gets_openai_s_error_json_naming_the_field(
    server, body, status, param, words
):
    if isinstance(body, bytes):
        response = post(server, "/v1/chat/completions", None, raw=body)
    else:
        full = {"model": NAME, "messages": [{"role": "user", "content": "hi"}]}
        response = post(server, "/v1/chat/completions", full | body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert words in error["message"] and "Received" in error["message"]


def test_the_api_key_is_required(server):
    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}]}
    for key in (None, "wrong"):
        response = post(server, "/v1/chat/completions", body, key=key)
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
    assert httpx.get(server.url + "/v1/models", timeout=WAIT).status_code == 401


def wait_for(condition, what):
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_client_that_disconnects_mid_stream_frees_its_slot(engine, server):
    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 25, "temperature": 0, "stream": True}  # fmt: skip
    cancelled = engine.finished.get("cancelled", 0)
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json=body, headers=headers,
        timeout=WAIT,
    ) as response:  # fmt: skip
        first = next(response.iter_lines())
        assert first.startswith("data: ")
    # Closed after one event: the slot frees long before 25 tokens.
    wait_for(lambda: engine.finished.get("cancelled", 0) == cancelled + 1, "cancel")
    wait_for(lambda: engine.busy_slots == 0, "the slot to free")


def test_a_full_queue_answers_503_with_retry_after(engine, server):
    """4 slots and a queue of 12: with the loop paused, the 17th request
    is refused at once, and the 16 others still complete."""
    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2, "temperature": 0}  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(SLOTS + QUEUE) as pool:
        with engine.paused():
            taken = [pool.submit(post, server, "/v1/chat/completions", body)
                     for _ in range(SLOTS + QUEUE)]  # fmt: skip
            full = SLOTS + QUEUE
            wait_for(lambda: engine.queued + engine.busy_slots == full, "queue")
            refused = post(server, "/v1/chat/completions", body)
        answered = [f.result(WAIT).status_code for f in taken]
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["error"]["type"] == "server_busy"
    assert answered == [200] * (SLOTS + QUEUE)


def test_metrics_count_what_was_sent(engine, server, client):
    def metrics():
        text = httpx.get(
            server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"},
            timeout=WAIT,
        ).text  # fmt: skip
        return {
            line.split()[0]: float(line.split()[1])
            for line in text.splitlines()
            if line and not line.startswith("#")
        }

    before = metrics()
    client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
        temperature=0,
    )  # fmt: skip
    after = metrics()
    assert after["kt_requests_total"] == before["kt_requests_total"] + 1
    assert after["kt_generated_tokens_total"] >= before["kt_generated_tokens_total"] + 1
    assert after["kt_time_to_first_token_seconds_count"] == (
        before["kt_time_to_first_token_seconds_count"] + 1
    )
    assert after["kt_slots"] == SLOTS and after["kt_queue_length"] == 0
    assert after['kt_http_responses_total{status="200"}'] == (
        before['kt_http_responses_total{status="200"}'] + 1
    )
    assert np.isfinite(after["kt_time_to_first_token_seconds_sum"])
