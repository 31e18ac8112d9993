package queue

import (
	"math"
	"testing"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

func TestCheckTime(t *testing.T) {
	ns := time.Nanosecond
	for _, c := range []struct {
		t  time.Time
		ok bool
	}{
		{time.Time{}, true},
		{MinTime, true},
		{MaxTime, true},
		{time.Unix(0, 0), true},
		{MinTime.Add(-ns), false},
		{MaxTime.Add(ns), false},
		{time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), false},
	} {
		err := CheckTime("f", c.t)
		if (err == nil) != c.ok || TimeInRange(c.t) != c.ok {
			t.Errorf("%s: CheckTime = %v, TimeInRange = %v; want ok %v", c.t, err, TimeInRange(c.t), c.ok)
		}
		if err != nil {
			if _, ok := apierr.As(err); !ok {
				t.Errorf("%s: %v is not an apierr", c.t, err)
			}
		}
		if c.ok && Nanos(c.t) != 0 && !FromNanos(Nanos(c.t)).Equal(c.t) {
			t.Errorf("%s does not survive Nanos", c.t)
		}
	}
	if Nanos(MinTime) != math.MinInt64 || Nanos(MaxTime) != math.MaxInt64 {
		t.Errorf("the range is not int64's: %d..%d", Nanos(MinTime), Nanos(MaxTime))
	}
}

func TestCheckItemTimes(t *testing.T) {
	bad := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	it := Item{Errors: ItemErrors{Errors: []AttemptError{{At: time.Now()}, {At: bad}}}}
	err := CheckItemTimes(7, &it)
	if err == nil || err.Error() != "invalid items[7].errors[1].at; 2300-01-01T00:00:00Z is out of range "+
		"1677-09-21T00:12:43.145224192Z..2262-04-11T23:47:16.854775807Z, the times storage keeps" {
		t.Fatalf("got %v", err)
	}
	it = Item{Meta: ItemMeta{LeaseDeadline: bad}}
	if err := CheckItemTimes(0, &it); err == nil {
		t.Fatal("lease_deadline of 2300 accepted")
	}
}
