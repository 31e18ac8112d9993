package transport

import (
	"testing"

	"github.com/styxq/styx/internal/auth"
)

// TestEveryRouteHasAScope: each API call names its scope in internal/auth.
// An unlisted call falls back to admin (safe, but a key of the call's
// intended scope would be refused), so a new call must be added there.
func TestEveryRouteHasAScope(t *testing.T) {
	h := NewHandler(Config{})
	if len(h.routes) == 0 {
		t.Fatal("no routes")
	}
	for path := range h.routes {
		if _, ok := auth.ScopeOf(path); !ok {
			t.Errorf("%s has no scope in internal/auth's table", path)
		}
	}
}
