package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestEditIsNoAttempt (issue 49, 8): a payload edit's entry in the attempt
// history is an edit (kind "edit", attempt 0), not an attempt (it read as
// "Attempt 1"); an export and import keeps it an edit, and an unknown kind
// is refused.
func TestEditIsNoAttempt(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "ee", &pb.QueueInfo{})
		dead := deadItemsIn(s, "ee", dlq, 1)[0]
		_, err := s.C.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: dlq, Id: dead.Id, Payload: []byte("fixed")})
		require.NoError(t, err)
		it := deadList(s, dlq, nil, 10)[0]
		require.Len(t, it.Errors, 2, "the attempt and the edit")
		assert.Equal(t, "", it.Errors[0].Kind)
		assert.EqualValues(t, 1, it.Errors[0].Attempt)
		edit := it.Errors[1]
		assert.Equal(t, "edit", edit.Kind)
		assert.Zero(t, edit.Attempt, "an edit is no attempt")
		assert.Contains(t, edit.Error, "payload edited by")

		// Exported and imported, the history keeps its edit.
		s.CreateQueue(&pb.QueueInfo{QueueName: "ee-copy"})
		_, err = s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "ee-copy", Items: []*pb.StorageItem{
			{Payload: []byte("fixed"), Errors: it.Errors}}})
		require.NoError(t, err)
		copied := s.Items("ee-copy")
		require.Len(t, copied, 1)
		require.Len(t, copied[0].Errors, 2)
		assert.Equal(t, "edit", copied[0].Errors[1].Kind)
		assert.Zero(t, copied[0].Errors[1].Attempt)

		for _, e := range []*pb.AttemptError{
			{Attempt: 1, Error: "x", Kind: "redrive", At: servertest.At(time.Now())},
			{Attempt: -1, Error: "x", At: servertest.At(time.Now())},
		} {
			_, err = s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "ee-copy", Items: []*pb.StorageItem{
				{Payload: []byte("y"), Errors: []*pb.AttemptError{e}}}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "items[0].errors[0].")
		}
	})
}
