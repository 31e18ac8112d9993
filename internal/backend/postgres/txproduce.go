package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/text"
)

// Transactional enqueue (issue 53; ADR 0028; docs/storage/postgres.md,
// "Transactional enqueue"): styx_produce(queue_name, items), a SQL
// function the application calls inside its own transaction, so that an
// item exists exactly when the application's rows do. Package txproduce
// is its Go helper. The function does what a produce iteration does
// (Tx.Produce, dedup.go, the engine's partition rule), written in SQL:
//
//   - The rules. Every limit and character class comes from the Go rules
//     (queue.CheckProduceItem and the constants beside it; internal/text
//     for hidden characters): each node writes them, with the wake-up
//     channel, into the row 'produce' of styx_settings at every start
//     (writeProduceRules, in the migration transaction), and the function
//     reads that row. No limit is written in SQL. An item that breaks one
//     is refused with SQLSTATE 22023, the field in the error's COLUMN
//     (items[3].kind) and its message worded as the /v1 answer; a queue
//     that does not exist with P0001 and TABLE styx_queues. Nothing of a
//     refused call is stored (every item is checked before anything is
//     written), and the function opens no subtransaction.
//   - Deduplication: the ids of a call are claimed in styx_dedup as
//     claimKeys does, sorted (byte order), so a call and a node's
//     iteration wait for each other on an id, never in a cycle; a claimed
//     id records the id of the item that used it (item_id, item_deadline:
//     valid while item_deadline is the record's deadline, so a window
//     taken over by a /v1 produce, which writes neither, reads as
//     unknown). A duplicate within the window stores nothing and returns
//     that id, or NULL when a /v1 produce took the window.
//   - Partition: the engine's rule (engine.FewestReady) on the ready
//     items of each partition as the transaction sees them, at most
//     readyCountCap each, ties to the first partition at or after the
//     call's first new id modulo the partitions; items with a group go to
//     their group's partition (styx_group_partition, queue.GroupPartition
//     in SQL).
//   - Ids from styx_item_ids, in item order, after styx_check_item_ids
//     (ids.go; called when it exists) has moved the sequence past a lost
//     primary's ids; the counts triggers count the insert in the caller's
//     backend's shard, as any statement.
//   - Wake-up: pg_notify on the schema's channel with "i:<queue id>", the
//     payload Manager.listen reads, delivered by PostgreSQL at the
//     caller's COMMIT and never after a rollback; a scheduled item is
//     found by the nodes' reload, as another node's.
//
// The function is SECURITY DEFINER with the schema's search_path pinned,
// and EXECUTE is revoked from PUBLIC: an application role needs USAGE on
// the schema and EXECUTE on the function only, and can touch no table.
const txProduceMigration = `
CREATE TABLE styx_settings (
	name  text  PRIMARY KEY,
	value jsonb NOT NULL
);

ALTER TABLE styx_dedup ADD COLUMN item_id bigint;
ALTER TABLE styx_dedup ADD COLUMN item_deadline bigint;

CREATE FUNCTION styx_produce_refuse(field text, detail text) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
	RAISE EXCEPTION 'invalid %; %', field, detail USING ERRCODE = '22023', COLUMN = field,
		HINT = 'nothing of the produce is stored; the rules are listed in Styx''s docs/storage/postgres.md, "Transactional enqueue"';
END
$f$;

CREATE FUNCTION styx_group_partition(grp text, partitions integer) RETURNS integer
	LANGUAGE plpgsql IMMUTABLE STRICT AS $f$
DECLARE
	b bytea := convert_to(grp, 'UTF8');
	h bigint := 2166136261;
BEGIN
	IF partitions <= 1 THEN
		RETURN 0;
	END IF;
	FOR i IN 0 .. length(b) - 1 LOOP
		h := ((h # get_byte(b, i)) * 16777619) & 4294967295;
	END LOOP;
	RETURN (h % partitions)::integer;
END
$f$;

CREATE FUNCTION styx_produce(queue_name text, items jsonb) RETURNS bigint[]
	LANGUAGE plpgsql SECURITY DEFINER AS $f$
DECLARE
	v_rules jsonb;
	v_q record;
	v_n integer;
	v_now bigint;
	v_x jsonb;
	v_k text;
	v_field text;
	v_s text;
	v_m text;
	v_g text[];
	v_at timestamptz;
	v_at_ns bigint;
	v_hidden text := '';
	v_max_field integer;
	v_payloads bytea[] := '{}';
	v_kinds text[] := '{}';
	v_encs text[] := '{}';
	v_refs text[] := '{}';
	v_dedups text[] := '{}';
	v_groups text[] := '{}';
	v_states smallint[] := '{}';
	v_deadlines bigint[] := '{}';
	v_parts integer[] := '{}';
	v_keep boolean[] := '{}';
	v_ids bigint[] := '{}';
	v_claimed text[];
	v_known jsonb := '{}';
	v_firsts jsonb := '{}';
	v_dedup_deadline bigint;
	v_part integer := 0;
	v_cursor bigint;
	v_ready boolean := false;
	v_expire bigint := 0;
	v_cap integer;
	v_i integer;
	v_unknown boolean;
	v_max_payload integer;
	v_resolution bigint;
BEGIN
	v_rules := (SELECT value FROM styx_settings WHERE name = 'produce');
	IF v_rules IS NULL THEN
		RAISE EXCEPTION 'styx_produce: the produce rules are missing (styx_settings)' USING ERRCODE = 'P0001',
			HINT = 'start a Styx server of this version on this schema once: it writes them at every start';
	END IF;
	SELECT id, partitions, expire_timeout, dedup_window INTO v_q FROM styx_queues WHERE name = queue_name;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue does not exist; no such queue named ''%''', queue_name USING ERRCODE = 'P0001', TABLE = 'styx_queues',
			HINT = 'create the queue first (queues.create); queue names are case-sensitive';
	END IF;
	IF items IS NULL OR jsonb_typeof(items) <> 'array' THEN
		PERFORM styx_produce_refuse('items', 'a JSON array of item objects is required');
	END IF;
	v_n := jsonb_array_length(items);
	IF v_n = 0 THEN
		PERFORM styx_produce_refuse('items', 'at least one is required');
	END IF;
	IF v_n > (v_rules->>'max_items')::integer THEN
		PERFORM styx_produce_refuse('items', format('%s given, the limit is %s', v_n, v_rules->>'max_items'));
	END IF;
	v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000;
	v_hidden := v_rules->>'hidden';
	v_max_field := (v_rules->>'max_field_bytes')::integer;
	v_max_payload := (v_rules->>'max_payload_bytes')::integer;
	v_resolution := (v_rules->>'schedule_resolution')::bigint;

	-- Every item is checked before anything is written: first the shape
	-- of every item (two statements for the whole call), then each.
	SELECT o - 1 INTO v_i FROM jsonb_array_elements(items) WITH ORDINALITY AS a(x, o) WHERE jsonb_typeof(x) <> 'object' ORDER BY o LIMIT 1;
	IF v_i IS NOT NULL THEN
		PERFORM styx_produce_refuse(format('items[%s]', v_i), 'a JSON object is required');
	END IF;
	SELECT o - 1, key, key NOT IN ('bytes', 'utf8', 'kind', 'encoding', 'reference', 'enqueue_at', 'deduplication_id', 'group')
		INTO v_i, v_k, v_unknown
		FROM jsonb_array_elements(items) WITH ORDINALITY AS a(x, o), jsonb_each(x)
		WHERE key NOT IN ('bytes', 'utf8', 'kind', 'encoding', 'reference', 'enqueue_at', 'deduplication_id', 'group')
			OR jsonb_typeof(value) NOT IN ('string', 'null')
		ORDER BY o, key LIMIT 1;
	IF v_unknown THEN
		PERFORM styx_produce_refuse(format('items[%s]', v_i), format('unknown field ''%s''; the fields are bytes (base64), utf8, '
			'kind, encoding, reference, enqueue_at, deduplication_id and group', v_k));
	ELSIF v_k IS NOT NULL THEN
		PERFORM styx_produce_refuse(format('items[%s].%s', v_i, v_k), 'a JSON string (or null) is required');
	END IF;

	FOR i IN 0 .. v_n - 1 LOOP
		v_x := items->i;
		v_field := 'items[' || i || ']';

		-- The payload: bytes (base64) when not empty, else utf8.
		v_s := v_x->>'bytes';
		IF v_s IS NOT NULL AND v_s <> '' THEN
			IF octet_length(v_s) % 4 <> 0 OR v_s !~ '^[A-Za-z0-9+/]*={0,2}$' THEN
				PERFORM styx_produce_refuse(v_field || '.bytes', 'not base64 (RFC 4648, standard alphabet, padded)');
			END IF;
			v_payloads := v_payloads || decode(v_s, 'base64');
		ELSE
			v_payloads := v_payloads || convert_to(coalesce(v_x->>'utf8', ''), 'UTF8');
		END IF;
		IF length(v_payloads[i + 1]) > v_max_payload THEN
			PERFORM styx_produce_refuse(v_field || '.bytes', format('payload is %s bytes, the limit is %s (5 MB)',
				length(v_payloads[i + 1]), v_max_payload));
		END IF;

		-- kind, encoding, reference: length, then hidden characters.
		FOREACH v_k IN ARRAY ARRAY['kind', 'encoding', 'reference'] LOOP
			v_s := coalesce(v_x->>v_k, '');
			CONTINUE WHEN v_s = '';
			IF octet_length(v_s) > v_max_field THEN
				PERFORM styx_produce_refuse(v_field || '.' || v_k, format('%s bytes, the limit is %s', octet_length(v_s), v_max_field));
			END IF;
			v_m := substring(v_s FROM v_hidden);
			IF v_m IS NOT NULL THEN
				PERFORM styx_produce_refuse(v_field || '.' || v_k, format('it holds U+%s at character %s; %s',
					upper(lpad(to_hex(ascii(v_m)), 4, '0')), strpos(v_s, v_m) - 1, v_rules->>'hidden_rule'));
			END IF;
		END LOOP;
		v_kinds := v_kinds || coalesce(v_x->>'kind', '');
		v_encs := v_encs || coalesce(v_x->>'encoding', '');
		v_refs := v_refs || coalesce(v_x->>'reference', '');

		-- deduplication_id and group: 1 to N ASCII letters, digits and
		-- punctuation, or empty (none).
		FOREACH v_k IN ARRAY ARRAY['deduplication_id', 'group'] LOOP
			v_s := coalesce(v_x->>v_k, '');
			CONTINUE WHEN v_s = '';
			IF octet_length(v_s) > (v_rules->>('max_' || v_k || '_bytes'))::integer THEN
				PERFORM styx_produce_refuse(v_field || '.' || v_k, format('%s bytes, the limit is %s', octet_length(v_s),
					v_rules->>('max_' || v_k || '_bytes')));
			END IF;
			v_m := substring(v_s FROM '[^!-~]');
			IF v_m IS NOT NULL THEN
				PERFORM styx_produce_refuse(v_field || '.' || v_k, format('byte %s (0x%s) is not an ASCII letter, digit or punctuation',
					octet_length(substr(v_s, 1, strpos(v_s, v_m) - 1)), lpad(to_hex(get_byte(convert_to(v_m, 'UTF8'), 0)), 2, '0')));
			END IF;
		END LOOP;
		v_dedups := v_dedups || nullif(coalesce(v_x->>'deduplication_id', ''), '');
		v_groups := v_groups || nullif(coalesce(v_x->>'group', ''), '');

		-- enqueue_at: an RFC 3339 time, checked field by field so that no
		-- cast can fail; empty, null and Go's zero time are unset.
		v_s := coalesce(v_x->>'enqueue_at', '');
		v_at_ns := NULL;
		IF v_s <> '' AND v_s !~ '^0001-01-01[Tt ]00:00:00(\.0+)?([Zz]|[+-]00:00)$' THEN
			v_g := regexp_match(v_s, '^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-](\d{2}):(\d{2}))$');
			IF v_g IS NULL OR v_g[2]::integer NOT BETWEEN 1 AND 12 OR v_g[3]::integer < 1 OR v_g[4]::integer > 23
				OR v_g[5]::integer > 59 OR v_g[6]::integer > 59 OR coalesce(v_g[9]::integer, 0) > 15 OR coalesce(v_g[10]::integer, 0) > 59 THEN
				PERFORM styx_produce_refuse(v_field || '.enqueue_at', format('''%s'' is not an RFC 3339 time such as 2026-01-02T15:04:05Z',
					left(v_s, 64)));
			END IF;
			IF v_g[1]::integer NOT BETWEEN (v_rules->>'min_year')::integer AND (v_rules->>'max_year')::integer THEN
				PERFORM styx_produce_refuse(v_field || '.enqueue_at', format('%s is out of range %s..%s, the times storage keeps',
					v_s, v_rules->>'min_time_text', v_rules->>'max_time_text'));
			END IF;
			IF v_g[3]::integer > extract(day FROM make_date(v_g[1]::integer, v_g[2]::integer, 1) + interval '1 month - 1 day') THEN
				PERFORM styx_produce_refuse(v_field || '.enqueue_at', format('''%s'' is not an RFC 3339 time such as 2026-01-02T15:04:05Z',
					left(v_s, 64)));
			END IF;
			v_at := v_s::timestamptz;
			IF extract(epoch FROM v_at) * 1000000000 NOT BETWEEN (v_rules->>'min_time')::numeric AND (v_rules->>'max_time')::numeric THEN
				PERFORM styx_produce_refuse(v_field || '.enqueue_at', format('%s is out of range %s..%s, the times storage keeps',
					v_s, v_rules->>'min_time_text', v_rules->>'max_time_text'));
			END IF;
			v_at_ns := (extract(epoch FROM v_at) * 1000000)::bigint * 1000;
		END IF;
		IF v_at_ns IS NULL OR v_at_ns < v_now + v_resolution THEN
			v_states := v_states || 0::smallint;
			v_deadlines := v_deadlines || 0::bigint;
		ELSE
			v_states := v_states || 2::smallint;
			v_deadlines := v_deadlines || v_at_ns;
		END IF;
	END LOOP;

	-- Deduplication: claim the call's ids in byte order (claimKeys).
	IF EXISTS (SELECT 1 FROM unnest(v_dedups) AS d WHERE d IS NOT NULL) THEN
		v_dedup_deadline := v_now + CASE WHEN v_q.dedup_window > 0 THEN v_q.dedup_window
			ELSE (v_rules->>'deduplication_window')::bigint END;
		WITH c AS (
			INSERT INTO styx_dedup AS d (queue_id, dedup_id, deadline)
			SELECT v_q.id, u.id, v_dedup_deadline FROM (SELECT DISTINCT x AS id FROM unnest(v_dedups) AS x WHERE x IS NOT NULL) u
			ORDER BY u.id COLLATE "C"
			ON CONFLICT (queue_id, dedup_id) DO UPDATE SET deadline = EXCLUDED.deadline, item_id = NULL, item_deadline = NULL
				WHERE d.deadline <= v_now
			RETURNING d.dedup_id)
		SELECT coalesce(array_agg(c.dedup_id), '{}') INTO v_claimed FROM c;
		SELECT coalesce(jsonb_object_agg(d.dedup_id, CASE WHEN d.item_deadline = d.deadline THEN d.item_id END), '{}') INTO v_known
			FROM styx_dedup d WHERE d.queue_id = v_q.id AND d.dedup_id = ANY(v_dedups) AND NOT d.dedup_id = ANY(v_claimed);
	END IF;

	-- The items stored: those without an id, and the first of each id
	-- claimed; each gets the next id of the sequence, in item order,
	-- once the sequence is past the ids of a lost primary (ids.go: the
	-- application's connection may be the first to meet a new epoch).
	IF to_regprocedure('styx_check_item_ids()') IS NOT NULL THEN
		PERFORM styx_check_item_ids();
	END IF;
	FOR i IN 1 .. v_n LOOP
		v_keep := v_keep || (v_dedups[i] IS NULL OR (v_dedups[i] = ANY(v_claimed) AND NOT v_firsts ? v_dedups[i]));
		IF v_keep[i] THEN
			v_ids := v_ids || nextval('styx_item_ids');
			IF v_dedups[i] IS NOT NULL THEN
				v_firsts := v_firsts || jsonb_build_object(v_dedups[i], i);
			END IF;
			v_cursor := coalesce(v_cursor, v_ids[i]);
			v_ready := v_ready OR v_states[i] = 0;
		ELSIF v_firsts ? v_dedups[i] THEN
			v_ids := v_ids || v_ids[(v_firsts->>v_dedups[i])::integer];
		ELSE
			v_ids := v_ids || (v_known->>v_dedups[i])::bigint;
		END IF;
	END LOOP;
	IF v_cursor IS NULL THEN
		RETURN v_ids; -- every item was a duplicate
	END IF;
	UPDATE styx_dedup d SET item_id = v_ids[(v_firsts->>d.dedup_id)::integer], item_deadline = v_dedup_deadline
		WHERE d.queue_id = v_q.id AND d.dedup_id = ANY(v_claimed);

	-- The partition with the fewest ready items (engine.FewestReady).
	v_cap := (v_rules->>'ready_count_cap')::integer;
	IF v_q.partitions > 1 THEN
		SELECT s.p INTO v_part FROM (
			SELECT p, least(v_cap,
				(SELECT count(*) FROM (SELECT 1 FROM styx_items WHERE queue_id = v_q.id AND partition = p AND state = 0 AND grp IS NULL
					LIMIT v_cap) a) +
				(SELECT count(*) FROM (SELECT 1 FROM styx_items WHERE queue_id = v_q.id AND partition = p AND state = 0 AND grp IS NOT NULL
					LIMIT v_cap) b)) AS r
			FROM generate_series(0, v_q.partitions - 1) AS p) s
		ORDER BY s.r, (s.p - v_cursor % v_q.partitions + v_q.partitions) % v_q.partitions LIMIT 1;
	END IF;
	FOR i IN 1 .. v_n LOOP
		v_parts := v_parts || CASE WHEN v_groups[i] IS NULL THEN v_part ELSE styx_group_partition(v_groups[i], v_q.partitions) END;
	END LOOP;
	IF v_q.expire_timeout > 0 THEN
		v_expire := v_now + v_q.expire_timeout;
	END IF;

	INSERT INTO styx_items (queue_id, id, partition, state, deadline, expire_deadline, created_at, reference, kind, encoding, payload, grp)
	SELECT v_q.id, u.id, u.part, u.state, u.deadline, v_expire, v_now, u.ref, u.kind, u.enc, u.payload, u.grp
	FROM unnest(v_ids, v_parts, v_states, v_deadlines, v_refs, v_kinds, v_encs, v_payloads, v_groups, v_keep)
		WITH ORDINALITY AS u(id, part, state, deadline, ref, kind, enc, payload, grp, keep, o)
	WHERE u.keep ORDER BY u.o;

	-- Delivered at the caller's COMMIT (Manager.listen).
	IF v_ready THEN
		PERFORM pg_notify(v_rules->>'channel', 'i:' || v_q.id);
	END IF;
	RETURN v_ids;
END
$f$;

REVOKE ALL ON FUNCTION styx_produce(text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION styx_produce_refuse(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION styx_group_partition(text, integer) FROM PUBLIC;

-- The functions run with this schema's search_path, whatever the
-- caller's (SECURITY DEFINER needs it pinned).
DO $do$ BEGIN
	EXECUTE format('ALTER FUNCTION styx_produce(text, jsonb) SET search_path = %I, pg_temp', current_schema());
	EXECUTE format('ALTER FUNCTION styx_produce_refuse(text, text) SET search_path = %I, pg_temp', current_schema());
	EXECUTE format('ALTER FUNCTION styx_group_partition(text, integer) SET search_path = %I, pg_temp', current_schema());
END $do$;
`

