"""Run one toolbox tool through a real engine, as this process's user or as a plain user.

`run_tool(spec)` drives an engine whose fake model calls the tool once and answers with its result.
`python escape_kit.py SPEC_JSON` does the same and prints the result as JSON: the escape tests start
it under `setpriv --reuid=65534` to attack the sandbox as a plain (non-root) user.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import toolbox  # noqa: E402

import tether  # noqa: E402
from tether.contracts.messages import ChatRequest  # noqa: E402
from tether.testing import Reply, ToolCall  # noqa: E402

PLAIN_UID = 65534
"""`nobody`: the plain user the escape tests attack as."""


def calling(name: str, args: dict[str, Any]) -> Any:
    def reply(request: ChatRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "tool":
            return Reply(text=last.parts[0].content)  # type: ignore[union-attr]
        return Reply(tool_calls=[ToolCall(name, args)])

    return reply


async def run_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """Dispatch `spec["tool"]` with `spec["args"]` through an engine on `spec["store"]`."""
    fn = getattr(toolbox, spec["tool"])
    tool = tether.tool(executor=spec.get("executor", "sandbox"), read_paths=spec.get("read_paths", []),
                       env=spec.get("env", ()), timeout_s=60)(fn)
    model = tether.models.fake("fake", script=calling(spec["tool"], spec["args"]))
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=spec["store"])

    @tether.workflow
    async def attack(ctx: tether.Ctx) -> Any:
        return await ctx.agent("attack", tools=[tool])

    try:
        out = await engine.run(attack, run_id="attack")
        assert out.status == "ok", out.error
        answer = json.loads(out.value)
        assert isinstance(answer, dict), f"the tool failed: {out.value}"
        return answer
    finally:
        await engine.close()


def plain_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """The plain user's environment: this interpreter's import path minus its stdlib, and `extra`."""
    stdlib = os.path.realpath(sys.base_prefix)
    paths = [p for p in map(os.path.abspath, sys.path) if p and not os.path.realpath(p).startswith(stdlib + "/")]
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(HERE), *paths])), **extra}


def as_plain_user(argv: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={PLAIN_UID}", f"--regid={PLAIN_UID}", "--clear-groups", *argv]


@functools.cache
def plain_python() -> str | None:
    """An interpreter of this Python version that the plain user can run, and re-run from inside."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [sys.executable, os.path.realpath(sys.executable), getattr(sys, "_base_executable", ""),
                  shutil.which(f"python{version}", path="/usr/local/bin:/usr/bin:/bin") or ""]
    # Its own sys.executable must start too (the subprocess executor re-runs it), with tether.
    check = (f"import subprocess, sys; assert sys.version.startswith('{version}.');"
             "subprocess.run([sys.executable, '-c', 'import tether, toolbox'], check=True)")
    for python in dict.fromkeys(c for c in candidates if c):
        done = subprocess.run(as_plain_user([python, "-c", check]), env=plain_env(Path("/"), {}),
                              capture_output=True, cwd="/", check=False)
        if done.returncode == 0:
            return python
    return None


def run_as_plain_user(spec: dict[str, Any], home: Path, env: dict[str, str]) -> dict[str, Any]:
    """`run_tool(spec)` in a child process that runs as the plain user."""
    python = plain_python()
    assert python is not None
    argv = as_plain_user([python, str(HERE / "escape_kit.py"), json.dumps(spec)])
    done = subprocess.run(argv, env=plain_env(home, env), cwd=str(home), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"the plain user's engine failed: {done.stderr[-3000:]}"
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def main() -> int:
    answer = asyncio.run(run_tool(json.loads(sys.argv[1])))
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
