package memory_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/internal/store/memory"
	"github.com/styxq/styx/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}

func TestTaskIDLength(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	require.Error(t, s.PutTask(ctx, store.TaskRecord{}), "empty id")
	long := strings.Repeat("x", 129)
	require.Error(t, s.PutTask(ctx, store.TaskRecord{ID: long}))
	require.NoError(t, s.PutTask(ctx, store.TaskRecord{ID: long[1:]}))
	tasks, err := s.ListTasks(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TaskRecord{{ID: long[1:]}}, tasks)
}
