package idemgrpc_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemgrpc"
)

// stampMethod takes a message with two fields (a Timestamp: seconds and
// nanos), so that one can be excluded and the other not.
const stampMethod = "/idemtest.Stamps/Record"

func serveStamps(t *testing.T, runs *atomic.Int64, lastKey *atomic.Pointer[string], ic grpc.UnaryServerInterceptor) *grpc.ClientConn {
	t.Helper()
	desc := grpc.ServiceDesc{
		ServiceName: "idemtest.Stamps",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Record", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(timestamppb.Timestamp)
			if err := dec(in); err != nil {
				return nil, err
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: stampMethod}, func(ctx context.Context, req any) (any, error) {
				runs.Add(1)
				md, _ := metadata.FromIncomingContext(ctx)
				if k := md.Get("idempotency-key"); len(k) == 1 {
					lastKey.Store(&k[0])
				}
				return req, nil
			})
		}}},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&desc, struct{}{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return dial(t, lis.Addr().String())
}

// TestKeyFromFingerprint: calls without a key are keyed by their work;
// a message differing only in an excluded field is the same work.
func TestKeyFromFingerprint(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		var runs atomic.Int64
		var lastKey atomic.Pointer[string]
		cc := serveStamps(t, &runs, &lastKey, idemgrpc.UnaryServerInterceptor(l, &idemgrpc.Options{
			SharedScope: true, KeyFromFingerprint: true, Exclude: []string{"nanos"}, Logger: quiet}))
		ctx := testCtx(t)
		send := func(sec int64, nanos int32) (replayed bool) {
			t.Helper()
			var hdr metadata.MD
			out := new(timestamppb.Timestamp)
			if err := cc.Invoke(ctx, stampMethod, &timestamppb.Timestamp{Seconds: sec, Nanos: nanos}, out, grpc.Header(&hdr)); err != nil {
				t.Fatal(err)
			}
			return len(hdr.Get("idempotent-replayed")) == 1
		}
		if send(100, 1) {
			t.Fatal("first call replayed")
		}
		if k := lastKey.Load(); k == nil || !strings.HasPrefix(*k, "grpc-sha256:") {
			t.Fatalf("the handler did not see the derived key in its metadata: %v", k)
		}
		if !send(100, 1) {
			t.Fatal("identical call was not a replay")
		}
		if !send(100, 2) {
			t.Fatal("a call differing only in an excluded field was not a replay")
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times for one piece of work", n)
		}
		if send(101, 1) {
			t.Fatal("a call differing elsewhere was a replay")
		}
		if n := runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times for two pieces of work", n)
		}
	})
}

func TestExcludeBadPath(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	if _, err := idemgrpc.New(l, &idemgrpc.Options{SharedScope: true, Exclude: []string{"meta..id"}}); err == nil {
		t.Fatal("an empty path segment was accepted")
	}
}
