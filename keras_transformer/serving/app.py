"""The OpenAI-compatible HTTP app over an `Engine` (Starlette; served by
uvicorn in `keras-transformer serve`).

Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`,
`GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus' text
format). With an API key every endpoint but `/health` needs
`Authorization: Bearer <key>`.
"""

import asyncio
import hmac
import json
import os
import time

import numpy as np
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from keras_transformer import tasks
from keras_transformer.serving import openai_api
from keras_transformer.serving.engine import Engine, QueueFull
from keras_transformer.serving.openai_api import ApiError

MAX_BODY_BYTES = 1 << 20  # a request body past this is refused (413)


def build_app(engine, model_name, *, api_key=None, max_body_bytes=MAX_BODY_BYTES):
    """The Starlette app serving `engine` as the model `model_name`.

    Args:
        engine: a started `kt.serving.Engine`.
        model_name: the `model` the API names (`GET /v1/models`).
        api_key: None, or the key every request but `/health` must send.
        max_body_bytes: the largest request body read.
    """
    server = _Server(engine, model_name, api_key, max_body_bytes)
    return Starlette(
        routes=[
            Route("/v1/chat/completions", server.chat, methods=["POST"]),
            Route("/v1/completions", server.complete, methods=["POST"]),
            Route("/v1/models", server.models, methods=["GET"]),
            Route("/health", server.health, methods=["GET"]),
            Route("/metrics", server.metrics, methods=["GET"]),
        ]
    )


def _error(error, headers=None):
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


class _Server:
    def __init__(self, engine, model_name, api_key, max_body_bytes):
        self.engine = engine
        self.model_name = model_name
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        self.started = int(time.time())
        self.responses = {}  # HTTP status -> count

    async def chat(self, request):
        return await self._handle(request, chat=True)

    async def complete(self, request):
        return await self._handle(request, chat=False)

    async def models(self, request):
        if (refused := self._refused(request)) is not None:
            return refused
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": self.started,
                        "owned_by": "keras-transformer",
                    }
                ],
            }
        )

    async def health(self, request):
        return JSONResponse({"status": "ok"})

    async def metrics(self, request):
        if (refused := self._refused(request)) is not None:
            return refused
        return PlainTextResponse(
            self.engine.metrics_text(self.responses),
            media_type="text/plain; version=0.0.4",
        )

    # --- a completion -------------------------------------------------------

    async def _handle(self, request, *, chat):
        try:
            if (refused := self._refused(request)) is not None:
                return refused
            body = await self._body(request)
            content, options, stream, include_usage, tools = openai_api.check_body(
                body, self.model_name, chat=chat
            )
            ids, ends = self._prompt(content, tools, chat)
            options = self._fit(options, ids)
            loop = asyncio.get_running_loop()
            news = asyncio.Event()
            try:
                reply = self.engine.submit(
                    ids,
                    end_token_ids=ends,
                    notify=lambda _: loop.call_soon_threadsafe(news.set),
                    **options,
                )
            except QueueFull as error:
                raise ApiError(503, str(error), kind="server_busy") from None
        except ApiError as error:
            self._count(error.status)
            headers = {"Retry-After": "1"} if error.status == 503 else None
            return _error(error, headers)
        request_id = openai_api.completion_id(chat)
        if stream:
            self._count(200)
            return StreamingResponse(
                self._events(reply, news, request_id, chat, include_usage),
                media_type="text/event-stream",
            )
        try:
            while not reply.done:
                await news.wait()
                news.clear()
        finally:
            if not reply.done:  # the client went away: free the slot
                reply.cancel()
        if reply.finish_reason == "error":
            self._count(500)
            return _error(
                ApiError(500, f"The step failed: {reply.error}", kind="server_error")
            )
        self._count(200)
        return JSONResponse(
            openai_api.response(reply, self.model_name, request_id, chat=chat)
        )

    async def _events(self, reply, news, request_id, chat, include_usage):
        def event(data):
            return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

        name = self.model_name
        try:
            if chat:
                yield event(openai_api.chunk(name, request_id, chat=True, role=True))
            while True:
                done = reply.done
                text = reply.take_text()
                if text:
                    yield event(
                        openai_api.chunk(name, request_id, chat=chat, text=text)
                    )
                if done:
                    break
                await news.wait()
                news.clear()
            if reply.finish_reason == "error":
                yield event(ApiError(500, f"The step failed: {reply.error}").body())
            else:
                finish = openai_api.finish_reason(reply)
                yield event(
                    openai_api.chunk(name, request_id, chat=chat, finish=finish)
                )
                if include_usage:
                    last = openai_api.chunk(name, request_id, chat=chat)
                    yield event(
                        {**last, "choices": [], "usage": openai_api.usage(reply)}
                    )
            yield "data: [DONE]\n\n"
        finally:
            if not reply.done:  # a client that disconnects frees its slot
                reply.cancel()

    def _refused(self, request):
        if self.api_key is None:
            return None
        sent = request.headers.get("authorization", "")
        if hmac.compare_digest(sent.encode(), f"Bearer {self.api_key}".encode()):
            return None
        self._count(401)
        error = ApiError(
            401,
            "A valid API key is needed: send `Authorization: Bearer <key>`. "
            "Received: " + ("a wrong key" if sent else "no Authorization header"),
            kind="authentication_error",
        )
        return _error(error)

    async def _body(self, request):
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_body_bytes:
                raise self._too_large(int(declared))
        data = bytearray()
        async for part in request.stream():
            data += part
            if len(data) > self.max_body_bytes:
                raise self._too_large(len(data))
        try:
            return json.loads(bytes(data))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(
                400,
                f"The request body is not valid JSON: {error}. Received: "
                f"{bytes(data[:40])!r}",
            ) from None

    def _too_large(self, size):
        return ApiError(
            413,
            f"The request body is larger than {self.max_body_bytes} bytes. "
            f"Received: {size} bytes",
        )

    def _prompt(self, content, tools, chat):
        generator = self.engine.generator
        if not chat:
            ids = generator.tokenizer.tokenize(np.array([content])).to_list()[0]
            return np.asarray(ids, "int32"), generator.end_ids()
        try:
            return generator.chat_prompt(
                content, **({"tools": tools} if tools is not None else {})
            )
        except Exception as error:  # noqa: BLE001 (the template's own errors)
            raise ApiError(
                400,
                f"The chat template cannot render `messages`: {error}",
                "messages",
            ) from None

    def _fit(self, options, ids):
        room = self.engine.context_length - len(ids)
        if room < 1:
            raise ApiError(
                400,
                f"The prompt has {len(ids)} tokens; the context holds "
                f"{self.engine.context_length}. Received: {len(ids)} prompt tokens",
                "messages",
            )
        wanted = options["max_new_tokens"]
        if wanted is None:
            return {**options, "max_new_tokens": room}
        if wanted > room:
            raise ApiError(
                400,
                f"`max_tokens` must leave the prompt ({len(ids)} tokens) room in "
                f"the context of {self.engine.context_length}. "
                f"Received: max_tokens={wanted}",
                "max_tokens",
            )
        return options

    def _count(self, status):
        self.responses[status] = self.responses.get(status, 0) + 1


