package idemgrpc_test

import (
	"context"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemgrpc"
)

// principalKey is where the example's authentication puts the caller.
type principalKey struct{}

// A server whose keys are scoped by the principal its authentication
// interceptor verified, and a client that makes one key per call and
// retries with it.
func Example() {
	dir, _ := os.MkdirTemp("", "idemgrpc-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()

	auth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		// Verify the caller's credential here; this example trusts everyone.
		return next(context.WithValue(ctx, principalKey{}, "acct_42"), req)
	}
	scope := func(ctx context.Context) (string, error) {
		if p, ok := ctx.Value(principalKey{}).(string); ok {
			return p, nil
		}
		return "", status.Error(codes.Unauthenticated, "no principal")
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth,
		idemgrpc.UnaryServerInterceptor(l, &idemgrpc.Options{Scope: scope})))
	defer srv.Stop()

	conn, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 5})))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	// Output:
}
