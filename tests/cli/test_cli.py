"""The CLI as a user drives it: an app module with its own engine, outcomes on the shell, one-line errors."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from clikit import AppDir, assert_one_line_error


def _flows_fake() -> Any:
    return sys.modules["flows"].fake


def test_a_module_engine_runs_resumes_free_and_every_read_command_reads_it(appdir: AppDir) -> None:
    done: Any = appdir.json("run", "flows:panel", "--args", '{"question": "Monorepo?"}', "--run-id", "p1",
                            "--budget", "1.0")
    assert done["status"] == "ok" and done["exit_code"] == 0, done
    assert done["value"] == {"score": 7.5, "rationale": "fair [enough]"}
    assert done["budget_usd"] == 1.0 and done["cost"]["total_usd"] > 0
    calls = _flows_fake().calls
    resumed: Any = appdir.json("resume", "p1", "--workflow", "flows:panel")
    assert resumed["status"] == "ok" and resumed["value"] == done["value"]
    assert resumed["replay"]["misses"] == 0 and resumed["replay"]["hits"] >= 2
    assert _flows_fake().calls == calls  # free: not one provider call
    assert resumed["cost"]["total_usd"] == done["cost"]["total_usd"]
    listed: Any = appdir.json("runs", "--store", appdir.store)
    assert [r["run_id"] for r in listed] == ["p1"] and listed[0]["status"] == "ok"
    journal: Any = appdir.json("inspect", "p1", "--store", appdir.store)
    assert [e["kind"] for e in journal].count("agent") == 4  # two agents, each running + terminal
    cost: Any = appdir.json("cost", "p1", "--store", appdir.store)
    assert cost["total_usd"] == done["cost"]["total_usd"]
    tree: Any = appdir.json("tree", "p1", "--store", appdir.store)
    assert sorted(a["label"] for a in tree["agents"]) == ["answer", "score"]
    ledger: Any = appdir.json("ledger", "p1", "--store", appdir.store)
    assert [(r["tool"], r["outcome"]) for r in ledger] == [("shout", "ok")]
    human = appdir("run", "flows:panel", "--args", '{"question": "Monorepo?"}', "--run-id", "p1")
    assert human.exit_code == 0 and "run p1: ok" in human.stdout and "of 1.00 USD ceiling" in human.stdout
    for command in ("inspect", "cost", "tree", "ledger"):
        shown = appdir(command, "p1", "--store", appdir.store)
        assert shown.exit_code == 0 and shown.stderr == "", (command, shown.stderr)


def test_a_workflow_needing_a_model_on_the_default_engine_says_how_to_give_it_one(appdir: AppDir) -> None:
    result = appdir("run", "bare:ask", "--store", appdir.store)
    assert result.exit_code == 1
    assert "error    (config) no model for role 'loop'" in result.stdout
    assert "define `engine = tether.Engine(models=[...]" in result.stdout and "--app MODULE:ATTR" in result.stdout
    doc: Any = appdir.json("run", "bare:ask", "--store", appdir.store)
    assert doc["error"]["code"] == "config" and "no model for role 'loop'" in doc["error"]["message"]
    assert doc["error"]["data"] == {"role": "loop"} and "--app MODULE:ATTR" in doc["hint"]


def test_app_names_the_engine_for_a_module_without_one(appdir: AppDir) -> None:
    doc: Any = appdir.json("run", "bare:ask", "--app", "flows:engine", "--args", '{"q": "hello"}')
    assert doc["status"] == "ok" and doc["value"] == "answer to: hello"
    wrong = appdir("run", "bare:ask", "--app", "flows:fake")
    assert_one_line_error(wrong, 1, "flows.fake is a FakeModel, not a tether.Engine")
    elsewhere = appdir.store.replace("app.db", "elsewhere.db")  # --store points the module's engine there
    moved: Any = appdir.json("run", "flows:panel", "--store", elsewhere, "--args", '{"question": "q"}')
    assert moved["status"] == "ok"
    assert appdir.json("runs", "--store", elsewhere)[0]["run_id"] == moved["run_id"]


def test_a_journaled_run_resumed_from_the_cli_stays_ok(appdir: AppDir) -> None:
    assert appdir("run", "flows:panel", "--args", '{"question": "q"}', "--run-id", "r").exit_code == 0
    again = appdir("resume", "r", "--app", "flows:engine")  # the workflow comes from the engine's registry
    assert again.exit_code == 0 and "run r: ok" in again.stdout and "0 misses" in again.stdout
    dry: Any = appdir.json("resume", "r", "--app", "flows:engine", "--dry-run")
    assert dry["status"] == "ok" and dry["replay"]["misses"] == 0


def test_a_failed_run_prints_its_error_and_json_carries_it(appdir: AppDir) -> None:
    result = appdir("run", "flows:boom", "--run-id", "b")
    assert result.exit_code == 1 and "run b: error" in result.stdout
    assert "error    (error) the [input] was wrong" in result.stdout  # the message, markup intact
    doc: Any = appdir.json("resume", "b", "--workflow", "flows:boom")
    assert doc["exit_code"] == 1
    assert doc["error"] == {"code": "error", "type": "ValueError", "message": "the [input] was wrong", "data": {}}
    assert doc["pending"] == [] and doc["warnings"] == []


def test_a_suspended_run_prints_the_exact_resolve_command_and_exits_4(appdir: AppDir) -> None:
    result = appdir("run", "flows:approve", "--run-id", "s1")
    assert result.exit_code == 4 and "run s1: suspended" in result.stdout
    (pending,) = [line for line in result.stdout.splitlines() if line.strip().startswith("pending")]
    command = pending.split("pending", 1)[1].strip()
    assert command == f"tether resolve s1 approve VALUE --store {appdir.store}"
    resolved = appdir.run_line(command.replace("VALUE", shlex.quote('{"ok": true}')))
    assert resolved.exit_code == 0 and "resolved" in resolved.stdout
    (then,) = [line for line in result.stdout.splitlines() if line.strip().startswith("then")]
    finished = appdir.run_line(then.split("then", 1)[1].strip())
    assert finished.exit_code == 0 and "run s1: ok" in finished.stdout and '{"ok": true}' in finished.stdout
    doc: Any = appdir.json("run", "flows:approve", "--run-id", "s2")
    assert doc["status"] == "suspended" and doc["pending"] == ["approve"] and doc["exit_code"] == 4
    assert doc["resolve"] == [f"tether resolve s2 approve VALUE --store {appdir.store}"]


def test_an_exhausted_run_exits_3_with_its_cost_against_the_ceiling(appdir: AppDir) -> None:
    result = appdir("run", "flows:spend", "--budget", "1.0", "--run-id", "x")
    assert result.exit_code == 3 and "run x: exhausted" in result.stdout
    assert "0.00 USD of 1.00 USD ceiling" in result.stdout and "(budget-exhausted)" in result.stdout


def test_user_data_prints_literally_not_as_markup(appdir: AppDir) -> None:
    result = appdir("run", "flows:items", "--run-id", "i")
    assert '{"items": [true, null], "tag": "[bold]x[/bold]"}' in result.stdout
    listed = appdir("runs", "--store", appdir.store)
    assert "i" in listed.stdout and "items" in listed.stdout


def test_a_missing_extra_names_the_exact_pip_command(appdir: AppDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # as if the openai SDK were not installed
    for name in ("tether.models.openai_responses", "needs_openai"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    (appdir.path / "needs_openai.py").write_text(
        "import tether\n\nengine = tether.Engine(models=[tether.models.openai(api_key='k')])\n"
        "async def go(ctx):\n    return 1\n"
    )
    result = appdir("run", "needs_openai:go")
    assert_one_line_error(result, 1, "pip install 'tether[openai]'")


@pytest.mark.parametrize(
    ("argv", "code", "fragment"),
    [
        (["run", "flows:panel", "--args", "{bad"], 2, "--args is not valid JSON"),
        (["run", "flows:panel", "--args", "[1,2]"], 2, "must be a JSON object of workflow arguments, got a JSON array"),
        (["run", "nomodule:flow"], 1, "no module named 'nomodule'"),
        (["run", "flows:nothing"], 1, "module 'flows' has no attribute 'nothing'"),
        (["run", "flows:Verdict"], 1, "is a ModelMetaclass, not a workflow"),
        (["run", "flows"], 2, "must be MODULE:ATTR"),
        (["run", "flows:panel", "--bogus"], 2, "No such option"),
        (["resume", "nope", "--workflow", "flows:panel"], 1, "no run 'nope'"),
        (["resume", "nope"], 2, "needs --workflow MODULE:WORKFLOW"),
        (["runs", "--store", "redis://nowhere"], 2, "unknown store URL"),
    ],
)
def test_bad_input_is_one_line_on_stderr(appdir: AppDir, argv: list[str], code: int, fragment: str) -> None:
    assert_one_line_error(appdir(*argv), code, fragment)


def test_a_module_that_fails_to_import_is_one_line(appdir: AppDir) -> None:
    (appdir.path / "broken.py").write_text("import tether\n\nraise RuntimeError('no [config] here')\n")
    sys.modules.pop("broken", None)
    assert_one_line_error(appdir("run", "broken:flow"), 1, "importing 'broken' raised RuntimeError: no [config] here")
    sys.modules.pop("broken", None)


@pytest.mark.parametrize("command", ["inspect", "cost", "tree", "ledger", "cancel"])
def test_every_read_command_refuses_an_unknown_run(appdir: AppDir, command: str) -> None:
    assert appdir("run", "flows:items", "--run-id", "known").exit_code == 0
    assert_one_line_error(appdir(command, "nope", "--store", appdir.store), 1, "no run 'nope'")
    assert_one_line_error(appdir(command, "nope", "--store", appdir.store, "--json"), 1, "(run-not-found)")


def test_resolve_and_abandon_refuse_an_unknown_run(appdir: AppDir) -> None:
    assert appdir("run", "flows:items", "--run-id", "known").exit_code == 0
    assert_one_line_error(appdir("resolve", "nope", "k", "1", "--store", appdir.store), 1, "no run 'nope'")
    assert_one_line_error(appdir("abandon", "nope", "k", "--store", appdir.store), 1, "no run 'nope'")


@pytest.mark.parametrize("command", ["runs", "inspect", "cost", "tree", "ledger", "resolve", "abandon", "cancel"])
def test_read_commands_never_create_a_store(appdir: AppDir, command: str) -> None:
    missing = appdir.path / "typo" / "tether.db"
    argv = {"runs": [], "resolve": ["r", "k", "1"], "abandon": ["r", "k"]}.get(command, ["r"])
    result = appdir(command, *argv, "--store", f"sqlite:///{missing}")
    assert_one_line_error(result, 1, f"no store at sqlite:///{missing}", "nothing was created")
    assert not missing.exists() and not missing.parent.exists()
    jsonl = appdir(command, *argv, "--store", f"jsonl://{appdir.path / 'nodir'}")
    assert_one_line_error(jsonl, 1, "does not exist")
    assert not (appdir.path / "nodir").exists()
    memory = appdir(command, *argv, "--store", "memory://")
    assert_one_line_error(memory, 1, "in-memory")


def test_the_default_store_is_the_documented_one(appdir: AppDir) -> None:
    assert appdir("run", "bare:ask", "--run-id", "d").exit_code == 1  # the default engine, the default store
    assert (appdir.path / ".tether" / "tether.db").is_file()
    listed: Any = appdir.json("runs")
    assert [r["run_id"] for r in listed] == ["d"]


def test_run_with_an_existing_run_id_and_other_args_refuses_unless_forced(appdir: AppDir) -> None:
    first = appdir("run", "flows:panel", "--args", '{"question": "a"}', "--run-id", "same")
    assert first.exit_code == 0
    other = appdir("run", "flows:panel", "--args", '{"question": "b"}', "--run-id", "same")
    assert_one_line_error(other, 1, "--args differ from the ones run 'same' started with", "--force")
    wrong_flow = appdir("run", "flows:items", "--run-id", "same")
    assert_one_line_error(wrong_flow, 1, "is a run of workflow 'panel', not 'items'")
    resume_other = appdir("resume", "same", "--workflow", "flows:panel", "--args", '{"question": "b"}')
    assert_one_line_error(resume_other, 1, "--args differ")
    same = appdir("run", "flows:panel", "--args", '{"question": "a"}', "--run-id", "same")
    assert same.exit_code == 0 and "0 misses" in same.stdout  # the same args continue the run, for free
    forced = appdir("run", "flows:panel", "--args", '{"question": "b"}', "--run-id", "same", "--force")
    assert forced.exit_code == 0 and "run same: ok" in forced.stdout


def test_cancel_settles_a_suspended_run_cancelled(appdir: AppDir) -> None:
    assert appdir("run", "flows:approve", "--run-id", "c").exit_code == 4
    doc: Any = appdir.json("cancel", "c", "--store", appdir.store, "--reason", "not needed")
    assert doc == {"run_id": "c", "result": "cancelled", "status": "cancelled"}
    listed: Any = appdir.json("runs", "--store", appdir.store)
    assert listed[0]["status"] == "cancelled"
    settle = [e for e in appdir.json("inspect", "c", "--store", appdir.store)  # type: ignore[union-attr]
              if e["label"] == "settle"][-1]
    assert settle["value"]["status"] == "cancelled" and settle["value"]["error"]["message"] == "not needed"
    again = appdir("cancel", "c", "--store", appdir.store)
    assert again.exit_code == 0 and "cancelled" in again.stdout
    assert appdir("run", "flows:items", "--run-id", "done").exit_code == 0
    assert_one_line_error(appdir("cancel", "done", "--store", appdir.store), 1, "already finished ok")


def test_resolve_and_abandon_print_json(appdir: AppDir) -> None:
    assert appdir("run", "flows:approve", "--run-id", "j").exit_code == 4
    assert appdir.json("resolve", "j", "approve", "yes", "--store", appdir.store) == {
        "run_id": "j", "key": "approve", "resolved": True}
    assert appdir("run", "flows:approve", "--run-id", "k").exit_code == 4
    assert appdir.json("abandon", "k", "approve", "--store", appdir.store) == {
        "run_id": "k", "target": "approve", "abandoned": True}


def test_version_help_and_debug(appdir: AppDir) -> None:
    version = appdir("--version")
    assert version.exit_code == 0 and version.stdout.startswith("tether ")
    shown = appdir("--help")
    assert "Exit codes: 0 ok, 1 error, 2 usage error, 3 exhausted" in " ".join(shown.stdout.split())
    debug = appdir("--debug", "run", "nomodule:flow")
    assert debug.exit_code == 1 and debug.exception is not None  # the real exception, for its traceback
    assert type(debug.exception).__name__ == "ConfigError"


def test_the_demo_prints_json(tmp_path: Path, appdir: AppDir) -> None:
    doc: Any = appdir.json("demo", "--store", f"sqlite:///{tmp_path}/demo.db")
    assert doc["status"] == "ok" and doc["child_exit"] == -9 and doc["replay"]["hits"] >= 3


NO_STORE_APP = '''
import tether
from flows import fake, panel

engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, workflows=[panel])  # names no store
'''


def test_tether_store_is_the_store_of_an_engine_that_names_none_and_never_overrides_one_that_does(
    appdir: AppDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    (appdir.path / "nostore.py").write_text(NO_STORE_APP)
    env_store = f"sqlite:///{appdir.path}/env.db"
    monkeypatch.setenv("TETHER_STORE", env_store)
    args = ("--args", '{"question": "q"}')

    by_module: Any = appdir.json("run", "nostore:panel", "--run-id", "m1", *args)  # MODULE's engine
    by_app: Any = appdir.json("run", "flows:panel", "--app", "nostore:engine", "--run-id", "a1", *args)  # --app
    named: Any = appdir.json("run", "flows:panel", "--run-id", "n1", *args)  # flows' engine names FLOWS_STORE
    assert [by_module["status"], by_app["status"], named["status"]] == ["ok", "ok", "ok"]
    assert sorted(r["run_id"] for r in appdir.json("runs")) == ["a1", "m1"]  # type: ignore[union-attr]
    assert [r["run_id"] for r in appdir.json("runs", "--store", appdir.store)] == ["n1"]  # type: ignore[union-attr]
    assert not (appdir.path / ".tether").exists()  # the default store was never the one in force

    # A resume resolves the same way, so it finds the run where the run went.
    again: Any = appdir.json("resume", "a1", "--app", "nostore:engine")
    assert again["status"] == "ok" and again["replay"]["hits"] >= 2

    # --store wins over both.
    flag = f"sqlite:///{appdir.path}/flag.db"
    moved: Any = appdir.json("run", "nostore:panel", "--run-id", "f1", "--store", flag, *args)
    assert moved["status"] == "ok" and [r["run_id"] for r in appdir.json("runs", "--store", flag)] == ["f1"]  # type: ignore[union-attr]
