"""`tether delete`, `tether sweep`, `tether store stats|compact` on a SQLite store, as a user types them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from retentionkit import gated, make_engine, tree
from typer.testing import CliRunner, Result

from tether.cli.main import app
from tether.cli.retention_commands import parse_before


def _tether(*argv: str) -> Result:
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})


def _setup(url: str) -> None:
    async def go() -> None:
        engine, _ = make_engine(url)
        try:
            await engine.run(tree, {"topic": "tides"}, run_id="tree")
            await engine.fork("tree", "tree-fork", tree)
            await engine.run(gated, {}, run_id="parked")
        finally:
            await engine.close()

    asyncio.run(go())


def test_delete_refuses_a_suspended_run_with_exit_2_then_deletes_with_force(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    _setup(url)
    refused = _tether("delete", "parked", "--store", url)
    assert refused.exit_code == 2
    assert "error (run-active)" in refused.output and "suspended" in refused.output and "--force" in refused.output
    assert _tether("inspect", "parked", "--store", url).exit_code == 0  # still there
    forced = _tether("delete", "parked", "--force", "--store", url, "--json")
    assert forced.exit_code == 0 and json.loads(forced.output)["deleted"] == ["parked"]
    assert _tether("inspect", "parked", "--store", url).exit_code != 0


def test_a_fork_verifies_and_costs_the_same_after_its_source_is_deleted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    _setup(url)
    cost_before = _tether("cost", "tree-fork", "--store", url, "--json")
    assert cost_before.exit_code == 0
    deleted = _tether("delete", "tree", "--store", url)
    assert deleted.exit_code == 0, deleted.output
    assert "deleted run tree" in deleted.output and "kept fork tree-fork whole" in deleted.output
    verified = _tether("verify", "tree-fork", "--store", url)
    assert verified.exit_code == 0, verified.output
    assert _tether("cost", "tree-fork", "--store", url, "--json").output == cost_before.output
    assert _tether("delete", "tree", "--store", url).exit_code != 0  # gone: run-not-found


def test_sweep_dry_run_lists_then_sweeps_and_names_what_it_skipped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    _setup(url)
    dry = _tether("sweep", "--before", "2100-01-01", "--dry-run", "--store", url)
    assert dry.exit_code == 0, dry.output
    assert "would delete 2 runs" in dry.output and "  tree\n" in dry.output and "  tree-fork\n" in dry.output
    assert "skipped parked: suspended: it may still resume" in dry.output and "nothing was deleted" in dry.output
    assert _tether("inspect", "tree", "--store", url).exit_code == 0
    done = _tether("sweep", "--before", "2100-01-01", "--status", "ok", "--store", url, "--json")
    report = json.loads(done.output)
    assert sorted(report["deleted"]) == ["tree", "tree-fork"] and report["skipped"] == []  # --status ok: not parked
    runs = json.loads(_tether("runs", "--store", url, "--json").output)
    assert [r["run_id"] for r in runs] == ["parked"]


def test_store_stats_and_compact(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    _setup(url)
    stats = json.loads(_tether("store", "stats", "--store", url, "--json").output)
    assert stats["runs"] == 3 and stats["store"] == "sqlite" and stats["blobs"] > 0
    assert [r["run_id"] for r in stats["largest"]][:1] in (["tree"], ["tree-fork"])
    shown = _tether("store", "stats", "--store", url)
    assert "sqlite store: 3 runs" in shown.output and "largest runs:" in shown.output
    _tether("delete", "tree", "--with-forks", "--store", url)
    compacted = _tether("store", "compact", "--store", url)
    assert compacted.exit_code == 0 and "sqlite store: VACUUM:" in compacted.output


def test_a_store_that_does_not_exist_is_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/none.db"
    assert _tether("store", "stats", "--store", url).exit_code != 0
    assert not (tmp_path / "none.db").exists()


def test_before_takes_dates_and_ages_and_refuses_anything_else() -> None:
    assert parse_before("2026-01-31") == 1769817600.0
    assert parse_before("2026-01-31T01:00+01:00") == 1769817600.0
    assert parse_before("30d", now=1e9) == 1e9 - 30 * 86400
    bad = _tether("sweep", "--before", "last tuesday", "--store", "sqlite:///x.db")
    assert bad.exit_code == 2 and "neither a date" in bad.output


def test_archive_keeps_cost_json_to_the_cent_and_verify_names_the_entries_without_payload(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    _setup(url)
    cost_before = _tether("cost", "tree", "--store", url, "--json")
    archived = _tether("archive", "tree", "--why", "closed ticket", "--store", url)
    assert archived.exit_code == 0, archived.output
    assert "archived run tree:" in archived.output and "journaled as decision seq" in archived.output
    assert _tether("cost", "tree", "--store", url, "--json").output == cost_before.output
    verified = _tether("verify", "tree", "--store", url)
    assert verified.exit_code == 0 and "carry no payload" in verified.output, verified.output
    as_json = json.loads(_tether("verify", "tree", "--store", url, "--json").output)
    assert as_json["ok"] and as_json["no_payload"]
    resumed = _tether("resume", "tree", "--workflow", "retentionkit:tree", "--store", url)
    assert resumed.exit_code != 0 and "error (run-retained)" in resumed.output and "archived" in resumed.output
    assert "closed ticket" in resumed.output


def test_redact_takes_match_or_seq_and_refuses_a_text_in_chained_members(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    _setup(url)
    assert _tether("redact", "tree", "--store", url).exit_code == 2  # neither --match nor --seq
    refused = _tether("redact", "tree", "--match", "root", "--store", url)  # the label "root" is chained
    assert refused.exit_code == 2 and "error (run-retained)" in refused.output and "tether delete" in refused.output
    done = _tether("redact", "tree", "--match", "tides", "--why", "request 7", "--store", url, "--json")
    report = json.loads(done.output)
    assert done.exit_code == 0 and report["entries"]["tree"] and report["decision"] == "redact"
    assert _tether("verify", "tree", "--store", url).exit_code == 0
