"""The explorer's web app (ASGI, Starlette): the page, its assets, and its JSON endpoints.

Safe by construction: no endpoint takes a path, a model name or code; the page's static files are
the package's own; bodies are capped in size before they are read whole; every request is
validated (`page_requests`) before it reaches the models. A request the explorer cannot answer gets a
JSON `{"error": message}` with a 4xx status; anything unexpected gets a 500 with a one-line
message, its traceback goes to the server's log, and the server goes on.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from weightgraft.errors import UserError
from weightgraft.explore import analyses
from weightgraft.explore.compare import Pin
from weightgraft.explore.grid import Cells
from weightgraft.explore.page_requests import AttributeIn, ExactIn, GenerateIn, LensIn, ManyIn, PredictIn, PromptIn
from weightgraft.explore.session import ExploreSession

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 256 * 1024
log = logging.getLogger("weightgraft.explore")


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def create_app(session: ExploreSession, allowed_hosts: list[str] | None = None) -> Starlette:
    """The app on one session. `allowed_hosts`: Host headers it answers (default: this machine's
    loopback names), which keeps other web pages from reaching it through DNS rebinding."""

    async def page(_: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def info(_: Request) -> Response:
        return JSONResponse(session.info())

    def encoded(prompt: PromptIn):
        return session.encode(prompt.text, prompt.target, prompt.prompt_id)

    def predict(req: PredictIn) -> dict:
        prompt, cells = encoded(req.prompt), _cells(req.cells)
        out = session.predict(prompt, cells, req.top_k)
        pins = [Pin(p.label, tuple(_cells(p.cells))) for p in req.pins]
        out["compare"] = None if prompt.target_id is None else session.compare(prompt, cells, pins, req.competitor)
        return out

    def generate(req: GenerateIn) -> dict:
        return session.generate(encoded(req.prompt), _cells(req.cells), req.max_new_tokens, req.generated)

    def attribute(req: AttributeIn) -> dict:
        return analyses.attribution(session, encoded(req.prompt), req.donor, req.method)

    def exact(req: ExactIn) -> dict:
        return analyses.exact_map(session, encoded(req.prompt), req.donor, _cells(req.cells), req.heads, req.experts)

    def lens(req: LensIn) -> dict:
        return analyses.lens(session, encoded(req.prompt), _cells(req.cells))

    def many(req: ManyIn) -> dict:
        return analyses.many_prompts(session, encoded(req.prompt), _cells(req.cells), req.count, req.template)

    routes = [
        Route("/", page),
        Route("/api/info", info),
        Route("/api/predict", json_endpoint(PredictIn, predict), methods=["POST"]),
        Route("/api/generate", json_endpoint(GenerateIn, generate), methods=["POST"]),
        Route("/api/attribute", json_endpoint(AttributeIn, attribute), methods=["POST"]),
        Route("/api/exact", json_endpoint(ExactIn, exact), methods=["POST"]),
        Route("/api/lens", json_endpoint(LensIn, lens), methods=["POST"]),
        Route("/api/many", json_endpoint(ManyIn, many), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    hosts = allowed_hosts or ["127.0.0.1", "localhost", "[::1]"]
    return Starlette(
        routes=routes,
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)],
        exception_handlers={HTTPException: _not_found},
    )


def json_endpoint(model: type[BaseModel], work: Callable[[BaseModel], dict]):
    """A POST handler: the body read (capped), parsed as JSON and validated as `model`, `work` run
    on it in a thread; every failure a JSON `{"error": ...}` with its status, never a traceback."""

    async def handle(request: Request) -> Response:
        arrived = time.perf_counter()
        try:
            body = await _read_body(request)
            try:
                data = json.loads(body)
            except (ValueError, UnicodeDecodeError) as err:
                raise BadRequest(f"the request body is not JSON ({err})") from None
            except RecursionError:  # `[[[[...` thousands deep: no request of the page nests past 4
                raise BadRequest("the request body is nested too deeply to be one of the page's requests") from None
            try:
                parsed = model.model_validate(data)
            except ValidationError as err:
                raise BadRequest(_validation_message(err), 422) from None
            start = time.perf_counter()
            answer = await run_in_threadpool(work, parsed)
            computed = time.perf_counter()
            response = JSONResponse(answer)
            response.headers["Server-Timing"] = _server_timing(arrived, start, computed)
            return response
        except BadRequest as err:
            return JSONResponse({"error": str(err)}, status_code=err.status)
        except (UserError, ValueError) as err:  # the session's and the engine's input errors
            return JSONResponse({"error": str(err).splitlines()[0] if str(err) else type(err).__name__}, 400)
        except Exception as err:  # noqa: BLE001 - never a traceback to the page, never a dead server
            log.error("explore: unexpected error on %s\n%s", request.url.path, traceback.format_exc())
            return JSONResponse({"error": f"internal error ({type(err).__name__}); see the server's log"}, 500)

    return handle


def _server_timing(arrived: float, start: float, computed: float) -> str:
    """What the server spent: reading the request (body, JSON, validation), the model calls and the
    answer's JSON, so that a click's time can be split from the network's and the page's (the
    benchmark reads it)."""
    parts = (("read", start - arrived), ("work", computed - start), ("json", time.perf_counter() - computed))
    return ", ".join(f"{name};dur={1000 * seconds:.1f}" for name, seconds in parts)


async def _not_found(request: Request, exc: HTTPException) -> Response:
    """An unknown path or method, as JSON like every other error."""
    return JSONResponse({"error": f"{exc.status_code}: {exc.detail}"}, status_code=exc.status_code)


async def _read_body(request: Request) -> bytes:
    """The body, refused past MAX_BODY_BYTES without reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise BadRequest(f"the request is larger than {MAX_BODY_BYTES // 1024} KiB", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BadRequest(f"the request is larger than {MAX_BODY_BYTES // 1024} KiB", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _validation_message(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    more = f" (and {err.error_count() - 1} more problems)" if err.error_count() > 1 else ""
    return f"bad request: {where}: {first['msg']}{more}"


def _cells(cells) -> list[Cells]:
    return [Cells(c.donor, c.group, c.layer, tuple(c.positions), c.head, c.expert) for c in cells]
