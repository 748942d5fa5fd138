"""The PostgreSQL schema of `PostgresStore`: tables, and the functions that make each write one round trip.

Every fenced write (append, meta, blob) and every lease change runs as one server-side function
that takes the run's advisory lock, reads the lease and judges its expiry by the database's clock
(`clock_timestamp()`), so hosts whose clocks disagree still agree on who holds a run. A rejected
write returns the lease it found, and the Python side raises the same `LeaseHeldError` every store
raises. `SCHEMA_VERSION` names this layout; opening a schema at an older version upgrades it in place.
"""

from __future__ import annotations

import hashlib

from tether.stores.postgres_budgets import BUDGET_FUNCTIONS, BUDGET_TABLES
from tether.stores.postgres_schedules import SCHEDULE_TABLES
from tether.stores.postgres_sessions import SESSION_TABLES

SCHEMA_VERSION = 6
"""5: sessions, turns and notes (`postgres_sessions.SESSION_TABLES`); 6: an append carries the run's meta."""

_TABLES = """
CREATE TABLE IF NOT EXISTS {s}.entries (
    run_id text NOT NULL, seq bigint NOT NULL, json text NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS {s}.meta (
    run_id text PRIMARY KEY, created_at double precision NOT NULL, json text NOT NULL);
ALTER TABLE {s}.meta ADD COLUMN IF NOT EXISTS status text;
CREATE INDEX IF NOT EXISTS meta_by_created ON {s}.meta (created_at DESC, run_id);
CREATE INDEX IF NOT EXISTS meta_by_status ON {s}.meta (status, created_at DESC, run_id);
CREATE TABLE IF NOT EXISTS {s}.blobs (key text PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.effects (
    id bigserial PRIMARY KEY, run_id text NOT NULL, json text NOT NULL);
CREATE INDEX IF NOT EXISTS effects_by_run ON {s}.effects (run_id, id);
CREATE TABLE IF NOT EXISTS {s}.leases (
    run_id text PRIMARY KEY, owner text NOT NULL, epoch bigint NOT NULL,
    expires_at double precision NOT NULL, ttl_s double precision NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.epochs (run_id text PRIMARY KEY, epoch bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.queue (
    run_id text PRIMARY KEY, queue text NOT NULL, priority integer NOT NULL, workflow text NOT NULL,
    deadline_s double precision, state text NOT NULL, enqueued_at double precision NOT NULL,
    claim_id bigint NOT NULL DEFAULT 0, claimed_by text, claimed_until double precision,
    attempts integer NOT NULL DEFAULT 0, finished_at double precision, error text);
CREATE INDEX IF NOT EXISTS queue_ready ON {s}.queue (queue, priority DESC, enqueued_at, run_id)
    WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS queue_claimed ON {s}.queue (queue, claimed_until) WHERE state = 'claimed';
CREATE TABLE IF NOT EXISTS {s}.version (v integer NOT NULL)
"""

# The lease row a fenced write checks: read after the run's advisory lock, so it is the latest.
_LEASE_COLUMNS = "o_owner text, o_epoch bigint, o_expires double precision, o_ttl double precision"
_READ_LEASE = """
    SELECT l.owner, l.epoch, l.expires_at, l.ttl_s INTO o_owner, o_epoch, o_expires, o_ttl
      FROM {s}.leases l WHERE l.run_id = p_run;"""
_FENCE = (
    """
    IF p_epoch IS NOT NULL THEN
      PERFORM pg_advisory_xact_lock(hashtext(p_run));"""
    + _READ_LEASE
    + """
      IF o_epoch IS DISTINCT FROM p_epoch OR o_owner IS DISTINCT FROM p_owner OR o_now > o_expires THEN
        o_outcome := 'fence'; RETURN NEXT; RETURN;
      END IF;
    END IF;"""
)
# The hot writes answer in one text column ('ok', 'head:<seq>', 'fence:<lease as JSON>'): less to decode.
_TEXT_DECLARE = """
DECLARE
  o_owner text; o_epoch bigint; o_expires double precision; o_ttl double precision; o_head bigint;
  o_now double precision := extract(epoch FROM clock_timestamp());"""
