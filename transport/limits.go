package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

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
// hold in one message: service.MaxBatch, or the tighter limit the service
// checks for an import's attempt errors.
func listLimit(fd protoreflect.FieldDescriptor) int {
	if fd.FullName() == "styx.v1.StorageItem.errors" {
		return service.MaxAttemptErrors
	}
	return service.MaxBatch
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
			// Scalars (packed numeric lists among them) cost no more
			// than their bytes to decode.
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
			i := fd.Index()
			counts[i]++
			// Elements past the limit are only counted.
			if fd.Message() != nil && counts[i] <= listLimit(fd) {
				if e := scanProto(v, fd.Message(), depth+1); e != nil {
					return e.within(string(fd.Name()), counts[i]-1)
				}
			}
		case fd.Message() != nil:
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
// message expects; protojson judges it.
var errShape = errors.New("not the expected shape")

// checkListsJSON is checkListsProto for a protojson body. It reads b as a
// stream of tokens, so its memory does not grow with the number of
// elements, and stops at the first element over a limit ("more than 1000
// given").
func checkListsJSON(b []byte, md protoreflect.MessageDescriptor) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil
	}
	var le *limitError
	if err := scanJSON(dec, md, 0); errors.As(err, &le) {
		return le.apiError()
	}
	return nil
}

// scanJSON scans the members of an object of descriptor md whose '{' dec
// has read, up to and including its '}'. It returns a *limitError, errShape,
// or a decoding error.
func scanJSON(dec *json.Decoder, md protoreflect.MessageDescriptor, depth int) error {
	if depth > maxScanDepth {
		return errShape
	}
	fields := md.Fields()
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errShape
		}
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if tok, err = dec.Token(); err != nil {
			return err
		}
		switch {
		case fd == nil:
			err = skipJSON(dec, tok)
		case fd.IsList() && tok == json.Delim('['):
			err = scanJSONList(dec, fd, depth)
		case fd.IsMap() && tok == json.Delim('{'):
			err = scanJSONMap(dec, fd)
		case fd.Message() != nil && tok == json.Delim('{'):
			if err = scanJSON(dec, fd.Message(), depth+1); err != nil {
				var le *limitError
				if errors.As(err, &le) {
					return le.withinMessage(string(fd.Name()))
				}
			}
		default:
			err = skipJSON(dec, tok)
		}
		if err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// scanJSONList scans the elements of list fd whose '[' dec has read, up to
// and including its ']'.
func scanJSONList(dec *json.Decoder, fd protoreflect.FieldDescriptor, depth int) error {
	limit := listLimit(fd)
	for n := 0; dec.More(); n++ {
		if n == limit {
			return &limitError{field: string(fd.Name()), n: n, more: true, limit: limit}
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if fd.Message() != nil && tok == json.Delim('{') {
			if err := scanJSON(dec, fd.Message(), depth+1); err != nil {
				var le *limitError
				if errors.As(err, &le) {
					return le.within(string(fd.Name()), n)
				}
				return err
			}
			continue
		}
		if err := skipJSON(dec, tok); err != nil {
			return err
		}
	}
	_, err := dec.Token() // ']'
	return err
}

// scanJSONMap counts the entries of map fd whose '{' dec has read, up to
// and including its '}'.
func scanJSONMap(dec *json.Decoder, fd protoreflect.FieldDescriptor) error {
	limit := listLimit(fd)
	for n := 0; dec.More(); n++ {
		if n == limit {
			return &limitError{field: string(fd.Name()), n: n, more: true, limit: limit}
		}
		if _, err := dec.Token(); err != nil { // the key
			return err
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if err := skipJSON(dec, tok); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// skipJSON skips the rest of the value whose first token dec has read.
func skipJSON(dec *json.Decoder, tok json.Token) error {
	depth := 0
	for {
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
		var err error
		if tok, err = dec.Token(); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("skip: %w", io.ErrUnexpectedEOF)
			}
			return err
		}
	}
}
