"""Budgets across runs on PostgreSQL: reservations per scope and window, settled, reclaimed after a crash.

`budget_windows` keeps each (scope, window) row's charged and held USD; `budget_reservations` keeps one
row per call and budget, with the run and the lease epoch it was taken under. Every change locks the
window rows it touches in (scope, window) order, so concurrent reservers neither deadlock nor pass a
limit. A held reservation whose run has no live lease at its epoch (its driver died or lost the run)
is reclaimed: charged at the worst case it held, unless its call settles later. Every time is the
database's (`clock_timestamp()`), so windows roll over at the same moment for every host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.contracts.budgets import Budget, ReserveAnswer, ScopeUsage
from tether.contracts.entries import Lease

EPSILON_SQL = "1e-9"

BUDGET_TABLES = """
CREATE TABLE IF NOT EXISTS {s}.budget_windows (
    scope text NOT NULL, window_start double precision NOT NULL,
    charged_usd double precision NOT NULL DEFAULT 0, held_usd double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, window_start));
CREATE TABLE IF NOT EXISTS {s}.budget_reservations (
    id bigserial PRIMARY KEY, run_id text NOT NULL, epoch bigint, scope text NOT NULL,
    window_start double precision NOT NULL, amount_usd double precision NOT NULL, state text NOT NULL,
    charged_usd double precision, what text, created_at double precision NOT NULL, settled_at double precision);
CREATE INDEX IF NOT EXISTS budget_held ON {s}.budget_reservations (scope, window_start) WHERE state = 'held';
ALTER TABLE {s}.queue ADD COLUMN IF NOT EXISTS budgets jsonb;
ALTER TABLE {s}.queue ADD COLUMN IF NOT EXISTS reserve_usd double precision NOT NULL DEFAULT 0;
ALTER TABLE {s}.queue ADD COLUMN IF NOT EXISTS waiting text
"""

_DEAD = """NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.run_id = r.run_id AND l.epoch = r.epoch
                                                     AND l.expires_at >= p_now)"""

BUDGET_FUNCTIONS = [
    """
