"""A tool that attacks its sandbox gets nothing, whether the engine runs as root or as a plain user.

Issue 34. Every test runs real bubblewrap through a real engine twice: as this process (root, here
and in CI) and as uid 65534 (a child engine under `setpriv`, see `escape_kit`). The attacks are the
tool's own syscalls (`umount2`, `mount(MS_REMOUNT)`, `unshare`, reads and writes); the assertions
are on their effects: the store's bytes never come back, the written file never lands on the host.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from escape_kit import HERE, PLAIN_UID, as_plain_user, plain_python, run_as_plain_user, run_tool

STORE_HEADER = "SQLite format 3"


@dataclass
class Attacker:
    """Runs one tool through an engine as `who`, on files under `base` that `who` owns."""

    who: str
    base: Path
    monkeypatch: pytest.MonkeyPatch
    in_child: bool = field(default=False)

    def owned(self, path: Path) -> Path:
        if self.in_child:
            os.chown(path, PLAIN_UID, PLAIN_UID)
        return path

    def mkdir(self, name: str) -> Path:
        path = self.base / name
        path.mkdir(parents=True)
        return self.owned(path)

    def write(self, path: Path, text: str) -> Path:
        path.write_text(text)
        return self.owned(path)

    async def run(self, tool: str, args: dict[str, Any], *, store: str, executor: str = "sandbox",
                  read_paths: tuple[str, ...] = (), env: dict[str, str] | None = None,
                  declared_env: tuple[str, ...] = ()) -> dict[str, Any]:
        spec = {"tool": tool, "args": args, "store": store, "executor": executor,
                "read_paths": list(read_paths), "env": list(declared_env)}
        if self.in_child:
            home = self.mkdir(f"home-{uuid.uuid4().hex[:6]}")
            return run_as_plain_user(spec, home, env or {})
        for name, value in (env or {}).items():
            self.monkeypatch.setenv(name, value)
        return await run_tool(spec)


@functools.cache
def plain_bwrap_failure() -> str | None:
    """Why the plain user cannot run bubblewrap here (None when it can)."""
    argv = as_plain_user(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--", "true"])
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/", check=False)
    return None if done.returncode == 0 else done.stderr.strip()


@pytest.fixture(params=["root", "plain"])
def attacker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Attacker]:
    root = os.geteuid() == 0
    if request.param == "root" and not root:
        pytest.skip("the root half of these attacks needs the tests to run as root (CI does)")
    in_child = request.param == "plain" and root
    if in_child:
        if plain_python() is None:
            pytest.skip(f"no python{sys.version_info[0]}.{sys.version_info[1]} here that uid {PLAIN_UID} can run")
        if (why := plain_bwrap_failure()) is not None:
            pytest.skip(f"uid {PLAIN_UID} cannot run bubblewrap here: {why}")
    base = Path(tempfile.mkdtemp(prefix="tether-escape-", dir="/var/tmp"))  # /tmp is the sandbox's own
    base.chmod(0o755)
    attacker = Attacker(request.param, base, monkeypatch, in_child)
    attacker.owned(base)
    yield attacker
    shutil.rmtree(base, ignore_errors=True)


def refused(answer: str) -> bool:
    return not answer.startswith("ok") and STORE_HEADER not in answer


def store_refused(seen: dict[str, Any]) -> bool:
    """The store's bytes came back neither before the tool's unmount attempts nor after them."""
    return refused(seen["read_before"]) and refused(seen["read"])


# Item 1: no capabilities, so no mount table changes, as root too.


async def test_a_sandboxed_tool_holds_no_capabilities_even_when_the_engine_is_root(attacker: Attacker) -> None:
    caps = await attacker.run("capabilities", {}, store=f"sqlite:///{attacker.base / 't.db'}")
    assert int(caps["CapEff"], 16) == int(caps["CapPrm"], 16) == int(caps["CapAmb"], 16) == 0, caps
    assert caps["NoNewPrivs"] == "1", caps  # and no exec can grant one back (not even uid 0's)
    # In a user namespace bubblewrap empties the bounding set too (without one it may not).
    in_user_namespace = caps["uid_map"] != "0 0 4294967295"
    assert int(caps["CapBnd"], 16) == 0 or not in_user_namespace, caps


@pytest.mark.parametrize("nested", [False, True], ids=["direct", "in-a-nested-user-namespace"])
async def test_a_sandboxed_tool_cannot_unmount_the_mask_over_the_store_and_read_it(
    attacker: Attacker, nested: bool
) -> None:
    project = attacker.mkdir("project")
    notes = attacker.write(project / "notes.txt", "readable notes")
    store = project / "t.db"
    args = {"path": str(store), "nested": nested, "also": [str(notes)]}
    seen = await attacker.run("unmount_and_read", args, store=f"sqlite:///{store}", read_paths=(str(project),))
    assert store.read_bytes().startswith(STORE_HEADER.encode())  # the store is there, beside the notes
    assert seen["also"][str(notes)] == "ok:readable notes"  # so only the mask stands between them
    assert (seen["umount"], seen["umount_lazy"]) != ("ok", "ok"), seen
    assert store_refused(seen), f"the tool read the store: {seen}"


def remount_targets(base: Path) -> dict[str, Path]:
    name = f"tether-escape-{uuid.uuid4().hex[:8]}.txt"
    return {"project": base / "project" / name, "usr": Path("/usr") / name, "repository": HERE / name}


@pytest.mark.parametrize(
    ("target", "nested"),
    [("project", False), ("project", True), ("usr", False), ("repository", False)],
    ids=["project", "project-in-a-nested-user-namespace", "usr", "repository"],
)
async def test_a_sandboxed_tool_cannot_remount_a_read_only_folder_writable(
    attacker: Attacker, target: str, nested: bool
) -> None:
    project = attacker.mkdir("project")  # the plain user owns it: only the read-only bind stops a write
    path = remount_targets(attacker.base)[target]
    try:
        seen = await attacker.run("remount_writable_and_write", {"path": str(path), "nested": nested},
                                  store=f"sqlite:///{attacker.base / 't.db'}", read_paths=(str(project),))
        assert not path.exists(), f"the tool wrote {path} on the host: {seen}"
        assert seen["remount"] != "ok" and seen["write"] != "ok", seen
    finally:
        path.unlink(missing_ok=True)


async def test_a_sandboxed_tool_cannot_rewrite_a_host_sysctl(attacker: Attacker) -> None:
    # uid 0 without capabilities passes the owner check on /proc/sys, and core_pattern runs a
    # program as host root; the tool writes the current value back, so nothing changes if it lands.
    seen = await attacker.run("rewrite_sysctl", {"path": "/proc/sys/kernel/core_pattern"},
                              store=f"sqlite:///{attacker.base / 't.db'}")
    assert seen["read"] == "ok"
    assert seen["write"] in ("error:EROFS", "error:EACCES", "error:EPERM"), seen


# Item 5: an allow-list of the engine's environment, for the subprocess executor too.

DATABASE_SECRETS = {
    "PGPASSWORD": "pg-secret",
    "DATABASE_URL": "postgresql://tether:pg-secret@db/tether",
    "TETHER_STORE": "postgresql://tether:pg-secret@db/tether",
}


@pytest.mark.parametrize("executor", ["subprocess", "sandbox"])
async def test_a_tool_never_sees_the_engine_database_credentials(attacker: Attacker, executor: str) -> None:
    env = {**DATABASE_SECRETS, "LANG": "C.UTF-8", "DECLARED_SETTING": "given"}
    seen = await attacker.run("read_env", {"names": [*env, "PATH"]}, store=f"sqlite:///{attacker.base / 't.db'}",
                              executor=executor, env=env, declared_env=("DECLARED_SETTING",))
    assert {name: seen[name] for name in DATABASE_SECRETS} == dict.fromkeys(DATABASE_SECRETS), seen
    assert (seen["LANG"], seen["DECLARED_SETTING"]) == ("C.UTF-8", "given") and seen["PATH"]


# Item 8: the store is masked under its real path and every name a bind gives it.


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_a_store_opened_through_a_symlinked_folder_stays_hidden_under_its_real_path(
    attacker: Attacker, kind: str
) -> None:
    real = attacker.mkdir("real")
    (attacker.base / "link").symlink_to(real)
    attacker.write(real / "notes.txt", "readable notes")
    name = "t.db" if kind == "sqlite" else "journals"
    store = f"sqlite:///{attacker.base / 'link' / name}" if kind == "sqlite" else f"jsonl://{attacker.base / 'link' / name}"
    target = real / name if kind == "sqlite" else real / name / "attack.jsonl"
    seen = await attacker.run("unmount_and_read", {"path": str(target), "also": [str(real / "notes.txt")]},
                              store=store, read_paths=(str(real),))
    assert target.exists(), "the store is not where the test expects it"
    assert seen["also"][str(real / "notes.txt")] == "ok:readable notes"
    assert store_refused(seen), f"the tool read the store through its real path: {seen}"


async def test_a_store_stays_hidden_under_a_symlinked_read_path(attacker: Attacker) -> None:
    real = attacker.mkdir("real")
    (attacker.base / "link").symlink_to(real)
    through_link = attacker.base / "link" / "t.db"
    seen = await attacker.run("unmount_and_read", {"path": str(through_link)}, store=f"sqlite:///{real / 't.db'}",
                              read_paths=(str(attacker.base / "link"),))
    assert (real / "t.db").exists()
    assert store_refused(seen), f"the tool read the store through the symlinked read path: {seen}"


async def test_a_symlinked_store_file_stays_hidden_with_its_wal_at_the_target(attacker: Attacker) -> None:
    data = attacker.mkdir("data")
    project = attacker.mkdir("project")
    (project / "t.db").symlink_to(data / "real.db")  # SQLite puts real.db-wal next to the target
    wal = data / "real.db-wal"
    seen = await attacker.run("unmount_and_read", {"path": str(data / "real.db"), "also": [str(wal)]},
                              store=f"sqlite:///{project / 't.db'}", read_paths=(str(data),))
    assert (data / "real.db").read_bytes().startswith(STORE_HEADER.encode())  # the store went through the link
    assert store_refused(seen), f"the tool read the store at the symlink's target: {seen}"
    assert refused(seen["also"][str(wal)]), f"the tool read the store's WAL: {seen}"
    assert seen["masked"][str(wal)], f"the WAL was not masked (did it exist?): {seen}"


async def test_a_read_path_inside_the_store_shows_nothing_of_it(attacker: Attacker) -> None:
    store = attacker.mkdir("journals")
    blobs = attacker.mkdir("journals/blobs")
    marker = attacker.write(blobs / "checkpoint", "a journaled checkpoint")
    seen = await attacker.run("unmount_and_read", {"path": str(marker)}, store=f"jsonl://{store}",
                              read_paths=(str(blobs),))
    assert marker.read_text() == "a journaled checkpoint"
    assert store_refused(seen) and "checkpoint" not in seen["read"], f"the tool read inside the store: {seen}"
