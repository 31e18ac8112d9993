package postgres_test

import (
	"testing"
	"time"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/store"
)

// BenchmarkGetKey measures the lookup --auth adds to every request on
// PostgreSQL: one primary-key SELECT on styx_api_keys, no cache
// (docs/security.md). Run with:
//
//	go test -run '^$' -bench GetKey ./internal/backend/postgres/
func BenchmarkGetKey(b *testing.B) {
	s, err := postgres.OpenStore(b.Context(), pgtest.SchemaURL(b, pgtest.BaseURL(b)), 8)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	_, id, hash, err := auth.Generate()
	if err != nil {
		b.Fatal(err)
	}
	if err := s.CreateKey(b.Context(), store.KeyRecord{Name: "k", ID: id, Hash: hash, Scopes: []string{"read"}, CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.GetKey(b.Context(), id); err != nil {
			b.Fatal(err)
		}
	}
}
