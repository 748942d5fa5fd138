"""The app module `tether worker --app worker_app:engine` loads in the worker tests.

Configured by environment variables, so each worker process can differ:
- `WORKER_STORE`: the PostgreSQL URL (with `?schema=`) the engine names; set but empty, the engine
  names no store (so `TETHER_STORE` or `--store` chooses it); `WORKER_LOG`: the shared request log;
- `WORKER_FIXED`: set, the `crasher` workflow no longer kills its worker;
- `WORKER_LATENCY` (s, default 0.02), `WORKER_TTL` (lease TTL s, default 60),
  `WORKER_CLOCK_OFFSET` (s added to this process's clock for the engine and the store),
  `WORKER_CAPS` (`queue=cap,...`);
- `WORKER_REFUSALS`: a file to log each fenced write of this process the database refused;
- `WORKER_OUTPUT_PRICE`: USD per million output tokens (default 2.0; the tenant budget tests raise it).

The fake model logs `start <prompt>` when a request is sent and `done <prompt>` once its reply
completed, one line each, from every process into one file; replies name the answering process.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import tether
from tether.contracts.messages import ChatRequest
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, Finish, ModelCaps
from tether.stores.postgres import PostgresStore
from tether.testing import Reply

OFFSET = float(os.environ.get("WORKER_CLOCK_OFFSET", "0"))
LATENCY = float(os.environ.get("WORKER_LATENCY", "0.02"))
LOG = os.environ.get("WORKER_LOG", os.devnull)
PRICE = tether.Price(input=1.0, output=float(os.environ.get("WORKER_OUTPUT_PRICE", "2.0")))


def clock() -> float:
    """This process's wall clock, shifted by `WORKER_CLOCK_OFFSET` (the clock-skew test sets an hour)."""
    return time.time() + OFFSET


def log(event: str, prompt: str) -> None:
    with open(LOG, "a") as f:
        f.write(f"{event} {prompt}\t{os.getpid()}\t{time.time()}\n")


class LoggedModel:
    """The fake model, with every request and every completed reply written to the shared log."""

    def __init__(self) -> None:
        self._inner = tether.models.fake("fake", script=self._reply, prices={"m": PRICE})
        self.id = self._inner.id
        self.family = self._inner.family

    @staticmethod
    def _reply(request: ChatRequest) -> Reply:
        prompt = request.messages[-1].text_content
        return Reply(text=f"{prompt} by {os.getpid()}", input_tokens=100, output_tokens=20, latency_s=LATENCY)

    def caps(self, model: str) -> ModelCaps:
        return self._inner.caps(model)

    async def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        prompt = request.messages[-1].text_content
        log("start", prompt)
        async for event in self._inner.stream(request, signal):
            if isinstance(event, Finish) and event.reason != "cancelled":
                log("done", prompt)
            yield event


@tether.workflow(name="chain")
async def chain(ctx: tether.Ctx, tag: str, n: int = 2) -> list[str]:
    """`n` agents one after another; each answer names the process that paid for it."""
    return [await ctx.agent(f"{tag} step {i}") for i in range(n)]


@tether.workflow(name="stamp")
async def stamp(ctx: tether.Ctx) -> float:
    """The moment the body started (this host's clock), to time enqueue-to-start."""
    return time.time()


@tether.workflow(name="approval")
async def approval(ctx: tether.Ctx, tag: str) -> dict[str, Any]:
    """One paid agent, a human decision, then one more paid agent."""
    draft = await ctx.agent(f"{tag} draft")
    verdict = await ctx.await_external("verdict")
    final = await ctx.agent(f"{tag} final after {verdict}")
    return {"draft": draft, "verdict": verdict, "final": final}


@tether.workflow(name="budgeted")
async def budgeted(ctx: tether.Ctx, tag: str, n: int = 2) -> list[str]:
    """`chain` with each call's output capped at 30 tokens, so its worst case is known (the tenant tests)."""
    return [await ctx.agent(f"{tag} step {i}", max_output_tokens=30) for i in range(n)]


@tether.workflow(name="ticked")
async def ticked(ctx: tether.Ctx) -> str:
    """One paid agent naming the run: a schedule's tick (the schedule tests count them)."""
    return str(await ctx.agent(f"tick {ctx.run_id}"))


