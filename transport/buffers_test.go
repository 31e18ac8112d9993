package transport

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// TestReadBody: the buffer holds the body whatever Content-Length claims,
// and its capacity follows the bytes that arrived, not the claim.
func TestReadBody(t *testing.T) {
	// A fresh pool (no test here runs in parallel): a buffer pooled by an
	// earlier test would start with its capacity.
	buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	for _, c := range []struct {
		name    string
		n       int   // bytes sent
		size    int64 // Content-Length
		maxCap  int
		wantErr error
	}{
		{name: "Small", n: 100, size: 100, maxCap: 100 + bytes.MinRead},
		{name: "Unknown", n: 3 << 20, size: -1, maxCap: 8 << 20},
		{name: "ExactLarge", n: 5 << 20, size: 5 << 20, maxCap: 5<<20 + 4*bytes.MinRead},
		{name: "ClaimsMoreThanSent", n: 200, size: 64 << 20, maxCap: maxPresize + bytes.MinRead, wantErr: io.ErrUnexpectedEOF},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("x"), c.n)
			var r io.Reader = iotest.HalfReader(bytes.NewReader(body))
			if c.wantErr != nil {
				r = io.MultiReader(r, iotest.ErrReader(c.wantErr))
			}
			b, err := readBody(r, c.size)
			defer putBuffer(b)
			require.ErrorIs(t, err, c.wantErr)
			require.Equal(t, body, b.Bytes())
			require.LessOrEqual(t, b.Cap(), c.maxCap)
		})
	}
}
