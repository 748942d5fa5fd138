"""The sandbox executor: the subprocess executor inside bubblewrap, on an allow-list of paths.

The sandbox has no network, its own pid namespace, a private `/tmp`, no capabilities (not even when
the engine runs as root; see `_privileges`), and a filesystem built from nothing: read-only binds of
the system runtime (`/usr`, `/bin`, `/lib*`, the few `/etc` files the dynamic linker and Python
read), the interpreter's prefixes and every import-path entry (`sys.path`, so `PYTHONPATH`
included), the paths the tool declares with `read_paths=`, and the dispatch's workdir (plus the
request's `cwd`) writable. The home directory is never bound (it is covered by an empty tmpfs when
an import-path entry contains it) and the engine's store (`ExecRequest.hide_paths`) is masked
wherever a bind shows it, under its real path and under every name a bind gives it. The environment
is an allow-list: `PATH`, the locale, `HOME` (the workdir), the import path, and what the tool or
executor names. `--die-with-parent` plus the pid namespace end every process of the call when the
engine dies.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Sequence

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest
from tether.tools.executors._privileges import NAMESPACES, privilege_flags, proc_guards
from tether.tools.executors._process import ChildExit, is_harmless, python_path, unwrap_shell_status
from tether.tools.executors.subprocess import SubprocessExecutor

INSTALL_HINT = (
    "sandbox executor needs bubblewrap: apt-get install bubblewrap (Debian/Ubuntu), "
    "dnf install bubblewrap (Fedora), or pick executor='subprocess'"
)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
)
"""The `/etc` the dynamic linker and Python need; nothing with credentials or host config."""
ALLOWED_ENV = frozenset({"PATH", "LANG", "LANGUAGE", "TZ"})
"""The engine variables a sandboxed tool inherits (and `LC_*`); its HOME is the workdir."""


class SandboxExecutor(SubprocessExecutor):
    """Runs each call in a fresh interpreter under `bwrap`; raises `ConfigError` without it.

    `env_passthrough` names engine variables the sandbox may see; `scrub` is kept for signature
    compatibility with the subprocess executor: the sandbox's environment is always an allow-list.
    """

    name = "sandbox"
    watch_engine = False  # bwrap's --die-with-parent and the pid namespace do it

    def __init__(
        self,
        env_passthrough: Sequence[str] = (),
        scrub: bool = True,
        *,
        keep_workdir: bool = False,
        bwrap: str = "bwrap",
    ) -> None:
        super().__init__(env_passthrough, scrub, keep_workdir=keep_workdir)
        found = shutil.which(bwrap)
        if found is None:
            raise ConfigError(INSTALL_HINT, command=bwrap)
        self.bwrap = found
        self._privileges: tuple[str, ...] | None = None

    def privileges(self) -> tuple[str, ...]:
        """The privilege drop this bwrap accepts here, probed once per executor (a few ms of bwrap runs)."""
        if self._privileges is None:
            self._privileges = privilege_flags(self.bwrap, os.geteuid())
        return self._privileges

    def environment(self, request: ExecRequest, workdir: str) -> dict[str, str]:
        """The allow-list: PATH, the locale, HOME = the workdir, the import path, the declared names."""
        keep = set(self.env_passthrough)
        env = {k: v for k, v in os.environ.items() if k in keep or is_harmless(k, ALLOWED_ENV)}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(request.env)
        env["HOME"] = workdir
        env["PYTHONPATH"] = python_path(request.env.get("PYTHONPATH"))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def command(self, request: ExecRequest, workdir: str) -> list[str]:
        """`bwrap <mounts> -- python -c <runner>`; later mounts win, so masks come after binds."""
        argv = [
            self.bwrap,
            *NAMESPACES,  # no network, ipc, uts or cgroup sharing; its own pid namespace
            *self.privileges(),  # no capabilities, even for root
            "--die-with-parent",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            *proc_guards(),
            "--tmpfs",
            "/tmp",
        ]
        argv += system_mounts()
        home = _home()
        roots = _outermost(runtime_paths())
        argv += _ro_binds(r for r in roots if not _under(r, home))
        if any(_under(home, r) for r in roots):
            argv += ["--tmpfs", home]  # a root that contains the home directory must not expose it
        argv += _ro_binds(r for r in roots if _under(r, home))
        declared = [os.path.abspath(p) for p in request.read_paths]
        argv += _ro_binds(declared)
        writable = [workdir, *([request.cwd] if request.cwd else [])]
        for path in writable:
            argv += ["--bind", path, path]
        shown = [*system_dirs(), *roots, *declared, *writable]
        argv += masks(request.hide_paths, shown)
        argv += ["--remount-ro", "/", "--chdir", request.cwd or workdir, "--"]
        return argv + super().command(request, workdir)

    def describe_child(self, child: ChildExit) -> ChildExit:
        """bwrap exits 128 + N when the sandboxed process died of signal N."""
        return unwrap_shell_status(child)


def system_dirs() -> list[str]:
    """The system directories bound as they are (merged-/usr symlinks are recreated, not bound)."""
    return [p for p in SYSTEM_DIRS if os.path.isdir(p) and not os.path.islink(p)]


def system_mounts() -> list[str]:
    """Read-only binds of the system runtime, with merged-/usr symlinks kept as symlinks."""
    argv: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in SYSTEM_FILES:
        argv += ["--ro-bind-try", path, path]
    return argv


def runtime_paths() -> list[str]:
    """The interpreter's prefixes and import path (what a fresh `python` needs to start and import)."""
    candidates = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        *(os.path.abspath(p) for p in sys.path),
        *os.environ.get("PYTHONPATH", "").split(os.pathsep),
    ]
    out: list[str] = []
    for path in candidates:
        if not path:
            continue
        for p in (os.path.abspath(path), os.path.realpath(path)):
            if os.path.exists(p) and p != "/" and not _under(p, "/usr"):
                out.append(p)
    return list(dict.fromkeys(out))


