package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/service"
)

// The pre-scan: a request body is checked for lists longer than their
// limit before it is decoded, so that a body of a million empty items is
// refused for the cost of reading it, not of building a million messages
// (issue 23). It follows the request's message descriptor, so every route
// and every nested list (filter.ids, items[i].errors) is covered without a
// table per route. A body the scan does not understand is left to the
// decoder, which answers it 455.

// maxScanDepth bounds the nesting the pre-scan follows; the request
// messages nest 3 deep, deeper is left to the decoder.
const maxScanDepth = 16

// listLimit returns the most elements the repeated (or map) field fd may
// hold in one message: service.MaxBatch, or the limit the service checks
// for an import's items (service.MaxImportItems) and for an imported
// item's attempt errors.
func listLimit(fd protoreflect.FieldDescriptor) int {
	switch fd.FullName() {
	case "styx.v1.StorageItem.errors":
		return service.MaxAttemptErrors
	case "styx.v1.StorageItemsImportRequest.items":
		return service.MaxImportItems
	}
	return service.MaxBatch
}

// holdsLists caches mayHoldLists by message descriptor.
var holdsLists sync.Map // protoreflect.MessageDescriptor → bool

// mayHoldLists reports whether a message of descriptor md may hold a list
// or map at any depth: the scans skip, rather than walk, the messages that
// cannot (a produce's items, their timestamps).
func mayHoldLists(md protoreflect.MessageDescriptor) bool {
	if v, ok := holdsLists.Load(md); ok {
		return v.(bool)
	}
	v := findLists(md, map[protoreflect.FullName]bool{})
	holdsLists.Store(md, v)
	return v
}

func findLists(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return true // a recursive message: assume the worst
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Cardinality() == protoreflect.Repeated || (fd.Message() != nil && findLists(fd.Message(), seen)) {
			return true
		}
	}
	return false
}

// limitError is a list over its limit. field is its path from the request
// ("items", "items[3].errors"); n is how many the body holds, or, when
// more is set, the count at which the scan stopped.
type limitError struct {
	field string
	n     int
	more  bool
	limit int
}

func (e *limitError) Error() string {
	given := strconv.Itoa(e.n)
	if e.more {
		given = "more than " + strconv.Itoa(e.limit)
	}
	return fmt.Sprintf("invalid %s; %s given, the limit is %d", e.field, given, e.limit)
}

// apiError is e as the client's 400.
func (e *limitError) apiError() error { return apierr.Invalidf("%s", e.Error()) }

// within prefixes e's field with the path of the element that holds it.
func (e *limitError) within(field string, index int) *limitError {
	e.field = field + "[" + strconv.Itoa(index) + "]." + e.field
	return e
}

// withinMessage prefixes e's field with the singular message field holding it.
func (e *limitError) withinMessage(field string) *limitError {
	e.field = field + "." + e.field
	return e
}

// checkListsProto returns a 400 apierr when the protobuf message of
// descriptor md encoded in b holds a list over its limit, and nil
// otherwise (a malformed body included: proto.Unmarshal judges it). It
// allocates nothing for bodies within the limits.
func checkListsProto(b []byte, md protoreflect.MessageDescriptor) error {
	if e := scanProto(b, md, 0); e != nil {
		return e.apiError()
	}
	return nil
}

func scanProto(b []byte, md protoreflect.MessageDescriptor, depth int) *limitError {
	if depth > maxScanDepth {
		return nil
	}
	fields := md.Fields()
	var small [16]int
	counts := small[:]
	// A singular message field given more than once is merged by the
	// decoder, which is decoding the concatenation of its occurrences: so
	// the scan reads that, once the message's end is reached. merged[i]
	// is field i's occurrences so far: a slice of b (its capacity cut, so
	// that appending copies) while there is one.
	var smallMerged [16][]byte
	merged := smallMerged[:]
	if fields.Len() > len(small) {
		counts, merged = make([]int, fields.Len()), make([][]byte, fields.Len())
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		fd := fields.ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			// Scalars cost no more than their bytes to decode.
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		switch {
		case fd.Cardinality() == protoreflect.Repeated:
			// A packed numeric list (no request has one) counts by its
			// chunks: its elements cost no more than their bytes.
			i := fd.Index()
			counts[i]++
			// Elements past the limit are only counted.
			if fd.Message() != nil && counts[i] <= listLimit(fd) && mayHoldLists(fd.Message()) {
				if e := scanProto(v, fd.Message(), depth+1); e != nil {
					return e.within(string(fd.Name()), counts[i]-1)
				}
			}
		case fd.Message() != nil && mayHoldLists(fd.Message()):
			if i := fd.Index(); merged[i] == nil {
				merged[i] = v[:len(v):len(v)]
			} else {
				merged[i] = append(merged[i], v...)
			}
		}
	}
	for i, c := range counts[:fields.Len()] {
		if fd := fields.Get(i); c > 0 && c > listLimit(fd) {
			return &limitError{field: string(fd.Name()), n: c, limit: listLimit(fd)}
		}
	}
	for i, v := range merged[:fields.Len()] {
		if v == nil {
			continue
		}
		fd := fields.Get(i)
		if e := scanProto(v, fd.Message(), depth+1); e != nil {
			return e.withinMessage(string(fd.Name()))
		}
	}
	return nil
}

// errShape stops the JSON pre-scan at a body that is not shaped as the
// message expects, or is not JSON; protojson judges it.
var errShape = errors.New("transport: not the expected JSON shape")

