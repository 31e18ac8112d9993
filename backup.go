package styx

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	v1 "github.com/duh-rpc/duh-go/proto/v1"
	"google.golang.org/protobuf/proto"
)

// StorageBackup streams an online backup of the server's embedded (Pebble)
// store into w (Styx, issue 47; the admin scope, with a key without queue
// patterns): a tar archive of a checkpoint of the store, taken when the
// call reaches the server (every write answered before is in it), ending
// with a MANIFEST.json of the files' checksums (docs/wire-contract.md,
// "Backup"; `styx restore` verifies and writes it). progress, when not nil,
// is called after each chunk with the bytes written to w so far and the
// size of the store's files the server announced (-1 when it did not; the
// archive is a little larger). It returns the bytes written. A server on
// PostgreSQL answers 501 (an *Error): back its database up with
// pg_basebackup or pg_dump. An error after the first byte leaves w holding
// an archive without its manifest, which a restore refuses; the caller
// should delete it. No request timeout applies but ctx's.
func (c *Client) StorageBackup(ctx context.Context, w io.Writer, progress func(written, total int64)) (int64, error) {
	const path = "/v1/storage/backup"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint+path, bytes.NewReader(nil))
	if err != nil {
		return 0, fmt.Errorf("styx: %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/protobuf")
	req.Header.Set("Accept", "application/protobuf")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("styx: %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var reply v1.Reply
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/protobuf") || proto.Unmarshal(b, &reply) != nil {
			return 0, &Error{Code: resp.StatusCode, Message: fmt.Sprintf("%s: %s", path, strings.TrimSpace(string(b)))}
		}
		return 0, &Error{Code: int(reply.Code), Reason: reply.Details["reason"], Message: reply.Message, Details: reply.Details}
	}
	total := int64(-1)
	if v, err := strconv.ParseInt(resp.Header.Get("Styx-Backup-Bytes"), 10, 64); err == nil {
		total = v
	}
	var written int64
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return written, fmt.Errorf("styx: %s: write the backup: %w", path, err)
			}
			written += int64(n)
			if progress != nil {
				progress(written, total)
			}
		}
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			return written, fmt.Errorf("styx: %s: read the backup: %w", path, rerr)
		}
	}
}