def _outermost(paths: Iterable[str]) -> list[str]:
    """Drop paths already covered by another one in the list."""
    ordered = sorted(set(paths), key=len)
    kept: list[str] = []
    for p in ordered:
        if not any(_under(p, k) for k in kept):
            kept.append(p)
    return sorted(kept)


def _ro_binds(paths: Iterable[str]) -> list[str]:
    argv: list[str] = []
    for p in paths:
        argv += ["--ro-bind-try", p, p]
    return argv


def masks(hide_paths: Iterable[str], binds: Iterable[str]) -> list[str]:
    """Cover each hidden path at every place a bind shows it (an empty dir, or /dev/null over a file).

    A bind at `dest` shows the real directory `dest` resolves to, so a hidden path is found by its
    real path (symlinks resolved), wherever that lies under a bind's real directory, and mapped to
    the name the bind gives it. Any other name, a symlink in a bound tree, resolves inside the
    sandbox to one of those places or to nothing. A bind inside a hidden directory is covered whole.
    """
    views = [(dest, os.path.realpath(dest)) for dest in dict.fromkeys(binds)]
    argv: list[str] = []
    covered: set[str] = set()
    for real in real_paths(hide_paths):
        if not os.path.exists(real):
            continue
        for dest, shows in views:
            if _under(real, shows):
                spot, hidden = dest + real[len(shows) :], real
            elif _under(shows, real):
                spot, hidden = dest, shows
            else:
                continue
            if spot not in covered:
                covered.add(spot)
                argv += ["--tmpfs", spot] if os.path.isdir(hidden) else ["--ro-bind", "/dev/null", spot]
    return argv


def real_paths(hide_paths: Iterable[str]) -> list[str]:
    """The real paths behind the hidden ones (symlinks resolved).

    A hidden path named after another one (`t.db-wal` after `t.db`) also follows that one's real
    target: SQLite names a database's companions after the resolved path, so the `-wal` of a
    symlinked `t.db` lies next to the file the link points to.
    """
    given = [os.path.abspath(p) for p in hide_paths]
    found = [os.path.realpath(p) for p in given]
    for path in given:
        for base in given:
            if path != base and path.startswith(base) and os.path.islink(base):
                found.append(os.path.realpath(base) + path[len(base) :])
    return list(dict.fromkeys(found))


def _under(path: str, root: str) -> bool:
    """Whether `path` is `root` or inside it (both absolute)."""
    if not root:
        return False
    return path == root or path.startswith(root.rstrip("/") + "/")


def _home() -> str:
    """The engine's home directory ("" when it is `/`, which cannot be hidden from anything)."""
    home = os.path.realpath(os.environ.get("HOME") or os.path.expanduser("~"))
    return "" if home == "/" else home
