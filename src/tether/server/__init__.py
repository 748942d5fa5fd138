"""`tether serve`: an HTTP API over an engine's runs and a web inspector (the `server` extra).

`create_app(engine)` builds the Starlette app; `tether serve` runs it under uvicorn.
"""

from tether.server.app import create_app, operations
from tether.server.auth import check_bind
from tether.server.events import event_json
from tether.server.state import LiveRun, ServerState

__all__ = ["LiveRun", "ServerState", "check_bind", "create_app", "event_json", "operations"]
