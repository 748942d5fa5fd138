"""Worker "hosts" in network namespaces: each reaches PostgreSQL over its own veth link, which a test can cut.

A `Lab` makes one network namespace per host, joined to the root namespace by a veth pair (a /30 of
its own in 10.213.0.0/16). PostgreSQL listens on 127.0.0.1 in the root namespace only, so each host
gets a forwarder process there, bound to the root end of its veth, that relays bytes to 127.0.0.1:5432
(the server's configuration is never touched). The link's one-way delay is `tc netem` on both veth ends
when the kernel has netem; a kernel built without it (CONFIG_NET_SCH_NETEM unset, as on the VMs this
suite runs on here, where no module can add it) gets the same delay from the forwarder's delay line
instead, and the test prints which. A partition sets the host's end of the link down: packets stop both ways, the kernel
keeps what each side sent and retransmits it once the link is up again, so late writes really arrive late.

Worker processes run inside their host's namespace (`ip netns exec`) and UTS namespace (`unshare --uts`)
under the host's own name, so their leases name that host, as on separate machines. Every namespace,
veth pair and process is removed when the `Lab` closes, however the test ended.

Run as a script, this module is the forwarder: `python netns_kit.py forward HOST PORT DELAY_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from workerkit import HERE, SRC, WorkerProcess, libfaketime

PG_HOST, PG_PORT = "127.0.0.1", 5432
HOSTNAME = """import os, socket, sys
socket.sethostname(sys.argv[1])
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip ARGS...` (iproute2), raising with its stderr when it fails and `check` is set."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def netns_refused() -> str | None:
    """Why this process may not create a network namespace (None when it may): the tests' only skip."""
    if shutil.which("ip") is None:
        raise AssertionError("iproute2 `ip` is missing: apt-get install iproute2 (.ci/run must install it)")
    probe = f"tether-probe-{uuid.uuid4().hex[:8]}"
    done = ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"`ip netns add` was refused here: {done.stderr.strip() or done.returncode}"
    ip("netns", "del", probe, check=False)
    return None


@dataclass
class Host:
    """One worker host: a network namespace, its veth link to the root namespace, and its forwarder."""

    name: str
    netns: str
    root_end: str
    host_end: str
    root_ip: str
    host_ip: str
    shaping: str = ""
    forwarder: subprocess.Popen[str] | None = None
    workers: list[HostWorker] = field(default_factory=list)

    def url(self, store_url: str) -> str:
        """`store_url` pointed at this host's forwarder (the address PostgreSQL has from inside the host)."""
        parts = urlsplit(store_url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}{self.root_ip}:{PG_PORT}"))

    def partition(self) -> None:
        """Cut the host off: its end of the link goes down, so nothing passes either way."""
        ip("-n", self.netns, "link", "set", self.host_end, "down")

    def heal(self) -> None:
        ip("-n", self.netns, "link", "set", self.host_end, "up")

    def python(self, *args: str) -> list[str]:
        """The command line of `python ARGS...` inside this host: its network namespace, a UTS namespace of
        its own and its host name. `ip netns exec` and `unshare` exec, so the child's pid is Python's."""
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "--",
                sys.executable, "-c", HOSTNAME, self.name, *args]

    def round_trip_ms(self, store_url: str, n: int = 15) -> float:
        """The median time of `SELECT 1` from inside this host over its link, in milliseconds."""
        code = (
            "import statistics, sys, time, psycopg\n"
            "from tether.stores.postgres import split_dsn\n"
            "with psycopg.connect(split_dsn(sys.argv[1])[0], autocommit=True) as c:\n"
            "    c.execute('SELECT 1')\n"
            "    ts = []\n"
            f"    for _ in range({n}):\n"
            "        t = time.perf_counter(); c.execute('SELECT 1'); ts.append(time.perf_counter() - t)\n"
            "print(statistics.median(ts) * 1000)\n"
        )
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        done = subprocess.run(self.python("-c", code, self.url(store_url)),
                              capture_output=True, text=True, timeout=60, env=env)
        if done.returncode != 0:
            raise AssertionError(f"the round-trip probe in {self.name} failed: {done.stderr.strip()}")
        return float(done.stdout.split()[-1])


@dataclass
class HostWorker(WorkerProcess):
    """A `tether worker` inside a host; each output line is kept with the (test's) time it arrived."""

    host: str = ""
    stamped: list[tuple[float, str]] = field(default_factory=list)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stamped.append((time.time(), line.rstrip("\n")))
            self.lines.append(line.rstrip("\n"))

    def seen_at(self, needle: str) -> float:
        """When the first line containing `needle` arrived (it must have)."""
        return next(t for t, line in self.stamped if needle in line)

    def runs(self, how: str) -> list[str]:
        """The run ids of the lines `run ID: <how> ...` (e.g. `claimed`, `taken over`, `stopped`)."""
        return [line.split(":", 1)[0].removeprefix("run ") for line in self.lines
                if line.startswith("run ") and line.split(": ", 1)[1].startswith(how)]


class Lab:
    """Hosts in network namespaces, each with a link to PostgreSQL of `delay_s` each way. A context manager."""

    def __init__(self, *names: str, delay_s: float = 0.0025) -> None:
        self.names = names
        self.delay_s = delay_s
        self.token = uuid.uuid4().hex[:6]
        self.hosts: dict[str, Host] = {}

    def __enter__(self) -> Lab:
        try:
            subnet = self._free_subnet()
            for i, name in enumerate(self.names):
                self.hosts[name] = self._make(name, subnet, i)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    @staticmethod
    def _free_subnet() -> int:
        """A third octet of 10.213.X.0/24 that no address or route in the root namespace uses."""
        used = ip("-4", "-o", "addr").stdout + ip("-4", "route").stdout
        for _ in range(100):
            x = random.randrange(256)
            if f"10.213.{x}." not in used:
                return x
        raise RuntimeError("no free 10.213.X.0/24 for the test's links")

    def _make(self, name: str, subnet: int, i: int) -> Host:
        tag = f"{self.token}{i}"
        host = Host(
            name=name, netns=f"tether-{tag}", root_end=f"tth{tag}r", host_end=f"tth{tag}h",
            root_ip=f"10.213.{subnet}.{4 * i + 1}", host_ip=f"10.213.{subnet}.{4 * i + 2}",
        )
        ip("netns", "add", host.netns)
        self.hosts[name] = host  # from here on, close() removes what exists
        ip("link", "add", host.root_end, "type", "veth", "peer", "name", host.host_end)
        ip("link", "set", host.host_end, "netns", host.netns)
        ip("addr", "add", f"{host.root_ip}/30", "dev", host.root_end)
        ip("link", "set", host.root_end, "up")
        ip("-n", host.netns, "addr", "add", f"{host.host_ip}/30", "dev", host.host_end)
        ip("-n", host.netns, "link", "set", host.host_end, "up")
        ip("-n", host.netns, "link", "set", "lo", "up")
        forwarder_delay = self._shape(host)
        host.forwarder = start_forwarder(host.root_ip, PG_PORT, forwarder_delay)
        return host

    def _shape(self, host: Host) -> float:
        """Delay both veth ends with netem; without netem in the kernel, return the delay the forwarder adds."""
        ms = f"{self.delay_s * 1000:g}ms"
        args = ["root", "netem", "delay", ms]
        done = subprocess.run(["tc", "qdisc", "add", "dev", host.root_end, *args], capture_output=True, text=True)
        if done.returncode == 0:
            subprocess.run(["tc", "-n", host.netns, "qdisc", "add", "dev", host.host_end, *args], check=True)
            host.shaping = f"tc netem delay {ms} on both veth ends"
            return 0.0
        if "unknown" not in done.stderr and "No such file" not in done.stderr:
            raise RuntimeError(f"tc qdisc add ... netem failed: {done.stderr.strip()}")
        host.shaping = (f"{ms} each way in the forwarder's delay line (this kernel has no netem: "
                        f"{done.stderr.strip()})")
        return self.delay_s

    def close(self) -> None:
        for host in self.hosts.values():
            ip("-n", host.netns, "link", "set", host.host_end, "up", check=False)  # so its workers can let go
            for w in host.workers:
                with contextlib.suppress(Exception):
                    w.stop(timeout=10)
            if host.forwarder is not None and host.forwarder.poll() is None:
                host.forwarder.kill()
                host.forwarder.wait(10)
            ip("link", "del", host.root_end, check=False)  # takes the peer end with it
            ip("netns", "del", host.netns, check=False)
        self.hosts = {}

    def spawn(
        self,
        name: str,
        store_url: str,
        log: Path,
        *,
        ttl: float,
        latency: float = 0.02,
        concurrency: int = 4,
        poll: float = 0.2,
        faketime: str | None = None,
        refusals: Path | None = None,
    ) -> HostWorker:
        """Start `tether worker --app worker_app:engine` inside host `name`; return once it is ready."""
        host = self.hosts[name]
        env = {
            **os.environ,
            "PYTHONPATH": f"{SRC}{os.pathsep}{HERE}",
            "WORKER_STORE": host.url(store_url),
            "WORKER_LOG": str(log),
            "WORKER_TTL": str(ttl),
            "WORKER_LATENCY": str(latency),
        }
        env.pop("TETHER_STORE", None)
        if refusals is not None:
            env["WORKER_REFUSALS"] = str(refusals)
        if faketime is not None:
            env |= {"LD_PRELOAD": libfaketime(), "FAKETIME": faketime, "FAKETIME_DONT_RESET": "1"}
        argv = host.python("-c", "from tether.cli.main import main; main()", "worker", "--app", "worker_app:engine",
                           "--concurrency", str(concurrency), "--poll", str(poll))
        proc = subprocess.Popen(argv, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        worker = HostWorker(proc, host=name)
        host.workers.append(worker)
        threading.Thread(target=worker._pump, daemon=True).start()
        worker.wait_for(" ready: ")
        return worker


def start_forwarder(host: str, port: int, delay_s: float) -> subprocess.Popen[str]:
    """The forwarder process for one link, listening on `host:port` in the root namespace."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "forward", host, str(port), str(delay_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("forwarding"):
        proc.kill()
        raise RuntimeError(f"the forwarder on {host}:{port} did not start: {line}{proc.stdout.read()}")
    return proc


# -- the forwarder (run as a script) ------------------------------------------------------------------
async def _delayed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Relay one direction; each chunk leaves `delay_s` after it arrived (a delay line, so chunks overlap)."""
    loop = asyncio.get_running_loop()
    line: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await line.get()
            if not data:
                return
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.ensure_future(send())
    try:
        while data := await reader.read(65536):
            line.put_nowait((loop.time() + delay_s, data))
            if sender.done():
                break
        line.put_nowait((loop.time() + delay_s, b""))
        await sender
    except (ConnectionError, OSError):
        pass
    finally:
        sender.cancel()
        with contextlib.suppress(Exception):
            writer.close()


async def _forward(host: str, port: int, delay_s: float) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(PG_HOST, PG_PORT)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_delayed(reader, up_writer, delay_s), _delayed(up_reader, writer, delay_s))

    server = await asyncio.start_server(client, host, port, reuse_address=True)
    print(f"forwarding {host}:{port} -> {PG_HOST}:{PG_PORT}, {delay_s * 1000:g} ms each way", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__" and sys.argv[1:2] == ["forward"]:
    asyncio.run(_forward(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
