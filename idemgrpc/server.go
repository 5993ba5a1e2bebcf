package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/fingerprint"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/keepalive"
)

// New returns the server interceptor for l under opts, or an error matching
// ErrBadOptions when opts are inconsistent.
func New(l *idem.Ledger, opts *Options) (grpc.UnaryServerInterceptor, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	s := &server{l: l, cfg: cfg}
	return s.intercept, nil
}

// UnaryServerInterceptor is New for options known to be good; it panics on
// bad options.
//
// A guarded call with a key is claimed in l: the first runs the handler
// once; retries get its recorded answer with the header
// "idempotent-replayed: true"; a retry while it runs gets Aborted. See
// docs/grpc.md for every answer. The handler's context is cancelled with a
// cause matching idem.ErrLeaseLost if the claim's lease is lost (the
// process paused past it and another call took the key).
func UnaryServerInterceptor(l *idem.Ledger, opts *Options) grpc.UnaryServerInterceptor {
	i, err := New(l, opts)
	if err != nil {
		panic(err)
	}
	return i
}

type server struct {
	l   *idem.Ledger
	cfg config
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.cfg.methods != nil && !s.cfg.methods(info.FullMethod) {
		return handler(ctx, req)
	}
	key, keyed, err := incomingKey(ctx)
	if err != nil {
		return nil, refusal(codes.InvalidArgument, ReasonKeyInvalid, err.Error())
	}
	if !keyed && !s.cfg.derive {
		if s.cfg.require {
			return nil, refusal(codes.InvalidArgument, ReasonKeyMissing,
				"idemgrpc: this method needs metadata "+MetadataKey+": a key made once per logical call and sent with every retry")
		}
		return handler(ctx, req)
	}
	scope, err := s.scope(ctx)
	if err != nil {
		return nil, err
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "idemgrpc: request of %s is a %T, not a proto.Message", info.FullMethod, req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s.cfg.withoutExcluded(msg))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: encoding the request for its fingerprint: %v", err)
	}
	fp := fingerprint.GRPC(info.FullMethod, b)
	if !keyed {
		// KeyFromFingerprint: identical work is one operation. The handler
		// sees the derived key in its metadata, as it would a caller's.
		key = fp
		md, _ := metadata.FromIncomingContext(ctx)
		md = md.Copy()
		md.Set(MetadataKey, key)
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	op := idem.Op{Scope: scope, Key: key, Fingerprint: fp, Lease: s.cfg.lease, Retention: s.cfg.retention}

	cctx, cancel := detached(ctx)
	c, err := s.l.Claim(cctx, op)
	cancel()
	if err != nil || !c.Outcome.Held() {
		return s.answer(ctx, op, c, err)
	}
	return s.run(ctx, req, handler, c)
}

// ledgerTimeout bounds every ledger call the interceptor makes on a call's
// behalf. They run detached from the call's context, so that a client that
// goes away cannot stop a claim or a record half way.
const ledgerTimeout = 10 * time.Second

func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), ledgerTimeout)
}

// incomingKey returns the call's key: absent, valid, or an error matching
// idemhttp.ErrInvalidKey. The rule is idemhttp's (ParseKey): 1 to 255
// printable ASCII characters, bare or as a structured-field string.
func incomingKey(ctx context.Context) (key string, ok bool, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, fmt.Errorf("%w: metadata %s sent %d times", idemhttp.ErrInvalidKey, MetadataKey, len(vals))
	}
	key, err = idemhttp.ParseKey(vals[0])
	return key, err == nil, err
}

// scope returns the call's scope, or the status error that refuses it.
func (s *server) scope(ctx context.Context) (string, error) {
	switch {
	case s.cfg.shared:
		return "", nil
	case s.cfg.scope == nil:
		return "", refusal(codes.FailedPrecondition, ReasonScopeUnset,
			"idemgrpc: this server has no scope for idempotency keys (set idemgrpc.Options.Scope, or Options.SharedScope for a single-tenant service); the call was not handled")
	}
	sc, err := s.cfg.scope(ctx)
	if err != nil {
		if st, ok := status.FromError(err); ok {
			return "", st.Err()
		}
		return "", status.Errorf(codes.Unauthenticated, "idemgrpc: no scope for this call: %v", err)
	}
	return sc, nil
}