@tether.workflow(name="crasher")
async def crasher(ctx: tether.Ctx, tag: str) -> str:
    """One paid agent, then the process driving it dies of SIGKILL (no handler, no hand-back), unless
    `WORKER_FIXED` is set; each death is logged as `crash <tag>` first."""
    answer = await ctx.agent(f"{tag} before the crash")
    if not os.environ.get("WORKER_FIXED"):
        log("crash", tag)
        os.kill(os.getpid(), signal.SIGKILL)
    return answer


def _caps() -> dict[str, int]:
    spec = os.environ.get("WORKER_CAPS", "")
    return {k: int(v) for k, v in (item.split("=") for item in spec.split(",") if item)}


_STORE = os.environ.get("WORKER_STORE", "postgresql://postgres@127.0.0.1:5432/test")
_NAMED_STORE: dict[str, Any] = {"store": PostgresStore(_STORE, clock=clock)} if _STORE else {}

engine = tether.Engine(
    models=[LoggedModel()],
    routing={"loop": "fake:m"},
    **_NAMED_STORE,
    workflows=[chain, stamp, approval, crasher, budgeted, ticked],
    lease_ttl_s=float(os.environ.get("WORKER_TTL", "60")),
    clock=clock,
    queues=_caps(),
)
# What this process believes the time is (the skew test reads it from the worker's output). On stderr,
# so a command's `--json` document on stdout stays the only thing there.
print(f"worker_app clock {clock()}", file=sys.stderr, flush=True)


def _log_refusals(store: PostgresStore, path: str) -> None:
    """Write `refused <run_id> <action> epoch <n>` to `path` each time the database refuses one of this
    process's fenced writes (a stale epoch or an expired lease): the multi-host tests count them."""
    reject = store._reject

    def logged(run_id: str, lease: Any, row: Any, action: str = "append") -> Any:
        with open(path, "a") as f:
            f.write(f"refused {run_id} {action} epoch {lease.epoch}\t{os.getpid()}\t{time.time()}\n")
        return reject(run_id, lease, row, action)

    store._reject = logged  # type: ignore[method-assign]


# `WORKER_REFUSALS`: a file that receives one line per fenced write the database refused (see above).
if os.environ.get("WORKER_REFUSALS") and isinstance(_NAMED_STORE.get("store"), PostgresStore):
    _log_refusals(_NAMED_STORE["store"], os.environ["WORKER_REFUSALS"])


def _die_carrying(store: PostgresStore, when: str) -> None:
    """Die of SIGKILL between a run's finish and the commit of the claim that carries its settle (`ClaimRiding`):
    `parked`, as the settle parks (before the claim is sent); `claim`, once the claim carrying it ran in the
    database but before its transaction commits (it is rolled back when the connection drops). Logs
    `crash carrying <run ids>` first."""
    import psycopg

    ride = store.ride_claims

    def riding(wake: Any) -> None:
        def dying() -> None:
            log("crash", f"carrying {' '.join(store._parked)}")
            os.kill(os.getpid(), signal.SIGKILL)

        ride(dying if wake is not None and when == "parked" else wake)

    fetch = store._fetch

    async def fetching(name: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        if when != "claim" or name != "claim_counted" or not params[0]:
            return await fetch(name, params)
        async with await psycopg.AsyncConnection.connect(store.conninfo) as conn:  # a transaction, never committed
            await (await conn.execute(store._sql[name], params)).fetchall()
            log("crash", f"carrying {' '.join(params[0])}")
            os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    store.ride_claims = riding  # type: ignore[method-assign]
    store._fetch = fetching  # type: ignore[method-assign]


# `WORKER_DIE_CARRYING`: `parked` or `claim`, where this worker dies with a finished run's settle not yet
# committed (see above): the crash-window tests of a settle that rides the claim.
if os.environ.get("WORKER_DIE_CARRYING") and isinstance(_NAMED_STORE.get("store"), PostgresStore):
    _die_carrying(_NAMED_STORE["store"], os.environ["WORKER_DIE_CARRYING"])
