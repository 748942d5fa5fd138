"""User text prints as text (issue 43): a run id with an emoji shortcode is not rendered as an emoji, and a
port out of range is a usage error (exit 2), not an internal one."""

from __future__ import annotations

import pytest
from clikit import AppDir


def test_an_emoji_shortcode_in_a_run_id_prints_as_written(appdir: AppDir) -> None:
    result = appdir("run", "flows:panel", "--args", '{"question": "Monorepo?"}', "--run-id", "a:skull:c")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    listed = appdir("runs", "--store", appdir.store)
    inspected = appdir("inspect", "a:skull:c", "--store", appdir.store)
    assert listed.exit_code == 0 and inspected.exit_code == 0, (listed.stderr, inspected.stderr)
    for out in (result.stdout, listed.stdout, inspected.stdout):
        assert "💀" not in out
    assert "a:skull:c" in listed.stdout and "a:skull:c" in inspected.stdout


@pytest.mark.parametrize("port", ["-1", "0", "70000"])
def test_serve_refuses_a_port_out_of_range_with_exit_2(appdir: AppDir, port: str) -> None:
    result = appdir("serve", "--store", appdir.store, "--port", port)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert "--port" in result.stderr and "Traceback" not in result.stderr