_TEXT_REJECT = "RETURN 'fence:' || json_build_array(o_owner, o_epoch, o_expires, o_ttl, o_now)::text;"
_TEXT_FENCE = (
    """
  IF p_epoch IS NOT NULL THEN"""
    + _READ_LEASE
    + f"""
    IF o_epoch IS DISTINCT FROM p_epoch OR o_owner IS DISTINCT FROM p_owner OR o_now > o_expires THEN
      {_TEXT_REJECT}
    END IF;
  END IF;"""
)
_NOW = "o_now := extract(epoch FROM clock_timestamp());"

_FUNCTIONS = [
    # append: fence, check the caller's view of the head, insert the numbered, checksummed rows, and the
    # run's meta when the writer handed one to ride along (`p_meta_*`, as put_meta writes it).
    "DROP FUNCTION IF EXISTS {s}.append(text, bigint, bigint, text, bigint[], text[], bigint, text)",
    f"""
CREATE OR REPLACE FUNCTION {{s}}.append(p_run text, p_head bigint, p_seq bigint, p_text text, p_seqs bigint[],
                                        p_texts text[], p_epoch bigint, p_owner text,
                                        p_meta_created double precision, p_meta_status text, p_meta_json text)
RETURNS text
LANGUAGE plpgsql AS $fn${_TEXT_DECLARE}
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext(p_run));{_TEXT_FENCE}
  IF p_head IS NOT NULL THEN
    SELECT COALESCE(MAX(e.seq), 0) INTO o_head FROM {{s}}.entries e WHERE e.run_id = p_run;
    IF o_head <> p_head THEN
      RETURN 'head:' || o_head;
    END IF;
    IF p_seq IS NOT NULL THEN  -- one entry: plain parameters are cheaper to send than arrays
      INSERT INTO {{s}}.entries (run_id, seq, json) VALUES (p_run, p_seq, p_text);
    ELSE
      INSERT INTO {{s}}.entries (run_id, seq, json)
        SELECT p_run, r.seq, r.json FROM unnest(p_seqs, p_texts) AS r(seq, json);
    END IF;
    IF p_meta_json IS NOT NULL THEN
      INSERT INTO {{s}}.meta (run_id, created_at, status, json)
        VALUES (p_run, p_meta_created, p_meta_status, p_meta_json)
        ON CONFLICT (run_id) DO UPDATE
        SET created_at = EXCLUDED.created_at, status = EXCLUDED.status, json = EXCLUDED.json;
      IF p_meta_status NOT IN ('queued', 'running') THEN
        PERFORM pg_notify({{channel}}, 's:' || p_run);
      END IF;
    END IF;
  END IF;
  RETURN 'ok';
END $fn$""",
    f"""
CREATE OR REPLACE FUNCTION {{s}}.put_meta(p_run text, p_created double precision, p_status text, p_json text,
                                          p_epoch bigint, p_owner text)
RETURNS text
LANGUAGE plpgsql AS $fn${_TEXT_DECLARE}
BEGIN
  IF p_epoch IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtext(p_run));
  END IF;{_TEXT_FENCE}
  INSERT INTO {{s}}.meta (run_id, created_at, status, json) VALUES (p_run, p_created, p_status, p_json)
    ON CONFLICT (run_id) DO UPDATE
    SET created_at = EXCLUDED.created_at, status = EXCLUDED.status, json = EXCLUDED.json;
  IF p_status NOT IN ('queued', 'running') THEN
    PERFORM pg_notify({{channel}}, 's:' || p_run);
  END IF;
  RETURN 'ok';
END $fn$""",
    f"""
CREATE OR REPLACE FUNCTION {{s}}.put_blob(p_key text, p_data bytea, p_run text, p_epoch bigint, p_owner text)
RETURNS text
LANGUAGE plpgsql AS $fn${_TEXT_DECLARE}
BEGIN
  IF p_epoch IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtext(p_run));
  END IF;{_TEXT_FENCE}
  INSERT INTO {{s}}.blobs (key, data) VALUES (p_key, p_data)
    ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data;
  RETURN 'ok';
END $fn$""",
    # acquire: a live holder under another owner id wins, unless the caller proved it dead (p_takeover).
    # Once taken, what a segment reads next comes back in the same round trip, read under the run's lock
    # after the lease was written: the journal (rows 'e'), the meta ('m') and the cancel request ('b').
    f"""
CREATE OR REPLACE FUNCTION {{s}}.acquire(p_run text, p_owner text, p_owner_id text, p_ttl double precision,
                                         p_takeover bigint, p_cancel_key text)
RETURNS TABLE (o_outcome text, {_LEASE_COLUMNS}, o_now double precision, o_seq bigint, o_text text,
               o_data bytea)
LANGUAGE plpgsql ROWS 8 AS $fn$  -- a few rows: a plan that joins it stays cheap (no JIT)
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext(p_run));
  {_NOW}{_READ_LEASE}
  IF FOUND AND (o_owner::json ->> 'owner_id') IS DISTINCT FROM p_owner_id AND o_now <= o_expires
     AND o_epoch IS DISTINCT FROM p_takeover THEN
    o_outcome := 'held'; RETURN NEXT; RETURN;
  END IF;
  INSERT INTO {{s}}.epochs AS e (run_id, epoch) VALUES (p_run, 1)
    ON CONFLICT (run_id) DO UPDATE SET epoch = e.epoch + 1 RETURNING e.epoch INTO o_epoch;
  o_owner := p_owner; o_expires := o_now + p_ttl; o_ttl := p_ttl;
  INSERT INTO {{s}}.leases (run_id, owner, epoch, expires_at, ttl_s) VALUES (p_run, p_owner, o_epoch, o_expires, p_ttl)
    ON CONFLICT (run_id) DO UPDATE SET owner = EXCLUDED.owner, epoch = EXCLUDED.epoch,
    expires_at = EXCLUDED.expires_at, ttl_s = EXCLUDED.ttl_s;
  o_outcome := 'ok'; RETURN NEXT;
  RETURN QUERY SELECT 'e'::text, NULL::text, NULL::bigint, NULL::float8, NULL::float8, NULL::float8, e.seq, e.json,
                      NULL::bytea
    FROM {{s}}.entries e WHERE e.run_id = p_run ORDER BY e.seq;
  RETURN QUERY SELECT 'm'::text, NULL::text, NULL::bigint, NULL::float8, NULL::float8, NULL::float8, NULL::bigint,
                      m.json, NULL::bytea
    FROM {{s}}.meta m WHERE m.run_id = p_run;
  RETURN QUERY SELECT 'b'::text, NULL::text, NULL::bigint, NULL::float8, NULL::float8, NULL::float8, NULL::bigint,
                      NULL::text, b.data
    FROM {{s}}.blobs b WHERE b.key = p_cancel_key;
END $fn$""",
    # renew: the row update is atomic, so no advisory lock; a stale epoch finds no row. A renewal also
    # answers the run's cancel request (the renewal loop reads it next).
    f"""
CREATE OR REPLACE FUNCTION {{s}}.renew(p_run text, p_epoch bigint, p_owner text, p_cancel_key text)
RETURNS TABLE (o_outcome text, {_LEASE_COLUMNS}, o_now double precision, o_data bytea)
LANGUAGE plpgsql AS $fn$
BEGIN
  {_NOW}
  UPDATE {{s}}.leases l SET expires_at = o_now + l.ttl_s
    WHERE l.run_id = p_run AND l.epoch = p_epoch AND l.owner = p_owner
    RETURNING l.owner, l.epoch, l.expires_at, l.ttl_s INTO o_owner, o_epoch, o_expires, o_ttl;
  IF FOUND THEN
    SELECT b.data INTO o_data FROM {{s}}.blobs b WHERE b.key = p_cancel_key;
    o_outcome := 'ok'; RETURN NEXT; RETURN;
  END IF;{_READ_LEASE}
  o_outcome := 'lost'; RETURN NEXT;
END $fn$""",
    # release: a queued run becomes claimable now, so wake its queue's workers.
    """
CREATE OR REPLACE FUNCTION {s}.release(p_run text, p_epoch bigint) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  DELETE FROM {s}.leases WHERE run_id = p_run AND epoch = p_epoch;
  IF FOUND THEN
    PERFORM pg_notify({channel}, 'q:' || q.queue) FROM {s}.queue q WHERE q.run_id = p_run AND q.state = 'queued';
  END IF;
END $fn$""",
    # delete: everything of the run but its epoch, which must keep growing.
    """
CREATE OR REPLACE FUNCTION {s}.delete_run(p_run text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext(p_run));
  DELETE FROM {s}.entries WHERE run_id = p_run;
  DELETE FROM {s}.meta WHERE run_id = p_run;
  DELETE FROM {s}.effects WHERE run_id = p_run;
  DELETE FROM {s}.leases WHERE run_id = p_run;
  DELETE FROM {s}.queue WHERE run_id = p_run;
END $fn$""",
    # enqueue: the genesis entry, the meta row and the queue row in one transaction.
    """
CREATE OR REPLACE FUNCTION {s}.enqueue(p_run text, p_queue text, p_priority integer, p_workflow text,
                                       p_deadline double precision, p_created double precision, p_meta text,
                                       p_genesis text, p_budgets jsonb, p_reserve double precision)
RETURNS text
LANGUAGE plpgsql AS $fn$
DECLARE
  t double precision := extract(epoch FROM clock_timestamp());
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext(p_run));
  IF EXISTS (SELECT 1 FROM {s}.queue WHERE run_id = p_run) THEN
    RETURN 'exists';
  END IF;
  IF EXISTS (SELECT 1 FROM {s}.leases WHERE run_id = p_run AND expires_at >= t) THEN
    RETURN 'held';
  END IF;
  IF p_genesis IS NOT NULL THEN
    IF EXISTS (SELECT 1 FROM {s}.entries WHERE run_id = p_run) THEN
      RETURN 'raced';
    END IF;
    INSERT INTO {s}.entries (run_id, seq, json) VALUES (p_run, 1, p_genesis);
  END IF;
  INSERT INTO {s}.meta (run_id, created_at, status, json) VALUES (p_run, p_created, 'queued', p_meta)
    ON CONFLICT (run_id) DO UPDATE SET status = 'queued', json = EXCLUDED.json;
  INSERT INTO {s}.queue (run_id, queue, priority, workflow, deadline_s, state, enqueued_at, budgets, reserve_usd)
    VALUES (p_run, p_queue, p_priority, p_workflow, p_deadline, 'queued', t, p_budgets, COALESCE(p_reserve, 0));
  PERFORM pg_notify({channel}, 'q:' || p_queue);
  RETURN 'queued';
END $fn$""",
    # claim: first let go of the worker's finished claims (`p_done*`, as `finish` does), then lapsed claims
    # (takeovers), then new work per queue; capped queues count under a lock.
    """
CREATE OR REPLACE FUNCTION {s}.claim(p_worker text, p_queues text[], p_caps integer[], p_workflows text[],
                                     p_limit integer, p_ttl double precision, p_done text[], p_done_claims bigint[],
                                     p_done_states text[], p_done_errors text[], p_done_epochs bigint[])
RETURNS TABLE (o_run text, o_queue text, o_workflow text, o_claim bigint, o_deadline double precision,
               o_attempts integer, o_takeover boolean, o_meta text)
LANGUAGE plpgsql ROWS 8 AS $fn$  -- a few rows: a plan that joins it stays cheap (no JIT)
DECLARE
  t double precision := extract(epoch FROM clock_timestamp());
  left_ integer := p_limit;
  free integer;
  r record;
BEGIN
  FOR i IN 1 .. COALESCE(array_length(p_done, 1), 0) LOOP
    PERFORM {s}.finish(p_done[i], p_done_claims[i], p_done_states[i], p_done_errors[i], p_done_epochs[i]);
  END LOOP;
  PERFORM {s}.budget_sweep(t);  -- holds of runs whose lease died are charged, so they block nobody for good
  FOR r IN
    SELECT c.run_id FROM {s}.queue c
     WHERE c.state = 'claimed' AND c.claimed_until < t AND c.queue = ANY (p_queues)
       AND c.workflow = ANY (p_workflows)
       AND NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.run_id = c.run_id AND l.expires_at >= t)
     ORDER BY c.priority DESC, c.enqueued_at, c.run_id
     LIMIT left_ FOR UPDATE OF c SKIP LOCKED
  LOOP
    UPDATE {s}.queue c SET claim_id = c.claim_id + 1, claimed_by = p_worker, claimed_until = t + p_ttl,
           attempts = c.attempts + 1
     WHERE c.run_id = r.run_id
     RETURNING c.run_id, c.queue, c.workflow, c.claim_id, c.deadline_s, c.attempts
          INTO o_run, o_queue, o_workflow, o_claim, o_deadline, o_attempts;
    o_takeover := true;
    SELECT m.json INTO o_meta FROM {s}.meta m WHERE m.run_id = o_run;
    RETURN NEXT;
    left_ := left_ - 1;
  END LOOP;
  FOR i IN 1 .. COALESCE(array_length(p_queues, 1), 0) LOOP
    EXIT WHEN left_ <= 0;
    free := left_;
    IF p_caps[i] IS NOT NULL THEN
      PERFORM pg_advisory_xact_lock(hashtext({schema} || ':queue:' || p_queues[i]));
      SELECT LEAST(left_, p_caps[i] - count(*)) INTO free
        FROM {s}.queue c WHERE c.queue = p_queues[i] AND c.state = 'claimed';
    END IF;
    CONTINUE WHEN free <= 0;
    FOR r IN
      SELECT c.run_id, c.waiting FROM {s}.queue c
       WHERE c.queue = p_queues[i] AND c.state = 'queued' AND c.workflow = ANY (p_workflows)
         AND NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.run_id = c.run_id AND l.expires_at >= t)
         AND (c.budgets IS NULL OR {s}.budget_blocks(c.budgets, c.reserve_usd, t) IS NULL)
       ORDER BY c.priority DESC, c.enqueued_at, c.run_id
       LIMIT free FOR UPDATE OF c SKIP LOCKED
    LOOP
      IF r.waiting IS NOT NULL THEN
        UPDATE {s}.meta SET json = (json::jsonb - 'waiting')::text WHERE run_id = r.run_id;
      END IF;
      UPDATE {s}.queue c SET state = 'claimed', claim_id = c.claim_id + 1, claimed_by = p_worker,
             claimed_until = t + p_ttl, attempts = c.attempts + 1, waiting = NULL
       WHERE c.run_id = r.run_id
       RETURNING c.run_id, c.queue, c.workflow, c.claim_id, c.deadline_s, c.attempts
            INTO o_run, o_queue, o_workflow, o_claim, o_deadline, o_attempts;
      o_takeover := false;
      SELECT m.json INTO o_meta FROM {s}.meta m WHERE m.run_id = o_run;
      RETURN NEXT;
      left_ := left_ - 1;
    END LOOP;
  END LOOP;
  IF left_ > 0 THEN  -- room left: say why the runs a budget holds back wait (written once per reason)
    FOR r IN
      SELECT c.run_id, {s}.budget_blocks(c.budgets, c.reserve_usd, t) AS why FROM {s}.queue c
       WHERE c.state = 'queued' AND c.budgets IS NOT NULL AND c.queue = ANY (p_queues)
         AND c.workflow = ANY (p_workflows)
    LOOP
      CONTINUE WHEN r.why IS NULL OR r.why IS NOT DISTINCT FROM (SELECT q.waiting FROM {s}.queue q
                                                                  WHERE q.run_id = r.run_id);
      UPDATE {s}.queue q SET waiting = r.why WHERE q.run_id = r.run_id AND q.state = 'queued';
      UPDATE {s}.meta SET json = jsonb_set(json::jsonb, '{{waiting}}', to_jsonb(r.why))::text
       WHERE run_id = r.run_id;
    END LOOP;
  END IF;
END $fn$""",
    # finish: only the current claim may report; handing back re-queues and wakes the queue. `p_epoch` is
    # the driver's lease, released here (whatever became of the claim) when its release was left to the finish.
    """
CREATE OR REPLACE FUNCTION {s}.finish(p_run text, p_claim bigint, p_state text, p_error text, p_epoch bigint)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
  q text;
BEGIN
  IF p_epoch IS NOT NULL THEN
    DELETE FROM {s}.leases WHERE run_id = p_run AND epoch = p_epoch;
  END IF;
  UPDATE {s}.queue c SET state = p_state, claimed_until = NULL, error = p_error,
         finished_at = extract(epoch FROM clock_timestamp())
   WHERE c.run_id = p_run AND c.claim_id = p_claim AND c.state = 'claimed'
   RETURNING c.queue INTO q;
  IF NOT FOUND THEN
    IF p_epoch IS NOT NULL THEN  -- the claim moved on (a re-queue): the released run may be claimable now
      PERFORM pg_notify({channel}, 'q:' || c.queue) FROM {s}.queue c WHERE c.run_id = p_run AND c.state = 'queued';
    END IF;
    RETURN false;
  END IF;
  IF p_state = 'queued' THEN
    UPDATE {s}.meta SET status = 'queued', json = jsonb_set(json::jsonb, '{{status}}', '"queued"')::text
     WHERE run_id = p_run;
    PERFORM pg_notify({channel}, 'q:' || q);
  ELSE
    IF p_state = 'failed' THEN
      UPDATE {s}.meta SET status = 'error', json = jsonb_set(json::jsonb, '{{status}}', '"error"')::text
       WHERE run_id = p_run AND status IN ('queued', 'running');
    END IF;
    PERFORM pg_notify({channel}, 's:' || p_run);
  END IF;
  RETURN true;
END $fn$""",
    # requeue: under the caller's live lease (a resolution), so workers can claim it once released.
    f"""
CREATE OR REPLACE FUNCTION {{s}}.requeue(p_run text, p_epoch bigint, p_owner text)
RETURNS TABLE (o_outcome text, {_LEASE_COLUMNS}, o_now double precision)
LANGUAGE plpgsql AS $fn$
BEGIN
  {_NOW}{_FENCE}
  UPDATE {{s}}.queue c SET state = 'queued', claim_id = c.claim_id + 1, claimed_by = NULL, claimed_until = NULL
   WHERE c.run_id = p_run AND c.state IN ('suspended', 'claimed');
  IF NOT FOUND THEN
    o_outcome := 'absent'; RETURN NEXT; RETURN;
  END IF;
  UPDATE {{s}}.meta SET status = 'queued', json = jsonb_set(json::jsonb, '{{{{status}}}}', '"queued"')::text
   WHERE run_id = p_run;
  o_outcome := 'ok'; RETURN NEXT;
END $fn$""",
]


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema (at most 63 bytes, the identifier limit)."""
    name = f"tether_{schema}"
    return name if len(name) <= 63 else f"tether_{hashlib.sha256(schema.encode()).hexdigest()[:32]}"


def schema_statements(schema: str) -> list[str]:
    """Every DDL statement that brings `schema` to `SCHEMA_VERSION` (each safe to run again)."""
    s = f'"{schema}"'
    literals = {"s": s, "channel": f"'{notify_channel(schema)}'", "schema": f"'{schema}'"}
    tables = [stmt for text in (_TABLES, BUDGET_TABLES, SCHEDULE_TABLES, SESSION_TABLES)
              for stmt in text.format(s=s).split(";") if stmt.strip()]
    functions = [fn.format(**literals) for fn in (*BUDGET_FUNCTIONS, *_FUNCTIONS)]
    version = [f"DELETE FROM {s}.version", f"INSERT INTO {s}.version (v) VALUES ({SCHEMA_VERSION})"]
    return [f"CREATE SCHEMA IF NOT EXISTS {s}", *tables, *functions, *version]


def statements(schema: str) -> dict[str, str]:
    """The parameterized statements the store runs, by name (one round trip each)."""
    s = f'"{schema}"'
    lease_args = "%s::bigint, %s::text"
    return {
        "version": f"SELECT v FROM {s}.version",
        "append": f"SELECT {s}.append(%s::text, %s::bigint, %s::bigint, %s::text, %b::bigint[], %b::text[],"
        f" {lease_args}, %s::float8, %s::text, %s::text)",
        # one entry and no meta (the hot path): the NULLs are written in, so only six parameters are sent
        "append_one": f"SELECT {s}.append(%s::text, %s::bigint, %s::bigint, %s::text, NULL, NULL, {lease_args},"
        f" NULL, NULL, NULL)",
        "load": f"SELECT seq, json FROM {s}.entries WHERE run_id = %s ORDER BY seq",
        "meta_put": f"SELECT * FROM {s}.put_meta(%s::text, %s::float8, %s::text, %s::text, {lease_args})",
        "meta_get": f"SELECT json FROM {s}.meta WHERE run_id = %s",
        "meta_list": f"SELECT json FROM {s}.meta ORDER BY created_at DESC, run_id LIMIT %s",
        "meta_list_status": f"SELECT json FROM {s}.meta WHERE status = %s"
        f" OR (status IS NULL AND (json::jsonb ->> 'status') = %s) ORDER BY created_at DESC, run_id LIMIT %s",
        "blob_put": f"SELECT * FROM {s}.put_blob(%s::text, %s::bytea, %s::text, {lease_args})",
        "blob_get": f"SELECT data FROM {s}.blobs WHERE key = %s",
        "effect_put": f"INSERT INTO {s}.effects (run_id, json) VALUES (%s, %s)",
        "effect_load": f"SELECT json FROM {s}.effects WHERE run_id = %s ORDER BY id",
        "acquire": f"SELECT * FROM {s}.acquire(%s::text, %s::text, %s::text, %s::float8, %s::bigint, %s::text)",
        "renew": f"SELECT * FROM {s}.renew(%s::text, {lease_args}, %s::text)",
        "release": f"SELECT {s}.release(%s::text, %s::bigint)",
        "lease_get": f"SELECT owner, epoch, expires_at, ttl_s, extract(epoch FROM clock_timestamp())"
        f" FROM {s}.leases WHERE run_id = %s",
        "delete": f"SELECT {s}.delete_run(%s::text)",
        "enqueue": f"SELECT {s}.enqueue(%s::text, %s::text, %s::integer, %s::text, %s::float8, %s::float8,"
        f" %s::text, %s::text, %s::jsonb, %s::float8)",
        "claim": f"SELECT * FROM {s}.claim(%s::text, %s::text[], %s::integer[], %s::text[], %s::integer,"
        f" %s::float8, %s::text[], %s::bigint[], %s::text[], %s::text[], %s::bigint[])",
        "finish": f"SELECT {s}.finish(%s::text, %s::bigint, %s::text, %s::text, %s::bigint)",
        "requeue": f"SELECT * FROM {s}.requeue(%s::text, {lease_args})",
        "queue_get": f"SELECT run_id, queue, workflow, priority, state, enqueued_at, claim_id, claimed_by,"
        f" attempts, error, waiting FROM {s}.queue WHERE run_id = %s",
    }
