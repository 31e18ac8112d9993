package sqs

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The query protocol: what SDKs released before the AWS JSON protocol (and
// Debian's boto3 and awscli) send. A request is form-encoded
// (Action=<Action>&Version=2012-11-05&…, in the body of a POST or the
// query string of a GET) to the endpoint or to a queue URL; lists and maps
// are flattened (Attribute.1.Name, Attribute.1.Value, MessageAttribute.1.
// Value.StringValue…); replies and errors are XML. This file translates a
// form into the JSON body of the same action and the action's JSON reply
// into XML, so both protocols run the same handlers.

// queryNamespace is the XML namespace of SQS replies.
const queryNamespace = "http://queue.amazonaws.com/doc/2012-11-05/"

// isQuery reports whether r is an SQS query-protocol request: a form POST,
// or a GET with an Action parameter, on any path but the API's own.
func isQuery(r *http.Request) bool {
	p := r.URL.Path
	if strings.HasPrefix(p, "/v1/") || p == "/health" || p == "/metrics" || p == "/ui" || strings.HasPrefix(p, "/ui/") {
		return false
	}
	switch r.Method {
	case http.MethodPost:
		ct := strings.ToLower(r.Header.Get("Content-Type"))
		return strings.HasPrefix(ct, "application/x-www-form-urlencoded") || r.URL.Query().Get("Action") != ""
	case http.MethodGet:
		return r.URL.Query().Get("Action") != ""
	}
	return false
}

// formListNames maps a flattened list's member name onto the JSON member
// of the action's input ("" for the same name).
var formLists = map[string]string{
	"AttributeName":                            "AttributeNames",
	"MessageAttributeName":                     "MessageAttributeNames",
	"MessageSystemAttributeName":               "MessageSystemAttributeNames",
	"TagKey":                                   "TagKeys",
	"AWSAccountId":                             "AWSAccountIds",
	"ActionName":                               "Actions",
	"SendMessageBatchRequestEntry":             "Entries",
	"DeleteMessageBatchRequestEntry":           "Entries",
	"ChangeMessageVisibilityBatchRequestEntry": "Entries",
	"StringListValue":                          "StringListValues",
	"BinaryListValue":                          "BinaryListValues",
}

// formMaps maps a flattened map's name onto its JSON member and the
// entry's key and value names.
var formMaps = map[string]struct{ json, key, value string }{
	"Attribute":              {"Attributes", "Name", "Value"},
	"MessageAttribute":       {"MessageAttributes", "Name", "Value"},
	"MessageSystemAttribute": {"MessageSystemAttributes", "Name", "Value"},
	"Tag":                    {"Tags", "Key", "Value"},
}

// formNumbers are the members sent as numbers in JSON.
var formNumbers = map[string]bool{
	"MaxResults": true, "MaxNumberOfMessages": true, "VisibilityTimeout": true, "WaitTimeSeconds": true,
	"DelaySeconds": true, "MaxNumberOfMessagesPerSecond": true,
}

// formToJSON turns a query-protocol form into the JSON body of action.
func formToJSON(action string, form url.Values) ([]byte, error) {
	tree := map[string]any{}
	for k, vs := range form {
		if k == "Action" || k == "Version" || strings.HasPrefix(k, "X-Amz-") || strings.HasPrefix(k, "AWSAccessKeyId") ||
			k == "Signature" || k == "SignatureMethod" || k == "SignatureVersion" || k == "Timestamp" || k == "Expires" {
			continue
		}
		if err := insert(tree, strings.Split(k, "."), vs[len(vs)-1]); err != nil {
			return nil, invalidParameter("Parameter %s is invalid: %v.", k, err)
		}
	}
	out, err := convert(tree)
	if err != nil {
		return nil, err
	}
	m := out.(map[string]any)
	if action == "CreateQueue" { // the JSON member of CreateQueue's tags is "tags"
		if t, ok := m["Tags"]; ok {
			delete(m, "Tags")
			m["tags"] = t
		}
	}
	return json.Marshal(m)
}

// insert puts value at path in a tree of maps (list indexes are keys too).
func insert(tree map[string]any, path []string, value string) error {
	for i, p := range path {
		if p == "" {
			return fmt.Errorf("empty name part")
		}
		if i == len(path)-1 {
			if _, ok := tree[p].(map[string]any); ok {
				return fmt.Errorf("both a value and a structure")
			}
			tree[p] = value
			return nil
		}
		next, ok := tree[p].(map[string]any)
		if !ok {
			if _, isLeaf := tree[p]; isLeaf {
				return fmt.Errorf("both a value and a structure")
			}
			next = map[string]any{}
			tree[p] = next
		}
		tree = next
	}
	return nil
}

// indexed returns a node's children in index order (1, 2, …) when every
// key is a positive integer.
func indexed(m map[string]any) ([]any, bool) {
	keys := make([]int, 0, len(m))
	for k := range m {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			return nil, false
		}
		keys = append(keys, n)
	}
	sort.Ints(keys)
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = m[strconv.Itoa(k)]
	}
	return out, true
}

