"""`tether serve` as a real process, and `load_engine` (the `--app MODULE:ENGINE` loader)."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_kit import wait_for

import tether
from tether.engine.targets import load_engine

TETHER = Path(sys.executable).with_name("tether")

APP_MODULE = '''
import tether
from tether.testing import Reply

fake = tether.models.fake("fake", script=lambda request: Reply(text="hi", input_tokens=10, output_tokens=2),
                          prices={"m": tether.Price(input=1.0, output=2.0)})

@tether.workflow(name="hello")
async def hello(ctx, name: str = "world"):
    return {"greeting": await ctx.agent(f"greet {name}"), "name": name}

engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store="sqlite:///served.db", workflows=[hello])
not_an_engine = 42
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def call(url: str, *, token: str | None = None, body: dict[str, object] | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    headers = {"Content-Type": "application/json", "X-Tether-Request": "1",
               **({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    (tmp_path / "myapp.py").write_text(APP_MODULE)
    port = free_port()
    proc = subprocess.Popen([str(TETHER), "serve", "--app", "myapp:engine", "--port", str(port), "--token", "tk"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return call(base + "/healthz")[0] == 200
        except OSError:
            assert proc.poll() is None, proc.communicate()
            return False

    wait_for(up, timeout=60, what="tether serve to listen")
    yield base, proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_tether_serve_app_serves_the_api_runs_workflows_and_stops_on_sigint(
    served: tuple[str, subprocess.Popen[str]],
) -> None:
    base, proc = served
    assert call(base + "/healthz")[1]["mode"] == "app"
    assert call(base + "/api/runs")[0] == 401
    status, started = call(base + "/api/runs", token="tk", body={"workflow": "hello", "args": {"name": "ann"},
                                                                 "run_id": "h-1"})
    assert status == 201, started
    wait_for(lambda: call(base + "/api/runs/h-1", token="tk")[1]["status"] == "ok", what="the run to finish")
    detail = call(base + "/api/runs/h-1", token="tk")[1]
    assert detail["outcome"]["value"] == {"greeting": "hi", "name": "ann"}  # type: ignore[index]
    req = urllib.request.Request(base + "/", headers={"Authorization": "Bearer tk"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert "tether inspector" in resp.read().decode()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "tether serve: app myapp:engine on http://127.0.0.1:" in out and "(token required)" in out


def test_tether_serve_store_reads_a_store_and_refuses_to_start_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    engine = tether.Engine(store=url)

    async def record() -> None:
        @tether.workflow(name="noop")
        async def noop(ctx: tether.Ctx) -> int:
            return 1

        await engine.run(noop, run_id="n-1")
        await engine.close()

    import asyncio

    asyncio.run(record())
    port = free_port()
    proc = subprocess.Popen([str(TETHER), "serve", "--store", url, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base, proc), timeout=60, what="tether serve to listen")
        runs = call(base + "/api/runs")[1]["runs"]
        assert [r["run_id"] for r in runs] == ["n-1"]  # type: ignore[attr-defined, index]
        status, body = call(base + "/api/runs", body={"workflow": "noop"})
        assert status == 409 and body["error"]["code"] == "no-app-engine"  # type: ignore[index]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def _answers(base: str, proc: subprocess.Popen[str]) -> bool:
    try:
        return call(base + "/healthz")[0] == 200
    except OSError:
        assert proc.poll() is None, proc.communicate()
        return False


def test_tether_serve_prints_the_store_url_without_its_password(pg_dsn: str, pg_schema: str) -> None:
    dsn = pg_dsn.replace("://postgres@", "://postgres:hunter2@", 1) + f"?schema={pg_schema}"
    assert "hunter2" in dsn
    port = free_port()
    proc = subprocess.Popen([str(TETHER), "serve", "--store", dsn, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base, proc), timeout=60, what="tether serve to listen")
        assert call(base + "/api/runs")[1] == {"runs": [], "next_cursor": None}  # the password did its job
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert "hunter2" not in out + err
    assert f"tether serve: store postgresql://postgres:***@127.0.0.1:5432/test?schema={pg_schema} on " in out


def test_tether_serve_answers_its_allowed_hosts_and_refuses_other_names(tmp_path: Path) -> None:
    port = free_port()
    argv = ["serve", "--store", f"sqlite:///{tmp_path}/t.db", "--port", str(port), "--allowed-host",
            "tether.example.org", "--allowed-host", "*.corp.example"]
    proc = subprocess.Popen([str(TETHER), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base, proc), timeout=60, what="tether serve to listen")
        for host in ("localhost", f"127.0.0.1:{port}", "tether.example.org", "ci.corp.example:8642"):
            assert call(base + "/api/runs", headers={"Host": host})[0] == 200, host
        status, body = call(base + "/api/runs", headers={"Host": f"evil.test:{port}"})
        assert status == 403 and body["error"]["code"] == "host-not-allowed"  # type: ignore[index]
        assert "Start tether serve with --allowed-host evil.test" in body["error"]["message"]  # type: ignore[index]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM), in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def test_a_300_mb_body_is_refused_with_413_and_never_held(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([str(TETHER), "serve", "--store", f"sqlite:///{tmp_path}/t.db", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base, proc), timeout=60, what="tether serve to listen")
        before = peak_rss_kib(proc.pid)
        chunk = b"x" * (1 << 20)
        for framing in (b"Content-Length: 314572800", b"Transfer-Encoding: chunked"):  # declared, and streamed
            sent = 0
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             b"X-Tether-Request: 1\r\n" + framing + b"\r\n\r\n")
                try:
                    while sent < 300 << 20:
                        sock.sendall(chunk if b"Length" in framing else b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        sent += len(chunk)
                except OSError:  # refused: the server answered and hung up
                    pass
                answer = b""
                with contextlib.suppress(OSError):
                    while part := sock.recv(65536):
                        answer += part
            assert answer.startswith(b"HTTP/1.1 413"), (framing, answer[:200])
            assert sent < 64 << 20, (framing, sent)  # refused long before the 300 MB were sent
            head, _, body = answer.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length: (\d+)", head)
            if length is not None and len(body) == int(length.group(1)):  # (a reset may drop the unread body)
                assert b'"code":"body-too-large"' in body, (framing, body[:200])
        assert peak_rss_kib(proc.pid) - before < 32 * 1024  # the 300 MB never reached memory
        status, body = call(base + "/api/runs")
        assert status == 200 and body["runs"] == []
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


@pytest.mark.parametrize("argv, message, code", [
    (["--host", "0.0.0.0"], "refusing to bind '0.0.0.0' without a token", 1),
    (["--app", "myapp:engine", "--store", "nope://x"], "unknown store URL 'nope://x'", 1),
    (["--app", "no_such_module_here:engine"], "no module named 'no_such_module_here'", 1),
    (["--app", "myapp"], "must be MODULE:ATTR", 2),
    (["--app", "myapp:not_an_engine"], "is a int, not a tether.Engine", 1),
    (["--allowed-host", "evil test"], "allowed host 'evil test' is not a host name", 1),
    (["--max-body-bytes", "0"], "max_body_bytes must be at least 1 (got 0); pass --max-body-bytes N", 1),
    (["--max-streams", "0"], "max_streams must be at least 1 (got 0); pass --max-streams N", 1),
])
def test_tether_serve_refuses_bad_options_with_one_line(tmp_path: Path, argv: list[str], message: str,
                                                        code: int) -> None:
    (tmp_path / "myapp.py").write_text(APP_MODULE)
    done = subprocess.run([str(TETHER), "serve", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == code and done.stdout == ""  # errors are one line on stderr, like every command
    (line,) = done.stderr.splitlines()
    assert message in line and "Traceback" not in done.stderr


# -- load_engine ---------------------------------------------------------------------------------

def _module(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))


def test_load_engine_imports_module_attr_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    _module(tmp_path, "le_ok", """
        import tether
        engine = tether.Engine(store="memory://")
        class Services:
            engine = engine
    """)
    engine = load_engine("le_ok:engine")
    assert isinstance(engine, tether.Engine)
    assert load_engine("le_ok:Services.engine") is engine
    assert sys.path[0] == str(tmp_path)


def test_load_engine_says_what_is_wrong_as_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _module(tmp_path, "le_bad", """
        engine = "not an engine"
    """)
    _module(tmp_path, "le_needs", """
        import some_dependency_that_is_missing
    """)
    cases = {
        "le_bad": "must be MODULE:ATTR",
        ":engine": "must be MODULE:ATTR",
        "le_bad:": "must be MODULE:ATTR",
        "le_missing_mod:engine": "no module named 'le_missing_mod'",
        "le_bad:nope": "has no attribute 'nope'",
        "le_bad:engine": "le_bad.engine is a str, not a tether.Engine",
        "le_needs:engine": "it needs the module 'some_dependency_that_is_missing'",
    }
    for target, message in cases.items():
        with pytest.raises(tether.ConfigError) as caught:
            load_engine(target)
        assert message in caught.value.message, target
        assert caught.value.data["target"] == target
    for name in ("le_bad", "le_needs"):
        sys.modules.pop(name, None)


def test_a_refused_bind_happens_before_the_app_is_imported(tmp_path: Path) -> None:
    (tmp_path / "marker_app.py").write_text("open('imported', 'w').close()\n" + APP_MODULE)
    done = subprocess.run([str(TETHER), "serve", "--app", "marker_app:engine", "--host", "10.0.0.1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "refusing to bind" in done.stderr
    assert not (tmp_path / "imported").exists()
