package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Item ids after a failover or a restore (issue 53).
//
// An item id is a lease handle (and inside an SQS receipt handle): a
// complete names the lease by it. Ids come from the sequence styx_item_ids,
// which a promoted asynchronous standby, or a database restored from a
// backup, holds at an older value than the ids the lost primary handed out;
// without more, it would hand them out again, and a stale client's complete
// would delete another consumer's item. So each database incarnation, an
// epoch, is named by its system identifier (pg_control_system(); a restore
// into a new cluster changes it) and its timeline (the first eight
// hexadecimal digits of pg_walfile_name(pg_current_wal_lsn()); a promotion
// and a point-in-time recovery each start a new one), and recorded in
// styx_item_id_epochs. The first time a node's connection finds its epoch
// unrecorded (styx_check_item_ids, run on every new connection of the pool
// and once at start), the sequence moves itemIDsGap past its value, and the
// epoch is recorded, once, under an advisory lock; every id allocation site
// (the produce insert, requeues, dead-letter moves, the transactional
// enqueue function) keeps calling nextval('styx_item_ids') and gets ids
// past every id the lost primary can have handed out. A fresh database
// (the sequence never used, no epoch recorded) records its epoch without
// moving.
//
// The functions the check reads are executable by every role by default; a
// role denied one (some managed services revoke pg_control_system) reads
// it as 0, so its epochs differ by timeline alone (see
// docs/storage/postgres.md, "Item ids after a failover or a restore").

// itemIDsGap is how far styx_item_ids moves when a new epoch begins: 2^40
// ids, more than a lost primary can have handed out beyond what its
// standby received (12 days of lag at a million ids a second), and room
// for 8 million epochs in a bigint.
const itemIDsGap = 1 << 40

// itemIDsMigration creates styx_item_id_epochs and styx_check_item_ids
// (migration 17). The function names the schema's objects with the schema,
// and runs with its owner's rights and a fixed search_path (SECURITY
// DEFINER), so that an application's role calling the transactional
// enqueue function may call it too. A session remembers that it checked
// (the setting styx.item_ids_checked, naming the schema; reverted with
// its transaction if that rolls back): a session's server cannot change
// timeline under it once it accepts writes, so later calls in the session
// cost a setting's read (an allocation site may call it every time).
// A session on a standby records nothing: promoted, it checks.
var itemIDsMigration = fmt.Sprintf(`
CREATE TABLE styx_item_id_epochs (
	system_identifier bigint      NOT NULL,
	timeline          integer     NOT NULL,
	found             bigint      NOT NULL,
	moved_to          bigint      NOT NULL,
	at                timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (system_identifier, timeline)
);

DO $do$ BEGIN EXECUTE format($q$
	CREATE FUNCTION styx_check_item_ids() RETURNS bigint LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
	DECLARE
		sys bigint := 0;
		tl integer := 0;
		last bigint;
		called boolean;
		target bigint;
	BEGIN
		IF current_setting('styx.item_ids_checked', true) = %%1$L THEN
			RETURN NULL; -- checked in this session, on this primary
		END IF;
		IF pg_is_in_recovery() THEN
			RETURN NULL; -- a standby hands out no id
		END IF;
		IF has_function_privilege('pg_control_system()', 'EXECUTE') THEN
			SELECT system_identifier INTO sys FROM pg_control_system();
		END IF;
		IF has_function_privilege('pg_walfile_name(pg_lsn)', 'EXECUTE') AND has_function_privilege('pg_current_wal_lsn()', 'EXECUTE') THEN
			tl := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
		END IF;
		IF EXISTS (SELECT 1 FROM %%1$I.styx_item_id_epochs WHERE system_identifier = sys AND timeline = tl) THEN
			PERFORM set_config('styx.item_ids_checked', %%1$L, false);
			RETURN NULL;
		END IF;
		PERFORM pg_advisory_xact_lock(hashtext(%%3$L));
		IF EXISTS (SELECT 1 FROM %%1$I.styx_item_id_epochs WHERE system_identifier = sys AND timeline = tl) THEN
			PERFORM set_config('styx.item_ids_checked', %%1$L, false);
			RETURN NULL; -- recorded by another session meanwhile
		END IF;
		SELECT last_value, is_called INTO last, called FROM %%1$I.styx_item_ids;
		target := last;
		IF called OR EXISTS (SELECT 1 FROM %%1$I.styx_item_id_epochs) THEN
			target := last + %d;
			PERFORM setval(%%2$L, target);
		END IF;
		INSERT INTO %%1$I.styx_item_id_epochs (system_identifier, timeline, found, moved_to) VALUES (sys, tl, last, target);
		PERFORM set_config('styx.item_ids_checked', %%1$L, false);
		RETURN CASE WHEN target <> last THEN target END;
	END
	$f$
$q$, current_schema(), quote_ident(current_schema()) || '.styx_item_ids', 'styx-item-ids:' || current_schema());
END $do$;
`, itemIDsGap)

// checkItemIDs runs styx_check_item_ids on conn (see above): it returns
// the value it set the sequence to when this call found a new epoch and
// moved the sequence, 0 otherwise.
func checkItemIDs(ctx context.Context, conn interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int64, error) {
	var moved *int64
	if err := conn.QueryRow(ctx, `SELECT styx_check_item_ids()`).Scan(&moved); err != nil {
		return 0, wrap("check the item ids' epoch", err)
	}
	if moved == nil {
		return 0, nil
	}
	return *moved, nil
}
