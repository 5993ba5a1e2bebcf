package idemgrpc_test

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/internal/ledgertest"
	"github.com/idemdev/idem/internal/pgtest"
)

func TestMain(m *testing.M) {
	if isChild() {
		childMain()
		return
	}
	pgtest.Main(m)
}

var quiet = slog.New(slog.DiscardHandler)

// The test service, defined by hand (no protoc step): two unary methods on
// well-known wrapper types.
const (
	chargeMethod = "/idemtest.Payments/Charge"
	refundMethod = "/idemtest.Payments/Refund"
)

// handleFunc is what a test's server does for a call.
type handleFunc func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "idemtest.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Charge", Handler: methodHandler(chargeMethod)},
		{MethodName: "Refund", Handler: methodHandler(refundMethod)},
	},
}

func methodHandler(full string) func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := srv.(handleFunc)
		run := func(ctx context.Context, req any) (any, error) { return h(ctx, full, req.(*wrapperspb.StringValue)) }
		if ic == nil {
			return run(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, run)
	}
}

// eachDriver runs fn against a fresh ledger on SQLite and on PostgreSQL.
func eachDriver(t *testing.T, fn func(t *testing.T, l *idem.Ledger)) { ledgertest.EachDriver(t, fn) }

func openLedger(t testing.TB, driver string) *idem.Ledger { return ledgertest.Open(t, driver) }

// serve starts a real grpc-go server on loopback with the given server
// interceptors around h, and returns a client connection to it.
func serve(t *testing.T, h handleFunc, interceptors ...grpc.UnaryServerInterceptor) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptors...))
	srv.RegisterService(&paymentsDesc, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return dial(t, lis.Addr().String())
}

// dial connects to addr, reconnecting quickly after the server went away.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append(opts,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// reply is what a client saw for one call.
type reply struct {
	out      *wrapperspb.StringValue
	err      error
	replayed bool
}

// call invokes method with key (none if "") and extra metadata pairs.
func call(ctx context.Context, cc *grpc.ClientConn, method, key, value string, kv ...string) reply {
	if key != "" {
		kv = append(kv, "idempotency-key", key)
	}
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var hdr metadata.MD
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String(value), out, grpc.Header(&hdr))
	if err != nil {
		out = nil
	}
	return reply{out: out, err: err, replayed: len(hdr.Get("idempotent-replayed")) == 1 && hdr.Get("idempotent-replayed")[0] == "true"}
}

// counted is a handler that counts its runs and answers "done:" + value.
// fail, when set, may answer instead (its error) or let the run go on (nil).
type counted struct {
	runs atomic.Int64
	fail func(n int64) error
}

func (c *counted) handle(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	n := c.runs.Add(1)
	if c.fail != nil {
		if err := c.fail(n); err != nil {
			return nil, err
		}
	}
	return wrapperspb.String("done:" + in.GetValue()), nil
}

// reason returns the ErrorInfo reason of err's status, or "".
func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

func wantCode(t *testing.T, err error, code codes.Code, why string) {
	t.Helper()
	if status.Code(err) != code || reason(err) != why {
		t.Fatalf("got %v (reason %q), want %v with reason %q", err, reason(err), code, why)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
