package service

import (
	"context"
	"errors"
	"slices"
	"strings"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// Limits of keys.create.
const (
	// MaxKeyNameBytes bounds a key's name, in bytes.
	MaxKeyNameBytes = 128
	// MaxKeyPatterns bounds how many queue-name patterns a key holds.
	MaxKeyPatterns = 64
	// MaxKeyPatternBytes bounds one queue-name pattern, in bytes.
	MaxKeyPatternBytes = 512
)

// errNoKeys answers a keys.* call on a Service built without WithKeys: a
// wiring mistake (transport routes keys.* only when it has keys), so an
// internal error (500).
var errNoKeys = errors.New("service: keys.* called on a service without keys (WithKeys)")

// WithKeys returns s serving keys.* with k (the keys transport
// authenticates with). Call it before serving.
func (s *Service) WithKeys(k *auth.Keys) *Service {
	s.keys = k
	return s
}

// KeysCreate creates a key and returns its secret (shown only here).
// Returns 400 naming the field for a bad name, scope or pattern, 409 for a
// name in use.
func (s *Service) KeysCreate(ctx context.Context, req *pb.KeysCreateRequest) (*pb.KeysCreateResponse, error) {
	if s.keys == nil {
		return nil, errNoKeys
	}
	if err := checkKeyName(req.Name); err != nil {
		return nil, err
	}
	if len(req.Scopes) == 0 {
		return nil, apierr.Invalidf("invalid scopes; at least one of %s is required", scopeList())
	}
	for i, sc := range req.Scopes {
		if !slices.Contains(auth.Scopes, auth.Scope(sc)) {
			return nil, apierr.Invalidf("invalid scopes[%d]; '%s' is not one of %s", i, quote(sc), scopeList())
		}
		if slices.Contains(req.Scopes[:i], sc) {
			return nil, apierr.Invalidf("invalid scopes[%d]; '%s' is given twice", i, sc)
		}
	}
	if len(req.Queues) > MaxKeyPatterns {
		return nil, apierr.Invalidf("invalid queues; %d patterns, the limit is %d", len(req.Queues), MaxKeyPatterns)
	}
	for i, q := range req.Queues {
		if err := checkPattern(i, q); err != nil {
			return nil, err
		}
	}
	key, rec, err := s.keys.Create(ctx, req.Name, req.Scopes, req.Queues)
	if errors.Is(err, store.ErrKeyExists) {
		return nil, apierr.New(apierr.Conflict, "key already exists; a key named '%s' exists", req.Name)
	} else if err != nil {
		return nil, err
	}
	return &pb.KeysCreateResponse{Key: key, Name: rec.Name, Scopes: rec.Scopes, Queues: rec.Queues, CreatedAt: timestamppb.New(rec.CreatedAt)}, nil
}

// KeysList lists every key without its secret, by name.
func (s *Service) KeysList(ctx context.Context, _ *pb.KeysListRequest) (*pb.KeysListResponse, error) {
	if s.keys == nil {
		return nil, errNoKeys
	}
	recs, err := s.keys.List(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.KeysListResponse{}
	for _, r := range recs {
		out.Keys = append(out.Keys, &pb.ApiKey{Name: r.Name, Scopes: r.Scopes, Queues: r.Queues,
			CreatedAt: timestamppb.New(r.CreatedAt), CreatedBy: r.CreatedBy})
	}
	return out, nil
}

// KeysDelete deletes a key; requests with it are refused (401) from the
// moment this returns, on every node. Returns 404 for an unknown name.
// Transport then ends the key's waiting requests on this server.
func (s *Service) KeysDelete(ctx context.Context, req *pb.KeysDeleteRequest) error {
	if s.keys == nil {
		return errNoKeys
	}
	if err := checkKeyName(req.Name); err != nil {
		return err
	}
	if err := s.keys.Delete(ctx, req.Name); errors.Is(err, store.ErrKeyNotFound) {
		return apierr.New(apierr.NotFound, "key does not exist; no key named '%s'", req.Name)
	} else if err != nil {
		return err
	}
	return nil
}

func scopeList() string {
	names := make([]string, len(auth.Scopes))
	for i, sc := range auth.Scopes {
		names[i] = string(sc)
	}
	return strings.Join(names, ", ")
}

// checkKeyName checks a key name: 1..MaxKeyNameBytes of [A-Za-z0-9._-],
// not auth.BootstrapName.
func checkKeyName(name string) error {
	if name == "" || len(name) > MaxKeyNameBytes {
		return apierr.Invalidf("invalid name; '%s' must be 1..%d characters", quote(name), MaxKeyNameBytes)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return apierr.Invalidf("invalid name; '%s' may hold only letters, digits, '.', '_' and '-'", quote(name))
		}
	}
	if name == auth.BootstrapName {
		return apierr.Invalidf("invalid name; '%s' is reserved for the --admin-key-file key", name)
	}
	return nil
}

// checkPattern checks queues[i]: 1..MaxKeyPatternBytes characters without
// whitespace or '~' (as queue names, plus '*').
func checkPattern(i int, p string) error {
	if p == "" || len(p) > MaxKeyPatternBytes {
		return apierr.Invalidf("invalid queues[%d]; '%s' must be 1..%d characters", i, quote(p), MaxKeyPatternBytes)
	}
	if pos, r, ok := queue.HiddenRune(p); ok {
		return apierr.Invalidf("invalid queues[%d]; %q holds %U at character %d; patterns may not hold control, bidi or zero-width characters", i, quote(p), r, pos)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return unicode.IsSpace(r) || r == '~' }) {
		return apierr.Invalidf("invalid queues[%d]; '%s' may not hold whitespace or '~'", i, quote(p))
	}
	return nil
}
