"""OpenAI's HTTP API, the part `keras-transformer serve` speaks: each
request body checked into engine arguments before any work, and the
response and stream-chunk JSON built from a `Reply`.

A field of the wrong type or out of range is an `ApiError` naming it, as
OpenAI answers (`{"error": {"message", "type", "param", "code"}}`).
Fields this server does not read are ignored, as llama.cpp's server does
(clients send `user`, `logprobs`, ...), except those whose other values
would change the answer (`n` > 1, `logprobs`, penalties), which are
refused by name.
"""

import time
import uuid

# The most stop strings OpenAI takes, and the roles it knows.
MAX_STOPS = 4
ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(Exception):
    """An answer with OpenAI's error JSON, before any work."""

    def __init__(self, status, message, param=None, kind="invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.param = param
        self.kind = kind

    def body(self):
        return {
            "error": {
                "message": str(self),
                "type": self.kind,
                "param": self.param,
                "code": None,
            }
        }


def _invalid(param, message, value):
    return ApiError(400, f"{message} Received: {param}={value!r}", param)


def _int(body, name, default=None, minimum=None):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(name, f"`{name}` must be an integer.", value)
    if minimum is not None and value < minimum:
        raise _invalid(name, f"`{name}` must be at least {minimum}.", value)
    return value


def _number(body, name, default, low, high, low_open=False):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(name, f"`{name}` must be a number.", value)
    if value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise _invalid(name, f"`{name}` must be in {bracket}{low}, {high}].", value)
    return float(value)


def _stops(body):
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOPS
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise _invalid(
            "stop",
            f"`stop` must be a non-empty string or a list of at most {MAX_STOPS}.",
            stop,
        )
    return tuple(stops)


def _refuse_unsupported(body):
    checks = {
        "n": lambda v: v in (None, 1),
        "logprobs": lambda v: v in (None, False),
        "frequency_penalty": lambda v: v in (None, 0, 0.0),
        "presence_penalty": lambda v: v in (None, 0, 0.0),
        "best_of": lambda v: v in (None, 1),
        "echo": lambda v: v in (None, False),
    }
    for name, allowed in checks.items():
        if name in body and not allowed(body[name]):
            raise _invalid(
                name, f"`{name}` is not supported by this server.", body[name]
            )


def check_body(body, model_name, *, chat):
    """The engine's keyword arguments of a request body, checked; `chat`:
    a chat completion (`messages`), else a completion (`prompt`).

    Returns:
        `(messages or prompt, options, stream, include_usage, tools)`.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    model = body.get("model", model_name)
    if model != model_name:
        raise ApiError(
            404,
            f"The model {model!r} does not exist; this server serves "
            f"{model_name!r}. Received: model={model!r}",
            "model",
            "model_not_found",
        )
    _refuse_unsupported(body)
    if chat:
        content = body.get("messages")
        if not isinstance(content, list) or not content:
            raise _invalid("messages", "`messages` must be a non-empty list.", content)
        for message in content:
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ROLES:
                raise _invalid(
                    "messages",
                    "Each message must be an object whose `role` is one of "
                    f"{', '.join(ROLES)}.",
                    message,
                )
    else:
        content = body.get("prompt")
        if not isinstance(content, str) or not content:
            raise _invalid("prompt", "`prompt` must be a non-empty string.", content)
    limit = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _int(body, limit, default=None, minimum=1)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _invalid("stream", "`stream` must be a boolean.", stream)
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise _invalid(
            "stream_options", "`stream_options` must be an object.", stream_options
        )
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise _invalid("tools", "`tools` must be a list.", tools)
    seed = _int(body, "seed")
    options = {
        "max_new_tokens": max_tokens,
        "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
        "top_p": _number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        "top_k": _int(body, "top_k", default=0, minimum=0),
        "seed": seed,
        "stop": _stops(body),
    }
    return content, options, stream, bool(stream_options.get("include_usage")), tools


def completion_id(chat):
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"


def response(reply, model_name, request_id, *, chat):
    """The JSON of a finished `Reply` (`chat.completion` or
    `text_completion`)."""
    finish = "stop" if reply.finish_reason == "stop" else "length"
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": reply.text},
            "finish_reason": finish,
        }
    else:
        choice = {"index": 0, "text": reply.text, "finish_reason": finish}
    return {
        "id": request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [choice],
        "usage": usage(reply),
    }


def usage(reply):
    prompt, completion = len(reply.prompt_ids), len(reply.token_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def chunk(model_name, request_id, *, chat, text=None, role=False, finish=None):
    """One server-sent event's JSON of a stream."""
    if chat:
        delta = {"role": "assistant", "content": ""} if role else {}
        if text:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    return {
        "id": request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [choice],
    }


def finish_reason(reply):
    return "stop" if reply.finish_reason == "stop" else "length"
