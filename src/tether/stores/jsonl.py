"""`JsonlStore`: journals as plain JSON-lines files, one per run, readable with `cat` and `jq`.

A line is committed when its newline is written. A crash can leave a torn last line; loads ignore
it and the next append truncates it away. Any other damaged line is a `JournalCorruptError`.
Every write to a run happens under an `flock` on `<run_id>.lock`, so processes on one host (or a
filesystem with working `flock`) can share a directory; leases follow the same rules as SQLite.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner, RunMeta
from tether.contracts.errors import JournalCorruptError, StoreUnavailableError
from tether.contracts.retention import CompactResult, RunRewrite, RunSize, StoreStats
from tether.journal.blobs import blob_owner, run_blob_keys
from tether.stores.codec import (
    EntryDecoder,
    check_rows,
    decode_batch,
    decode_meta,
    effect_json,
    number_entries,
)
from tether.stores.jsonl_sessions import JsonlSessions
from tether.stores.leases import (
    cancel_request_key,
    check_acquire,
    check_fence,
    new_lease,
    releases,
    renewed,
)
from tether.stores.run_ids import check_run_id

T = TypeVar("T")
_CHUNK = 1 << 16


class _Unparsable(Exception):
    """A line that is not JSON at all: torn if it is the last one, corruption otherwise."""


def _scan(path: Path, data: bytes, parse: Callable[[bytes, int, int], T]) -> tuple[list[T], int]:
    """Parse the committed lines of `data`; return the items and the byte length they span."""
    items: list[T] = []
    pos = valid_end = 0
    committed = data[: data.rfind(b"\n") + 1]
    for lineno, line in enumerate(committed.split(b"\n")[:-1], start=1):
        pos += len(line) + 1
        if not line.strip():
            continue
        try:
            items.append(parse(line, lineno, len(items) + 1))
        except _Unparsable:
            if not committed[pos:].strip():
                break  # the last line, torn by a crash: not committed
            raise JournalCorruptError(
                f"journal corrupt: line {lineno} of {path} is not JSON, and it is not the last "
                f"line, so it was not torn by a crash. Fix or remove that line by hand (the file "
                f"is plain JSON lines; later entries need consecutive seq) or restore the file "
                f"from a backup.",
                path=str(path),
                line=lineno,
            ) from None
        valid_end = pos
    return items, valid_end


def _journal_parser(path: Path) -> Callable[[bytes, int, int], JournalEntry]:
    decoder = EntryDecoder(path.name.removesuffix(".jsonl"))

    def parse(line: bytes, lineno: int, seq: int) -> JournalEntry:
        try:
            entry = decoder.parse(line, f"line {lineno} (seq {seq}) of {path}")
        except JournalCorruptError as exc:
            if exc.data.get("unparsable"):
                raise _Unparsable from None
            raise
        if entry.seq != seq:
            raise JournalCorruptError(
                f"journal corrupt: line {lineno} of {path} holds seq {entry.seq} where seq {seq} "
                f"belongs. The file was edited or mixed with another run's: restore it from a "
                f"backup, or renumber the lines by hand.",
                path=str(path),
                line=lineno,
            )
        return entry

    return parse


def _effect_parser(path: Path) -> Callable[[bytes, int, int], dict[str, Any]]:
    def parse(line: bytes, lineno: int, _index: int) -> dict[str, Any]:
        try:
            row = json.loads(line)
        except ValueError:
            raise _Unparsable from None
        if not isinstance(row, dict):
            raise JournalCorruptError(
                f"effect ledger corrupt: line {lineno} of {path} is not a JSON object. Fix or "
                f"remove that line by hand, or restore the file from a backup.",
                path=str(path),
                line=lineno,
            )
        return row

    return parse


def _last_line(fd: int, size: int) -> bytes | None:
    """The file's last line if the file ends with a newline (the common, clean case), else None."""
    if size == 0 or os.pread(fd, 1, size - 1) != b"\n":
        return None
    pos, buf = size - 1, b""
    while pos > 0:
        step = min(_CHUNK, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf
        cut = buf.rfind(b"\n")
        if cut >= 0:
            return buf[cut + 1 :]
    return buf


def _is_object(line: bytes | None) -> bool:
    try:
        return line is not None and isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _atomic_write(path: Path, data: bytes, fsync: bool) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


class JsonlStore(JsonlSessions):
    """A journal store in a directory of JSON-lines files, with leases and blobs beside them."""

    def __init__(
        self, dir: str | Path, *, fsync: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self.dir = Path(dir).absolute()  # a later chdir must not move the journals
        try:
            (self.dir / "blobs").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailableError(
                f"cannot use {self.dir} as a JSONL store: {exc.strerror or exc}. Give a directory this process "
                f"can create and write (jsonl:///path/to/dir).",
                path=str(self.dir),
            ) from None
        self._fsync = fsync
        self._clock = clock
        # run_id -> (inode, size, last seq) as this instance last wrote it; saves a tail read.
        self._tails: dict[str, tuple[int, int, int]] = {}

    def _file(self, run_id: str, suffix: str) -> Path:
        check_run_id(run_id)  # every store's rule, which is also what makes a run id a safe file name
        return self.dir / f"{run_id}{suffix}"

    @contextmanager
    def _locked(self, run_id: str) -> Iterator[None]:
        fd = os.open(self._file(run_id, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _held(self, run_id: str) -> Lease | None:
        try:
            return Lease.model_validate_json(self._file(run_id, ".lease").read_bytes())
        except FileNotFoundError:
            return None

    def _tail(self, path: Path, fd: int, size: int) -> tuple[int, int]:
        """(valid end offset, last seq) of a journal file, reading only its end when it is clean."""
        if size == 0:
            return 0, 0
        line = _last_line(fd, size)
        if line is not None:
            try:
                seq = json.loads(line)["seq"]
                if isinstance(seq, int):
                    return size, seq
            except (ValueError, KeyError, TypeError):
                pass
        entries, end = _scan(path, os.pread(fd, size, 0), _journal_parser(path))
        return end, len(entries)

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        return (await self.append_many(run_id, [entry], lease))[0]

    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]:
        return self._append(run_id, lease, lambda last: number_entries(run_id, last, entries), bool(entries))

    async def append_rows(
        self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None
    ) -> list[int]:
        """Append rows already encoded by `codec.encode_entry` (the segment's group commits)."""
        return self.append_rows_now(run_id, rows, lease)

    def append_rows_now(self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None) -> list[int]:
        """`append_rows` in the calling thread: it never waits, so a segment may commit without a task."""

        def checked(last: int) -> list[tuple[int, str]]:
            check_rows(run_id, last, rows)
            return rows

        return self._append(run_id, lease, checked, bool(rows))

    def _append(
        self, run_id: str, lease: Lease | None, numbered: Callable[[int], list[tuple[int, str]]], any_rows: bool
    ) -> list[int]:
        path = self._file(run_id, ".jsonl")
        with self._locked(run_id):
            self._fenced(run_id, lease)
            if not any_rows:
                return []
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                st = os.fstat(fd)
                cached = self._tails.get(run_id)
                if cached is not None and cached[:2] == (st.st_ino, st.st_size):
                    end, last = st.st_size, cached[2]
                else:
                    end, last = self._tail(path, fd, st.st_size)
                rows = numbered(last)
                data = "".join(f"{text}\n" for _, text in rows).encode()
                if st.st_size != end:
                    os.ftruncate(fd, end)  # drop a torn tail so the file stays well-formed
                _pwrite_all(fd, data, end)
                if self._fsync:
                    os.fsync(fd)
                self._tails[run_id] = (st.st_ino, end + len(data), rows[-1][0])
            finally:
                os.close(fd)
        return [seq for seq, _ in rows]

    async def load(self, run_id: str) -> list[JournalEntry]:
        path = self._file(run_id, ".jsonl")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        lines.pop()  # what follows the last newline: nothing, or a tail torn by a crash (not committed)
        fast = decode_batch(lines) if lines and all(lines) else None
        del lines
        if fast is not None:
            return fast
        return _scan(path, data, _journal_parser(path))[0]  # line by line: names what is wrong, and where

    def _fenced(self, run_id: str, lease: Lease | None) -> None:
        if lease is not None:
            check_fence(run_id, lease, self._held(run_id), self._clock())

    async def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        with self._locked(meta.run_id):
            self._fenced(meta.run_id, lease)
            _atomic_write(
                self._file(meta.run_id, ".meta.json"), meta.model_dump_json().encode(), self._fsync
            )

    def _read_meta(self, path: Path) -> RunMeta:
        try:
            return decode_meta(path.read_bytes())
        except ValueError as exc:
            raise JournalCorruptError(
                f"run metadata corrupt: {path} is not valid ({exc.__class__.__name__}). Restore "
                f"it from a backup or delete it (the journal beside it is unaffected).",
                path=str(path),
            ) from None

    async def get_meta(self, run_id: str) -> RunMeta | None:
        path = self._file(run_id, ".meta.json")
        try:
            return self._read_meta(path)
        except FileNotFoundError:
            return None

    async def list_runs(self, *, limit: int = 100) -> list[RunMeta]:
        metas: list[RunMeta] = []
        for path in self.dir.glob("*.meta.json"):
            try:
                metas.append(self._read_meta(path))
            except FileNotFoundError:
                continue  # deleted while we listed
        metas.sort(key=lambda m: (-m.created_at, m.run_id))
        return metas[:limit]

    async def delete(self, run_id: str) -> None:
        # The lock file and the epoch stay: a later acquire must still get a higher epoch.
        with self._locked(run_id):
            for suffix in (".jsonl", ".meta.json", ".effects.jsonl", ".lease"):
                self._file(run_id, suffix).unlink(missing_ok=True)
            self._tails.pop(run_id, None)

    async def delete_runs(self, run_ids: Sequence[str], *, keep_blobs: Collection[str] = ()) -> dict[str, int]:
        """`RetentionStore.delete_runs` as files allow: run by run under its lock, the meta last (a delete cut
        short still lists the run, so it can be run again). The lock and epoch files stay."""
        ids, keep = list(dict.fromkeys(run_ids)), set(keep_blobs)
        counts = dict.fromkeys(("entries", "meta", "effects", "leases", "blobs"), 0)
        named: dict[str, set[Path]] = {r: set() for r in ids}
        for path in (self.dir / "blobs").iterdir():  # blobs named after their key, by the run the key names
            owner = blob_owner(unquote(path.name))
            if not path.name.startswith("h-") and owner in named and unquote(path.name) not in keep:
                named[owner].add(path)
        for run_id in ids:
            try:
                entries = await self.load(run_id)
            except JournalCorruptError:
                entries = []  # a damaged journal is deleted all the same (its blobs by their names)
            keys = await run_blob_keys(run_id, entries, self.get_blob)  # also finds blobs stored under a hash
            named[run_id] |= {self._blob(k) for k in [*keys, cancel_request_key(run_id)] if k not in keep}
            with self._locked(run_id):
                for suffix, table in ((".jsonl", "entries"), (".effects.jsonl", "effects"), (".lease", "leases")):
                    path = self._file(run_id, suffix)
                    try:
                        data = path.read_bytes()
                    except FileNotFoundError:
                        continue
                    counts[table] += 1 if table == "leases" else data.count(b"\n")
                    path.unlink(missing_ok=True)
                for path in named[run_id]:
                    if path.exists():
                        path.unlink(missing_ok=True)
                        counts["blobs"] += 1
                meta = self._file(run_id, ".meta.json")
                counts["meta"] += meta.exists()
                meta.unlink(missing_ok=True)
                self._tails.pop(run_id, None)
        return counts

    async def rewrite_run(self, rewrite: RunRewrite) -> None:
        """`RewritingStore.rewrite_run` under the run's lock: each file written whole to a new file that replaces
        it. The journal goes first: once its rename lands the run holds its retention decision (resume refused), so
        a crash before the blobs, effects and meta are replaced leaves texts a second archive or redact removes,
        never a removed text with no decision naming it."""
        run_id = rewrite.run_id
        path = self._file(run_id, ".jsonl")
        with self._locked(run_id):
            data = path.read_bytes()
            lines = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]
            check_rows(run_id, len(lines), rewrite.append)
            for seq, text in rewrite.entries.items():
                lines[seq - 1] = text.encode()
            lines += [text.encode() for _, text in rewrite.append]
            _atomic_write(path, b"".join(line + b"\n" for line in lines), self._fsync)
            self._tails.pop(run_id, None)
            for key, blob in rewrite.blobs.items():
                _atomic_write(self._blob(key), blob, self._fsync)
            if rewrite.effects is not None:
                _atomic_write(self._file(run_id, ".effects.jsonl"),
                              "".join(effect_json(run_id, row) + "\n" for row in rewrite.effects).encode(), self._fsync)
            if rewrite.meta_json is not None:
                _atomic_write(self._file(run_id, ".meta.json"), rewrite.meta_json.encode(), self._fsync)

    async def store_stats(self, *, largest: int = 5) -> StoreStats:
        sizes: dict[str, list[int]] = {}
        effects = disk = 0
        for path in self.dir.iterdir():
            if not path.is_file():
                continue
            size = path.stat().st_size
            disk += size
            for suffix in (".effects.jsonl", ".jsonl", ".meta.json"):
                if path.name.endswith(suffix) and not path.name.startswith("."):
                    row = sizes.setdefault(path.name.removesuffix(suffix), [0, 0])
                    row[1] += size
                    if suffix == ".jsonl":
                        row[0] += path.read_bytes().count(b"\n")
                    elif suffix == ".effects.jsonl":
                        effects += path.read_bytes().count(b"\n")
                    break
        blobs = [p.stat().st_size for p in (self.dir / "blobs").iterdir() if p.is_file()]
        runs = [RunSize(run_id=r, entries=n, bytes=b) for r, (n, b) in sizes.items()]
        return StoreStats(
            store="jsonl", runs=len(runs), entries=sum(r.entries for r in runs),
            bytes=sum(r.bytes for r in runs) + sum(blobs), blobs=len(blobs), blob_bytes=sum(blobs), effects=effects,
            largest=sorted(runs, key=lambda r: (-r.bytes, r.run_id))[:largest], on_disk_bytes=disk + sum(blobs),
            reclaimable_bytes=0,
        )

    async def compact(self) -> CompactResult:
        size = (await self.store_stats(largest=0)).on_disk_bytes
        return CompactResult(store="jsonl", action="nothing to do: each run is its own files, removed when it is "
                             "deleted, so a JSONL store holds no free space", before_bytes=size, after_bytes=size)

    def _blob(self, key: str) -> Path:
        name = quote(key, safe="")
        if len(name) > 200 or name.startswith("."):
            name = "h-" + uuid.uuid5(uuid.NAMESPACE_URL, key).hex
        return self.dir / "blobs" / name

    async def put_blob(self, key: str, data: bytes, lease: Lease | None = None) -> None:
        if lease is None:
            _atomic_write(self._blob(key), bytes(data), self._fsync)
            return
        with self._locked(lease.run_id):
            self._fenced(lease.run_id, lease)
            _atomic_write(self._blob(key), bytes(data), self._fsync)

    async def get_blob(self, key: str) -> bytes | None:
        try:
            return self._blob(key).read_bytes()
        except FileNotFoundError:
            return None

    async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None:
        line = (effect_json(run_id, row) + "\n").encode()
        path = self._file(run_id, ".effects.jsonl")
        with self._locked(run_id):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                end = os.fstat(fd).st_size
                last = _last_line(fd, end)
                if end and not _is_object(last):
                    end = _scan(path, os.pread(fd, end, 0), _effect_parser(path))[1]
                    os.ftruncate(fd, end)
                _pwrite_all(fd, line, end)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)

    async def load_effects(self, run_id: str) -> list[dict[str, Any]]:
        path = self._file(run_id, ".effects.jsonl")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        return _scan(path, data, _effect_parser(path))[0]

    async def acquire(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> Lease:
        epoch_file = self._file(run_id, ".epoch")
        with self._locked(run_id):
            now = self._clock()
            check_acquire(run_id, self._held(run_id), owner, ttl_s, now)
            prev = int(epoch_file.read_text()) if epoch_file.exists() else 0
            lease = new_lease(run_id, owner, prev, ttl_s, now)
            # Epoch first: a crash between the two writes wastes an epoch, never reuses one.
            _atomic_write(epoch_file, str(lease.epoch).encode(), self._fsync)
            _atomic_write(
                self._file(run_id, ".lease"), lease.model_dump_json().encode(), self._fsync
            )
        return lease

    async def renew(self, lease: Lease) -> Lease:
        with self._locked(lease.run_id):
            fresh = renewed(lease, self._held(lease.run_id), self._clock())
            _atomic_write(
                self._file(lease.run_id, ".lease"), fresh.model_dump_json().encode(), self._fsync
            )
        return fresh

    async def release(self, lease: Lease) -> None:
        with self._locked(lease.run_id):
            if releases(lease, self._held(lease.run_id)):
                self._file(lease.run_id, ".lease").unlink(missing_ok=True)

    async def close(self) -> None:
        self._tails.clear()
