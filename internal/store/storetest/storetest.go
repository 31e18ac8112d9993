// Package storetest is the conformance suite for store.Store backends.
//
// A backend's tests call Run with a function opening a fresh, empty store;
// persistent backends also call RunReopen. Both use nested t.Run subtests,
// so one failing behaviour can be run alone with -run.
//
// Comparisons treat times as instants (time.Time.Equal: location and
// monotonic clock reading are ignored, nanoseconds are not), and an empty
// payload or error list as equal to a nil one.
//
// The tests, by area:
//   - storetest.go: Run and RunCatalog, which run the areas below.
//   - queues.go: the catalog (queue definitions) and DeleteQueue.
//   - items.go: the item log: items, bodies, errors, leases, listings, and
//     item groups.
//   - consistency.go: isolation of partitions and queues, last ids, and
//     batches written whole and not aliased.
//   - tasks.go: redrive task records (store.TaskStore).
//   - keys.go: API key records (store.KeyStore).
//   - history.go: per-minute history records (store.HistoryStore).
//   - activity.go: the activity log's records (store.ActivityStore).
//   - concurrent.go: concurrent writers, and a closed store.
//   - reopen.go: RunReopen, everything kept across Close and open.
//   - fixtures.go: the fixtures, reads and comparisons the tests share.
package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/store"
)

// base is the time most fixtures derive from; its nanoseconds catch
// backends that round.
var base = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)

// Run runs the conformance suite. open must return a new, empty, open store
// each time it is called; the suite closes it (the error of a second Close
// is ignored).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	newStore := func(t *testing.T) store.Store {
		t.Helper()
		s := open(t)
		require.NotNil(t, s)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	asCatalog := func(t *testing.T) CatalogStore { return newStore(t) }
	t.Run("Queues", func(t *testing.T) { testQueues(t, asCatalog) })
	t.Run("Items", func(t *testing.T) { testItems(t, newStore) })
	t.Run("Groups", func(t *testing.T) { testGroups(t, newStore) })
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, newStore) })
	t.Run("DeleteQueue", func(t *testing.T) { testDeleteQueue(t, newStore) })
	t.Run("LastID", func(t *testing.T) { testLastID(t, newStore) })
	t.Run("Atomicity", func(t *testing.T) { testAtomicity(t, newStore) })
	t.Run("Aliasing", func(t *testing.T) { testAliasing(t, newStore) })
	t.Run("Tasks", func(t *testing.T) { testTasks(t, asCatalog) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, asCatalog) })
	t.Run("History", func(t *testing.T) { testHistory(t, asCatalog) })
	t.Run("Activity", func(t *testing.T) { testActivity(t, asCatalog) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newStore) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, newStore) })
}

// CatalogStore is the part of the contract a backend without an item log
// implements (the PostgreSQL backend, whose items are decided in SQL): queue
// definitions and tasks.
type CatalogStore interface {
	store.Catalog
	store.TaskStore
	store.KeyStore
	store.HistoryStore
	store.ActivityStore
	Close() error
}

// RunCatalog runs the suite's queue-definition and task tests. open must
// return a new, empty, open store each time it is called; the suite closes
// it.
func RunCatalog(t *testing.T, open func(t *testing.T) CatalogStore) {
	newStore := func(t *testing.T) CatalogStore {
		t.Helper()
		s := open(t)
		require.NotNil(t, s)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("Queues", func(t *testing.T) { testQueues(t, newStore) })
	t.Run("Tasks", func(t *testing.T) { testTasks(t, newStore) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, newStore) })
	t.Run("History", func(t *testing.T) { testHistory(t, newStore) })
	t.Run("Activity", func(t *testing.T) { testActivity(t, newStore) })
}
