"""`IcebergRestServer`: an Iceberg REST catalog for the tests, over pyiceberg's own SQL catalog.

Why it exists: telemq's Iceberg sink takes a REST catalog's URL (`--catalog http://...`),
and no REST catalog server is packaged for this machine (the reference servers are Java
images). This one speaks the REST catalog protocol (Iceberg's OpenAPI spec) over HTTP as far
as pyiceberg's `RestCatalog` client needs it for what telemq does: the configuration,
namespaces (list, create, load, exists), tables (list, create, load, exists, commit). Behind
it is pyiceberg's `SqlCatalog` on a SQLite file: each request is parsed into pyiceberg's own
models (`CreateTableRequest`, `CommitTableRequest` with its requirement and update unions),
handed to the SQL catalog, and answered with pyiceberg's response models. So a test proves
telemq's use of the REST protocol through pyiceberg's client, not a catalog of our own.

Errors are the spec's: ``{"error": {"message", "type", "code"}}``, 404 `NoSuchTableException`
or `NoSuchNamespaceException`, 409 `AlreadyExistsException`, 409 `CommitFailedException`
when a commit's requirement fails (the client maps these to the exceptions telemq catches),
400 `BadRequestException` for a request that does not parse, 501 for what is not served.
Anything else is a 500, and is kept in `failures` for the test to fail on.

The server runs on an event loop in a thread of the test process, on a loopback port the
system picks as it binds (port 0), unless the test gives one. It answers one request at a
time (the SQL catalog is called on the loop); a commit's compare-and-swap is the SQL
catalog's own either way. `requests` lists each request
as ``"METHOD /path?query"``, so a test can tell the catalog was used; `refused`, the requests
answered with an error of the spec, with its status and type.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import ValidationError
from pyiceberg.catalog.rest import (
    Capability,
    CreateTableRequest,
    ListNamespaceResponse,
    ListTableResponseEntry,
    ListTablesResponse,
    NamespaceResponse,
    TableResponse,
)
from pyiceberg.catalog.rest.response import ErrorResponse, ErrorResponseMessage
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableRequest, Table
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.typedef import IcebergBaseModel, Identifier

HOST = "127.0.0.1"
SEPARATOR = "\x1f"  # between a namespace's levels in a path (the client's default)
ENDPOINTS = (
    Capability.V1_LIST_NAMESPACES,
    Capability.V1_CREATE_NAMESPACE,
    Capability.V1_LOAD_NAMESPACE,
    Capability.V1_NAMESPACE_EXISTS,
    Capability.V1_LIST_TABLES,
    Capability.V1_CREATE_TABLE,
    Capability.V1_LOAD_TABLE,
    Capability.V1_TABLE_EXISTS,
    Capability.V1_UPDATE_TABLE,
)
# An exception of the SQL catalog: the status and the spec's error type it is answered with.
ERRORS: dict[type[Exception], tuple[int, str]] = {
    NoSuchTableError: (404, "NoSuchTableException"),
    NoSuchNamespaceError: (404, "NoSuchNamespaceException"),
    TableAlreadyExistsError: (409, "AlreadyExistsException"),
    NamespaceAlreadyExistsError: (409, "AlreadyExistsException"),
    CommitFailedException: (409, "CommitFailedException"),
    ValidationError: (400, "BadRequestException"),
    NotImplementedError: (501, "NotImplementedException"),
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(model: IcebergBaseModel | dict[str, Any], status: int = 200) -> web.Response:
    text = model.model_dump_json() if isinstance(model, IcebergBaseModel) else json.dumps(model)
    return web.Response(text=text, status=status, content_type="application/json")


def _namespace(request: web.Request) -> Identifier:
    """The path's namespace (aiohttp has decoded the client's percent-encoding)."""
    return tuple(request.match_info["namespace"].split(SEPARATOR))


def _table(request: web.Request) -> Identifier:
    return (*_namespace(request), request.match_info["table"])


def _loaded(table: Table) -> TableResponse:
    return TableResponse(metadata_location=table.metadata_location, metadata=table.metadata)


class IcebergRestServer:
    """The REST catalog of `directory` (its SQLite file and default warehouse there)."""

    def __init__(self, directory: Path, port: int = 0) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.catalog = SqlCatalog(
            "rest",
            uri=f"sqlite:///{directory / 'catalog.db'}",
            warehouse=(directory / "warehouse").as_uri(),
        )
        self.port = port
        self.requests: list[str] = []
        self.refused: list[str] = []
        self.failures: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="iceberg-rest")
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> IcebergRestServer:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self.catalog.engine.dispose()

    async def _open(self) -> int:
        app = web.Application(middlewares=[self._errors])
        app.router.add_get("/v1/config", self.config)
        app.router.add_get("/v1/namespaces", self.list_namespaces)
        app.router.add_post("/v1/namespaces", self.create_namespace)
        app.router.add_get("/v1/namespaces/{namespace}", self.load_namespace)
        app.router.add_get("/v1/namespaces/{namespace}/tables", self.list_tables)
        app.router.add_post("/v1/namespaces/{namespace}/tables", self.create_table)
        app.router.add_get("/v1/namespaces/{namespace}/tables/{table}", self.load_table)
        app.router.add_post("/v1/namespaces/{namespace}/tables/{table}", self.commit)
        # HEAD: aiohttp answers it from the GET route, without a body (the exists checks).
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, self.port)
        await site.start()
        port: int = self._runner.addresses[0][1]
        return port

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as error:
            status, kind = next(
                (known for cls, known in ERRORS.items() if isinstance(error, cls)),
                (500, "ServerError"),
            )
            what = f"{request.method} {request.path}: {status} {kind}"
            (self.failures if status == 500 else self.refused).append(f"{what}: {error}")
            message = ErrorResponseMessage(message=str(error), type=kind, code=status)
            return _json(ErrorResponse(error=message), status)

    # -- the endpoints ---------------------------------------------------------------------

    async def config(self, request: web.Request) -> web.Response:
        endpoints = [str(endpoint) for endpoint in ENDPOINTS]
        return _json({"defaults": {}, "overrides": {}, "endpoints": endpoints})

    async def list_namespaces(self, request: web.Request) -> web.Response:
        parent = (
            tuple(request.query["parent"].split(SEPARATOR)) if "parent" in request.query else ()
        )
        return _json(ListNamespaceResponse(namespaces=self.catalog.list_namespaces(parent)))

    async def create_namespace(self, request: web.Request) -> web.Response:
        made = NamespaceResponse.model_validate_json(await request.read())
        self.catalog.create_namespace(made.namespace, made.properties)
        return _json(made)

    async def load_namespace(self, request: web.Request) -> web.Response:
        namespace = _namespace(request)
        properties = self.catalog.load_namespace_properties(namespace)
        return _json(NamespaceResponse(namespace=namespace, properties=properties))

    async def list_tables(self, request: web.Request) -> web.Response:
        names = self.catalog.list_tables(_namespace(request))
        entries = [ListTableResponseEntry(namespace=n[:-1], name=n[-1]) for n in names]
        return _json(ListTablesResponse(identifiers=entries))

    async def create_table(self, request: web.Request) -> web.Response:
        made = CreateTableRequest.model_validate_json(await request.read())
        if made.stage_create:
            raise NotImplementedError("stage-create is not served here")
        table = self.catalog.create_table(
            (*_namespace(request), made.name),
            schema=made.table_schema,
            location=made.location,
            partition_spec=made.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=made.write_order or UNSORTED_SORT_ORDER,
            properties=made.properties,
        )
        return _json(_loaded(table))

    async def load_table(self, request: web.Request) -> web.Response:
        return _json(_loaded(self.catalog.load_table(_table(request))))

    async def commit(self, request: web.Request) -> web.Response:
        """The requirements are checked against the table's current metadata and the
        metadata pointer is swapped by the SQL catalog (`CommitFailedException`: 409)."""
        commit = CommitTableRequest.model_validate_json(await request.read())
        current = self.catalog.load_table(_table(request))
        done = self.catalog.commit_table(current, commit.requirements, commit.updates)
        return _json(done)