// produceRules are the rules styx_produce reads (the row 'produce' of
// styx_settings), from the Go rules of a produce. Sizes are bytes, times
// and durations Unix nanoseconds.
type produceRules struct {
	// Channel is the schema's NOTIFY channel (Store.channel).
	Channel                 string `json:"channel"`
	MaxItems                int    `json:"max_items"`
	MaxPayloadBytes         int    `json:"max_payload_bytes"`
	MaxFieldBytes           int    `json:"max_field_bytes"`
	MaxDeduplicationIDBytes int    `json:"max_deduplication_id_bytes"`
	MaxGroupBytes           int    `json:"max_group_bytes"`
	// Hidden is a regular expression (PostgreSQL's ARE) matching one
	// hidden character (text.Hidden), HiddenRule the rule in words.
	Hidden     string `json:"hidden"`
	HiddenRule string `json:"hidden_rule"`
	// MinTime and MaxTime bound enqueue_at (queue.MinTime, queue.MaxTime);
	// MinYear and MaxYear are their years, the texts their RFC 3339 forms.
	MinTime     int64  `json:"min_time"`
	MaxTime     int64  `json:"max_time"`
	MinYear     int    `json:"min_year"`
	MaxYear     int    `json:"max_year"`
	MinTimeText string `json:"min_time_text"`
	MaxTimeText string `json:"max_time_text"`
	// ScheduleResolution: an enqueue_at closer than this is ready now.
	ScheduleResolution int64 `json:"schedule_resolution"`
	// DeduplicationWindow is the window of a queue without its own.
	DeduplicationWindow int64 `json:"deduplication_window"`
	// ReadyCountCap bounds the ready items counted per partition.
	ReadyCountCap int `json:"ready_count_cap"`
}

