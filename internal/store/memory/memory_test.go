package memory_test

import (
	"testing"

	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/internal/store/memory"
	"github.com/styxq/styx/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}
