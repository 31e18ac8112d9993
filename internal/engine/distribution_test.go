package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFewestReady(t *testing.T) {
	// ADR 0019 of Querator, "Opportunistic Distribution": requests of 50,
	// 30 and 100 items onto four empty partitions, then 20, 100 and 100.
	ready := make([]int, 4)
	next := 0
	produce := func(n int) int {
		p := FewestReady(ready, next)
		next = p + 1
		ready[p] += n
		return p
	}
	assert.Equal(t, 0, produce(50))
	assert.Equal(t, 1, produce(30))
	assert.Equal(t, 2, produce(100))
	assert.Equal(t, []int{50, 30, 100, 0}, ready)
	assert.Equal(t, 3, produce(20))
	assert.Equal(t, 3, produce(100))
	assert.Equal(t, 1, produce(100))
	assert.Equal(t, []int{50, 130, 100, 120}, ready)
	assert.Equal(t, 0, produce(1), "partition 0 now holds the fewest")

	// Equals take turns from the cursor, wrapping.
	assert.Equal(t, 2, FewestReady([]int{0, 0, 0}, 2))
	assert.Equal(t, 0, FewestReady([]int{0, 0, 0}, 3))
	assert.Equal(t, 0, FewestReady([]int{7}, 5))
}

func TestMostReady(t *testing.T) {
	assert.Equal(t, -1, MostReady([]int{0, 0}, 0))
	assert.Equal(t, 1, MostReady([]int{3, 9, 9}, 0))
	assert.Equal(t, 2, MostReady([]int{3, 9, 9}, 2))
	assert.Equal(t, 0, MostReady([]int{3, 0, 0}, 1))
}

func TestAssignLeases(t *testing.T) {
	t.Run("MostReadyFirst", func(t *testing.T) {
		// Querator's OpportunisticLease: 30 and 20 ready, leases of 5, 10
		// and 20 one after another.
		ready, next := []int{30, 20}, 0
		for _, c := range []struct{ want, p int }{{5, 0}, {10, 0}, {20, 1}} {
			var a []int
			a, next = AssignLeases(ready, []int{c.want}, next)
			assert.Equal(t, []int{c.p}, a)
			ready[c.p] -= c.want
		}
		assert.Equal(t, []int{15, 0}, ready)
	})
	t.Run("SpreadsOverPartitions", func(t *testing.T) {
		a, next := AssignLeases([]int{10, 10, 4}, []int{10, 10, 10}, 0)
		assert.Equal(t, []int{0, 1, 2}, a)
		assert.Equal(t, 3, next)
	})
	t.Run("SharesWhenAllPromised", func(t *testing.T) {
		// Querator's WaitingConsumers: five waiters, ten items in one
		// partition of five.
		a, _ := AssignLeases([]int{0, 0, 10, 0, 0}, []int{10, 10, 10, 10, 10}, 0)
		assert.Equal(t, []int{2, 2, 2, 2, 2}, a)
		a, _ = AssignLeases([]int{10, 4}, []int{10, 10, 10}, 0)
		assert.Equal(t, []int{0, 1, 0}, a, "the third shares the partition with the most")
	})
	t.Run("NothingReady", func(t *testing.T) {
		a, next := AssignLeases([]int{0, 0}, []int{1, 2}, 1)
		assert.Equal(t, []int{-1, -1}, a)
		assert.Equal(t, 1, next)
	})
}

func TestDeal(t *testing.T) {
	assert.Equal(t, []int{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}, Deal(10, []int{10, 10, 10, 10, 10}))
	assert.Equal(t, []int{0, 1, 0, 0}, Deal(4, []int{5, 1}))
	assert.Equal(t, []int{0, 1, 1}, Deal(9, []int{1, 2}), "no more than the waiters want")
	assert.Equal(t, []int{0, 1}, Deal(2, []int{1, 1, 1}), "more waiters than items")
	assert.Empty(t, Deal(0, []int{3}))
}
