package service_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// rlo is U+202E RIGHT-TO-LEFT OVERRIDE: "invoice\u202Efdp.exe" shows as
// "invoiceexe.pdf".
const rlo = "\u202e"

// TestHiddenCharactersRefused (issue 36, 8): a /v1 string that is an
// identifier an operator will see (a queue's reference and namespace, an
// item's kind, reference and encoding on produce, import and dead.edit, a lease's
// client_id) is refused with 400 naming the field, the character and the
// rule when it holds a control, bidi or zero-width character. Before, all
// were stored as sent. Nothing is stored.
func TestHiddenCharactersRefused(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "text-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "text", DeadQueue: "text-dlq", MaxAttempts: 1})
		s.Produce("text", "one")
		leased := s.Lease("text", 1)
		s.Retry("text", leased.Partition, &pb.QueueRetryItem{Id: leased.Items[0].Id, Dead: true, Error: "boom"})
		dead := s.WaitItems("text-dlq", 1)[0]
		str := func(v string) *string { return &v }

		cases := []struct {
			name  string
			call  func() error
			parts []string
		}{
			{"QueueReferenceOnCreate", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "q1", Reference: "invoice" + rlo + "fdp.exe"})
			}, []string{"invalid reference", `invoice\u202efdp.exe`, "U+202E at character 7", "bidi"}},
			{"QueueReferenceOnUpdate", func() error {
				return s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "text", Reference: "a\x1b[2Jb", UpdateMask: []string{"reference"}})
			}, []string{"invalid reference", `a\u001b[2Jb`, "U+001B at character 1", "control"}},
			{"Namespace", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "q2", Namespace: "team" + rlo})
			}, []string{"invalid namespace", "U+202E at character 4"}},
			{"LeaseClientID", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "text", BatchSize: 1, ClientId: "worker\u200b1", RequestTimeout: "1s"})
				return err
			}, []string{"invalid client_id", "U+200B at character 6", "zero-width"}},
			{"ProduceKind", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "text", RequestTimeout: "1m",
					Items: []*pb.QueueProduceItem{{Utf8: "x", Kind: "email" + rlo}}})
			}, []string{"invalid items[0].kind", "U+202E at character 5"}},
			{"ProduceReference", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "text", RequestTimeout: "1m",
					Items: []*pb.QueueProduceItem{{Utf8: "x"}, {Utf8: "y", Reference: "ord\u20661"}}})
			}, []string{"invalid items[1].reference", "U+2066 at character 3"}},
			{"ImportKind", func() error {
				_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "text", Items: []*pb.StorageItem{
					{Payload: []byte("x"), Kind: "email" + rlo}}})
				return err
			}, []string{"invalid items[0].kind", "U+202E at character 5"}},
			{"ImportReference", func() error {
				_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "text", Items: []*pb.StorageItem{
					{Payload: []byte("x")}, {Payload: []byte("y"), Reference: "\u2066ref"}}})
				return err
			}, []string{"invalid items[1].reference", "U+2066 at character 0"}},
			{"ImportEncoding", func() error {
				_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "text", Items: []*pb.StorageItem{
					{Payload: []byte("x"), Encoding: "json\ufeff"}}})
				return err
			}, []string{"invalid items[0].encoding", "U+FEFF at character 4"}},
			{"DeadEditKind", func() error {
				_, err := s.C.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "text-dlq", Id: dead.Id, Payload: []byte("x"), Kind: str("k" + rlo)})
				return err
			}, []string{"invalid kind", "U+202E at character 1"}},
			{"DeadEditReference", func() error {
				_, err := s.C.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "text-dlq", Id: dead.Id, Payload: []byte("x"), Reference: str("r\u200fr")})
				return err
			}, []string{"invalid reference", "U+200F at character 1"}},
			{"QueueName", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders" + rlo + "gpj.exe"})
			}, []string{"invalid queue_name", `orders\u202egpj.exe`, "U+202E at character 6"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				err := c.call()
				servertest.RequireCode(t, err, styx.CodeBadRequest, c.parts...)
				require.NotContains(t, err.Error(), rlo, "the answer escapes what it quotes")
			})
		}

		// Nothing was stored.
		list, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 10})
		require.NoError(t, err)
		require.Len(t, list.Items, 2)
		for _, q := range list.Items {
			require.Empty(t, q.Reference)
		}
		require.Empty(t, s.Items("text"))
		got := s.Items("text-dlq")
		require.Len(t, got, 1)
		require.Equal(t, "test", got[0].Kind)
		require.Equal(t, "ref-one", got[0].Reference)
	})
}

// TestErrorTextKeptAsSent (issue 36, 8): a retry's error is free text: tabs,
// newlines and even U+202E are accepted and kept byte for byte (the CLI and
// the console escape them where they show them); only its length is
// limited.
func TestErrorTextKeptAsSent(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "errs-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "errs", DeadQueue: "errs-dlq", MaxAttempts: 1})
		s.Produce("errs", "one")
		leased := s.Lease("errs", 1)
		const text = "panic: boom\n\tat main.go:12\r\n" + rlo + "fdp.exe"
		s.Retry("errs", leased.Partition, &pb.QueueRetryItem{Id: leased.Items[0].Id, Dead: true, Error: text})
		got := s.WaitItems("errs-dlq", 1)[0]
		require.Equal(t, text, got.LastError)

		s.Produce("errs", "two")
		leased = s.Lease("errs", 1)
		_, err := s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "errs", Partition: leased.Partition,
			Items: []*pb.QueueRetryItem{{Id: leased.Items[0].Id, Error: strings.Repeat("x", 4097)}}})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "items[0].error", "4097", "4096")
	})
}
