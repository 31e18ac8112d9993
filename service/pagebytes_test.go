package service_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/service"
	pb "github.com/styxq/styx/styxpb"
)

// Listings bounded by bytes (issue 36, finding 4): storage/items.list,
// storage/scheduled.list and dead.list stop a page at service.PageBytes of
// items, whatever the limit, and a client paging by pivot (next_pivot for
// dead.list) still gets every item exactly once. The tests lower the bound
// (service.SetPageBytes) to a few items of itemBytes, so that small items
// show it (the bound is a number of bytes, whatever it is: 64 KiB items
// against a 288 KiB bound page as 1 MiB items against 4.5 MiB, at a
// sixteenth of the bytes written and listed); they do not run in parallel
// with other tests.

// itemBytes is the size of the tests' big items.
const itemBytes = 64 << 10

// bigPayload is item i's payload: n bytes, its index first.
func bigPayload(i, n int) []byte {
	p := bytes.Repeat([]byte{byte('a' + i%26)}, n)
	copy(p, fmt.Sprintf("item %03d ", i))
	return p
}

// fillBig gives queue n items of size bytes each: scheduled an hour ahead
// when scheduled, as imported dead items from queue "src" when dead, else
// produced. Batches of 4 keep each request small.
func fillBig(t *testing.T, s *servertest.Server, queue string, n, size int, scheduled, dead bool) {
	t.Helper()
	for i := 0; i < n; i += 4 {
		if dead {
			req := &pb.StorageItemsImportRequest{QueueName: queue}
			for j := i; j < min(i+4, n); j++ {
				req.Items = append(req.Items, &pb.StorageItem{Payload: bigPayload(j, size), SourceQueue: "src", DeadReason: "explicit"})
			}
			_, err := s.C.StorageItemsImport(ctx, req)
			require.NoError(t, err)
			continue
		}
		req := &pb.QueueProduceRequest{QueueName: queue, RequestTimeout: "1m"}
		for j := i; j < min(i+4, n); j++ {
			it := &pb.QueueProduceItem{Bytes: bigPayload(j, size)}
			if scheduled {
				it.EnqueueAt = timestamppb.New(time.Now().Add(time.Hour))
			}
			req.Items = append(req.Items, it)
		}
		require.NoError(t, s.C.QueueProduce(ctx, req))
	}
}

// payloadBytes is the payload bytes of a page.
func payloadBytes(items []*pb.StorageItem) int {
	n := 0
	for _, it := range items {
		n += len(it.Payload)
	}
	return n
}

// pageByPivot pages through a storage/*.list call as a Querator client
// does: the next page starts at the last id seen (inclusive), its first
// item dropped when it is that one, until a page holds nothing new. check
// sees every page. It returns the items in the order listed.
func pageByPivot(t *testing.T, list func(pivot string) []*pb.StorageItem, check func(t *testing.T, page []*pb.StorageItem)) []*pb.StorageItem {
	t.Helper()
	var all []*pb.StorageItem
	pivot := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "the listing ends")
		page := list(pivot)
		check(t, page)
		if pivot != "" && len(page) > 0 && page[0].Id == pivot {
			page = page[1:]
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		pivot = page[len(page)-1].Id
	}
}

// requireEachOnce checks that items are the n items of bigPayload(0..n-1,
// size), in order, each once.
func requireEachOnce(t *testing.T, items []*pb.StorageItem, n, size int) {
	t.Helper()
	require.Len(t, ids(items), n)
	seen := map[string]bool{}
	for i, it := range items {
		require.False(t, seen[it.Id], "item %s listed twice", it.Id)
		seen[it.Id] = true
		require.True(t, bytes.Equal(bigPayload(i, size), it.Payload), "item %d is %.16q…", i, it.Payload)
	}
}

// TestListingsBoundedByBytes: 40 items of itemBytes (40 dead ones, 40
// scheduled ones) and a bound of 4.5 items: a page of each listing (limit
// 1000, the most a dead.list may ask) holds at most 4 items and stays under
// the bound, and paging lists each item once. Before, one call returned all
// 40 (the server built them all).
func TestListingsBoundedByBytes(t *testing.T) {
	const n, limit = 40, 1000
	bound := 4*itemBytes + itemBytes/2
	t.Cleanup(service.SetPageBytes(bound))
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		// The dead items serve storage/items.list (which lists a
		// dead-letter queue's items too) and dead.list.
		s.CreateQueue(&pb.QueueInfo{QueueName: "later"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "big-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "src", DeadQueue: "big-dead"})
		fillBig(t, s, "later", n, itemBytes, true, false)
		fillBig(t, s, "big-dead", n, itemBytes, false, true)

		check := func(t *testing.T, page []*pb.StorageItem) {
			require.NotEmpty(t, page)
			require.LessOrEqual(t, len(page), 4, "a page stops at the bound, not at the limit")
			require.LessOrEqual(t, payloadBytes(page), bound)
		}
		for name, call := range map[string]struct {
			queue string
			list  func(context.Context, *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error)
		}{"storage/items.list": {"big-dead", s.C.StorageItemsList}, "storage/scheduled.list": {"later", s.C.StorageScheduledList}} {
			t.Run(name, func(t *testing.T) {
				items := pageByPivot(t, func(pivot string) []*pb.StorageItem {
					res, err := call.list(ctx, &pb.StorageItemsListRequest{QueueName: call.queue, Pivot: pivot, Limit: limit})
					require.NoError(t, err)
					return res.Items
				}, check)
				requireEachOnce(t, items, n, itemBytes)
			})
		}
		t.Run("dead.list", func(t *testing.T) {
			var items []*pb.StorageItem
			pivot := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 1000, "the listing ends")
				res, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "big-dead", Pivot: pivot, Limit: limit})
				require.NoError(t, err)
				if len(res.Items) > 0 || res.NextPivot != "" {
					check(t, res.Items)
				}
				items = append(items, res.Items...)
				if pivot = res.NextPivot; pivot == "" {
					break
				}
			}
			requireEachOnce(t, items, n, itemBytes)
		})
	})
}

// TestListingItemOverPageBytes: an item bigger than the bound is listed
// alone on its page, and a storage/*.list page whose pivot item came first
// holds the next item too, so that paging by pivot moves on; dead.list
// moves on by next_pivot.
func TestListingItemOverPageBytes(t *testing.T) {
	const n = 3
	t.Cleanup(service.SetPageBytes(itemBytes / 4))
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "big"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "big-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "src", DeadQueue: "big-dead"})
		fillBig(t, s, "big", n, itemBytes, false, false)
		fillBig(t, s, "big-dead", n, itemBytes, false, true)

		res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "big", Limit: 10})
		require.NoError(t, err)
		require.Len(t, ids(res.Items), 1, "the first item, whatever its size")
		first := res.Items[0].Id
		res, err = s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "big", Pivot: first, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ids(res.Items), 2, "the pivot's item and the next")
		require.Equal(t, first, res.Items[0].Id)
		items := pageByPivot(t, func(pivot string) []*pb.StorageItem {
			res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "big", Pivot: pivot, Limit: 10})
			require.NoError(t, err)
			return res.Items
		}, func(*testing.T, []*pb.StorageItem) {})
		requireEachOnce(t, items, n, itemBytes)

		var dead []*pb.StorageItem
		pivot := ""
		for {
			res, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "big-dead", Pivot: pivot, Limit: 10})
			require.NoError(t, err)
			require.Len(t, ids(res.Items), 1)
			dead = append(dead, res.Items...)
			if pivot = res.NextPivot; pivot == "" {
				break
			}
		}
		requireEachOnce(t, dead, n, itemBytes)
	})
}
