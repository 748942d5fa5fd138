"""`isolation="worktree"`: a disposable git worktree as a tool's `cwd`, returned as a patch.

    async with Worktree("/path/to/repo") as wt:
        result = await executor.run(request.model_copy(update={"cwd": wt.path}))
    wt.patch   # `git diff --binary` of everything the tool changed, new files included

The worktree is a detached checkout of `ref` in a fresh temporary directory; on exit the patch is
taken (`git add -A`, then `git diff --cached --binary HEAD`) and the worktree is removed with
`git worktree remove --force`, whether the body raised or not. The repository's own checkout is
never touched. Non-UTF-8 bytes in the patch survive as surrogate escapes
(`patch.encode("utf-8", "surrogateescape")` gives back the exact bytes for `git apply`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from tether.contracts.errors import ConfigError


async def git(*args: str, cwd: str) -> str:
    """Run one git command; a failure is a `ConfigError` carrying git's own message."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        detail = err.decode("utf-8", "replace").strip()
        raise ConfigError(
            f"git {' '.join(args[:2])} failed in {cwd} (exit {proc.returncode}): {detail}",
            cwd=cwd,
            exit_code=proc.returncode,
        )
    return out.decode("utf-8", "surrogateescape")


class Worktree:
    """One disposable detached worktree of `repo` at `ref`; `path` is the tool's cwd."""

    def __init__(self, repo: str | os.PathLike[str], *, ref: str = "HEAD") -> None:
        self.repo = str(Path(repo).resolve())
        self.ref = ref
        self.path = ""
        self.patch: str | None = None
        self._parent = ""

    async def create(self) -> str:
        """Check out `ref` into a fresh directory and return its path."""
        if not shutil.which("git"):
            raise ConfigError("worktree isolation needs git on PATH")
        self._parent = tempfile.mkdtemp(prefix="tether-worktree-")
        path = os.path.join(self._parent, "tree")
        try:
            await git("worktree", "add", "--detach", path, self.ref, cwd=self.repo)
        except BaseException:
            shutil.rmtree(self._parent, ignore_errors=True)
            raise
        self.path = path
        return path

    async def diff(self) -> str:
        """Everything changed in the worktree against `HEAD` (staged, unstaged and new files)."""
        await git("add", "-A", cwd=self.path)
        return await git("diff", "--cached", "--binary", "HEAD", cwd=self.path)

    async def remove(self) -> None:
        """Remove the worktree and its directory (idempotent)."""
        if self.path:
            try:
                await git("worktree", "remove", "--force", self.path, cwd=self.repo)
            finally:
                shutil.rmtree(self._parent, ignore_errors=True)
                self.path = ""

    async def __aenter__(self) -> Worktree:
        await self.create()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.patch = await self.diff()
        finally:
            await self.remove()
