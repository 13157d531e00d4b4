"""Every error of the HTTP listener as JSON, ``{"error": "..."}``, naming the problem.

Theory of operation
-------------------
Clients of the admin API and the journal service parse JSON, and aiohttp's own answers are
plain text. The `json_errors` middleware, outermost, turns an `HTTPException` (no route:
404; a method the route does not take: 405, its `Allow` header kept; a body over
`MAX_BODY`: 413; or one a handler raises with its message as `text`) into one with a
message naming the problem, a body that cannot be read into 400, and any other
exception into a 500 whose message says nothing of the broker's inside, the exception going
to the log. What a handler returns passes untouched (the dashboard's files, with their
conditional and range answers). What aiohttp answers before the middlewares run (a request
it cannot parse: 400; an `Expect` other than ``100-continue``: 417) comes through
`HttpProtocol`, each listener's connection, which answers those in JSON as well.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from aiohttp import hdrs, web
from multidict import CIMultiDict

log = logging.getLogger("telemq.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY = 1024 * 1024  # bytes of a request body (aiohttp's default, named for the 413)


def json_error(status: int, message: str, **headers: str) -> web.Response:
    """The JSON error every endpoint answers with: ``{"error": message}``."""
    return web.json_response({"error": message}, status=status, headers=headers)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error of the listener as ``{"error": "..."}`` (see the module docstring):
    aiohttp's own answers are plain text, and clients of the API parse JSON."""
    try:
        return await handler(request)
    except ConnectionError:
        raise  # the client went away: there is no one to answer
    except Exception as error:
        if isinstance(error, web.HTTPException) and error.status < 400:
            raise  # a redirect or the like is no error
        if request.writer.output_size > 0:
            # An answer is under way (a journal range): a second one would land inside it.
            # It can only be cut short, which the client sees as a truncated stream.
            expected = isinstance(error, web.HTTPException)  # e.g. the store failed: 503
            log.log(
                logging.WARNING if expected else logging.ERROR,
                "HTTP %s %s broken off: %s",
                request.method,
                request.path,
                error.text if isinstance(error, web.HTTPException) else repr(error),
                exc_info=not expected,
            )
            raise AnswerBrokenOff from error
        if isinstance(error, web.HTTPException):
            routing = request.match_info.http_exception is error
            return _answer(request, error, routing=routing)
        if isinstance(error, web.RequestPayloadError):  # e.g. a compressed body that is not
            return json_error(400, f"the request body could not be read: {error}")
        log.exception("HTTP %s %s failed", request.method, request.path)
        return json_error(500, _internal(request))


class AnswerBrokenOff(Exception):
    """A request failed after its answer began: `HttpProtocol` closes the connection."""


def _answer(request: web.BaseRequest, error: web.HTTPException, *, routing: bool) -> web.Response:
    """`error` as JSON, its headers (`Allow`, `WWW-Authenticate`...) kept."""
    headers = CIMultiDict(error.headers)
    for name in (hdrs.CONTENT_TYPE, hdrs.CONTENT_LENGTH):
        headers.popall(name, None)
    problem = _problem(request, error, routing)
    return web.json_response({"error": problem}, status=error.status, headers=headers)


def _problem(request: web.BaseRequest, error: web.HTTPException, routing: bool) -> str:
    """What `error` says about `request`, in words (aiohttp's own texts name only the
    status). `routing`: the router raised it (no route, or not that method)."""
    method, path = request.method, request.path
    if routing and isinstance(error, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(error.allowed_methods))
        return f"method {method} not allowed on {path}; allowed: {allowed}"
    if routing and error.status == 404:
        return f"no route {method} {path}"
    if isinstance(error, web.HTTPRequestEntityTooLarge):
        size = request.content_length
        body = "request body" if size is None else f"request body of {size} bytes"
        return f"{body} is larger than the limit of {MAX_BODY} bytes"
    text = (error.text or "").strip()
    if not text or text == f"{error.status}: {error.reason}":
        return f"{error.reason.lower()}: {method} {path}"
    return text


def _internal(request: web.BaseRequest) -> str:
    """The message of a 500: nothing of the broker's inside, which goes to its log."""
    return f"internal error answering {request.method} {request.path}: see the broker's log"


class HttpProtocol(web.RequestHandler):
    """aiohttp's HTTP/1.1 connection, with JSON for the answers aiohttp gives before the
    application's middlewares run: to a request it cannot parse (400: a malformed request
    line, header or chunk; headers too long) and to an `Expect` other than ``100-continue``
    (417, from the route's expect handler)."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Like aiohttp's (the connection closes after it), in JSON, and logged in one
        line: a malformed request is the client's mistake, not a traceback's worth."""
        if request.writer.output_size > 0:  # part of an answer went out: none can follow
            raise ConnectionError("the answer was cut short") from exc  # aiohttp closes
        if isinstance(exc, ConnectionError):  # the client went away
            log.debug("HTTP request from %s: connection lost: %s", request.remote, exc)
            problem = "the connection was lost"
        elif status >= 500:
            log.error("HTTP request from %s failed", request.remote, exc_info=exc)
            problem = _internal(request)
        else:
            lines = (message or str(exc or "")).splitlines()
            detail = " ".join(line.strip() for line in lines if line.strip() not in ("", "^"))
            problem = f"malformed HTTP request: {detail or HTTPStatus(status).phrase}"
            log.info("HTTP request from %s refused (%d): %s", request.remote, status, problem)
        response = json_error(status, problem)
        response.force_close()
        return response

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        """An error raised outside the middlewares (the 417) answered as JSON too; after
        a body that could not be read, the connection ends (aiohttp would read the rest of
        it, meet the same error again and log it as unhandled)."""
        if isinstance(resp, web.HTTPException) and resp.status >= 400:
            resp = _answer(request, resp, routing=False)
        finished = await super().finish_response(request, resp, start_time)
        if isinstance(request.content.exception(), web.RequestPayloadError):
            self.force_close()  # what was written is still sent
        return finished
