package transport

import (
	"bytes"
	"sync"
)

// maxPooledBuffer is the largest buffer kept for reuse; larger ones (rare
// huge batches) are left to the garbage collector.
const maxPooledBuffer = 4 << 20

// buffers pools the buffers request bodies are read into and protobuf
// replies are encoded into, which cost a large share of the CPU of batched
// requests when allocated per request.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// getBuffer returns an empty pooled buffer with room for size bytes when
// size is known (>= 0) and at most limit.
func getBuffer(size, limit int64) *bytes.Buffer {
	b := buffers.Get().(*bytes.Buffer)
	if size > 0 && size <= limit {
		b.Grow(int(size) + bytes.MinRead) // ReadFrom wants MinRead spare bytes
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