// convert rewrites a parsed form tree into the JSON shape: flattened lists
// into arrays, flattened maps into objects, numbers into numbers.
func convert(node any) (any, error) {
	m, ok := node.(map[string]any)
	if !ok {
		return node, nil
	}
	out := map[string]any{}
	for k, v := range m {
		if mp, ok := formMaps[k]; ok {
			sub, ok := v.(map[string]any)
			if !ok {
				return nil, invalidParameter("Parameter %s must be a list of entries (%s.1.%s, %s.1.%s).", k, k, mp.key, k, mp.value)
			}
			entries, ok := indexed(sub)
			if !ok {
				return nil, invalidParameter("Parameter %s has an entry that is not numbered from 1.", k)
			}
			obj := map[string]any{}
			for _, e := range entries {
				em, ok := e.(map[string]any)
				if !ok {
					return nil, invalidParameter("Parameter %s has an entry without %s and %s.", k, mp.key, mp.value)
				}
				name, _ := em[mp.key].(string)
				val, err := convert(em[mp.value])
				if err != nil {
					return nil, err
				}
				obj[name] = val
			}
			out[mp.json] = obj
			continue
		}
		if name, ok := formLists[k]; ok {
			sub, ok := v.(map[string]any)
			if !ok {
				return nil, invalidParameter("Parameter %s must be numbered (%s.1, %s.2…).", k, k, k)
			}
			items, ok := indexed(sub)
			if !ok {
				return nil, invalidParameter("Parameter %s has an entry that is not numbered from 1.", k)
			}
			list := make([]any, len(items))
			for i, it := range items {
				c, err := convert(it)
				if err != nil {
					return nil, err
				}
				list[i] = c
			}
			out[name] = list
			continue
		}
		if s, ok := v.(string); ok && formNumbers[k] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, invalidParameter("Value %s for parameter %s is invalid. Reason: it must be an integer.", s, k)
			}
			out[k] = n
			continue
		}
		c, err := convert(v)
		if err != nil {
			return nil, err
		}
		out[k] = c
	}
	return out, nil
}

// xmlRenames gives, per JSON member of a reply, the element name of each
// item of a flattened list (or, for maps, of each entry).
var xmlLists = map[string]string{
	"QueueUrls": "QueueUrl", "queueUrls": "QueueUrl", "Messages": "Message",
	"Failed": "BatchResultErrorEntry", "Results": "ListMessageMoveTasksResultEntry",
}

// xmlMaps gives, per JSON map member of a reply, the entry element and its
// key and value names.
var xmlMaps = map[string]struct{ entry, key, value string }{
	"Attributes":        {"Attribute", "Name", "Value"},
	"MessageAttributes": {"MessageAttribute", "Name", "Value"},
	"Tags":              {"Tag", "Key", "Value"},
}

// toXML writes a reply in the query protocol: <Action>Response with an
// <Action>Result holding out's members, and the request id.
func toXML(action string, out any, requestID string) ([]byte, error) {
	var b bytes.Buffer
	xmlHead(&b, action)
	tree, err := jsonTree(out)
	if err != nil {
		return nil, err
	}
	if len(tree) > 0 {
		fmt.Fprintf(&b, "<%sResult>", action)
		successful := map[string]string{
			"SendMessageBatch": "SendMessageBatchResultEntry", "DeleteMessageBatch": "DeleteMessageBatchResultEntry",
			"ChangeMessageVisibilityBatch": "ChangeMessageVisibilityBatchResultEntry",
		}[action]
		writeMembers(&b, tree, successful)
		fmt.Fprintf(&b, "</%sResult>", action)
	}
	xmlTail(&b, action, requestID)
	return b.Bytes(), nil
}