def open_generator(model):
    """The `kt.tasks.TextGenerator` of `model`: a folder or GGUF file
    (`kt.tasks.from_pretrained`), a `.keras` task file (`kt.tasks.load`),
    or a `TextGenerator` itself."""
    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"No such model: {path!r}. Received: model={path!r}"
            )
        model = (
            tasks.load(path) if path.endswith(".keras") else tasks.from_pretrained(path)
        )
    if not isinstance(model, tasks.TextGenerator):
        raise ValueError(
            "`model` must be a text generator's folder, GGUF file or `.keras` "
            f"task. Received: model={type(model).__name__}"
        )
    return model


def serve(
    model, *, host="127.0.0.1", port=8000, slots=8, context_length=None,
    max_queue=64, api_key=None, model_name=None,
):  # fmt: skip
    """Serves `model` over OpenAI's HTTP API until interrupted
    (`keras-transformer serve MODEL`).

    Args:
        model: a folder, GGUF file or `.keras` task file of a text
            generator, or a `kt.tasks.TextGenerator`.
        host: the address to bind (127.0.0.1: this machine only).
        port: the TCP port.
        slots: the requests decoded at once (`kt.serving.Engine`).
        context_length: the positions of each slot (None: the model's, at
            most 2048).
        max_queue: the requests that may wait for a slot (then 503).
        api_key: None, or the key clients send as `Authorization: Bearer`.
        model_name: the name clients ask for (None: the folder or file's
            name).
    """
    import uvicorn

    if model_name is None:
        model_name = (
            os.path.basename(os.path.normpath(os.fspath(model)))
            if isinstance(model, str | os.PathLike)
            else "model"
        )
    engine = Engine(
        open_generator(model), slots=slots, context_length=context_length,
        max_queue=max_queue,
    )  # fmt: skip
    engine.warm_up()
    engine.start()
    try:
        app = build_app(engine, model_name, api_key=api_key)
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        engine.close()