// run calls the handler under the held claim c and records its answer.
func (s *server) run(ctx context.Context, req any, handler grpc.UnaryHandler, c *idem.Claim) (any, error) {
	if c.Outcome == idem.Reclaimed {
		s.logOp(ctx, slog.LevelInfo, "handling a reclaimed key again", c)
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := keepalive.Start(context.WithoutCancel(ctx), keepalive.Config{
		Lease:     c.Op.Lease,
		Heartbeat: func(ctx context.Context) error { return s.l.Heartbeat(ctx, c) },
		Fenced:    func(err error) bool { return errors.Is(err, idem.ErrLeaseLost) },
		Lost:      func(error) { cancel(fmt.Errorf("idemgrpc: %w", idem.ErrLeaseLost)) },
	})
	// A panicking handler leaves the claim to its lease: its outcome is
	// unknown. stop runs either way.
	defer stop()
	resp, herr := handler(hctx, req)
	stop()
	crashpoint.Hit(crashpoint.AfterCall)

	rctx, rcancel := detached(ctx)
	defer rcancel()
	act, res := decide(resp, herr)
	var err error
	switch act {
	case actRelease:
		err = s.l.Release(rctx, c)
		s.logOp(ctx, slog.LevelInfo, "key released", c, slog.String("code", status.Code(herr).String()))
	case actLeave:
		s.logOp(ctx, slog.LevelWarn, "outcome unknown; claim left to its lease", c, slog.String("code", status.Code(herr).String()))
		return resp, herr
	case actFail:
		err = s.l.Fail(rctx, c, res)
	default:
		err = s.l.Complete(rctx, c, res)
	}
	if errors.Is(err, idem.ErrLeaseLost) {
		s.logOp(ctx, slog.LevelWarn, "lease lost before the answer was recorded; a later attempt owns the key", c)
	} else if err != nil {
		s.logOp(ctx, slog.LevelError, "recording the answer failed; the claim ends with its lease", c, slog.Any("err", err))
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	return resp, herr
}

// answer responds to a claim that did not give the key to this call.
func (s *server) answer(ctx context.Context, op idem.Op, c *idem.Claim, err error) (any, error) {
	if err != nil {
		var ce *idem.ConflictError
		var ie *idem.InputError
		switch {
		case errors.Is(err, idem.ErrExpired) && errors.As(err, &ce):
			return nil, refusal(codes.FailedPrecondition, ReasonKeyExpired, fmt.Sprintf(
				"idemgrpc: a call with this key was handled on %s; its answer is no longer kept and it will not be handled again: use a new key for a new call",
				ce.Record.CompletedAt.UTC().Format(time.RFC3339)))
		case errors.As(err, &ie) && ie.Field == "scope":
			return nil, refusal(codes.InvalidArgument, ReasonScopeInvalid, err.Error())
		case errors.As(err, &ie): // Options.Lease or Retention outside the ledger's range
			return nil, status.Errorf(codes.Internal, "idemgrpc: %v", err)
		default:
			s.cfg.log.LogAttrs(ctx, slog.LevelError, "ledger unavailable; call not handled",
				slog.String("key", idem.KeyHash(op.Key)), slog.String("fingerprint", op.Fingerprint), slog.Any("err", err))
			return nil, retryLater(codes.Unavailable, ReasonLedgerUnavailable,
				"idemgrpc: the idempotency ledger did not answer; the call was not handled: retry with the same key")
		}
	}
	switch c.Outcome {
	case idem.Replay:
		s.logOp(ctx, slog.LevelDebug, "replayed", c)
		return replay(ctx, c.Result)
	case idem.InFlight:
		return nil, retryLater(codes.Aborted, ReasonInFlight,
			"idemgrpc: a call with this idempotency key is being handled; retry later with the same key to get its answer")
	case idem.Mismatch:
		s.logOp(ctx, slog.LevelInfo, "key reused with a different request", c, slog.String("stored_fingerprint", c.Record.Fingerprint))
		return nil, refusal(codes.FailedPrecondition, ReasonKeyMismatch,
			"idemgrpc: this idempotency key was used for a different call (method or request message); nothing was done: use a new key for a new call")
	case idem.Parked:
		s.logOp(ctx, slog.LevelWarn, "parked key retried", c)
		return nil, refusal(codes.FailedPrecondition, ReasonParked,
			"idemgrpc: the first call with this key may or may not have taken effect, and waits for an operator; it will not be handled again until then")
	default:
		return nil, status.Errorf(codes.Internal, "idemgrpc: unexpected claim outcome %s", c.Outcome)
	}
}

func (s *server) logOp(ctx context.Context, level slog.Level, msg string, c *idem.Claim, attrs ...slog.Attr) {
	attrs = append(attrs, slog.String("scope", c.Op.Scope), slog.String("key", idem.KeyHash(c.Op.Key)),
		slog.String("fingerprint", c.Op.Fingerprint), slog.Int64("attempt", c.Record.Attempt))
	s.cfg.log.LogAttrs(ctx, level, msg, attrs...)
}