// xmlOut is where the query protocol's XML is written: a bytes.Buffer
// (toXML), or a bufio.Writer over the client's connection (writeXML).
type xmlOut interface {
	io.Writer
	io.StringWriter
}

// xmlHead writes the XML declaration and action's response element's
// start tag.
func xmlHead(b xmlOut, action string) {
	b.WriteString(xml.Header)
	fmt.Fprintf(b, `<%sResponse xmlns="%s">`, action, queryNamespace)
}

// xmlTail writes the response metadata and action's response element's
// end tag.
func xmlTail(b xmlOut, action, requestID string) {
	fmt.Fprintf(b, "<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>", requestID, action)
}

// jsonTree returns out's JSON encoding (marshalJSON) decoded into maps,
// lists, strings and json.Numbers: what toXML writes as elements.
func jsonTree(out any) (map[string]any, error) {
	raw, err := marshalJSON(out)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	return tree, nil
}

func writeMembers(b xmlOut, m map[string]any, successful string) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if mp, ok := xmlMaps[k]; ok {
			if obj, ok := v.(map[string]any); ok {
				for _, name := range slices.Sorted(maps.Keys(obj)) {
					fmt.Fprintf(b, "<%s><%s>", mp.entry, mp.key)
					escape(b, name)
					fmt.Fprintf(b, "</%s>", mp.key)
					writeElement(b, mp.value, obj[name], "")
					fmt.Fprintf(b, "</%s>", mp.entry)
				}
				continue
			}
		}
		item := xmlLists[k]
		if k == "Successful" {
			item = successful
		}
		if list, ok := v.([]any); ok && item != "" {
			for _, it := range list {
				writeElement(b, item, it, "")
			}
			continue
		}
		writeElement(b, k, v, "")
	}
}

func writeElement(b xmlOut, name string, v any, successful string) {
	fmt.Fprintf(b, "<%s>", name)
	switch x := v.(type) {
	case map[string]any:
		writeMembers(b, x, successful)
	case []any:
		for _, it := range x {
			writeElement(b, "member", it, successful)
		}
	case string:
		escape(b, x)
	case json.Number:
		b.WriteString(x.String())
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case nil:
	default:
		escape(b, fmt.Sprint(x))
	}
	fmt.Fprintf(b, "</%s>", name)
}

// escape writes s as XML character data, escaping only what XML requires
// there (&, <, and > for "]]>") and \r (which a parser would turn into \n);
// quotes, tabs and newlines stay one byte each, not five (&#34;) as
// xml.EscapeText writes them. A character XML does not allow becomes
// U+FFFD, as xml.EscapeText does.
func escape(b xmlOut, s string) {
	last := 0
	for i, r := range s {
		var esc string
		switch {
		case r == '&':
			esc = "&amp;"
		case r == '<':
			esc = "&lt;"
		case r == '>':
			esc = "&gt;"
		case r == '\r':
			esc = "&#xD;"
		case r == '\t' || r == '\n' || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD && (r != utf8.RuneError || isRune(s[i:])) ||
			r >= 0x10000 && r <= 0x10FFFF:
			continue
		default:
			esc = "\uFFFD"
		}
		b.WriteString(s[last:i])
		b.WriteString(esc)
		_, w := utf8.DecodeRuneInString(s[i:])
		last = i + w
	}
	b.WriteString(s[last:])
}

// isRune reports whether s starts with a valid encoding (a U+FFFD written
// out, not an invalid byte).
func isRune(s string) bool {
	_, w := utf8.DecodeRuneInString(s)
	return w == 3
}

// failXML answers an error in the query protocol.
func failXML(w http.ResponseWriter, e *Error, requestID string) {
	var b bytes.Buffer
	b.WriteString(xml.Header)
	fmt.Fprintf(&b, `<ErrorResponse xmlns="%s"><Error><Type>%s</Type><Code>`, queryNamespace, fault(e.Status))
	escape(&b, e.queryCode())
	b.WriteString("</Code><Message>")
	escape(&b, e.Message)
	fmt.Fprintf(&b, "</Message><Detail/></Error><RequestId>%s</RequestId></ErrorResponse>", requestID)
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(e.Status)
	_, _ = w.Write(b.Bytes())
}
