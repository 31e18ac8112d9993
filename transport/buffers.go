package transport

import (
	"bytes"
	"io"
	"sync"
)

// maxPooledBuffer is the largest buffer kept for reuse; larger ones (rare
// huge batches) are left to the garbage collector.
const maxPooledBuffer = 4 << 20

// maxPresize is the most room a request body's buffer is given before its
// bytes arrive: Content-Length is the client's claim, not bytes received,
// so a larger body's buffer grows as it arrives (issue 23: 200 bytes sent
// under "Content-Length: 64 MiB" pinned 64 MiB).
const maxPresize = 1 << 20

// buffers pools the buffers request bodies are read into and protobuf
// replies are encoded into, which cost a large share of the CPU of batched
// requests when allocated per request.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// getBuffer returns an empty pooled buffer with room for size bytes when
// size > 0.
func getBuffer(size int) *bytes.Buffer {
	b := buffers.Get().(*bytes.Buffer)
	if size > 0 {
		b.Grow(size)
	}
	return b
}

// putBuffer returns b to the pool; the caller must not use b or bytes
// taken from it afterwards.
func putBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuffer {
		return
	}
	b.Reset()
	buffers.Put(b)
}

// readBody reads r to its end into a pooled buffer, which the caller
// returns with putBuffer (also on error). size is the body's announced
// length (-1: unknown). The buffer is given room for at most maxPresize
// bytes before bytes arrive, and then grows as they do, doubling but never
// past size: its memory is at most about twice what the client has sent.
func readBody(r io.Reader, size int64) (*bytes.Buffer, error) {
	b := getBuffer(0)
	buf := b.AvailableBuffer() // empty, with the pooled buffer's capacity
	var err error
	for {
		if cap(buf)-len(buf) < bytes.MinRead {
			want := max(len(buf), maxPresize) // double, from maxPresize on
			if rest := size - int64(len(buf)); rest >= 0 && rest < int64(want) {
				want = int(rest)
			}
			// MinRead spare bytes to read the end of the body into.
			grown := make([]byte, len(buf), len(buf)+want+bytes.MinRead)
			copy(grown, buf)
			buf = grown
		}
		var n int
		n, err = r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
	}
	*b = *bytes.NewBuffer(buf)
	if err == io.EOF {
		return b, nil
	}
	return b, err
}