CREATE OR REPLACE FUNCTION {s}.budget_window(p_window text, p_now double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT CASE p_window WHEN 'day' THEN floor(p_now / 86400) * 86400 WHEN 'hour' THEN floor(p_now / 3600) * 3600
         ELSE 0 END
$fn$""",
    # reclaim: the caller holds the window row's lock.
    f"""
CREATE OR REPLACE FUNCTION {{s}}.budget_reclaim(p_scope text, p_ws double precision, p_now double precision)
RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  total double precision;
BEGIN
  WITH dead AS (
    UPDATE {{s}}.budget_reservations r SET state = 'reclaimed', charged_usd = r.amount_usd, settled_at = p_now
     WHERE r.scope = p_scope AND r.window_start = p_ws AND r.state = 'held' AND {_DEAD}
    RETURNING r.amount_usd)
  SELECT sum(amount_usd) INTO total FROM dead;
  IF total IS NOT NULL THEN
    UPDATE {{s}}.budget_windows w SET held_usd = w.held_usd - total, charged_usd = w.charged_usd + total
     WHERE w.scope = p_scope AND w.window_start = p_ws;
  END IF;
END $fn$""",
    # sweep: reclaim every dead reservation (workers call it with each claim, so a crashed run's holds
    # are charged even when nobody reserves in its scope again).
    f"""
CREATE OR REPLACE FUNCTION {{s}}.budget_sweep(p_now double precision) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  w record;
BEGIN
  FOR w IN SELECT DISTINCT r.scope, r.window_start FROM {{s}}.budget_reservations r
            WHERE r.state = 'held' AND {_DEAD} ORDER BY 1, 2 LOOP
    PERFORM 1 FROM {{s}}.budget_windows b WHERE b.scope = w.scope AND b.window_start = w.window_start FOR UPDATE;
    PERFORM {{s}}.budget_reclaim(w.scope, w.window_start, p_now);
  END LOOP;
END $fn$""",
    # reserve: all budgets or none. `refused`: even with nothing held the window cannot cover it; `wait`:
    # other calls' holds are in the way (they settle, or are reclaimed once their lease dies).
    f"""
CREATE OR REPLACE FUNCTION {{s}}.budget_reserve(p_run text, p_epoch bigint, p_scopes text[], p_windows text[],
                                                p_limits double precision[], p_amount double precision, p_what text)
RETURNS TABLE (o_outcome text, o_scope text, o_window double precision, o_charged double precision,
               o_held double precision, o_limit double precision, o_ids bigint[])
LANGUAGE plpgsql AS $fn$
DECLARE
  t double precision := extract(epoch FROM clock_timestamp());
  starts double precision[] := '{{{{}}}}';
  ids bigint[] := '{{{{}}}}';
  i integer;
  ws double precision;
  ch double precision;
  hd double precision;
  new_id bigint;
BEGIN
  FOR i IN SELECT g.i FROM generate_subscripts(p_scopes, 1) AS g(i)
            ORDER BY p_scopes[g.i], {{s}}.budget_window(p_windows[g.i], t) LOOP
    ws := {{s}}.budget_window(p_windows[i], t);
    starts[i] := ws;
    INSERT INTO {{s}}.budget_windows (scope, window_start) VALUES (p_scopes[i], ws) ON CONFLICT DO NOTHING;
    PERFORM 1 FROM {{s}}.budget_windows b WHERE b.scope = p_scopes[i] AND b.window_start = ws FOR UPDATE;
    PERFORM {{s}}.budget_reclaim(p_scopes[i], ws, t);
    SELECT b.charged_usd, b.held_usd INTO ch, hd FROM {{s}}.budget_windows b
     WHERE b.scope = p_scopes[i] AND b.window_start = ws;
    IF ch + p_amount > p_limits[i] + {EPSILON_SQL} OR ch + hd + p_amount > p_limits[i] + {EPSILON_SQL} THEN
      o_outcome := CASE WHEN ch + p_amount > p_limits[i] + {EPSILON_SQL} THEN 'refused' ELSE 'wait' END;
      o_scope := p_scopes[i]; o_window := ws; o_charged := ch; o_held := hd; o_limit := p_limits[i];
      RETURN NEXT; RETURN;
    END IF;
  END LOOP;
  FOR i IN 1 .. COALESCE(array_length(p_scopes, 1), 0) LOOP
    INSERT INTO {{s}}.budget_reservations (run_id, epoch, scope, window_start, amount_usd, state, what, created_at)
      VALUES (p_run, p_epoch, p_scopes[i], starts[i], p_amount, 'held', p_what, t) RETURNING id INTO new_id;
    UPDATE {{s}}.budget_windows b SET held_usd = b.held_usd + p_amount
     WHERE b.scope = p_scopes[i] AND b.window_start = starts[i];
    ids := ids || new_id;
  END LOOP;
  o_outcome := 'ok'; o_ids := ids; RETURN NEXT;
END $fn$""",
    # settle: a held reservation is charged what its call cost; a reclaimed one (its lease lapsed while the
    # call ran) is charged that instead of its worst case.
    """
CREATE OR REPLACE FUNCTION {s}.budget_settle(p_ids bigint[], p_usd double precision[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  t double precision := extract(epoch FROM clock_timestamp());
  r record;
  amount double precision;
BEGIN
  FOR r IN SELECT x.id, x.usd, b.scope, b.window_start FROM unnest(p_ids, p_usd) AS x(id, usd)
             JOIN {s}.budget_reservations b ON b.id = x.id ORDER BY b.scope, b.window_start, x.id LOOP
    PERFORM 1 FROM {s}.budget_windows w WHERE w.scope = r.scope AND w.window_start = r.window_start FOR UPDATE;
    UPDATE {s}.budget_reservations b SET state = 'settled', charged_usd = r.usd, settled_at = t
     WHERE b.id = r.id AND b.state = 'held' RETURNING b.amount_usd INTO amount;
    IF FOUND THEN
      UPDATE {s}.budget_windows w SET held_usd = w.held_usd - amount, charged_usd = w.charged_usd + r.usd
       WHERE w.scope = r.scope AND w.window_start = r.window_start;
      CONTINUE;
    END IF;
    UPDATE {s}.budget_reservations b SET state = 'settled', charged_usd = r.usd, settled_at = t
     WHERE b.id = r.id AND b.state = 'reclaimed' RETURNING b.amount_usd INTO amount;
    IF FOUND THEN
      UPDATE {s}.budget_windows w SET charged_usd = w.charged_usd - amount + r.usd
       WHERE w.scope = r.scope AND w.window_start = r.window_start;
    END IF;
  END LOOP;
END $fn$""",
    # blocks: why a queued run carrying `p_budgets` may not start now (NULL: it may). Its reserve (its own
    # ceiling, else nothing) must fit beside what is charged and held; a run without one needs room left.
    f"""
CREATE OR REPLACE FUNCTION {{s}}.budget_blocks(p_budgets jsonb, p_reserve double precision, p_now double precision)
RETURNS text
LANGUAGE sql STABLE AS $fn$
  SELECT format('budget: scope %s cannot cover this run''s reserve of %s USD beside what its runs have charged '
                'and hold (limit %s USD%s); it stays queued until calls settle or the window rolls over',
                b.value ->> 'scope', to_char(p_reserve, 'FM999999990.0000'),
                to_char((b.value ->> 'usd')::float8, 'FM999999990.0000'),
                CASE WHEN b.value ->> 'window' IS NULL THEN ', no window'
                     ELSE ' per ' || (b.value ->> 'window') || ' from '
                          || to_char(to_timestamp({{s}}.budget_window(b.value ->> 'window', p_now)) AT TIME ZONE 'UTC',
                                     'YYYY-MM-DD"T"HH24:MI"Z"') END)
    FROM jsonb_array_elements(p_budgets) AS b(value)
    LEFT JOIN {{s}}.budget_windows w ON w.scope = b.value ->> 'scope'
          AND w.window_start = {{s}}.budget_window(b.value ->> 'window', p_now)
   WHERE COALESCE(w.charged_usd, 0) + COALESCE(w.held_usd, 0) + p_reserve > (b.value ->> 'usd')::float8 + {EPSILON_SQL}
      OR COALESCE(w.charged_usd, 0) >= (b.value ->> 'usd')::float8 - {EPSILON_SQL}
   LIMIT 1
$fn$""",
]


def budget_statements(schema: str) -> dict[str, str]:
    """The statements of the budget ledger, by name."""
    s = f'"{schema}"'
    return {
        "budget_reserve": f"SELECT * FROM {s}.budget_reserve(%s::text, %s::bigint, %s::text[], %s::text[],"
        f" %s::float8[], %s::float8, %s::text)",
        "budget_settle": f"SELECT {s}.budget_settle(%s::bigint[], %s::float8[])",
        "budget_usage": f"SELECT scope, window_start, charged_usd, held_usd FROM {s}.budget_windows"
        f" WHERE %s::text IS NULL OR scope = %s ORDER BY window_start DESC, scope",
    }


class PostgresBudgets:
    """The `BudgetLedger` half of `PostgresStore`."""

    async def _fetch(self, name: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    async def budget_reserve(self, run_id: str, lease: Lease | None, budgets: Sequence[Budget], usd: float,
                             what: str) -> ReserveAnswer:
        params = (run_id, None if lease is None else lease.epoch, [b.scope for b in budgets],
                  [b.window for b in budgets], [float(b.usd) for b in budgets], float(usd), what)
        ((outcome, scope, window, charged, held, limit, ids),) = await self._fetch("budget_reserve", params)
        return ReserveAnswer(outcome=outcome, ids=tuple(ids or ()), scope=scope, window_start=window or 0.0,
                             charged_usd=charged or 0.0, held_usd=held or 0.0, limit_usd=limit or 0.0)

    async def budget_settle(self, charges: Sequence[tuple[int, float]]) -> None:
        await self._fetch("budget_settle", ([i for i, _ in charges], [float(u) for _, u in charges]))

    async def budget_usage(self, scope: str | None = None) -> list[ScopeUsage]:
        rows = await self._fetch("budget_usage", (scope, scope))
        return [ScopeUsage(scope=r[0], window_start=r[1], charged_usd=r[2], held_usd=r[3]) for r in rows]
