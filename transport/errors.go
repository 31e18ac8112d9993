package transport

import (
	"net/http"
	"strings"

	duh "github.com/duh-rpc/duh-go"
	v1 "github.com/duh-rpc/duh-go/proto/v1"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/audit"
	"github.com/styxq/styx/internal/errclass"
)

// reasonDetail is the key of duh.v1.Reply.details that every /v1 error
// reply carries: the error's reason (errclass.Reason), the stable word a
// client decides by (docs/wire-contract.md).
const reasonDetail = "reason"

// fail answers err on /v1. What it is answered with (code, reason,
// message) is internal/errclass's one classification; fail writes it as a
// duh.v1.Reply with details["reason"], the HTTP status equal to the code.
// An internal error (500) is logged with its detail; a client that went
// away gets 499, which it never reads.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	c := errclass.Of(err)
	if c.Internal() {
		h.cfg.Log.Error("internal error", "path", r.URL.Path, "error", err)
	}
	code := int(c.Code)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="styx"`)
	}
	if c.Code == apierr.Overloaded {
		w.Header().Set("Retry-After", "1") // the in-flight budget frees as requests are answered
	}
	reply := errorReply(c)
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		audit.From(r.Context()).Refused(reply.Message)
	}
	h.reply(w, r, code, reply)
}

// errorReply returns the duh.v1.Reply of class c. Messages may quote client
// input; JSON needs valid UTF-8.
func errorReply(c errclass.Class) *v1.Reply {
	return &v1.Reply{Code: int32(c.Code), CodeText: duh.CodeText(int(c.Code)), Message: strings.ToValidUTF8(c.Message, "?"),
		Details: map[string]string{reasonDetail: string(c.Reason)}}
}

// internalReplyJSON is the reply of an answer that could not be encoded.
const internalReplyJSON = `{"code":500,"code_text":"Internal Service Error","message":"internal error",` +
	`"details":{"` + reasonDetail + `":"` + string(errclass.Internal) + `"}}`

// overloadedReplyJSON is the reply of a connection there is no room for
// (ConnLimiter), before any request is read.
const overloadedReplyJSON = `{"code":503,"code_text":"Service Unavailable","message":"server busy; every connection the server allows ` +
	`(--max-connections, --max-connections-per-address) is serving a request, retry later",` +
	`"details":{"` + reasonDetail + `":"` + string(errclass.Overloaded) + `"}}`
