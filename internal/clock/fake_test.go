package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/clock"
)

func TestFake(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f := clock.NewFake(start)
	require.Equal(t, start, f.Now())
	require.Equal(t, start.Add(time.Minute), f.Advance(time.Minute))
	require.Equal(t, start.Add(time.Minute), f.Now())
	f.Set(start)
	require.Equal(t, start, f.Now())

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				f.Advance(time.Millisecond)
				_ = f.Now()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, start.Add(800*time.Millisecond), f.Now())
}

func TestFakeAfter(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f := clock.NewFake(start)
	now := f.After(0)
	require.Equal(t, start, <-now, "d <= 0 fires at once")
	a, b := f.After(time.Second), f.After(2*time.Second)
	f.Advance(999 * time.Millisecond)
	require.Empty(t, a)
	f.Advance(time.Millisecond)
	require.Equal(t, start.Add(time.Second), <-a)
	require.Empty(t, b)
	f.Set(start.Add(time.Hour))
	require.Equal(t, start.Add(time.Hour), <-b)
}