// checkListsJSON is checkListsProto for a protojson body. It walks b
// without decoding it (jsonScan), so its memory does not grow with the
// number of elements, and stops at the first element over a limit ("more
// than 1000 given").
func checkListsJSON(b []byte, md protoreflect.MessageDescriptor) error {
	s := jsonScan{b: b}
	if !s.eat('{') {
		return nil
	}
	var le *limitError
	if err := s.object(md, 0); errors.As(err, &le) {
		return le.apiError()
	}
	return nil
}

// jsonScan walks a JSON body by hand: strings are skipped, not unescaped
// (keys holding escapes aside), numbers and literals skipped to their end.
// It allocates nothing else, and is several times faster than
// encoding/json's tokens, which allocate every string.
type jsonScan struct {
	b []byte
	i int // the next byte to read
}

// ws skips whitespace.
func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, 0 at the end.
func (s *jsonScan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// eat reads c, after whitespace, if it is next.
func (s *jsonScan) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// str reads a string and returns its content, escapes as written.
func (s *jsonScan) str() ([]byte, error) {
	if !s.eat('"') {
		return nil, errShape
	}
	start := s.i
	for j := start; ; j++ {
		k := bytes.IndexByte(s.b[j:], '"')
		if k < 0 {
			return nil, errShape
		}
		j += k
		escaped := false // by an odd number of backslashes before it
		for p := j - 1; p >= start && s.b[p] == '\\'; p-- {
			escaped = !escaped
		}
		if !escaped {
			s.i = j + 1
			return s.b[start:j], nil
		}
	}
}

// skip reads one value of any kind.
func (s *jsonScan) skip() error {
	switch s.peek() {
	case '"':
		_, err := s.str()
		return err
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, err := s.str(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					s.i++
					return nil
				}
			}
			s.i++
		}
		return errShape
	case 0, '}', ']', ',', ':':
		return errShape
	}
	start := s.i // a number, true, false or null
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ':', ' ', '\t', '\n', '\r', '"', '{', '[':
			if s.i == start {
				return errShape
			}
			return nil
		}
		s.i++
	}
	return nil
}

// field returns the field of fields named key, by JSON or proto name as
// protojson accepts them; nil when there is none.
func field(fields protoreflect.FieldDescriptors, key []byte) protoreflect.FieldDescriptor {
	if bytes.IndexByte(key, '\\') >= 0 {
		var name string
		if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &name) != nil {
			return nil
		}
		if fd := fields.ByJSONName(name); fd != nil {
			return fd
		}
		return fields.ByTextName(name)
	}
	for i := range fields.Len() {
		if fd := fields.Get(i); fd.JSONName() == string(key) || fd.TextName() == string(key) {
			return fd
		}
	}
	return nil
}

// object reads the members of an object of descriptor md whose '{' has
// been read, through its '}'. It returns a *limitError or errShape.
func (s *jsonScan) object(md protoreflect.MessageDescriptor, depth int) error {
	if depth > maxScanDepth {
		return errShape
	}
	if s.eat('}') {
		return nil
	}
	fields := md.Fields()
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if !s.eat(':') {
			return errShape
		}
		fd := field(fields, key)
		next := s.peek()
		switch {
		case fd == nil:
			err = s.skip()
		case fd.IsList() && next == '[':
			s.i++
			err = s.list(fd, depth)
		case fd.IsMap() && next == '{':
			s.i++
			err = s.mapEntries(fd)
		case fd.Cardinality() != protoreflect.Repeated && fd.Message() != nil && next == '{' && mayHoldLists(fd.Message()):
			s.i++
			if err = s.object(fd.Message(), depth+1); err != nil {
				var le *limitError
				if errors.As(err, &le) {
					err = le.withinMessage(string(fd.Name()))
				}
			}
		default:
			err = s.skip()
		}
		if err != nil {
			return err
		}
		if s.eat('}') {
			return nil
		}
		if !s.eat(',') {
			return errShape
		}
	}
}

// list reads the elements of list fd whose '[' has been read, through its
// ']'.
func (s *jsonScan) list(fd protoreflect.FieldDescriptor, depth int) error {
	if s.eat(']') {
		return nil
	}
	limit := listLimit(fd)
	for n := 0; ; n++ {
		if n == limit {
			if s.peek() == ']' { // "[…,]" is not JSON
				return errShape
			}
			return &limitError{field: string(fd.Name()), n: n, more: true, limit: limit}
		}
		var err error
		if fd.Message() != nil && s.peek() == '{' && mayHoldLists(fd.Message()) {
			s.i++
			if err = s.object(fd.Message(), depth+1); err != nil {
				var le *limitError
				if errors.As(err, &le) {
					err = le.within(string(fd.Name()), n)
				}
			}
		} else {
			err = s.skip()
		}
		if err != nil {
			return err
		}
		if s.eat(']') {
			return nil
		}
		if !s.eat(',') {
			return errShape
		}
	}
}

// mapEntries counts the entries of map fd whose '{' has been read,
// through its '}'.
func (s *jsonScan) mapEntries(fd protoreflect.FieldDescriptor) error {
	if s.eat('}') {
		return nil
	}
	limit := listLimit(fd)
	for n := 0; ; n++ {
		if n == limit {
			return &limitError{field: string(fd.Name()), n: n, more: true, limit: limit}
		}
		if _, err := s.str(); err != nil {
			return err
		}
		if !s.eat(':') {
			return errShape
		}
		if err := s.skip(); err != nil {
			return err
		}
		if s.eat('}') {
			return nil
		}
		if !s.eat(',') {
			return errShape
		}
	}
}
