"""The API's route table: each `Operation` names its models once, for both request handling and OpenAPI."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tether.contracts.errors import (
    ConfigError,
    InvalidResolutionError,
    JournalCompatibilityError,
    JournalCorruptError,
    JournalSealedError,
    LeaseHeldError,
    NonSerializableValueError,
    RunActiveError,
    RunNotFoundError,
    RunRetainedError,
    StoreUnavailableError,
    TetherError,
)
from tether.contracts.sessions import SessionConflictError, SessionNotFoundError
from tether.journal.canonical import MAX_DEPTH, to_jsonable
from tether.server.models import ErrorBody, ErrorResponse


class ApiError(Exception):
    """An answer other than success: HTTP status plus the typed JSON error body."""

    def __init__(self, status: int, code: str, message: str, /, **data: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = ErrorBody(code=code, message=message, data=_json_data(data))


def _json_data(data: dict[str, Any]) -> dict[str, Any]:
    try:
        out = to_jsonable(data, what="error data")
    except TetherError:
        return {k: repr(v) for k, v in data.items()}
    return out if isinstance(out, dict) else {}


# Engine errors a client can act on, by HTTP status; anything else a TetherError raises is a 400.
_STATUS_OF: tuple[tuple[type[TetherError], int], ...] = (
    (RunNotFoundError, 404),
    (SessionNotFoundError, 404),
    (SessionConflictError, 409),
    (InvalidResolutionError, 422),
    (JournalCorruptError, 500),
    (LeaseHeldError, 409),
    (RunActiveError, 409),
    (RunRetainedError, 409),
    (JournalSealedError, 409),
    (JournalCompatibilityError, 409),
    (NonSerializableValueError, 422),
    (StoreUnavailableError, 503),
    (ConfigError, 400),
)


def from_tether_error(exc: TetherError) -> ApiError:
    status = next((s for cls, s in _STATUS_OF if isinstance(exc, cls)), 400)
    return ApiError(status, exc.code, exc.message, **exc.data)


def error_response(err: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(ErrorResponse(error=err.body).model_dump(mode="json"), status_code=err.status, headers=headers)


@dataclass(frozen=True)
class Call:
    """What a handler receives: the request, its path params and its validated query and body."""

    request: Request
    path: dict[str, str]
    query: Any
    body: Any

    @property
    def run_id(self) -> str:
        return self.path["run_id"]


Handler = Callable[[Call], Awaitable[BaseModel | Response]]


@dataclass(frozen=True)
class Operation:
    """One API route: path, method, models, and the handler. OpenAPI is generated from these."""

    method: str
    path: str
    name: str
    summary: str
    handler: Handler
    response: type[BaseModel] | None
    status: int = 200
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    errors: tuple[int, ...] = ()
    stream: str | None = None
    """Media type of a streamed response (its events are documented by `response`)."""
    description: str = ""
    int_params: tuple[str, ...] = ()
    """Path parameters that are integers."""

    async def respond(self, request: Request) -> Response:
        try:
            path = dict(request.path_params)
            for name in self.int_params:
                if not path[name].lstrip("-").isdigit():
                    raise ApiError(422, "invalid-request", f"path parameter {name!r} must be an integer",
                                   param=name, got=path[name])
            query = _validate(self.query, dict(request.query_params), "query") if self.query else None
            body = _validate_json(self.body, await request.body()) if self.body else None
            result = await self.handler(Call(request, path, query, body))
        except ApiError as err:
            return error_response(err)
        except TetherError as exc:
            return error_response(from_tether_error(exc))
        except RecursionError:  # a value too deep for a parser or a walk on its way in: the request's fault
            return error_response(ApiError(422, "invalid-request", f"the request nests deeper than this server "
                                           f"reads; values are journaled at most {MAX_DEPTH} levels deep"))
        if isinstance(result, Response):
            return result
        return JSONResponse(result.model_dump(mode="json"), status_code=self.status)


def routes(operations: list[Operation], *, check_write: Callable[[Request], None]) -> list[Route]:
    """One Starlette route per path, dispatching on the method (so a 405 lists every allowed method).

    `check_write` vets every request to a state-changing (non-GET) operation before its body is read;
    it raises `ApiError` to refuse one.
    """
    by_path: dict[str, dict[str, Operation]] = {}
    for op in operations:
        by_path.setdefault(op.path, {})[op.method] = op
    out = []
    for path, ops in by_path.items():
        async def endpoint(request: Request, ops: dict[str, Operation] = ops) -> Response:
            method = "GET" if request.method == "HEAD" else request.method
            if method != "GET":
                try:
                    check_write(request)
                except ApiError as err:
                    return error_response(err)
            return await ops[method].respond(request)

        out.append(Route(path, endpoint, methods=list(ops), name=next(iter(ops.values())).name))
    return out


def _validate_json(model: type[BaseModel], raw: bytes) -> BaseModel:
    if not raw.strip():
        raw = b"{}"
    try:
        json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid-json", f"the request body is not JSON: {exc}") from None
    except RecursionError:
        raise ApiError(422, "invalid-request", f"the request body nests deeper than this server reads; values "
                       f"are journaled at most {MAX_DEPTH} levels deep", where="body") from None
    return _validate(model, raw, "body")


def _validate(model: type[BaseModel], data: Any, where: str) -> BaseModel:
    try:
        return model.model_validate_json(data) if isinstance(data, bytes) else model.model_validate(data)
    except ValidationError as exc:
        issues = [
            {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"], "type": err["type"]}
            for err in exc.errors(include_url=False, include_input=False)
        ]
        summary = "; ".join(f"{i['loc'] or where}: {i['msg']}" for i in issues[:5])
        raise ApiError(422, "invalid-request", f"invalid {where}: {summary}", where=where, issues=issues) from None