// currentProduceRules returns the rules of this server for the schema.
func currentProduceRules(schema string) produceRules {
	return produceRules{
		Channel: schemaChannel(schema), MaxItems: queue.MaxBatch, MaxPayloadBytes: queue.MaxPayloadBytes,
		MaxFieldBytes: queue.MaxFieldLength, MaxDeduplicationIDBytes: queue.MaxDeduplicationID, MaxGroupBytes: queue.MaxGroup,
		Hidden: hiddenClass(), HiddenRule: text.Rule,
		MinTime: queue.MinTime.UnixNano(), MaxTime: queue.MaxTime.UnixNano(),
		MinYear: queue.MinTime.Year(), MaxYear: queue.MaxTime.Year(),
		MinTimeText:        queue.MinTime.Format("2006-01-02T15:04:05.999999999Z07:00"),
		MaxTimeText:        queue.MaxTime.Format("2006-01-02T15:04:05.999999999Z07:00"),
		ScheduleResolution: int64(queue.ScheduleResolution), DeduplicationWindow: int64(queue.DeduplicationWindow),
		ReadyCountCap: readyCountCap,
	}
}

// writeProduceRules writes this server's produce rules for styx_produce,
// in the migration's transaction (so after the migration that creates
// styx_settings); nothing when they are the same. The last node to start
// sets them: nodes of one version agree.
func writeProduceRules(ctx context.Context, tx pgx.Tx) error {
	var schema string
	if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return err
	}
	b, err := json.Marshal(currentProduceRules(schema))
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO styx_settings AS s (name, value) VALUES ('produce', $1::jsonb)
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value WHERE s.value IS DISTINCT FROM EXCLUDED.value`, string(b))
	return err
}

// hiddenClass returns a bracket expression of PostgreSQL's regular
// expressions matching exactly the characters text.Hidden reports (but
// U+0000, which no PostgreSQL text holds), built from it.
var hiddenClass = sync.OnceValue(func() string {
	var b strings.Builder
	b.WriteByte('[')
	esc := func(r rune) string {
		if r > 0xffff {
			return fmt.Sprintf(`\U%08x`, r)
		}
		return fmt.Sprintf(`\u%04x`, r)
	}
	for r := rune(1); r <= utf8.MaxRune; r++ {
		if !text.Hidden(r) || r == utf8.RuneError {
			continue
		}
		end := r
		for end+1 <= utf8.MaxRune && text.Hidden(end+1) && end+1 != utf8.RuneError {
			end++
		}
		b.WriteString(esc(r))
		if end > r {
			b.WriteString("-" + esc(end))
		}
		r = end
	}
	b.WriteByte(']')
	return b.String()
})
